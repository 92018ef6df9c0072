#!/usr/bin/python3
"""The SQS endpoint of a real `sqlq serve`, driven by the AWS CLI from
Debian 12 (awscli 2.9, SQS's query protocol) as a user types it. Run by
ctest with SQLQ_BIN set to the sqlq program."""
import json
import os
import subprocess
import unittest

from sqs_server import SECRET, Server

AWS = "/usr/bin/aws"


class AwsCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def aws(self, *args, key="AKIAADMIN", secret=SECRET):
        env = dict(os.environ, AWS_ACCESS_KEY_ID=key,
                   AWS_SECRET_ACCESS_KEY=secret,
                   AWS_DEFAULT_REGION="eu-central-1", AWS_PAGER="",
                   AWS_CONFIG_FILE="/dev/null",
                   AWS_SHARED_CREDENTIALS_FILE="/dev/null")
        return subprocess.run(
            [AWS, "--endpoint-url", self.server.url(), "--output", "json",
             "sqs", *args], env=env, capture_output=True, text=True,
            timeout=60)

    def ok(self, *args):
        r = self.aws(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout) if r.stdout.strip() else {}

    def test_queues_from_the_command_line(self):
        url = self.ok("create-queue", "--queue-name", "cli-jobs",
                      "--attributes", "VisibilityTimeout=60")["QueueUrl"]
        self.assertEqual(url, self.server.url() + "/000000000000/cli-jobs")
        self.assertEqual(
            self.ok("get-queue-url", "--queue-name", "cli-jobs")["QueueUrl"],
            url)
        self.assertIn(url, self.ok("list-queues", "--queue-name-prefix",
                                   "cli-")["QueueUrls"])
        self.ok("delete-queue", "--queue-url", url)
        r = self.aws("get-queue-url", "--queue-name", "cli-jobs")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("AWS.SimpleQueueService.NonExistentQueue", r.stderr)

    def test_a_wrong_secret_is_refused(self):
        r = self.aws("list-queues", secret="not-the-secret-at-all")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("SignatureDoesNotMatch", r.stderr)


if __name__ == "__main__":
    unittest.main()
