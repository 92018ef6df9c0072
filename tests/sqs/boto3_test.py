#!/usr/bin/python3
"""The SQS endpoint of a real `sqlq serve`, driven by boto3 as users run it.

Debian 12's boto3 (python3-boto3) speaks SQS's query protocol: form-encoded
requests signed with AWS Signature Version 4, XML replies. Run by ctest
with SQLQ_BIN set to the sqlq program.
"""
import unittest
import warnings

import botocore.exceptions

from sqs_server import Server, WORKER_SECRET


def code_of(call):
    """The SQS error code a call fails with."""
    try:
        call()
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"]
    raise AssertionError("the call succeeded")


class QueuesOverSqs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # boto3 keeps its connections open until the process ends.
        warnings.simplefilter("ignore", ResourceWarning)
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_create_get_list_delete(self):
        sqs = self.server.client()
        url = sqs.create_queue(QueueName="jobs-a")["QueueUrl"]
        self.assertEqual(
            url, f"http://127.0.0.1:{self.server.port}/000000000000/jobs-a")
        # Idempotent for the same attributes; the SQS error for others.
        self.assertEqual(sqs.create_queue(QueueName="jobs-a")["QueueUrl"], url)
        sqs.create_queue(QueueName="jobs-b",
                         Attributes={"VisibilityTimeout": "45"})
        self.assertEqual(
            sqs.create_queue(QueueName="jobs-b",
                             Attributes={"VisibilityTimeout": "45"})["QueueUrl"],
            url.replace("jobs-a", "jobs-b"))
        self.assertEqual(
            code_of(lambda: sqs.create_queue(
                QueueName="jobs-b", Attributes={"VisibilityTimeout": "46"})),
            "QueueAlreadyExists")
        # Attributes left out are not compared (SQS compares those given).
        self.assertEqual(sqs.create_queue(QueueName="jobs-b")["QueueUrl"],
                         url.replace("jobs-a", "jobs-b"))
        self.assertEqual(
            code_of(lambda: sqs.create_queue(
                QueueName="jobs-c", Attributes={"VisibilityTimeout": "x"})),
            "InvalidAttributeValue")
        self.assertEqual(sqs.get_queue_url(QueueName="jobs-a")["QueueUrl"], url)
        sqs.create_queue(QueueName="other")
        listed = sqs.list_queues(QueueNamePrefix="jobs-")["QueueUrls"]
        self.assertEqual([u.rsplit("/", 1)[1] for u in listed],
                         ["jobs-a", "jobs-b"])
        # Paging with MaxResults and NextToken.
        first = sqs.list_queues(MaxResults=2)
        self.assertEqual(len(first["QueueUrls"]), 2)
        rest = sqs.list_queues(MaxResults=2, NextToken=first["NextToken"])
        self.assertEqual(
            [u.rsplit("/", 1)[1] for u in first["QueueUrls"] + rest["QueueUrls"]],
            ["jobs-a", "jobs-b", "other"])
        self.assertNotIn("NextToken", rest)
        sqs.delete_queue(QueueUrl=url)
        with self.assertRaises(sqs.exceptions.QueueDoesNotExist):
            sqs.get_queue_url(QueueName="jobs-a")
        with self.assertRaises(sqs.exceptions.QueueDoesNotExist):
            sqs.delete_queue(QueueUrl=url)

    def test_signatures_and_grants_are_enforced(self):
        self.assertEqual(
            code_of(lambda: self.server.client(secret="not-the-secret-at-all")
                    .list_queues()),
            "SignatureDoesNotMatch")
        self.assertEqual(
            code_of(lambda: self.server.client(key="AKIANOBODY").list_queues()),
            "InvalidClientTokenId")
        admin = self.server.client()
        admin.create_queue(QueueName="billing")
        admin.create_queue(QueueName="jobs-seen")
        worker = self.server.client("AKIAWORKER", WORKER_SECRET)
        # A worker key may not create or drop queues, nor see others'.
        self.assertEqual(code_of(lambda: worker.create_queue(QueueName="jobs-x")),
                         "AccessDenied")
        self.assertEqual(code_of(lambda: worker.get_queue_url(QueueName="billing")),
                         "AccessDenied")
        names = [u.rsplit("/", 1)[1]
                 for u in worker.list_queues().get("QueueUrls", [])]
        self.assertIn("jobs-seen", names)
        self.assertNotIn("billing", names)
        self.assertTrue(admin.get_queue_url(QueueName="billing")["QueueUrl"])


if __name__ == "__main__":
    unittest.main()
