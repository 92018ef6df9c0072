#!/usr/bin/python3
"""The SQS endpoint of a real `sqlq serve`, driven by boto3 as users run it.

Debian 12's boto3 (python3-boto3) speaks SQS's query protocol: form-encoded
requests signed with AWS Signature Version 4, XML replies. Run by ctest
with SQLQ_BIN set to the sqlq program.
"""
import json
import threading
import time
import unittest
import warnings

import botocore.exceptions

from sqs_server import (CLAIMER_SECRET, SENDER_SECRET, Server,
                        TENANT_SECRET, WORKER_SECRET)


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
        first = sqs.list_queues(QueueNamePrefix="jobs-", MaxResults=1)
        self.assertEqual(len(first["QueueUrls"]), 1)
        rest = sqs.list_queues(QueueNamePrefix="jobs-", MaxResults=1,
                               NextToken=first["NextToken"])
        self.assertEqual(
            [u.rsplit("/", 1)[1] for u in first["QueueUrls"] + rest["QueueUrls"]],
            ["jobs-a", "jobs-b"])
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

    def test_a_json_request_must_sign_its_operation(self):
        # A JSON-protocol request signed without X-Amz-Target, captured and
        # sent again with the target PurgeQueue: refused as AWS refuses
        # it, and the queue keeps its message.
        sqs = self.server.client()
        url = sqs.create_queue(QueueName="replayed")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="kept")
        json_type = {"Content-Type": "application/x-amz-json-1.0"}
        body = json.dumps({"QueueUrl": url})
        status, reply, headers = self.server.signed_post(
            body, json_type, {"X-Amz-Target": "AmazonSQS.PurgeQueue"})
        self.assertEqual(status, 400, reply)
        self.assertEqual(json.loads(reply), {
            "__type": "com.amazonaws.sqs#IncompleteSignature",
            "message": "'X-Amz-Target' must be a 'SignedHeader' in the AWS "
                       "Authorization."})
        self.assertEqual(headers["x-amzn-query-error"],
                         "IncompleteSignature;Sender")
        self.assertEqual(
            sqs.get_queue_attributes(
                QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
            ["Attributes"]["ApproximateNumberOfMessages"], "1")
        # Signed with its target, as the SDKs sign, the same call is served.
        status, reply, _ = self.server.signed_post(
            body, {**json_type, "X-Amz-Target": "AmazonSQS.PurgeQueue"})
        self.assertEqual(status, 200, reply)
        self.assertEqual(
            sqs.get_queue_attributes(
                QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
            ["Attributes"]["ApproximateNumberOfMessages"], "0")

    def test_messages_round_trip_with_attributes_and_digests(self):
        # boto3 checks MD5OfMessageBody and MD5OfMessageAttributes of every
        # send and receive: a wrong digest would raise here.
        sqs = self.server.client()
        url = sqs.create_queue(QueueName="msgs-attrs")["QueueUrl"]
        # Every range of characters SQS allows, and markup.
        body = ("tab\there\nline\r\ncr <b>&amp;</b> 'q' \"d\" é \ud7ff"
                "\ue000 \ufffd \U0001F600 \U0010FFFF")
        attrs = {
            "trace": {"DataType": "String", "StringValue": "abc <&>"},
            "count": {"DataType": "Number", "StringValue": "-12.5e3"},
            "blob": {"DataType": "Binary",
                     "BinaryValue": bytes(range(256))},
            "kind.v2": {"DataType": "String.custom", "StringValue": "x"},
        }
        sent = sqs.send_message(QueueUrl=url, MessageBody=body,
                                MessageAttributes=attrs)
        got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"],
                                  AttributeNames=["All"])["Messages"]
        self.assertEqual(len(got), 1)
        m = got[0]
        self.assertEqual(m["Body"], body)
        self.assertEqual(m["MessageId"], sent["MessageId"])
        self.assertEqual(m["MessageAttributes"], attrs)
        self.assertEqual(m["MD5OfMessageAttributes"],
                         sent["MD5OfMessageAttributes"])
        self.assertEqual(m["Attributes"]["ApproximateReceiveCount"], "1")
        self.assertGreater(int(m["Attributes"]["SentTimestamp"]), 0)
        # Attributes by name and by prefix; none unless asked for.
        m2 = self.redeliver(sqs, url, m, MessageAttributeNames=["kind.*",
                                                                 "count"])
        self.assertEqual(set(m2["MessageAttributes"]), {"kind.v2", "count"})
        self.assertEqual(m2["Attributes"]["ApproximateReceiveCount"], "2")
        m3 = self.redeliver(sqs, url, m2)
        self.assertNotIn("MessageAttributes", m3)
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m3["ReceiptHandle"])
        self.assertNotIn("Messages", sqs.receive_message(QueueUrl=url))

    def test_the_aws_trace_header_travels_as_the_message_trace_context(self):
        # What the AWS SDKs send from a traced application: the message is
        # stored with the same context as a W3C traceparent header (which
        # sqlq's workers continue), and comes back as AWSTraceHeader.
        sqs = self.server.client()
        url = sqs.create_queue(QueueName="msgs-traced")["QueueUrl"]
        xray = ("Root=1-5759e988-bd862e3fe1be46a994272793;"
                "Parent=53995c3f42cd8ad8;Sampled=1")
        sqs.send_message(QueueUrl=url, MessageBody="traced",
                         MessageSystemAttributes={"AWSTraceHeader": {
                             "DataType": "String", "StringValue": xray}})
        m = sqs.receive_message(QueueUrl=url, AttributeNames=["AWSTraceHeader"],
                                MessageAttributeNames=["All"])["Messages"][0]
        self.assertEqual(m["Attributes"]["AWSTraceHeader"], xray)
        self.assertEqual(
            m["MessageAttributes"]["traceparent"]["StringValue"],
            "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01")
        # "All" includes it; not asked for, it is not given.
        m2 = self.redeliver(sqs, url, m)
        self.assertEqual(m2["Attributes"]["AWSTraceHeader"], xray)
        sqs.change_message_visibility(QueueUrl=url,
                                      ReceiptHandle=m2["ReceiptHandle"],
                                      VisibilityTimeout=0)
        m3 = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"][0]
        self.assertNotIn("Attributes", m3)
        m2 = m3
        # A header that is not X-Ray's is refused, and nothing is sent.
        with self.assertRaises(botocore.exceptions.ClientError) as cm:
            sqs.send_message(QueueUrl=url, MessageBody="bad",
                             MessageSystemAttributes={"AWSTraceHeader": {
                                 "DataType": "String",
                                 "StringValue": "Root=1-5759e988"}})
        self.assertIn("AWSTraceHeader", str(cm.exception))
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m2["ReceiptHandle"])
        self.assertNotIn("Messages", sqs.receive_message(QueueUrl=url))

    def redeliver(self, sqs, url, m, **receive):
        """Makes `m` visible again and receives it once more."""
        sqs.change_message_visibility(QueueUrl=url,
                                      ReceiptHandle=m["ReceiptHandle"],
                                      VisibilityTimeout=0)
        got = sqs.receive_message(QueueUrl=url, AttributeNames=["All"],
                                  WaitTimeSeconds=5, **receive)["Messages"]
        self.assertEqual(got[0]["MessageId"], m["MessageId"])
        return got[0]

    def test_bad_messages_are_refused_and_nothing_is_lost(self):
        sqs = self.server.client()
        url = sqs.create_queue(QueueName="msgs-bad")["QueueUrl"]
        self.assertEqual(code_of(lambda: sqs.send_message(
            QueueUrl=url, MessageBody="bell\x07")), "InvalidMessageContents")
        self.assertEqual(code_of(lambda: sqs.send_message(
            QueueUrl=url, MessageBody="x", MessageAttributes={
                "AWS.x": {"DataType": "String", "StringValue": "v"}})),
            "InvalidParameterValue")
        self.assertEqual(code_of(lambda: sqs.send_message(
            QueueUrl=url, MessageBody="x", MessageAttributes={
                "n": {"DataType": "Number", "StringValue": "12abc"}})),
            "InvalidParameterValue")
        # The 256 KiB limit counts the body and the attributes.
        sqs.send_message(QueueUrl=url, MessageBody="a" * 262144)
        self.assertEqual(code_of(lambda: sqs.send_message(
            QueueUrl=url, MessageBody="a" * 262145)), "InvalidParameterValue")
        self.assertEqual(code_of(lambda: sqs.send_message(
            QueueUrl=url, MessageBody="a" * 262140, MessageAttributes={
                "k": {"DataType": "String", "StringValue": "v"}})),
            "InvalidParameterValue")
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
        self.assertEqual([len(m["Body"]) for m in got["Messages"]], [262144])
        self.assertEqual(code_of(lambda: sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=11)), "InvalidParameterValue")
        self.assertEqual(code_of(lambda: sqs.send_message(
            QueueUrl=url.replace("msgs-bad", "msgs-none"), MessageBody="x")),
            "AWS.SimpleQueueService.NonExistentQueue")

    def test_batches_answer_entry_by_entry(self):
        sqs = self.server.client()
        url = sqs.create_queue(QueueName="msgs-batch")["QueueUrl"]
        r = sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": "a", "MessageBody": "one"},
            {"Id": "b", "MessageBody": "bad\x00"},
            {"Id": "c", "MessageBody": "three", "DelaySeconds": 0,
             "MessageAttributes": {"k": {"DataType": "String",
                                         "StringValue": "v"}}}])
        self.assertEqual([e["Id"] for e in r["Successful"]], ["a", "c"])
        self.assertEqual([(e["Id"], e["Code"], e["SenderFault"])
                          for e in r["Failed"]],
                         [("b", "InvalidMessageContents", True)])
        for entries, code in [
                ([{"Id": "x", "MessageBody": "1"}] * 2,
                 "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
                ([{"Id": str(i), "MessageBody": "1"} for i in range(11)],
                 "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
                ([{"Id": "no spaces", "MessageBody": "1"}],
                 "AWS.SimpleQueueService.InvalidBatchEntryId"),
                ([{"Id": str(i), "MessageBody": "a" * 100000}
                  for i in range(3)],
                 "AWS.SimpleQueueService.BatchRequestTooLong")]:
            self.assertEqual(code_of(lambda: sqs.send_message_batch(
                QueueUrl=url, Entries=entries)), code)
        self.assertEqual(code_of(lambda: sqs.delete_message_batch(
            QueueUrl=url, Entries=[])),
            "AWS.SimpleQueueService.EmptyBatchRequest")
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                  WaitTimeSeconds=5)["Messages"]
        self.assertEqual(sorted(m["Body"] for m in got), ["one", "three"])
        r = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
            {"Id": "v1", "ReceiptHandle": got[0]["ReceiptHandle"],
             "VisibilityTimeout": 600},
            {"Id": "v2", "ReceiptHandle": "garbage", "VisibilityTimeout": 5}])
        self.assertEqual([e["Id"] for e in r["Successful"]], ["v1"])
        self.assertEqual([e["Code"] for e in r["Failed"]],
                         ["ReceiptHandleIsInvalid"])
        r = sqs.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": "d1", "ReceiptHandle": got[0]["ReceiptHandle"]},
            {"Id": "d2", "ReceiptHandle": got[1]["ReceiptHandle"]},
            {"Id": "d3", "ReceiptHandle": "garbage"}])
        self.assertEqual([e["Id"] for e in r["Successful"]], ["d1", "d2"])
        self.assertEqual([e["Code"] for e in r["Failed"]],
                         ["ReceiptHandleIsInvalid"])
        attrs = sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                          "ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]
        self.assertEqual(attrs, {"ApproximateNumberOfMessages": "0",
                                 "ApproximateNumberOfMessagesNotVisible": "0"})

    def test_receipts_visibility_and_purge(self):
        sqs = self.server.client()
        url = sqs.create_queue(QueueName="msgs-vis",
                               Attributes={"VisibilityTimeout": "300"})["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="m")
        first = sqs.receive_message(QueueUrl=url)["Messages"][0]
        # Leased: not visible, counted as in flight.
        self.assertNotIn("Messages", sqs.receive_message(QueueUrl=url))
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])[
            "Attributes"]
        self.assertEqual(attrs["ApproximateNumberOfMessagesNotVisible"], "1")
        self.assertEqual(attrs["VisibilityTimeout"], "300")
        self.assertTrue(attrs["QueueArn"].endswith(":000000000000:msgs-vis"))
        second = self.redeliver(sqs, url, first)
        # The first receipt is stale: deleting with it succeeds, as on SQS,
        # and deletes nothing; changing its visibility is refused.
        sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
        self.assertEqual(code_of(lambda: sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=first["ReceiptHandle"],
            VisibilityTimeout=10)), "InvalidParameterValue")
        self.assertEqual(sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]["ApproximateNumberOfMessagesNotVisible"], "1")
        self.assertEqual(code_of(lambda: sqs.delete_message(
            QueueUrl=url, ReceiptHandle="not-a-receipt")),
            "ReceiptHandleIsInvalid")
        sqs.delete_message(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"])
        self.assertEqual(code_of(lambda: sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=second["ReceiptHandle"],
            VisibilityTimeout=10)), "AWS.SimpleQueueService.MessageNotInflight")
        sqs.set_queue_attributes(QueueUrl=url,
                                 Attributes={"VisibilityTimeout": "20"})
        self.assertEqual(sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"],
            {"VisibilityTimeout": "20"})
        sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "MessageBody": str(i)} for i in range(5)])
        sqs.purge_queue(QueueUrl=url)
        self.assertEqual(sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]["ApproximateNumberOfMessages"], "0")

    def test_a_long_poll_wakes_when_a_message_is_sent(self):
        sqs = self.server.client()
        url = sqs.create_queue(QueueName="msgs-wait")["QueueUrl"]
        got = {}

        def receive():
            start = time.monotonic()
            got["reply"] = self.server.client().receive_message(
                QueueUrl=url, WaitTimeSeconds=20)
            got["waited"] = time.monotonic() - start

        t = threading.Thread(target=receive)
        t.start()
        # Sent once the receive is parked (the server counts it).
        self.server.wait_for_parked(1)
        sqs.send_message(QueueUrl=url, MessageBody="wake")
        t.join(30)
        self.assertEqual(got["reply"]["Messages"][0]["Body"], "wake")
        # Woken by the send, long before the 20 s wait ran out.
        self.assertLess(got["waited"], 10)
        # An empty wait ends empty-handed when its time is up.
        r = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
        self.assertNotIn("Messages", r)

    def test_queue_attributes_are_kept_and_applied(self):
        sqs = self.server.client()
        attrs = {"DelaySeconds": "1", "MessageRetentionPeriod": "86400",
                 "ReceiveMessageWaitTimeSeconds": "2",
                 "MaximumMessageSize": "2048", "VisibilityTimeout": "15",
                 "Policy": '{"Version":"2012-10-17"}'}
        url = sqs.create_queue(QueueName="attrs-q", Attributes=attrs,
                               tags={"team": "payments"})["QueueUrl"]
        # Idempotent for the same attributes, refused for others.
        sqs.create_queue(QueueName="attrs-q", Attributes=attrs)
        self.assertEqual(code_of(lambda: sqs.create_queue(
            QueueName="attrs-q", Attributes={"DelaySeconds": "3"})),
            "QueueAlreadyExists")
        got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])[
            "Attributes"]
        for k, v in attrs.items():
            self.assertEqual(got[k], v, k)
        self.assertEqual(sqs.list_queue_tags(QueueUrl=url)["Tags"],
                         {"team": "payments"})
        # A send takes the queue's delay; a receive its wait.
        sqs.send_message(QueueUrl=url, MessageBody="later")
        self.assertEqual(sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])[
            "Attributes"]["ApproximateNumberOfMessagesDelayed"], "1")
        got = sqs.receive_message(QueueUrl=url)  # waits up to 2 s
        self.assertEqual(got["Messages"][0]["Body"], "later")
        self.assertEqual(code_of(lambda: sqs.send_message(
            QueueUrl=url, MessageBody="x" * 2049)), "InvalidParameterValue")
        sqs.set_queue_attributes(QueueUrl=url, Attributes={
            "DelaySeconds": "0", "MaximumMessageSize": "4096"})
        got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
            "DelaySeconds", "MaximumMessageSize", "LastModifiedTimestamp"])[
            "Attributes"]
        self.assertEqual((got["DelaySeconds"], got["MaximumMessageSize"]),
                         ("0", "4096"))
        for bad, code in [({"DelaySeconds": "901"}, "InvalidAttributeValue"),
                          ({"Nonsense": "1"}, "InvalidAttributeName"),
                          ({"QueueArn": "x"}, "InvalidAttributeName"),
                          ({"FifoQueue": "true"}, "InvalidAttributeValue"),
                          ({"ContentBasedDeduplication": "true"},
                           "InvalidAttributeName")]:
            self.assertEqual(code_of(lambda: sqs.set_queue_attributes(
                QueueUrl=url, Attributes=bad)), code, bad)
        sqs.tag_queue(QueueUrl=url, Tags={"env": "prod", "team": "billing"})
        sqs.untag_queue(QueueUrl=url, TagKeys=["env"])
        self.assertEqual(sqs.list_queue_tags(QueueUrl=url)["Tags"],
                         {"team": "billing"})

    def test_redrive_policy_moves_poison_messages_and_back(self):
        sqs = self.server.client()
        dlq = sqs.create_queue(QueueName="poison-dlq")["QueueUrl"]
        arn = sqs.get_queue_attributes(
            QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 2})
        src = sqs.create_queue(QueueName="poison-src", Attributes={
            "RedrivePolicy": policy})["QueueUrl"]
        self.assertEqual(json.loads(sqs.get_queue_attributes(
            QueueUrl=src, AttributeNames=["RedrivePolicy"])["Attributes"][
            "RedrivePolicy"]), {"deadLetterTargetArn": arn,
                                "maxReceiveCount": 2})
        self.assertEqual(code_of(lambda: sqs.create_queue(
            QueueName="poison-x", Attributes={"RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": arn + "-none",
                 "maxReceiveCount": 2})})), "InvalidParameterValue")
        sqs.send_message(QueueUrl=src, MessageBody="poison", MessageAttributes={
            "k": {"DataType": "String", "StringValue": "v"}})
        # Received twice and never deleted: the third receive moves it.
        for _ in range(2):
            m = sqs.receive_message(QueueUrl=src, WaitTimeSeconds=5)[
                "Messages"][0]
            sqs.change_message_visibility(QueueUrl=src,
                                          ReceiptHandle=m["ReceiptHandle"],
                                          VisibilityTimeout=0)
        self.assertNotIn("Messages", sqs.receive_message(QueueUrl=src))
        moved = sqs.receive_message(QueueUrl=dlq, MessageAttributeNames=["All"],
                                    AttributeNames=["ApproximateReceiveCount"])[
            "Messages"][0]
        self.assertEqual(moved["Body"], "poison")
        self.assertEqual(moved["MessageAttributes"]["k"]["StringValue"], "v")
        self.assertEqual(moved["Attributes"]["ApproximateReceiveCount"], "1")
        self.assertEqual(sqs.list_dead_letter_source_queues(QueueUrl=dlq)[
            "queueUrls"], [src])
        # Moving messages back (StartMessageMoveTask) is newer than
        # Debian's boto3: signed query-protocol calls of our own.
        sqs.change_message_visibility(QueueUrl=dlq,
                                      ReceiptHandle=moved["ReceiptHandle"],
                                      VisibilityTimeout=0)
        status, xml = self.server.query({"Action": "StartMessageMoveTask",
                                         "SourceArn": arn})
        self.assertEqual(status, 200, xml)
        self.assertIn("<TaskHandle>", xml)
        status, xml = self.server.query({"Action": "ListMessageMoveTasks",
                                         "SourceArn": arn})
        self.assertEqual(status, 200, xml)
        self.assertRegex(
            xml, r"<ListMessageMoveTasksResultEntry>.*<Status>COMPLETED"
                 r"</Status>.*<ApproximateNumberOfMessagesMoved>1<")
        back = sqs.receive_message(QueueUrl=src, WaitTimeSeconds=5)[
            "Messages"][0]
        self.assertEqual(back["Body"], "poison")
        # An empty policy removes it.
        sqs.set_queue_attributes(QueueUrl=src,
                                 Attributes={"RedrivePolicy": ""})
        self.assertNotIn("RedrivePolicy", sqs.get_queue_attributes(
            QueueUrl=src, AttributeNames=["All"])["Attributes"])
        # (An empty list is no element in XML, so boto3 leaves it out.)
        self.assertEqual(sqs.list_dead_letter_source_queues(QueueUrl=dlq).get(
            "queueUrls", []), [])

    def test_a_redrive_policy_needs_send_on_its_target(self):
        """Regression: a key with admin on its own queues could make any
        queue their dead-letter queue and fail messages into it. Naming the
        target needs send (or admin) on it; whether it exists is not told
        to a key without."""
        admin = self.server.client()
        secret = admin.create_queue(QueueName="secret-dlq")["QueueUrl"]
        arn = admin.get_queue_attributes(
            QueueUrl=secret, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"]

        def policy(target_arn):
            return json.dumps({"deadLetterTargetArn": target_arn,
                               "maxReceiveCount": 1})

        tenant = self.server.client("AKIATENANT", TENANT_SECRET)
        missing = arn.rsplit(":", 1)[0] + ":no-such-queue"
        for target in (arn, missing):
            self.assertEqual(code_of(lambda: tenant.create_queue(
                QueueName="tenant-src",
                Attributes={"RedrivePolicy": policy(target)})),
                "AccessDenied")
        self.assertNotIn("tenant-src", " ".join(
            admin.list_queues().get("QueueUrls", [])))
        src = tenant.create_queue(QueueName="tenant-src")["QueueUrl"]
        for target in (arn, missing):
            self.assertEqual(code_of(lambda: tenant.set_queue_attributes(
                QueueUrl=src, Attributes={"RedrivePolicy": policy(target)})),
                "AccessDenied")
        self.assertNotIn("RedrivePolicy", admin.get_queue_attributes(
            QueueUrl=src, AttributeNames=["All"])["Attributes"])
        # A target of its own is fine, and then a policy back, a loop, is
        # refused.
        own = tenant.create_queue(QueueName="tenant-dlq")["QueueUrl"]
        own_arn = tenant.get_queue_attributes(
            QueueUrl=own, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        src_arn = tenant.get_queue_attributes(
            QueueUrl=src, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        tenant.set_queue_attributes(
            QueueUrl=src, Attributes={"RedrivePolicy": policy(own_arn)})
        self.assertEqual(code_of(lambda: tenant.set_queue_attributes(
            QueueUrl=own, Attributes={"RedrivePolicy": policy(src_arn)})),
            "InvalidParameterValue")
        self.assertNotIn("RedrivePolicy", tenant.get_queue_attributes(
            QueueUrl=own, AttributeNames=["All"])["Attributes"])
        # A poison message goes to the tenant's own dead-letter queue, and
        # none ever reached secret-dlq.
        tenant.send_message(QueueUrl=src, MessageBody="poison")
        m = tenant.receive_message(QueueUrl=src, WaitTimeSeconds=5)[
            "Messages"][0]
        tenant.change_message_visibility(QueueUrl=src,
                                         ReceiptHandle=m["ReceiptHandle"],
                                         VisibilityTimeout=0)
        self.assertNotIn("Messages", tenant.receive_message(QueueUrl=src))
        self.assertEqual(tenant.receive_message(
            QueueUrl=own, WaitTimeSeconds=5)["Messages"][0]["Body"], "poison")
        self.assertEqual(admin.get_queue_attributes(
            QueueUrl=secret, AttributeNames=["All"])["Attributes"][
            "ApproximateNumberOfMessages"], "0")

    def test_fifo_queues_order_groups_and_drop_duplicates(self):
        sqs = self.server.client()
        self.assertEqual(code_of(lambda: sqs.create_queue(
            QueueName="orders.fifo")), "InvalidParameterValue")
        self.assertEqual(code_of(lambda: sqs.create_queue(
            QueueName="orders", Attributes={"FifoQueue": "true"})),
            "InvalidParameterValue")
        url = sqs.create_queue(QueueName="orders.fifo", Attributes={
            "FifoQueue": "true", "ContentBasedDeduplication": "true"})[
            "QueueUrl"]
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])[
            "Attributes"]
        self.assertEqual((attrs["FifoQueue"], attrs["ContentBasedDeduplication"]),
                         ("true", "true"))
        self.assertEqual(code_of(lambda: sqs.send_message(
            QueueUrl=url, MessageBody="x")), "MissingParameter")
        self.assertEqual(code_of(lambda: sqs.send_message(
            QueueUrl=url, MessageBody="x", MessageGroupId="a",
            DelaySeconds=5)), "InvalidParameterValue")
        sent = [sqs.send_message(QueueUrl=url, MessageBody=body,
                                 MessageGroupId=group)
                for body, group in [("a1", "a"), ("a2", "a"), ("b1", "b")]]
        seqs = [int(r["SequenceNumber"]) for r in sent]
        self.assertEqual(seqs, sorted(seqs))
        # The same body again within five minutes: a duplicate, same id.
        again = sqs.send_message(QueueUrl=url, MessageBody="a1",
                                 MessageGroupId="a")
        self.assertEqual(again["MessageId"], sent[0]["MessageId"])
        explicit = sqs.send_message(QueueUrl=url, MessageBody="a1",
                                    MessageGroupId="a",
                                    MessageDeduplicationId="other-id")
        self.assertNotEqual(explicit["MessageId"], sent[0]["MessageId"])
        # One message per group in flight, in send order within a group.
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                  AttributeNames=["All"])["Messages"]
        self.assertEqual(sorted(m["Body"] for m in got), ["a1", "b1"])
        first = next(m for m in got if m["Body"] == "a1")
        self.assertEqual(first["Attributes"]["MessageGroupId"], "a")
        self.assertEqual(first["Attributes"]["SequenceNumber"],
                         sent[0]["SequenceNumber"])
        self.assertEqual(len(first["Attributes"]["MessageDeduplicationId"]),
                         64)
        self.assertNotIn("Messages", sqs.receive_message(QueueUrl=url))
        sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
        nxt = sqs.receive_message(QueueUrl=url)["Messages"][0]
        self.assertEqual(nxt["Body"], "a2")
        # Deduplication ids belong to FIFO queues only.
        std = sqs.create_queue(QueueName="not-fifo")["QueueUrl"]
        self.assertEqual(code_of(lambda: sqs.send_message(
            QueueUrl=std, MessageBody="x", MessageDeduplicationId="d")),
            "InvalidParameterValue")

    def test_message_groups_share_a_standard_queue(self):
        # A standard queue made by CreateQueue shares its receives between
        # MessageGroupIds, as SQS fair queues do: a noisy tenant's backlog
        # does not hold up a quiet one.
        sqs = self.server.client()

        def noisy_then_quiet(url):
            sqs.send_message_batch(QueueUrl=url, Entries=[
                {"Id": str(i), "MessageBody": f"noisy-{i}",
                 "MessageGroupId": "noisy"} for i in range(8)])
            sqs.send_message(QueueUrl=url, MessageBody="quiet-0",
                             MessageGroupId="quiet")
            sqs.send_message(QueueUrl=url, MessageBody="nobody-0")

        url = sqs.create_queue(QueueName="fair-tenants")["QueueUrl"]
        noisy_then_quiet(url)
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=4)[
            "Messages"]
        # One of each group per round (messages without a group are one
        # group), then the noisy one's next: each group in send order.
        self.assertEqual(sorted(m["Body"] for m in got),
                         ["nobody-0", "noisy-0", "noisy-1", "quiet-0"])
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)[
            "Messages"]
        self.assertEqual([m["Body"] for m in got],
                         [f"noisy-{i}" for i in range(2, 8)])
        # A queue made plain natively keeps the groups but delivers in
        # send order.
        self.server.native("POST", "/v1/queues/plain-tenants", {})
        plain = sqs.get_queue_url(QueueName="plain-tenants")["QueueUrl"]
        noisy_then_quiet(plain)
        got = sqs.receive_message(QueueUrl=plain, MaxNumberOfMessages=2,
                                  AttributeNames=["MessageGroupId"])[
            "Messages"]
        self.assertEqual([m["Body"] for m in got], ["noisy-0", "noisy-1"])
        self.assertEqual(got[0]["Attributes"]["MessageGroupId"], "noisy")

    def test_workers_send_and_receive_only_where_granted(self):
        admin = self.server.client()
        jobs = admin.create_queue(QueueName="jobs-granted")["QueueUrl"]
        billing = admin.create_queue(QueueName="billing-msgs")["QueueUrl"]
        worker = self.server.client("AKIAWORKER", WORKER_SECRET)
        worker.send_message(QueueUrl=jobs, MessageBody="ok")
        m = worker.receive_message(QueueUrl=jobs)["Messages"][0]
        worker.delete_message(QueueUrl=jobs, ReceiptHandle=m["ReceiptHandle"])
        for call in [
                lambda: worker.send_message(QueueUrl=billing, MessageBody="x"),
                lambda: worker.receive_message(QueueUrl=billing),
                lambda: worker.purge_queue(QueueUrl=jobs),
                lambda: worker.set_queue_attributes(
                    QueueUrl=jobs, Attributes={"VisibilityTimeout": "1"})]:
            self.assertEqual(code_of(call), "AccessDenied")


    def test_permission_matrix(self):
        """Every key against every operation on a name it matches (a-*) and
        one it does not (b-*): allowed cells succeed, refused ones are
        AccessDenied and change nothing."""
        admin = self.server.client()
        keys = {
            # key: (client, what its grants allow, written out by hand)
            "admin": (admin, lambda need, a: True),
            "sender": (self.server.client("AKIASENDER", SENDER_SECRET),
                       lambda need, a: a and need in ("send", "see")),
            "claimer": (self.server.client("AKIACLAIMER", CLAIMER_SECRET),
                        lambda need, a: a and need in ("claim", "see")),
            # send,claim on jobs*: neither a-* nor b-*.
            "worker": (self.server.client("AKIAWORKER", WORKER_SECRET),
                       lambda need, a: False),
        }
        urls = {n: admin.create_queue(QueueName=n)["QueueUrl"]
                for n in ("a-matrix", "b-matrix")}

        # Every lease taken here outlasts the test (an hour): a message
        # becoming visible again in the middle of a later cell would change
        # the counts that cell compares.
        def receipt(url):
            admin.send_message(QueueUrl=url, MessageBody="r")
            return admin.receive_message(
                QueueUrl=url, VisibilityTimeout=3600)["Messages"][0][
                    "ReceiptHandle"]

        def state(url):
            a = admin.get_queue_attributes(QueueUrl=url,
                                           AttributeNames=["All"])
            return a["Attributes"]

        # (operation, permission it needs, preparation as admin, the call
        # given the client, the queue URL and what the preparation made).
        none = lambda u: None  # noqa: E731
        ops = [
            ("send", "send", none, lambda c, u, p: c.send_message(
                QueueUrl=u, MessageBody="m")),
            ("send batch", "send", none, lambda c, u, p: c.send_message_batch(
                QueueUrl=u, Entries=[{"Id": "1", "MessageBody": "m"}])),
            ("receive", "claim", none,
             lambda c, u, p: c.receive_message(QueueUrl=u,
                                               VisibilityTimeout=3600)),
            ("delete message", "claim", receipt,
             lambda c, u, p: c.delete_message(QueueUrl=u, ReceiptHandle=p)),
            ("change visibility", "claim", receipt,
             lambda c, u, p: c.change_message_visibility(
                 QueueUrl=u, ReceiptHandle=p, VisibilityTimeout=3500)),
            ("attributes", "see", none, lambda c, u, p: c.get_queue_attributes(
                QueueUrl=u, AttributeNames=["All"])),
            ("set attributes", "admin", none,
             lambda c, u, p: c.set_queue_attributes(
                 QueueUrl=u, Attributes={"VisibilityTimeout": "31"})),
            ("purge", "admin", none, lambda c, u, p: c.purge_queue(QueueUrl=u)),
            ("create", "admin", none, lambda c, u, p: c.create_queue(
                QueueName=u.rsplit("/", 1)[1])),
            ("delete queue", "admin", none,
             lambda c, u, p: c.delete_queue(QueueUrl=u)),
        ]
        allowed = refused = 0
        for label, (client, allows) in keys.items():
            for op, need, prepare, call in ops:
                for name, a in (("a-matrix", True), ("b-matrix", False)):
                    with self.subTest(key=label, op=op, name=name):
                        url = urls[name]
                        admin.send_message(QueueUrl=url, MessageBody="x")
                        made = prepare(url)
                        before = state(url)
                        if allows(need, a):
                            call(client, url, made)
                            allowed += 1
                        else:
                            self.assertEqual(
                                code_of(lambda: call(client, url, made)),
                                "AccessDenied")
                            after = state(url)
                            # Counts of messages, settings: all as before.
                            self.assertEqual(after, before)
                            refused += 1
                        # A dropped queue comes back for the next cell.
                        admin.create_queue(QueueName=name)
        self.assertEqual(allowed + refused, len(keys) * len(ops) * 2)
        print(f"SQS cells: {allowed} allowed, {refused} refused")
        # Listing shows each key the queues it may see.
        for label, (client, allows) in keys.items():
            listed = [u.rsplit("/", 1)[1] for u in client.list_queues(
                QueueNamePrefix="").get("QueueUrls", [])
                if u.rsplit("/", 1)[1] in urls]
            self.assertEqual(
                sorted(listed),
                [n for n in sorted(urls) if allows("see", n == "a-matrix")],
                label)


if __name__ == "__main__":
    unittest.main()
