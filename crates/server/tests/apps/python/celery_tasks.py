"""The Celery application of celery_check.py: its tasks and its Redis broker and backend, on the
port in $PREFIXKV_CHECK_PORT. The worker runs this module in a process of its own, as in
production (`celery -A celery_tasks worker`)."""
import os
import time

from celery import Celery

URL = f"redis://127.0.0.1:{os.environ['PREFIXKV_CHECK_PORT']}/0"

app = Celery("celery_tasks", broker=URL, backend=URL)
app.conf.update(
    broker_connection_retry_on_startup=True,
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    result_expires=600,
    worker_hijack_root_logger=False,
)

# Attempts per token, in the worker process (the solo pool runs every task in it).
attempts = {}


@app.task
def add(x, y):
    return x + y


@app.task(bind=True, max_retries=3)
def flaky(self, token):
    attempts[token] = attempts.get(token, 0) + 1
    if attempts[token] == 1:
        raise self.retry(exc=RuntimeError("the first attempt fails"), countdown=0.2)
    return f"{token} after {attempts[token]} attempts"


@app.task
def stamp():
    return time.time()


@app.task
def fail():
    raise ValueError("this task always fails")
