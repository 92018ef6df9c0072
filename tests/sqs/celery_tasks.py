"""Celery tasks for celery_test.py: each records what it did in a file of
CELERY_TEST_DIR, so that the test sees the work done, not only the
messages moved."""
import os
import signal

from celery import Celery

DIR = os.environ["CELERY_TEST_DIR"]

app = Celery("celery_tasks", broker=os.environ["CELERY_BROKER"])
app.conf.broker_transport_options = {
    "region": "eu-central-1",
    "is_secure": False,  # sqlq serve on loopback, plain HTTP
    "wait_time_seconds": 5,  # long polls
    "polling_interval": 0.1,
    "visibility_timeout": 60,
}
app.conf.task_default_queue = "celery-jobs"
app.conf.worker_hijack_root_logger = False


def record(name, text):
    with open(os.path.join(DIR, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(DIR, name + ".tmp"), os.path.join(DIR, name))


@app.task
def add(x, y, name):
    record(name, str(x + y))


@app.task(bind=True, max_retries=3)
def flaky(self, name):
    """Fails its first run and asks Celery to retry it a second later."""
    marker = os.path.join(DIR, name + ".tried")
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise self.retry(countdown=1)
    record(name, f"retries={self.request.retries}")


@app.task
def stop_worker():
    """Stops the worker that runs it, as SIGTERM does (a warm shutdown).
    Sent from the test instead of signalling the worker from outside:
    Celery raises its shutdown exception inside the signal handler, and a
    SIGTERM that lands while botocore signs a request with awscrt (Debian's
    python3-awscrt) raises it in awscrt's C callback, which drops it and
    never completes the signing; the worker then waits on it for ever
    (seen about once in 50 stops under load). Signalled from here, the
    handler runs in this task's own code."""
    os.kill(os.getpid(), signal.SIGTERM)
