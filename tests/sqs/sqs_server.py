"""A real `sqlq serve` for the SQS client tests: a fresh database on the
engine SQLQ_SQS_ENGINE names (test_db.py; SQLite by default), a token file
with two access keys and a metrics token, and clients for it."""
import os
import re
import sys
import tempfile
import time
import urllib.error
import urllib.request


import boto3
import botocore.config

import test_db

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from serve import Serve  # noqa: E402

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
WORKER_SECRET = "workerSECRETworkerSECRET0123456789"
METRICS_TOKEN = "metrics-reader-0123456789abcdef"
ADMIN_TOKEN = "native-admin-0123456789abcdef"
# Keys of one permission each on the names a-*, for the permission matrix.
SENDER_SECRET = "senderSECRETsenderSECRET0123456789"
CLAIMER_SECRET = "claimerSECRETclaimerSECRET012345678"
# A key with admin on its own queues (tenant-*) and nothing else.
TENANT_SECRET = "tenantSECRETtenantSECRET0123456789"


class Server:
    """sqlq serve on a fresh database, with a token file. Raises
    unittest.SkipTest when the engine's server is not there (and not
    required)."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory()
        self.db = test_db.create_or_skip(self.dir)
        tokens = os.path.join(self.dir.name, "tokens")
        with open(tokens, "w") as f:
            f.write(f"aws-key AKIAADMIN {SECRET} admin:*\n")
            f.write(f"aws-key AKIAWORKER {WORKER_SECRET} send,claim:jobs*\n")
            f.write(f"aws-key AKIASENDER {SENDER_SECRET} send:a-*\n")
            f.write(f"aws-key AKIACLAIMER {CLAIMER_SECRET} claim:a-*\n")
            f.write(f"aws-key AKIATENANT {TENANT_SECRET} admin:tenant-*\n")
            f.write(f"{METRICS_TOKEN} metrics:*\n")
            f.write(f"{ADMIN_TOKEN} admin:*\n")
        self.serve = Serve(
            os.environ["SQLQ_BIN"], self.db, self.dir.name,
            "--tokens", tokens,
            # The tests refuse bad signatures on purpose, more than the
            # default allowance of failures (tested in the server tests).
            "--auth-failures", "1000/1m")
        self.port = self.serve.port

    def read_log(self):
        return self.serve.read_log()

    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def metric(self, name):
        """A gauge or counter of the server's /metrics."""
        req = urllib.request.Request(
            self.url() + "/metrics",
            headers={"Authorization": "Bearer " + METRICS_TOKEN})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        m = re.search(r"^" + name + r" (\S+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    def native(self, method, path, body=None):
        """A request to the native HTTP API, as the admin token."""
        import json
        req = urllib.request.Request(
            self.url() + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": "Bearer " + ADMIN_TOKEN,
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"null")

    def query(self, params, key="AKIAADMIN", secret=SECRET):
        """A query-protocol call signed as botocore signs, for operations
        Debian's boto3 predates: (HTTP status, XML reply)."""
        status, reply, _ = self.signed_post(
            params, {"Content-Type":
                     "application/x-www-form-urlencoded; charset=utf-8"},
            key=key, secret=secret)
        return status, reply

    def signed_post(self, data, headers, added_after_signing=None,
                    key="AKIAADMIN", secret=SECRET):
        """A POST to / signed as botocore signs, with `headers`; then
        `added_after_signing` (unsigned, as a replay of a captured request
        could add them): (HTTP status, reply text, reply headers)."""
        import botocore.auth
        import botocore.awsrequest
        import botocore.credentials
        request = botocore.awsrequest.AWSRequest(
            method="POST", url=self.url() + "/", data=data, headers=headers)
        botocore.auth.SigV4Auth(
            botocore.credentials.Credentials(key, secret), "sqs",
            "eu-central-1").add_auth(request)
        prepared = request.prepare()
        body = prepared.body
        if isinstance(body, str):
            body = body.encode()
        sent = dict(prepared.headers)
        sent.update(added_after_signing or {})
        req = urllib.request.Request(prepared.url, data=body, headers=sent,
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    def wait_for_parked(self, n):
        """Waits until `n` receives are parked waiting for messages."""
        deadline = time.monotonic() + 30
        while self.metric("sqlq_server_waiting_consumers") < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"{n} receives never parked")
            time.sleep(0.01)

    def client(self, key="AKIAADMIN", secret=SECRET):
        return boto3.client(
            "sqs", endpoint_url=f"http://127.0.0.1:{self.port}",
            region_name="eu-central-1", aws_access_key_id=key,
            aws_secret_access_key=secret,
            config=botocore.config.Config(retries={"max_attempts": 1}))

    def stop(self):
        self.serve.stop()
        test_db.drop(self.db)
        self.dir.cleanup()


