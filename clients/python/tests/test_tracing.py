"""Trace context from a send to the handler, against a real `sqlq serve`:
a traceparent given with a message reaches its handler, and what the
handler sends carries it on, with or without OpenTelemetry (these tests
pass either way; on Debian 12, which packages no OpenTelemetry for Python,
they run without it)."""
from __future__ import annotations

import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sqlq_server  # noqa: E402
from sqlq_server import wait_for  # noqa: E402

import sqlq  # noqa: E402
from sqlq import tracing  # noqa: E402

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TS = "vendor=opaque"
OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class TracingTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server, self.client = sqlq_server.serve(self)
        for q in ("in", "out"):
            self.client.queue(q).create()

    def handle_all(self, n: int, handler) -> None:
        """Runs a worker on "in" until n messages were handled."""
        done = threading.Semaphore(0)

        def wrapped(m: sqlq.Message) -> None:
            try:
                handler(m)
            finally:
                done.release()
        w = sqlq.Worker(self.client, "in", wrapped, wait_ms=500)
        w.start()
        try:
            for _ in range(n):
                self.assertTrue(done.acquire(timeout=20))
            wait_for(lambda: w.acked + w.nacked == n, 20, "the acks")
        finally:
            w.stop()
            w.join(30)

    def test_a_send_outside_a_trace_adds_no_header(self) -> None:
        q = self.client.queue("out")
        q.send("plain")
        q.send("mine", headers={"tenant": "acme"})
        self.assertEqual([m.headers for m in q.claim(2)],
                         [{}, {"tenant": "acme"}])

    def test_the_callers_traceparent_reaches_the_handler_and_goes_on(self):
        self.client.queue("in").send(
            "first", headers={"traceparent": TP, "tracestate": TS,
                              "tenant": "acme"})
        seen: list[dict] = []

        def handle(m: sqlq.Message) -> None:
            seen.append(dict(m.headers))
            self.assertEqual(tracing.current(),
                             {"traceparent": TP, "tracestate": TS})
            self.client.queue("out").send("next")
            self.client.queue("out").send("own", headers={
                "traceparent": OTHER})
        self.handle_all(1, handle)
        self.assertEqual(seen, [{"traceparent": TP, "tracestate": TS,
                                 "tenant": "acme"}])
        out = self.client.queue("out").claim(2)
        self.assertEqual([m.headers for m in out], [
            {"traceparent": TP, "tracestate": TS},  # carried on
            {"traceparent": OTHER},                 # the handler's own
        ])

    def test_the_trace_ends_with_its_handler(self) -> None:
        # One handler thread handles both: the second message, sent
        # without a trace, must not inherit the first one's.
        q = self.client.queue("in")
        q.send("traced", headers={"traceparent": TP})
        q.send("untraced")
        q.send("malformed", headers={"traceparent": "00-xyz-01"})

        def handle(m: sqlq.Message) -> None:
            self.client.queue("out").send(m.payload)
        self.handle_all(3, handle)
        out = {m.payload: m.headers
               for m in self.client.queue("out").claim(3)}
        self.assertEqual(out, {"traced": {"traceparent": TP},
                               "untraced": {}, "malformed": {}})
        self.assertEqual(tracing.current(), {})


if __name__ == "__main__":
    unittest.main()
