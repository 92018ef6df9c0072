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

    def test_messages_from_the_command_line(self):
        url = self.ok("create-queue", "--queue-name", "cli-msgs")["QueueUrl"]
        sent = self.ok("send-message", "--queue-url", url, "--message-body",
                       "hello from the shell", "--message-attributes",
                       json.dumps({"origin": {"DataType": "String",
                                              "StringValue": "cli"}}))
        self.assertTrue(sent["MessageId"])
        self.ok("send-message-batch", "--queue-url", url, "--entries",
                json.dumps([{"Id": "a", "MessageBody": "two"},
                            {"Id": "b", "MessageBody": "three"}]))
        attrs = self.ok("get-queue-attributes", "--queue-url", url,
                        "--attribute-names", "ApproximateNumberOfMessages")
        self.assertEqual(attrs["Attributes"]["ApproximateNumberOfMessages"],
                         "3")
        got = self.ok("receive-message", "--queue-url", url,
                      "--max-number-of-messages", "10", "--wait-time-seconds",
                      "5", "--message-attribute-names", "All")["Messages"]
        self.assertEqual(sorted(m["Body"] for m in got),
                         ["hello from the shell", "three", "two"])
        first = next(m for m in got if m["MessageId"] == sent["MessageId"])
        self.assertEqual(first["MessageAttributes"]["origin"]["StringValue"],
                         "cli")
        self.ok("delete-message", "--queue-url", url, "--receipt-handle",
                first["ReceiptHandle"])
        self.ok("change-message-visibility", "--queue-url", url,
                "--receipt-handle", got[1]["ReceiptHandle"],
                "--visibility-timeout", "0")
        again = self.ok("receive-message", "--queue-url", url,
                        "--wait-time-seconds", "5", "--attribute-names",
                        "ApproximateReceiveCount")["Messages"]
        self.assertEqual(again[0]["MessageId"], got[1]["MessageId"])
        self.assertEqual(again[0]["Attributes"]["ApproximateReceiveCount"],
                         "2")
        self.ok("purge-queue", "--queue-url", url)
        attrs = self.ok("get-queue-attributes", "--queue-url", url,
                        "--attribute-names", "All")["Attributes"]
        self.assertEqual(attrs["ApproximateNumberOfMessages"], "0")
        self.assertEqual(attrs["ApproximateNumberOfMessagesNotVisible"], "0")
        r = self.aws("delete-message", "--queue-url", url, "--receipt-handle",
                     "nonsense")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ReceiptHandleIsInvalid", r.stderr)

    def test_a_wrong_secret_is_refused(self):
        r = self.aws("list-queues", secret="not-the-secret-at-all")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("SignatureDoesNotMatch", r.stderr)


if __name__ == "__main__":
    unittest.main()
