"""RQ, unchanged, against the server on PORT.

Enqueues jobs and runs a real worker process (`rq worker --burst`, the simple worker) and checks
what an application sees: results (RQ keeps them in a stream per job), a job that fails lands in
the failed-job registry with its exception, a job enqueued at a later time is run by the
scheduler, and job metadata round-trips. Prints `ok ...` and exits 0; any failure raises.

Usage: rq_check.py PORT
"""
import os
import subprocess
import sys
import time
from datetime import timedelta

from redis import Redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry, FinishedJobRegistry

PORT = int(sys.argv[1])
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from rq_jobs import add, fail, slow_hello  # noqa: E402

# Bounded waits.
TIMEOUT_S = 60


def run_worker(url, *extra):
    """One burst worker: runs every queued job, then exits."""
    subprocess.run(
        [sys.executable, "-m", "rq.cli", "worker", "--burst", "--url", url,
         "--worker-class", "rq.worker.SimpleWorker", *extra, "default"],
        cwd=HERE, check=True, timeout=TIMEOUT_S,
        # The worker's output goes to standard error: standard output carries only the verdict.
        stdout=sys.stderr,
    )


def wait_for(condition, what):
    deadline = time.time() + TIMEOUT_S
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def main():
    url = f"redis://127.0.0.1:{PORT}/0"
    connection = Redis.from_url(url)
    queue = Queue("default", connection=connection)

    jobs = [queue.enqueue(add, i, 1) for i in range(10)]
    failing = queue.enqueue(fail, "boom")
    meta = queue.enqueue(slow_hello, "prefixkv", meta={"owner": "check"})
    run_worker(url)

    for i, job in enumerate(jobs):
        job.refresh()
        assert job.get_status() == JobStatus.FINISHED, job.get_status()
        assert job.return_value() == i + 1, job.return_value()
        results = job.results()
        assert len(results) == 1 and results[0].return_value == i + 1, results
    assert Job.fetch(meta.id, connection=connection).meta == {"owner": "check"}
    assert meta.return_value() == "hello prefixkv"

    failing.refresh()
    assert failing.get_status() == JobStatus.FAILED, failing.get_status()
    failed = FailedJobRegistry(queue=queue)
    assert failing.id in failed.get_job_ids(), failed.get_job_ids()
    latest = failing.latest_result()
    assert latest is not None and "boom" in (latest.exc_string or ""), latest
    assert len(FinishedJobRegistry(queue=queue)) == 11

    # A job scheduled two seconds from now: the worker's scheduler moves it to the queue (RQ
    # keeps the time in whole seconds, so it may run up to a second early).
    sent = time.time()
    later = queue.enqueue_in(timedelta(seconds=2), add, 40, 2)
    worker = subprocess.Popen(
        [sys.executable, "-m", "rq.cli", "worker", "--with-scheduler", "--url", url,
         "--worker-class", "rq.worker.SimpleWorker", "default"],
        cwd=HERE, stdout=sys.stderr,
    )
    try:
        wait_for(lambda: later.get_status(refresh=True) == JobStatus.FINISHED, "the scheduled job")
        assert later.return_value() == 42
        assert time.time() >= sent + 1.0, "the scheduled job ran too early"
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    print("ok rq: 10 results, a failed job in the failed registry, metadata, a scheduled job")


if __name__ == "__main__":
    main()
