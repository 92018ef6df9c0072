"""The worker as a job runtime, against a real `sqlq serve`: handlers by
kind over several queues sharing one concurrency limit, what becomes of a
message no handler takes, the outcomes a handler raises (Snooze,
RetryAfter, Permanent, Cancel), per-handler timeouts, a job's own
timeout and expiry. Each scenario runs
with sqlq.Worker and with sqlq.aio.Worker (its loop on a thread of its
own; the test's plain handlers run in asyncio.to_thread there). What is
asserted is what a user sees: the message's attempts, errors and state,
its dead letter, the worker's log lines and counters."""
from __future__ import annotations

import asyncio
import datetime
import logging
import os
import sys
import threading
import time
import unittest
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sqlq_server  # noqa: E402
from sqlq_server import wait_for  # noqa: E402

import sqlq  # noqa: E402
from sqlq import aio  # noqa: E402
from sqlq.outcomes import HandlerSpec  # noqa: E402


def _to_async(h: Any) -> Any:
    """A plain test handler as a coroutine function (run in a thread, so
    that a blocking one leaves the event loop free and can be cancelled
    from the worker's side)."""
    if isinstance(h, HandlerSpec):
        return sqlq.handler(_to_async(h.fn), timeout=h.timeout)

    async def run(m: sqlq.Message) -> Any:
        return await asyncio.to_thread(h, m)
    return run


class _AioWorker:
    """A sqlq.aio.Worker on an event loop of a thread of its own, with the
    start/stop/join and counters of a sqlq.Worker."""

    def __init__(self, url: str, args: tuple, kw: dict,
                 hooks: list) -> None:
        self.hooks = hooks
        args = tuple(_to_async(a) if i == 1 and a is not None else a
                     for i, a in enumerate(args))
        if kw.get("handler") is not None:
            kw["handler"] = _to_async(kw["handler"])
        if kw.get("handlers"):
            kw["handlers"] = {k: _to_async(v)
                              for k, v in kw["handlers"].items()}
        self.args, self.kw, self.url = args, kw, url
        self.started = threading.Event()
        self.done = threading.Event()
        self.error: list[BaseException] = []
        self.worker: Any = None
        self.loop: Any = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            async with aio.Client(self.url,
                                  token=sqlq_server.ADMIN_TOKEN) as c:
                self.worker = aio.Worker(c, *self.args, **self.kw)
                for h in self.hooks:
                    self.worker.use(**h)
                await self.worker.start()
                self.started.set()
                await self.worker.join()
        try:
            asyncio.run(main())
        except BaseException as e:  # noqa: B902
            self.error.append(e)
        finally:
            self.started.set()
            self.done.set()

    def start(self) -> None:
        self.thread.start()
        assert self.started.wait(30), "the aio worker did not start"
        if self.error:
            raise self.error[0]

    def stop(self) -> None:
        if self.loop is not None and not self.done.is_set():
            self.loop.call_soon_threadsafe(self.worker.stop)

    def join(self, timeout: float) -> bool:
        return self.done.wait(timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.worker, name)


