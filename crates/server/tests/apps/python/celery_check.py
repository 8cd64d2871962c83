"""Celery with the Redis broker and result backend, unchanged, against the server on PORT.

Starts a real worker process (`celery -A celery_tasks worker`, solo pool) and checks what an
application sees: a task's result, a task that fails once and succeeds on its retry, a task with
a countdown, a task that fails (its exception comes back through the result backend), and 20
tasks in a row. Prints `ok ...` and exits 0; any failure raises (exit 1) with the reason.

Usage: celery_check.py PORT
"""
import os
import subprocess
import sys
import time

PORT = sys.argv[1]
os.environ["PREFIXKV_CHECK_PORT"] = PORT
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from celery_tasks import add, fail, flaky, stamp  # noqa: E402

# Bounded waits: every result is awaited at most this long.
TIMEOUT_S = 60


def main():
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_tasks", "worker", "--pool", "solo",
         "--loglevel", "WARNING", "--without-heartbeat", "--without-mingle", "--without-gossip"],
        cwd=os.path.dirname(os.path.abspath(__file__)),
        env=dict(os.environ, C_FORCE_ROOT="1"),
        # The worker's output goes to standard error: standard output carries only the verdict.
        stdout=sys.stderr,
    )
    try:
        result = add.delay(2, 3)
        assert result.get(timeout=TIMEOUT_S) == 5, "add(2, 3)"
        assert result.state == "SUCCESS", result.state

        retried = flaky.delay("job-1")
        value = retried.get(timeout=TIMEOUT_S)
        assert value == "job-1 after 2 attempts", value

        sent = time.time()
        delayed = stamp.apply_async(countdown=1)
        ran = delayed.get(timeout=TIMEOUT_S)
        assert ran >= sent + 0.9, f"the countdown task ran {ran - sent:.2f} s after it was sent"

        failing = fail.delay()
        try:
            failing.get(timeout=TIMEOUT_S)
            raise AssertionError("a failing task returned a value")
        except ValueError as error:
            assert "always fails" in str(error), error
        assert failing.state == "FAILURE", failing.state

        many = [add.delay(i, i) for i in range(20)]
        assert [r.get(timeout=TIMEOUT_S) for r in many] == [2 * i for i in range(20)]
        print(f"ok celery: a result, a retry, a countdown task ({ran - sent:.2f} s), "
              f"a failure, 20 tasks")
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


if __name__ == "__main__":
    main()
