"""Job results and progress against a real `sqlq serve`: a handler's
return kept as its job's result and awaited by the sender
(client.result), a dead job's error raised as JobFailed, a result that
cannot be kept failing the attempt, progress read while the handler runs,
the wait outliving a server restart, and its timeout. With sqlq.Client
and sqlq.Worker, and with sqlq.aio's; run_inline and arun_inline record
the results too."""
from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import unittest
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sqlq_server import wait_for  # noqa: E402
from test_aio import AioCase  # noqa: E402
from test_worker import ServerCase  # noqa: E402

import sqlq  # noqa: E402
from sqlq import aio  # noqa: E402
from sqlq.testing import arun_inline, run_inline  # noqa: E402


class ResultsTest(ServerCase):
    def start(self, queue: str, handler: Any, **kw: Any) -> sqlq.Worker:
        return super().start(queue, handler, wait_ms=500, name="w1", **kw)

    def test_request_reply(self) -> None:
        q = self.client.queue("adds")
        q.create()

        def handle(m: sqlq.Message) -> Any:
            if m.kind != "add":
                return m.payload["v"]
            return {"sum": m.payload["a"] + m.payload["b"],
                    "by": ["w1", None, 1.5, True], "text": "déjà vu"}
        self.start("adds", handle)
        i = q.send({"a": 2, "b": 40}, kind="add")
        info = self.client.result("adds", i, timeout=20)
        self.assertEqual(info["result"], {"sum": 42, "by": ["w1", None, 1.5,
                                                            True],
                                          "text": "déjà vu"})
        self.assertEqual((info["id"], info["state"]), (i, "completed"))
        self.assertTrue(info["completed_at"].endswith("Z"))
        # Asked again, and of the queue: the same, at once.
        self.assertEqual(q.result(i, timeout=0)["result"]["sum"], 42)
        # Every JSON value is a result, and a falsy one is kept too.
        values = ["text", 7, [1, [2]], False, 0, ""]
        ids = [q.send({"v": v}) for v in values]
        self.assertEqual([self.client.result("adds", j, 20)["result"]
                          for j in ids], values)

    def test_a_handler_returning_nothing_keeps_no_result(self) -> None:
        q = self.client.queue("plain")
        q.create()
        i = q.send("x")
        w = self.start("plain", lambda m: None)
        wait_for(lambda: w.acked == 1, 20, "the ack")
        # Acked without a result, in a queue without an archive: nothing
        # is kept of it.
        with self.assertRaises(sqlq.NotFound):
            self.client.result("plain", i, timeout=0)
        with self.assertRaises(sqlq.NotFound):
            self.client.result("plain", 123456, timeout=0)

    def test_a_dead_job_raises_job_failed(self) -> None:
        q = self.client.queue("charges")
        q.create(max_attempts=2, backoff_base_ms=0)
        declined = q.send({"card": "4000"})
        flaky = q.send({"card": "flaky"})

        def charge(m: sqlq.Message) -> Any:
            if m.payload["card"] == "4000":
                raise sqlq.Permanent("card declined")
            raise RuntimeError(f"gateway down on attempt {m.attempt}")
        self.start("charges", charge)
        with self.assertRaises(sqlq.JobFailed) as cm:
            self.client.result("charges", declined, timeout=20)
        e = cm.exception
        self.assertEqual((e.id, e.error, e.attempts), (declined,
                                                       "card declined", 1))
        self.assertEqual(e.code, "job_failed")
        self.assertIn("card declined", str(e))
        with self.assertRaises(sqlq.JobFailed) as cm:
            self.client.result("charges", flaky, timeout=20)
        self.assertEqual((cm.exception.id, cm.exception.attempts), (flaky, 2))
        self.assertTrue(cm.exception.error.startswith(
            "RuntimeError: gateway down on attempt 2"), cm.exception.error)

    def test_a_result_that_cannot_be_kept_fails_the_attempt(self) -> None:
        q = self.client.queue("odd")
        q.create(max_attempts=1)
        not_json = q.send("object")
        nan = q.send("nan")
        big = q.send("big")
        results = {"object": object(), "nan": float("nan"),
                   "big": "x" * (1 << 20)}
        with self.assertLogs("sqlq", level="INFO") as logs:
            w = self.start("odd", lambda m: results[m.payload])
            wait_for(lambda: w.nacked == 3, 20, "three failed attempts")
        for i, start in ((not_json, "result is not JSON: TypeError: "),
                         (nan, "result is not JSON: ValueError: "),
                         (big, "result refused by the server: 413 "
                               "too_large: a result of 1048578 bytes")):
            with self.assertRaises(sqlq.JobFailed) as cm:
                self.client.result("odd", i, timeout=0)
            self.assertTrue(cm.exception.error.startswith(start),
                            cm.exception.error)
        self.assertTrue(any(f"message {not_json} of odd failed on attempt 1, "
                            "now a dead letter: result is not JSON" in line
                            for line in logs.output), logs.output)
        self.assertEqual(w.acked, 0)

    def test_progress_is_read_while_the_handler_runs(self) -> None:
        q = self.client.queue("reports")
        q.create()
        i = q.send("r")
        recorded, finish = threading.Event(), threading.Event()
        self.addCleanup(finish.set)

        def build(m: sqlq.Message) -> str:
            m.progress(10)
            m.progress(37.5, {"step": "rendering", "page": 3})
            recorded.set()
            finish.wait(30)
            return "report.pdf"
        self.start("reports", build)
        self.assertTrue(recorded.wait(20))
        info = q.result_info(i)
        self.assertEqual((info["state"], info["progress"], info["note"]),
                         ("leased", 37.5, {"step": "rendering", "page": 3}))
        self.assertNotIn("result", info)
        self.assertTrue(info["progress_at"].endswith("Z"))
        finish.set()
        done = self.client.result("reports", i, timeout=20)
        self.assertEqual((done["result"], done["progress"]),
                         ("report.pdf", 37.5))

    def test_progress_must_be_a_finite_number(self) -> None:
        q = self.client.queue("p")
        q.create()
        q.send("x")
        m = q.claim()[0]
        for bad in (float("nan"), float("inf")):
            with self.assertRaises(ValueError):
                m.progress(bad)
        for bad in ("50%", None, True):
            with self.assertRaises(TypeError):
                m.progress(bad)  # type: ignore[arg-type]
        m.ack()
        # The receipt of an acked message is gone.
        with self.assertRaises(sqlq.NotFound):
            m.progress(50)

    def test_ack_with_a_result_by_hand(self) -> None:
        q = self.client.queue("manual")
        q.create()
        i = q.send("x")
        m = q.claim()[0]
        m.ack(None, result_ttl=60)  # JSON null is a result too
        info = q.result_info(i)
        self.assertEqual((info["state"], info["result"]), ("completed", None))
        # A result too large is refused, and the message not acked.
        j = q.send("y")
        m = q.claim()[0]
        with self.assertRaises(sqlq.BadRequest) as cm:
            m.ack("x" * (1 << 20))
        self.assertEqual(cm.exception.status, 413)
        self.assertEqual(q.message(j)["state"], "leased")
        m.ack({"ok": True})
        self.assertEqual(self.client.result("manual", j)["result"],
                         {"ok": True})

    def test_result_times_out_when_no_worker_runs(self) -> None:
        q = self.client.queue("idle")
        q.create()
        i = q.send("x")
        t0 = time.monotonic()
        with self.assertRaises(sqlq.ResultTimeout) as cm:
            self.client.result("idle", i, timeout=0.5)
        took = time.monotonic() - t0
        self.assertIsInstance(cm.exception, TimeoutError)
        self.assertEqual(cm.exception.id, i)
        self.assertEqual(cm.exception.info["state"], "ready")
        # Held by the server for the whole wait, not asked in a loop.
        self.assertGreaterEqual(took, 0.5)
        self.assertLess(took, 10)

    def test_result_survives_a_server_restart(self) -> None:
        q = self.client.queue("restart")
        q.create()
        i = q.send(21)
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(
            self.client.result("restart", i, timeout=60)), daemon=True)
        with self.assertLogs("sqlq", level="INFO") as logs:
            waiter.start()
            self.server.kill()
            # The waiter asked while the server was down, and goes on.
            wait_for(lambda: any(
                f"waiting for the result of job {i}: " in line
                for line in logs.output), 20, "a failed ask")
            self.server.start()  # the same port and database
            self.start("restart", lambda m: m.payload * 2)
            waiter.join(60)
        self.assertFalse(waiter.is_alive())
        self.assertEqual(got[0]["result"], 42)

    def test_run_inline_records_the_results(self) -> None:
        q = self.client.queue("inline")
        q.create(max_attempts=1)
        a = q.send({"n": 1})
        b = q.send({"n": 0})
        c = q.send({"n": -1})

        def handle(m: sqlq.Message) -> Any:
            m.progress(50, "half")
            if m.payload["n"] < 0:
                raise sqlq.Permanent("negative")
            return m.payload["n"] * 10 or None
        done = run_inline(self.client, "inline", handle)
        self.assertEqual([(r.message.id, r.outcome, r.result) for r in done],
                         [(a, "acked", 10), (b, "acked", None),
                          (c, "dead", None)])
        m, out = done[0]  # a (message, outcome) pair as before
        self.assertEqual((m.id, out), (a, "acked"))
        info = self.client.result("inline", a, timeout=0)
        self.assertEqual((info["result"], info["progress"], info["note"]),
                         (10, 50, "half"))