def _ts(rfc3339: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class JobsTests:
    """Mixed into a unittest.TestCase; FLAVOUR: "sync" or "aio"."""
    FLAVOUR = "sync"

    def setUp(self) -> None:
        self.server, self.client = sqlq_server.serve(self)
        self.workers: list[Any] = []
        self.addCleanup(self._stop_workers)

    def _stop_workers(self) -> None:
        for w in self.workers:
            w.stop()
        for w in self.workers:
            self.assertTrue(w.join(30), "a worker did not stop")

    def start(self, *args: Any, **kw: Any) -> Any:
        kw.setdefault("wait_ms", 500)
        kw.setdefault("name", "w1")
        hooks = kw.pop("use", [])
        if self.FLAVOUR == "sync":
            w: Any = sqlq.Worker(self.client, *args, **kw)
            for h in hooks:
                w.use(**h)
        else:
            w = _AioWorker(self.server.url, args, kw, hooks)
        self.workers.append(w)
        w.start()
        return w

    def stats(self, queue: str) -> dict:
        return self.client.queue(queue).stats()["stats"]

    def wait_past_expiry(self, q: Any, i: int) -> None:
        """Until message i of q, still ready, is past its expiry."""
        def past_deadline() -> bool:
            msg = q.message(i)
            self.assertEqual(msg["state"], "ready")
            return _now() > _ts(msg["expires_at"])
        wait_for(past_deadline, 20, "the job's deadline to pass")

    def job(self, queue: str, kind: str, **options: Any) -> tuple:
        """A new queue of the options, and the id of a message of kind
        sent to it."""
        q = self.client.queue(queue)
        q.create(**options)
        return q, q.send("x", kind=kind)

    @staticmethod
    def lines(cm: Any) -> list[str]:
        return [f"{r.levelname} {r.getMessage()}" for r in cm.records]

    def wait_line(self, cm: Any, text: str, timeout: float = 20) -> Any:
        return wait_for(lambda: next((r for r in cm.records
                                      if text in r.getMessage()), None),
                        timeout, repr(text))

    # Several queues, one limit.
    def test_queues_share_the_concurrency_limit(self) -> None:
        for name, lease in (("ja", 30000), ("jb", 60000)):
            self.client.queue(name).create(lease_ms=lease)
            self.client.queue(name).send_batch(
                [{"payload": f"{name}{i}"} for i in range(3)])
        mu = threading.Lock()
        running, most, seen = [0], [0], []
        two = threading.Event()
        gate = threading.Event()

        def handle(m: sqlq.Message) -> None:
            with mu:
                running[0] += 1
                most[0] = max(most[0], running[0])
                seen.append((m.queue.name, m.payload))
                if running[0] == 2:
                    two.set()
            try:
                self.assertTrue(gate.wait(20))
            finally:
                with mu:
                    running[0] -= 1
        with self.assertLogs("sqlq", level="INFO") as cm:
            w = self.start(queues=["ja", "jb"], handler=handle,
                           concurrency=2)
            self.assertTrue(two.wait(20))
            gate.set()
            wait_for(lambda: w.acked == 6, 20, "six acks")
        self.assertEqual(most[0], 2)
        self.assertEqual(sorted(seen), sorted(
            [("ja", f"ja{i}") for i in range(3)]
            + [("jb", f"jb{i}") for i in range(3)]))
        self.assertEqual((w.by_queue["ja"]["acked"],
                          w.by_queue["jb"]["acked"]), (3, 3))
        self.assertEqual(self.lines(cm)[0], "INFO sqlq worker w1: started on "
                         "queues ja, jb (concurrency 2, leases 30000, 60000 "
                         "ms)")

    def test_no_queue_waits_out_another_queues_idle_poll(self) -> None:
        for name in ("idle", "busy"):
            self.client.queue(name).create()
        # One handler; the idle queue's claim waits 20 s for a message.
        w = self.start(queues=["idle", "busy"], handler=lambda m: None,
                       concurrency=1, wait_ms=20000)
        wait_for(lambda: self.client.overview()["waiting_consumers"] >= 2,
                 20, "both claims to wait")
        self.client.queue("busy").send_batch(
            [{"payload": str(i)} for i in range(3)])
        # Well within the idle queue's poll: it holds no handler.
        wait_for(lambda: w.by_queue["busy"]["acked"] == 3, 10,
                 "the busy queue's three acks")

    def test_a_job_waiting_for_a_handler_keeps_its_lease(self) -> None:
        for name in ("busy", "waits"):
            self.client.queue(name).create(lease_ms=30000)
        gate = threading.Event()
        busy = threading.Event()
        self.addCleanup(gate.set)

        def handle(m: sqlq.Message) -> None:
            if m.queue.name == "busy":
                busy.set()
                self.assertTrue(gate.wait(30))
        # One handler; both queues' claims wait 20 s for a message.
        w = self.start(queues=["busy", "waits"], handler=handle,
                       concurrency=1, wait_ms=20000)
        wait_for(lambda: self.client.overview()["waiting_consumers"] >= 2,
                 20, "both claims to wait")
        self.client.queue("busy").send("hold the handler")
        self.assertTrue(busy.wait(20))
        # Claimed by the poll still open while the one handler is taken:
        # it waits in the worker, on a lease of its own timeout, 500 ms.
        q = self.client.queue("waits")
        i = q.send("x", timeout=0.5)
        wait_for(lambda: q.message(i).get("lease_expires_at"), 20,
                 "the job to be claimed")
        later = _now() + datetime.timedelta(seconds=1.5)

        def still_leased_later() -> bool:
            msg = q.message(i)
            self.assertEqual(msg["state"], "leased")
            t = _now()
            return t > later and _ts(msg["lease_expires_at"]) > t
        # Extended while it waits: leased still, three leases on.
        wait_for(still_leased_later, 20,
                 "its lease to be extended while it waits")
        gate.set()
        wait_for(lambda: w.by_queue["waits"]["acked"] == 1, 20,
                 "its ack")
        st = self.stats("waits")
        self.assertEqual((st["claims"], st["acks"], st["expirations"]),
                         (1, 1, 0))

    def test_handlers_by_kind(self) -> None:
        q = self.client.queue("kinds")
        q.create(max_attempts=2, backoff_base_ms=0)
        e1 = q.send({"to": "ada"}, kind="email.send")
        s1, e2, f1 = q.send_batch([
            {"payload": "+100", "kind": "sms.send"},
            {"payload": {"to": "bob"}, "kind": "email.send"},
            {"payload": "fax", "kind": "fax.send"}]).ids
        got: list = []
        mu = threading.Lock()

        def by(name: str) -> Any:
            def h(m: sqlq.Message) -> None:
                with mu:
                    got.append((name, m.id, m.kind))
            return h
        w = self.start("kinds", handlers={"email.send": by("email"),
                                          "sms.send": by("sms")})
        wait_for(lambda: self.stats("kinds")["dead"] == 1, 20,
                 "the fax's dead letter")
        wait_for(lambda: w.acked == 3, 20, "three acks")
        self.assertEqual(sorted(got), sorted([
            ("email", e1, "email.send"), ("email", e2, "email.send"),
            ("sms", s1, "sms.send")]))
        # No handler for fax.send: failed attempts, then a dead letter.
        msg = q.message(f1)
        self.assertEqual((msg["state"], msg["attempts"], msg["kind"]),
                         ("dead", 2, "fax.send"))
        self.assertEqual([e["error"] for e in msg["errors"]],
                         ["no handler for kind 'fax.send'"] * 2)
        self.assertEqual(q.dead()[0]["kind"], "fax.send")

    def test_a_default_handler_takes_the_other_kinds(self) -> None:
        q = self.client.queue("rest")
        q.create()
        a = q.send("a", kind="email.send")
        b = q.send("b", kind="fax.send")
        c = q.send("c")
        got: list = []
        w = self.start("rest", handlers={
            "email.send": lambda m: got.append(("email", m.id)),
            "*": lambda m: got.append(("rest", m.id))})
        wait_for(lambda: w.acked == 3, 20, "three acks")
        self.assertEqual(sorted(got), sorted([("email", a), ("rest", b),
                                              ("rest", c)]))

    def test_unknown_kind_snooze_waits_for_a_worker_that_knows_it(self):
        # A rolling deploy: the old worker gives the new kind back without
        # counting the attempt, the new one handles it.
        q, i = self.job("deploy", "report.build", max_attempts=1)
        with self.assertLogs("sqlq", level="INFO") as cm:
            old = self.start("deploy", handlers={"email.send": lambda m: None},
                             unknown_kind="snooze", unknown_kind_delay=3600)
            self.wait_line(cm, f"message {i} of deploy has no handler")
            old.stop()
            self.assertTrue(old.join(30))
        msg = q.message(i)
        # Its attempt given back, no error kept.
        self.assertEqual((msg["state"], msg["attempts"], msg.get("snoozes"),
                          msg.get("errors", [])), ("delayed", 0, 1, []))
        self.assertIn(f"INFO sqlq worker w1: message {i} of deploy has no "
                      "handler for kind 'report.build', snoozed for 3600000 "
                      "ms", self.lines(cm))
        self.assertEqual((old.snoozed, old.nacked), (1, 1))
        self.assertEqual(q.retry_message(i), 1)  # ready now, by hand
        attempts = []
        new = self.start("deploy", handlers={
            "report.build": lambda m: attempts.append(m.attempt)})
        wait_for(lambda: new.acked == 1, 20, "the ack")
        # Its one attempt was not used up by the snooze.
        self.assertEqual(attempts, [1])
        self.assertEqual(self.stats("deploy")["dead"], 0)

    def test_snoozing_for_ever_ends_in_a_dead_letter(self) -> None:
        q, i = self.job("forever", "fax.send", max_attempts=1)
        with self.assertLogs("sqlq", level="INFO") as cm:
            w = self.start("forever", handlers={"email.send": lambda m: None},
                           unknown_kind="snooze", unknown_kind_delay=0)
            self.wait_line(cm, "now a dead letter")
        msg = q.message(i)
        # A hundred snoozes spent no attempt; the next one counts.
        self.assertEqual((msg["state"], msg["attempts"], msg["last_error"]),
                         ("dead", 1, "snoozed 100 times"))
        self.assertIn(f"ERROR sqlq worker w1: message {i} of forever failed "
                      "on attempt 1, now a dead letter: snoozed 100 times",
                      self.lines(cm))
        self.assertEqual((w.snoozed, w.nacked, w.dead), (100, 101, 0))

    def test_unknown_kind_dead(self) -> None:
        q, i = self.job("strict", "fax.send", max_attempts=5)
        with self.assertLogs("sqlq", level="INFO") as cm:
            w = self.start("strict", handlers={"email.send": lambda m: None},
                           unknown_kind="dead")
            wait_for(lambda: self.stats("strict")["dead"] == 1, 20,
                     "the dead letter")
            self.wait_line(cm, "now a dead letter")
        msg = q.message(i)
        self.assertEqual((msg["state"], msg["attempts"]), ("dead", 1))
        self.assertEqual(msg["last_error"], "no handler for kind 'fax.send'")
        self.assertIn(f"ERROR sqlq worker w1: message {i} of strict has no "
                      "handler for kind 'fax.send', now a dead letter",
                      self.lines(cm))
        self.assertEqual(w.dead, 1)

    def test_a_message_without_a_kind_and_no_default_handler_fails(self):
        q = self.client.queue("nokind")
        q.create(max_attempts=2, backoff_base_ms=0)
        i = q.send("x")
        with self.assertLogs("sqlq", level="INFO") as cm:
            w = self.start("nokind", handlers={"email.send": lambda m: None})
            self.wait_line(cm, "now a dead letter")
        msg = q.message(i)
        self.assertEqual(msg["attempts"], 2)
        self.assertEqual([e["error"] for e in msg["errors"]],
                         ["no handler for messages without a kind"] * 2)
        self.assertIn(f"ERROR sqlq worker w1: message {i} of nokind failed "
                      "on attempt 2, now a dead letter: no handler for "
                      "messages without a kind", self.lines(cm))
        self.assertEqual(w.nacked, 2)

    # Outcomes.
    def test_retry_after_fails_the_attempt_with_the_handlers_delay(self):
        q = self.client.queue("later")
        q.create(max_attempts=3, backoff_base_ms=0)
        i = q.send("x")
        attempts = []

        def handle(m: sqlq.Message) -> None:
            attempts.append(m.attempt)
            if m.attempt == 1:
                raise sqlq.RetryAfter(3600, error="rate limited: 429")
        with self.assertLogs("sqlq", level="INFO") as cm:
            w = self.start("later", handle)
            self.wait_line(cm, f"message {i} of later failed")
            before = datetime.datetime.now(datetime.timezone.utc)
            msg = q.message(i)
            self.assertEqual((msg["state"], msg["attempts"]), ("delayed", 1))
            self.assertEqual([e["error"] for e in msg["errors"]],
                             ["rate limited: 429"])
            # An hour, not the queue's backoff of nothing.
            wait = (_ts(msg["ready_at"]) - before).total_seconds()
            self.assertGreater(wait, 3500)
            self.assertLessEqual(wait, 3600)
            self.assertEqual(q.retry_message(i), 1)  # now, by hand
            wait_for(lambda: w.acked == 1, 20, "the second attempt's ack")
        self.assertEqual(attempts, [1, 2])
        self.assertIn(f"WARNING sqlq worker w1: message {i} of later failed "
                      "on attempt 1, retried in 3600000 ms: rate limited: 429",
                      self.lines(cm))

    def test_snooze_permanent_cancel(self) -> None:
        q = self.client.queue("outcomes")
        q.create(max_attempts=5, backoff_base_ms=0)
        ids = dict(zip(["snooze", "permanent", "cancel", "boom"],
                       q.send_batch([{"payload": p} for p in (
                           "snooze", "permanent", "cancel", "boom")]).ids))

        def handle(m: sqlq.Message) -> None:
            if m.payload == "snooze":
                raise sqlq.Snooze(datetime.timedelta(hours=1))
            if m.payload == "permanent":
                try:
                    int("card")
                except ValueError as e:
                    raise sqlq.PermanentFailure("card declined") from e
            if m.payload == "cancel":
                raise sqlq.Cancel("user deleted")
            if m.attempt == 1:
                raise KeyError("flaky")
        with self.assertLogs("sqlq", level="INFO") as cm:
            w = self.start("outcomes", handle)
            wait_for(lambda: (w.acked, w.nacked) == (1, 4), 20,
                     "every outcome")
        lines = self.lines(cm)
        i = ids["snooze"]
        msg = q.message(i)
        # Back in an hour, its attempt not counted, no error recorded.
        self.assertEqual((msg["state"], msg["attempts"], msg.get("snoozes"),
                          msg.get("errors", [])), ("delayed", 0, 1, []))
        before = datetime.datetime.now(datetime.timezone.utc)
        self.assertGreater((_ts(msg["ready_at"]) - before).total_seconds(),
                           3500)
        self.assertIn(f"INFO sqlq worker w1: message {i} of outcomes snoozed "
                      "for 3600000 ms on attempt 1", lines)
        # Dead letters at once, with four attempts left.
        i = ids["permanent"]
        msg = q.message(i)
        self.assertEqual((msg["state"], msg["attempts"], msg["last_error"]),
                         ("dead", 1, "card declined"))
        line = f"ERROR sqlq worker w1: message {i} of outcomes failed " \
            "permanently on attempt 1, now a dead letter: card declined"
        self.assertIn(line, lines)
        # Its log record carries the error it was raised from.
        rec = cm.records[lines.index(line)]
        self.assertIsInstance(rec.exc_info[1], ValueError)
        i = ids["cancel"]
        msg = q.message(i)
        self.assertEqual((msg["state"], msg["attempts"], msg["last_error"]),
                         ("dead", 1, "cancelled: user deleted"))
        self.assertIn(f"WARNING sqlq worker w1: message {i} of outcomes "
                      "cancelled on attempt 1, now a dead letter: user "
                      "deleted", lines)
        self.assertEqual(sorted(d["id"] for d in q.dead()),
                         sorted([ids["permanent"], ids["cancel"]]))
        # Anything else: a failed attempt, retried.
        self.assertIn(f"WARNING sqlq worker w1: message {ids['boom']} of "
                      "outcomes failed on attempt 1, retried after the "
                      "queue's backoff: KeyError: 'flaky'", lines)
        self.assertEqual((w.snoozed, w.dead), (1, 2))

    def test_middleware(self) -> None:
        q = self.client.queue("mw")
        q.create(max_attempts=3)
        ok, bad = q.send_batch([{"payload": "ok"}, {"payload": "bad"}]).ids
        calls: list = []
        mu = threading.Lock()

        def record(*c: Any) -> None:
            with mu:
                calls.append(c)

        def handle(m: sqlq.Message) -> int:
            if m.payload == "bad":
                raise ValueError("bad input")
            return 42

        def on_error(m: sqlq.Message, exc: BaseException) -> None:
            record("on_error", m.payload, repr(exc))
            if isinstance(exc, ValueError):
                # An application's rule: bad input waits for a fix.
                raise sqlq.RetryAfter(3600, error=f"held: {exc}")
        w = self.start("mw", handle, use=[
            {"before": lambda m: record("before 1", m.payload)},
            {"before": lambda m: record("before 2", m.payload),
             "after": lambda m, result: record("after", m.payload, result),
             "on_error": on_error}])
        wait_for(lambda: (w.acked, w.nacked) == (1, 1), 20, "both outcomes")
        with mu:
            by = {p: [c for c in calls if c[1] == p] for p in ("ok", "bad")}
        self.assertEqual(by["ok"], [("before 1", "ok"), ("before 2", "ok"),
                                    ("after", "ok", 42)])
        self.assertEqual(by["bad"], [("before 1", "bad"),
                                     ("before 2", "bad"),
                                     ("on_error", "bad",
                                      "ValueError('bad input')")])
        msg = q.message(bad)
        self.assertEqual((msg["state"], msg["attempts"]), ("delayed", 1))
        self.assertEqual([e["error"] for e in msg["errors"]],
                         ["held: bad input"])

    def _cut_off_once(self, queue: str, i: int, **worker: Any) -> float:
        """Runs a worker (of the options given) on queue, whose handler
        hangs on message i's first attempt, noticing message.cancelled but
        going on all the same, and lets its second attempt end; asserts
        what the server and the worker show of an attempt cut off at a
        timeout of 1000 ms: the message delivered again exactly once, while
        the first still hangs, after the timeout's nack (no lease ran
        out), and no second outcome for the first attempt. Returns how
        long the first attempt ran until it was told to stop."""
        q = self.client.queue(queue)
        mu = threading.Lock()
        attempts: list[int] = []
        ran_for: list[float] = []
        cut = threading.Event()  # the first attempt saw message.cancelled
        unhang = threading.Event()  # the test lets it end
        ended = threading.Event()
        second = threading.Event()
        proceed = threading.Event()

        def handle(m: sqlq.Message) -> None:
            with mu:
                attempts.append(m.attempt)
            if m.attempt == 1:
                t0 = time.monotonic()
                # Hung, on an event; it notices the cancellation.
                if m.cancelled.wait(30):
                    ran_for.append(time.monotonic() - t0)
                    cut.set()
                unhang.wait(30)
                ended.set()
                return  # an outcome the worker must ignore
            second.set()
            proceed.wait(30)
        self.addCleanup(unhang.set)
        self.addCleanup(proceed.set)
        handler = worker.pop("handler_timeout", None)
        spec = handle if handler is None else sqlq.handler(
            handle, timeout=handler)
        with self.assertLogs("sqlq", level="INFO") as cm:
            w = self.start(queue, handlers={"*": spec}, **worker)
            self.assertTrue(cut.wait(20))
            # Redelivered while the first still hangs: its slot was freed.
            self.assertTrue(second.wait(20))
            msg = q.message(i)
            self.assertEqual((msg["attempts"], msg["state"]), (2, "leased"))
            self.assertEqual([e["error"] for e in msg["errors"]],
                             ["timeout after 1000 ms"])
            proceed.set()
            wait_for(lambda: w.acked == 1, 20, "the second attempt's ack")
            unhang.set()
            self.assertTrue(ended.wait(20))
            if self.FLAVOUR == "sync":
                self.wait_line(cm, "finished after its timeout of 1000 ms")
            w.stop()
            self.assertTrue(w.join(30))
        self.assertEqual(attempts, [1, 2])
        st = self.stats(queue)
        # Redelivered exactly once, after the timeout's nack (not after the
        # lease ran out), and no second outcome for the first attempt.
        self.assertEqual((st["claims"], st["acks"], st["nacks"],
                          st["expirations"], st["ready"]), (2, 1, 1, 0, 0))
        self.assertEqual((w.acked, w.nacked), (1, 1))
        self.assertIn(f"WARNING sqlq worker w1: message {i} of {queue} failed "
                      "on attempt 1, retried after the queue's backoff: "
                      "timeout after 1000 ms", self.lines(cm))
        return ran_for[0]

    def test_a_hung_handler_is_cut_off_at_its_timeout(self) -> None:
        q = self.client.queue("hung")
        q.create(max_attempts=3, backoff_base_ms=0, lease_ms=2000)
        i = q.send("x")
        # The handler's own timeout wins over the worker's.
        self._cut_off_once("hung", i, handler_timeout=1, timeout=60,
                           concurrency=1)

    # A job's own limits (sent with it).
    def test_a_job_is_cut_off_at_its_own_timeout(self) -> None:
        q = self.client.queue("own")
        # The queue's lease is 30 s and the worker has no timeout: only the
        # message's own 1000 ms can cut it off.
        q.create(max_attempts=3, backoff_base_ms=0, lease_ms=30000)
        i = q.send("x", timeout=1.0)
        self.assertEqual(q.message(i)["timeout_ms"], 1000)
        # Two handlers: a claim is free to take the message again the
        # moment its lease runs out.
        ran_for = self._cut_off_once("own", i, concurrency=2)
        # Cut off at its own timeout (the handler's clock starts a little
        # after the worker's), not at a lease or the queue's.
        self.assertGreaterEqual(ran_for, 0.9)
        self.assertLess(ran_for, 10)

    def test_a_job_with_a_longer_timeout_of_its_own_gets_the_handlers(
            self) -> None:
        q = self.client.queue("longer")
        q.create(max_attempts=3, backoff_base_ms=0, lease_ms=30000)
        i = q.send("x", timeout=60)
        self._cut_off_once("longer", i, timeout=1, concurrency=2)

    def test_a_job_shorter_than_the_lease_is_extended_by_its_timeout(
            self) -> None:
        q = self.client.queue("ownlease")
        q.create(lease_ms=60000)
        i = q.send("x", timeout=3)
        seen: list[float] = []

        def handle(m: sqlq.Message) -> None:
            # The worker's first extension, at a third of the timeout.
            claimed = m.lease_expires_at
            wait_for(lambda: m.lease_expires_at != claimed, 20,
                     "an extension")
            lease_end = _ts(q.message(m.id)["lease_expires_at"])
            seen.append((lease_end - _now()).total_seconds())
        w = self.start("ownlease", handle)
        wait_for(lambda: w.acked == 1, 20, "the ack")
        # Leased for at most its timeout from the extension, not for 60 s.
        self.assertEqual(len(seen), 1)
        self.assertLessEqual(seen[0], 3)
        with self.assertRaises(sqlq.NotFound):
            q.message(i)

    def test_a_job_not_started_in_time_is_a_dead_letter(self) -> None:
        q = self.client.queue("late")
        q.create(max_attempts=3)
        # Sent while no worker runs.
        i = q.send("x", expire_after=0.2)
        seen: list[Any] = []

        def handle(m: sqlq.Message) -> None:
            seen.append(m.payload)

        self.wait_past_expiry(q, i)
        w = self.start("late", handler=handle)
        dead = wait_for(lambda: q.dead(), 20, "the dead letter")
        self.assertEqual([d["id"] for d in dead], [i])
        self.assertEqual(dead[0]["last_error"],
                         "expired: not started within 200 ms")
        # The worker claims all the same: a job sent now runs.
        q.send("after")
        wait_for(lambda: w.acked == 1, 20, "the next job's ack")
        self.assertEqual(seen, ["after"])
        self.assertEqual(w.nacked, 0)
        self.assertEqual(self.stats("late")["dead_lettered"], 1)
        self.assertEqual(self.stats("late")["expired"], 1)

    def test_a_job_not_started_in_time_is_dropped_when_sent_so(self) -> None:
        q = self.client.queue("stale")
        q.create(max_attempts=3)
        with self.assertRaises(sqlq.BadRequest):
            q.send("x", expire_after=60, on_expiry="later")
        # Sent while no worker runs.
        i = q.send("x", expire_after=0.2, on_expiry="drop")
        self.assertEqual(q.message(i)["on_expiry"], "drop")
        seen: list[Any] = []

        def handle(m: sqlq.Message) -> None:
            seen.append((m.payload, m.on_expiry))

        self.wait_past_expiry(q, i)
        w = self.start("stale", handler=handle)
        # The next job runs, so the claim that found the first has run.
        q.send("after", expire_after=60, on_expiry="drop")
        wait_for(lambda: w.acked == 1, 20, "the next job's ack")
        self.assertEqual(seen, [("after", "drop")])
        with self.assertRaises(sqlq.NotFound):
            q.message(i)
        self.assertEqual(q.dead(), [])
        stats = self.stats("stale")
        self.assertEqual(stats["expired"], 1)
        self.assertEqual(stats["dead_lettered"], 0)
        self.assertEqual(stats["acks"], 1)


    # A job's own retry policy (sent with it).
    def test_a_job_with_one_attempt_of_its_own_dies_at_its_first_failure(
            self) -> None:
        q = self.client.queue("once")
        q.create(max_attempts=5, backoff_base_ms=0)
        i = q.send("x", max_attempts=1)
        seen: list[Any] = []

        def handle(m: sqlq.Message) -> None:
            seen.append((m.attempt, m.max_attempts))
            raise ValueError("smtp 451")
        with self.assertLogs("sqlq", level="INFO") as cm:
            w = self.start("once", handle)
            self.wait_line(cm, f"message {i} of once failed")
            wait_for(lambda: w.nacked == 1, 20, "the nack")
        self.assertEqual(seen, [(1, 1)])
        msg = q.message(i)
        self.assertEqual((msg["state"], msg["attempts"]), ("dead", 1))
        self.assertEqual([d["id"] for d in q.dead()], [i])
        self.assertIn(f"ERROR sqlq worker w1: message {i} of once failed on "
                      "attempt 1, now a dead letter: ValueError: smtp 451",
                      self.lines(cm))

    def test_a_job_is_retried_after_its_own_backoff(self) -> None:
        q = self.client.queue("ownbackoff")
        # The queue retries after 10 ms at most; the job after 30 to 60 s
        # (its backoff of a minute, with the server's jitter).
        q.create(max_attempts=3, backoff_base_ms=10, backoff_max_ms=10)
        before = _now()
        i = q.send("x", backoff=60, backoff_max=60)

        def handle(m: sqlq.Message) -> None:
            raise ValueError("not yet")
        with self.assertLogs("sqlq", level="INFO") as cm:
            w = self.start("ownbackoff", handle)
            self.wait_line(cm, f"message {i} of ownbackoff failed")
            wait_for(lambda: w.nacked == 1, 20, "the nack")
        msg = q.message(i)
        self.assertEqual((msg["state"], msg["attempts"]), ("delayed", 1))
        wait = (_ts(msg["ready_at"]) - before).total_seconds()
        self.assertGreaterEqual(wait, 30)
        self.assertLessEqual((_ts(msg["ready_at"]) - _now()).total_seconds(),
                             60)


class TimeoutOfTest(unittest.TestCase):
    """Which timeout a worker keeps on a message: the handler's (else the
    worker's), or the message's own when shorter."""

    def test_the_shorter_wins(self) -> None:
        from sqlq.worker import _Router, lease_of
        h = sqlq.handler(lambda m: None, timeout=5)
        r = _Router(None, {"*": lambda m: None, "k": h}, 60, "fail", 30)
        c = sqlq.Client("http://127.0.0.1:1")  # never asked
        self.addCleanup(c.close)
        q = c.queue("q")

        def msg(timeout_ms: Any) -> sqlq.Message:
            d = {"id": 1, "receipt": "r", "attempt": 1, "payload": "",
                 "kind": "k"}
            if timeout_ms is not None:
                d["timeout_ms"] = timeout_ms
            return sqlq.Message.from_json(q, d)
        spec, default = r.handlers["k"], r.default
        assert default is not None
        self.assertEqual(r.timeout_of(spec, msg(None)), 5)
        self.assertEqual(r.timeout_of(spec, msg(2000)), 2)
        self.assertEqual(r.timeout_of(spec, msg(9000)), 5)
        self.assertEqual(r.timeout_of(default, msg(90000)), 60)
        none = _Router(lambda m: None, None, None, "fail", 30)
        assert none.default is not None
        self.assertIsNone(none.timeout_of(none.default, msg(None)))
        self.assertEqual(none.timeout_of(none.default, msg(250)), 0.25)
        # The lease kept: the claim's, or the job's timeout when shorter.
        self.assertEqual((lease_of(msg(None), 30000),
                          lease_of(msg(250), 30000),
                          lease_of(msg(90000), 30000)), (30000, 250, 30000))


class RunInlineTest(unittest.TestCase):
    """sqlq.testing.run_inline: the jobs of a queue run in the test's own
    thread, with the worker's outcomes."""

    def setUp(self) -> None:
        self.server, self.client = sqlq_server.serve(self)

    def test_every_ready_job_runs_in_the_calling_thread(self) -> None:
        from sqlq.testing import run_inline
        q = self.client.queue("inline")
        q.create(max_attempts=2, backoff_base_ms=0)
        ok = q.send("ok")
        flaky = q.send("flaky")
        later = q.send("later", delay_ms=3600000)  # not ready: not run
        threads = set()

        def handle(m: sqlq.Message) -> None:
            threads.add(threading.current_thread())
            if m.payload == "flaky":
                raise ValueError(f"flaky on attempt {m.attempt}")
        done = run_inline(self.client, "inline", handle)
        # The failed one is ready again at once (no backoff): run again
        # until its attempts are used up.
        self.assertEqual([(m.id, m.attempt, out) for m, out in done],
                         [(ok, 1, "acked"), (flaky, 1, "retry"),
                          (flaky, 2, "dead")])
        self.assertEqual(threads, {threading.current_thread()})
        self.assertTrue(q.message(flaky)["last_error"].startswith(
            "ValueError: flaky on attempt 2"))
        self.assertEqual(q.message(later)["state"], "delayed")
        self.assertEqual(run_inline(self.client, "inline", handle), [])

    def test_a_retry_after_is_not_run_again_before_its_delay(self) -> None:
        from sqlq.testing import run_inline
        q = self.client.queue("inline2")
        q.create(max_attempts=3, backoff_base_ms=0)
        i = q.send("x")

        def handle(m: sqlq.Message) -> None:
            raise sqlq.RetryAfter(3600, error="come back later")
        done = run_inline(self.client, "inline2", {"*": handle})
        self.assertEqual([(m.id, out) for m, out in done], [(i, "retry")])
        self.assertEqual(q.message(i)["errors"][0]["error"],
                         "come back later")

    def test_kinds_and_outcomes(self) -> None:
        from sqlq.testing import run_inline
        q = self.client.queue("inline3")
        q.create(max_attempts=3)
        a = q.send("a", kind="email.send")
        b = q.send("b", kind="fax.send")
        c = q.send("c", kind="sms.send")

        def cancel(m: sqlq.Message) -> None:
            raise sqlq.Cancel("user deleted")
        done = run_inline(self.client, "inline3", {
            "email.send": lambda m: None, "sms.send": cancel},
            unknown_kind="dead")
        self.assertEqual([(m.id, m.kind, out) for m, out in done],
                         [(a, "email.send", "acked"),
                          (b, "fax.send", "dead"),
                          (c, "sms.send", "dead")])
        self.assertEqual(q.message(b)["last_error"],
                         "no handler for kind 'fax.send'")
        self.assertEqual(q.message(c)["last_error"], "cancelled: user deleted")


class JobsTest(JobsTests, unittest.TestCase):
    FLAVOUR = "sync"


class AioJobsTest(JobsTests, unittest.TestCase):
    FLAVOUR = "aio"


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING,
                        format="%(threadName)s %(levelname)s %(message)s")
    unittest.main()
