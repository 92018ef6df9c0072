#!/usr/bin/env python3
"""Signs requests as the AWS SDK for Python (botocore) does, for sigv4_test.

Reads a JSON list of requests on stdin, each
  {"method", "url", "headers": [[name, value], ...], "body",
   "key", "secret", "region", "amz_date", "presign" (seconds, or absent)}
and writes the same list with the headers botocore added (X-Amz-Date,
Authorization) appended to "headers"; with "presign", the signature goes in
the query instead (botocore's SigV4QueryAuth, as kombu's GETs carry it)
and "url" is the presigned URL.
"""
import datetime
import json
import sys

import botocore.auth
import botocore.awsrequest
import botocore.credentials


def sign(spec):
    when = datetime.datetime.strptime(spec["amz_date"], "%Y%m%dT%H%M%SZ")

    class Frozen(datetime.datetime):
        @classmethod
        def utcnow(cls):
            return when

    botocore.auth.datetime.datetime = Frozen
    request = botocore.awsrequest.AWSRequest(
        method=spec["method"], url=spec["url"],
        data=spec["body"].encode("utf-8"))
    for name, value in spec["headers"]:
        request.headers[name] = value
    creds = botocore.credentials.Credentials(spec["key"], spec["secret"])
    if spec.get("presign"):
        botocore.auth.SigV4QueryAuth(creds, "sqs", spec["region"],
                                     expires=spec["presign"]).add_auth(request)
    else:
        botocore.auth.SigV4Auth(creds, "sqs", spec["region"]).add_auth(request)
    prepared = request.prepare()
    spec["headers"] = [[k, v] for k, v in prepared.headers.items()]
    spec["url"] = prepared.url
    return spec


json.dump([sign(s) for s in json.load(sys.stdin)], sys.stdout)
