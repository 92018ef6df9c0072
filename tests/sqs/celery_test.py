#!/usr/bin/python3
"""Celery with its SQS broker (Debian's python3-celery, python3-kombu and
python3-pycurl) against a real `sqlq serve`: a worker runs real tasks end
to end, one of them retried. kombu creates its queue, sends with boto3 and
receives with long polls, deletes and changes visibility over its own
HTTP client, some of it with presigned GETs. Run by ctest with SQLQ_BIN
set to the sqlq program (and SQLQ_SQS_ENGINE for the engine)."""
import os
import subprocess
import sys
import time
import unittest
import urllib.parse
import warnings

from sqs_server import SECRET, Server

HERE = os.path.dirname(os.path.abspath(__file__))


class CeleryOverSqs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        warnings.simplefilter("ignore", ResourceWarning)
        cls.server = Server()
        cls.out = os.path.join(cls.server.dir.name, "out")
        os.mkdir(cls.out)
        broker = "sqs://AKIAADMIN:{}@127.0.0.1:{}".format(
            urllib.parse.quote(SECRET, safe=""), cls.server.port)
        cls.env = dict(os.environ, CELERY_TEST_DIR=cls.out,
                       CELERY_BROKER=broker, PYTHONPATH=HERE)
        cls.log = open(os.path.join(cls.server.dir.name, "worker.log"), "w")
        cls.worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_tasks", "worker",
             "--pool=solo", "--loglevel=info", "--without-heartbeat",
             "--without-mingle", "--without-gossip"],
            env=cls.env, cwd=HERE, stdout=cls.log, stderr=subprocess.STDOUT)
        # The producer side, in this process, as an application sends.
        os.environ.update(CELERY_TEST_DIR=cls.out, CELERY_BROKER=broker)
        sys.path.insert(0, HERE)
        import celery_tasks
        cls.tasks = celery_tasks

    @classmethod
    def tearDownClass(cls):
        # A warm shutdown from inside the worker (celery_tasks.stop_worker
        # says why not SIGTERM from here); killed only if it never ends.
        cls.tasks.stop_worker.delay()
        try:
            code = cls.worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            cls.worker.kill()
            cls.worker.wait()
            code = None
        cls.log.close()
        cls.server.stop()
        if code != 0:
            with open(cls.log.name) as f:
                raise AssertionError(
                    f"the worker did not stop cleanly ({code}); its log:\n"
                    + f.read()[-4000:])

    def wait_for(self, name, timeout=60):
        """The text a task recorded in `name`, once it has."""
        path = os.path.join(self.out, name)
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if self.worker.poll() is not None or time.monotonic() > deadline:
                with open(self.log.name) as f:
                    self.fail(f"task never recorded {name}; worker log:\n"
                              + f.read()[-4000:])
            time.sleep(0.05)
        with open(path) as f:
            return f.read()

    def test_tasks_run_and_a_failed_one_is_retried(self):
        self.tasks.add.delay(2, 3, "sum")
        self.tasks.flaky.delay("flaky")
        self.assertEqual(self.wait_for("sum"), "5")
        self.assertEqual(self.wait_for("flaky"), "retries=1")
        # Every message was deleted after its task: the queue is empty, and
        # nothing is left in flight.
        sqs = self.server.client()
        url = sqs.get_queue_url(QueueName="celery-jobs")["QueueUrl"]
        names = ["ApproximateNumberOfMessages",
                 "ApproximateNumberOfMessagesNotVisible",
                 "ApproximateNumberOfMessagesDelayed"]
        deadline = time.monotonic() + 30
        while True:
            attrs = sqs.get_queue_attributes(QueueUrl=url,
                                             AttributeNames=names)["Attributes"]
            if all(attrs[n] == "0" for n in names):
                break
            self.assertLess(time.monotonic(), deadline, attrs)
            time.sleep(0.05)
        # Many tasks, each run once.
        for i in range(20):
            self.tasks.add.delay(i, 100, f"many-{i}")
        for i in range(20):
            self.assertEqual(self.wait_for(f"many-{i}"), str(i + 100))


if __name__ == "__main__":
    unittest.main()