class AioResultsTest(AioCase):
    async def start(self, queue: str, handler: Any, **kw: Any) -> aio.Worker:
        return await super().start(queue, handler, wait_ms=500, name="w1",
                                   **kw)

    async def test_request_reply_progress_and_failure(self) -> None:
        q = self.client.queue("jobs")
        await q.create(max_attempts=1)
        ok = await q.send({"a": 2, "b": 40})
        bad = await q.send({"a": "2", "b": 40})
        recorded, finish = asyncio.Event(), asyncio.Event()

        async def add(m: sqlq.Message) -> Any:
            await m.progress(99.5, {"step": "adding"})
            recorded.set()
            await finish.wait()
            return {"sum": m.payload["a"] + m.payload["b"]}
        await self.start("jobs", add)
        await asyncio.wait_for(recorded.wait(), 20)
        info = await q.result_info(ok)
        self.assertEqual((info["state"], info["progress"], info["note"]),
                         ("leased", 99.5, {"step": "adding"}))
        waiting = asyncio.create_task(self.client.result("jobs", ok,
                                                         timeout=20))
        finish.set()
        info = await waiting
        self.assertEqual((info["state"], info["result"]),
                         ("completed", {"sum": 42}))
        with self.assertRaises(sqlq.JobFailed) as cm:
            await self.client.result("jobs", bad, timeout=20)
        self.assertEqual((cm.exception.id, cm.exception.attempts), (bad, 1))
        self.assertTrue(cm.exception.error.startswith("TypeError: "),
                        cm.exception.error)

    async def test_result_times_out_when_no_worker_runs(self) -> None:
        q = self.client.queue("idle")
        await q.create()
        i = await q.send("x")
        t0 = time.monotonic()
        with self.assertRaises(sqlq.ResultTimeout) as cm:
            await q.result(i, timeout=0.5)
        self.assertGreaterEqual(time.monotonic() - t0, 0.5)
        self.assertEqual(cm.exception.info["state"], "ready")

    async def test_result_survives_a_server_restart(self) -> None:
        q = self.client.queue("restart")
        await q.create()
        i = await q.send(21)
        with self.assertLogs("sqlq", level="INFO") as logs:
            waiting = asyncio.create_task(self.client.result("restart", i,
                                                             timeout=60))
            await asyncio.to_thread(self.server.kill)

            def asked() -> bool:
                return any(f"waiting for the result of job {i}: " in line
                           for line in logs.output)
            await asyncio.to_thread(wait_for, asked, 20, "a failed ask")
            await asyncio.to_thread(self.server.start)
            await self.start("restart", lambda m: m.payload * 2)
            info = await asyncio.wait_for(waiting, 60)
        self.assertEqual(info["result"], 42)

    async def test_arun_inline_records_the_results(self) -> None:
        q = self.client.queue("inline")
        await q.create()
        i = await q.send("x")

        async def handle(m: sqlq.Message) -> Any:
            await m.progress(1)
            return ["done", m.payload]
        done = await arun_inline(self.client, "inline", handle)
        self.assertEqual([(r.message.id, r.outcome, r.result) for r in done],
                         [(i, "acked", ["done", "x"])])
        self.assertEqual((await self.client.result("inline", i))["result"],
                         ["done", "x"])


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING,
                        format="%(threadName)s %(levelname)s %(message)s")
    unittest.main()
