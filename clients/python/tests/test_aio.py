"""sqlq.aio against a real `sqlq serve`: the operations, errors and retries
of the asyncio client, and its worker in the scenarios of test_worker.py
(concurrency, nacks with the exception's text, leases kept while a handler
runs, the server killed mid-run, a worker process killed mid-message or
sent SIGTERM), its logs and its trace context."""
from __future__ import annotations

import asyncio
import collections
import datetime
import logging
import os
import re
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sqlq_server  # noqa: E402
import test_retries  # noqa: E402
import test_worker  # noqa: E402

import sqlq  # noqa: E402
from sqlq import aio, tracing  # noqa: E402


async def wait_for(cond, timeout: float = 20.0, what: str = "condition"):
    """Awaits cond() (a coroutine function or a plain one) until it is
    truthy; fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for "
                                 f"{what}")
        await asyncio.sleep(0.01)


class AioCase(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        # Off the event loop: starting a server blocks until it listens.
        self.server = await asyncio.to_thread(sqlq_server.Server)
        self.client = aio.Client(self.server.url,
                                 token=sqlq_server.ADMIN_TOKEN)
        self.workers: list[aio.Worker] = []

    async def asyncTearDown(self) -> None:
        for w in self.workers:
            w.stop()
            await asyncio.wait_for(w.join(), 30)
        await self.client.close()
        await asyncio.to_thread(self.server.close)

    async def start(self, queue: str, handler, **kw) -> aio.Worker:
        kw.setdefault("wait_ms", 2000)
        w = aio.Worker(self.client, queue, handler, **kw)
        self.workers.append(w)
        await w.start()
        return w

    async def stats(self, queue: str) -> dict:
        return (await self.client.queue(queue).stats())["stats"]


class AioClientTest(AioCase):
    async def test_queue_lifecycle_and_server_wide_reads(self) -> None:
        q = self.client.queue("life")
        made = await q.create(max_attempts=3, lease_ms=60000)
        self.assertEqual((made["name"], made["max_attempts"]), ("life", 3))
        with self.assertRaises(sqlq.AlreadyExists):
            await q.create()
        self.assertIn("life", [x["name"] for x in await self.client.queues()])
        self.assertEqual((await q.change(max_attempts=10))["max_attempts"], 10)
        self.assertTrue((await q.pause())["paused"])
        self.assertFalse((await q.resume())["paused"])
        await q.send("a")
        self.assertEqual(await q.purge(), 1)
        self.assertIn("points", await q.history())
        self.assertEqual(await self.client.health(), {"status": "ok"})
        self.assertEqual(await self.client.ready(), {"status": "ready"})
        self.assertIn("sqlq_", await self.client.metrics())
        self.assertIn("queues", await self.client.all())
        self.assertEqual(await q.drop(), {"dropped": "life"})
        with self.assertRaises(sqlq.NotFound) as cm:
            await q.stats()
        self.assertEqual((cm.exception.status, cm.exception.code),
                         (404, "not_found"))

    async def test_a_cut_long_poll_answers_with_what_the_server_took(
            self) -> None:
        # As test_worker.CutClaimTest: a long poll cut short (a worker's
        # stop) as the server took a message for it is still answered.
        await self.cut_long_polls(self.client)

    async def test_a_cut_long_poll_over_tls_answers_too(self) -> None:
        # The same over HTTPS, whose transport cannot close one side: the
        # client shuts its socket's sending side under TLS.
        server = await asyncio.to_thread(sqlq_server.Server, True)
        self.addAsyncCleanup(asyncio.to_thread, server.close)
        client = aio.Client(server.url, token=sqlq_server.ADMIN_TOKEN,
                            ssl_context=server.ssl_context())
        self.addAsyncCleanup(client.close)
        await self.cut_long_polls(client)

    async def cut_long_polls(self, client: aio.Client) -> None:
        """Ten long polls, each cut short as a message is sent for it: each
        answers with the message or leaves it ready, never leased to no
        one (the queue's one attempt would then end in the dead letters)."""
        q = client.queue("cut")
        await q.create(max_attempts=1)

        async def waiting() -> int:
            text = await client.metrics()
            m = re.search(r"^sqlq_server_waiting_consumers (\d+)", text, re.M)
            return int(m.group(1)) if m else -1

        async def stats() -> dict:
            return (await q.stats())["stats"]

        # Nothing sent: the cut claim ends its wait at once, answered with
        # no message, which the client reads (over TLS too).
        async def parked() -> bool:
            return await waiting() == 1

        claim = asyncio.ensure_future(q.claim(1, wait_ms=30000))
        await wait_for(parked, what="the claim to wait")
        client._abort_polls()
        self.assertEqual(await asyncio.wait_for(claim, 10), [])
        for i in range(10):
            claim = asyncio.ensure_future(q.claim(1, wait_ms=30000))
            deadline = time.monotonic() + 20
            while await waiting() != 1:
                self.assertLess(time.monotonic(), deadline, "never waited")
                await asyncio.sleep(0.01)
            await q.send(f"m{i}")
            client._abort_polls()
            got = await asyncio.wait_for(claim, 10)
            if got:
                self.assertEqual(got[0].payload, f"m{i}")
                await got[0].ack()
            else:
                self.assertEqual((await stats())["leased"], 0)
                (m,) = await q.claim(1)
                await m.ack()
        st = await stats()
        self.assertEqual((st["acks"], st["ready"] + st["leased"]), (10, 0), st)
        self.assertEqual(await q.dead(), [])

    async def test_send_claim_ack_nack_extend(self) -> None:
        q = self.client.queue("msgs")
        await q.create(max_attempts=2)
        i1 = await q.send("hello", headers={"tenant": "acme"})
        i2 = await q.send(b"\xff\x00", priority=5)
        i3 = await q.send({"n": 3}, group="g1")
        i4 = await q.send("once", dedup="k1")
        self.assertEqual(await q.send("twice", dedup="k1"), i4)
        r = await q.send_batch([{"payload": "x"}, {"payload": "y",
                                                   "dedup": "k1"}])
        self.assertEqual(r.duplicate, [False, True])
        msgs = await q.claim(10)
        by_id = {m.id: m for m in msgs}
        self.assertEqual(msgs[0].id, i2)
        self.assertEqual(by_id[i2].payload, b"\xff\x00")
        self.assertEqual(by_id[i1].headers, {"tenant": "acme"})
        self.assertEqual((by_id[i3].payload, by_id[i3].group),
                         ({"n": 3}, "g1"))
        before = by_id[i1].lease_expires_at
        after = await by_id[i1].extend(120000)
        self.assertGreater(after, before)
        self.assertEqual(by_id[i1].lease_expires_at, after)
        self.assertIsNone(await by_id[i1].ack())
        self.assertEqual(await by_id[i2].nack(error="smtp 451"), "retry")
        self.assertEqual(await q.nack(by_id[i3].receipt, error="x"), "retry")
        results = await q.ack_many([by_id[i4].receipt, "9-9-bad"])
        self.assertEqual([x["ok"] for x in results], [True, False])
        self.assertEqual((await q.message(i2))["errors"][0]["error"],
                         "smtp 451")

    async def test_a_jobs_own_retry_policy(self) -> None:
        q = self.client.queue("policy")
        await q.create(max_attempts=5)
        i = await q.send("x", max_attempts=1, backoff=2.5,
                         backoff_max=datetime.timedelta(seconds=5))
        j, = (await q.send_batch([{"payload": "y", "max_attempts": 2}])).ids
        shown = await q.message(i)
        self.assertEqual((shown["max_attempts"], shown["backoff_ms"],
                          shown["backoff_max_ms"]), (1, 2500, 5000))
        by_id = {m.id: m for m in await q.claim(2)}
        self.assertEqual((by_id[i].max_attempts, by_id[j].max_attempts),
                         (1, 2))
        self.assertEqual(await by_id[i].nack(), "dead")
        self.assertEqual((await q.message(i))["last_error"],
                         "failed attempt 1 of 1")
        with self.assertRaises(sqlq.BadRequest):
            await q.send("z", backoff=5, backoff_max=1)

    async def test_stale_receipt(self) -> None:
        q = self.client.queue("stale")
        await q.create(lease_ms=1)
        await q.send("x")
        first = (await q.claim(1))[0]
        second = (await wait_for(lambda: q.claim(1), 10, "the redelivery"))[0]
        with self.assertRaises(sqlq.StaleReceipt):
            await first.ack()
        await second.ack()

    async def test_long_poll_waits_while_other_requests_go_on(self) -> None:
        q = self.client.queue("poll")
        await q.create()
        claim = asyncio.create_task(q.claim(1, wait_ms=20000))
        await wait_for(lambda: self._waiting(), 10, "the claim to wait")
        # The same client goes on meanwhile, on another connection.
        await q.send("wake")
        got = await asyncio.wait_for(claim, 10)
        self.assertEqual([m.payload for m in got], ["wake"])
        self.assertEqual(await q.claim(1, wait_ms=50), [])

    async def _waiting(self) -> bool:
        return (await self.client.overview())["waiting_consumers"] >= 1

    async def test_listing_changes_dead_letters(self) -> None:
        q = self.client.queue("list")
        await q.create(max_attempts=1)
        ids = [await q.send(f"p{i}", headers={"tenant": "acme"})
               for i in range(5)]
        page = await q.messages(limit=2, header=("tenant", "acme"))
        self.assertEqual([m["id"] for m in page["messages"]], ids[:2])
        self.assertEqual([m["id"] async for m in q.iter_messages(limit=2)],
                         ids)
        self.assertEqual(await q.count(state="ready"), 5)
        self.assertEqual(await q.set_priority(ids[4], 9), 1)
        self.assertEqual(await q.cancel_message(ids[0]), 1)
        self.assertEqual([d["id"] for d in await q.dead()], [ids[0]])
        self.assertEqual(await q.redrive(all=True), 1)
        self.assertEqual(await q.bulk("delete", ids=ids[:2]), 2)
        self.assertEqual(await q.delete_message(ids[2]), 1)
        self.assertEqual(await q.count(), 2)
        self.assertEqual(await q.archive(), [])

    async def test_rings_rotations_schedules(self) -> None:
        r = self.client.ring("views")
        await r.create(capacity=2)
        for who in ("ada", "bob", "cy"):
            await r.push("a42", who)
        self.assertEqual([e["payload"] for e in await r.read("a42")],
                         ["cy", "bob"])
        self.assertEqual([g["group"] for g in await r.groups()], ["a42"])
        rot = self.client.rotation("relays")
        await rot.create(max_failures=2)
        await rot.add("s1", "10.0.0.1")
        await rot.add("s2", "10.0.0.2")
        self.assertEqual([i["key"] for i in await rot.next(2)], ["s1", "s2"])
        await rot.fail("s1")
        self.assertEqual(len(await rot.items()), 2)
        await self.client.queue("reports").create()
        s = self.client.schedule("daily")
        await s.create(cron="0 9 * * *", queue="reports", payload="r")
        self.assertFalse((await s.get())["paused"])
        self.assertIn("daily", [x["name"]
                                for x in await self.client.schedules()])
        await s.drop()

    async def test_topics(self) -> None:
        t = self.client.topic("news")
        await t.create()
        await self.client.queue("news-eu").create()
        await t.subscribe("news-eu", filter={"region": "eu"})
        self.assertEqual(await t.publish("us", headers={"region": "us"}), [])
        d = await t.publish("eu", headers={"region": "eu"})
        self.assertEqual([x["queue"] for x in d], ["news-eu"])
        self.assertEqual([s["queue"] for s in await t.subscriptions()],
                         ["news-eu"])
        self.assertIn("news", [x["name"] for x in await self.client.topics()])
        await t.drop()

    async def test_errors_and_an_unreachable_server(self) -> None:
        async with aio.Client(self.server.url) as anon:
            with self.assertRaises(sqlq.Unauthorized):
                await anon.queues()
        with self.assertRaises(sqlq.BadRequest) as cm:
            await self.client.queue("x").create(no_such_option=1)
        self.assertEqual(cm.exception.code, "unknown_field")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nobody listens there now
        async with aio.Client(f"http://127.0.0.1:{port}", retries=2,
                              backoff=0.01) as c:
            with self.assertRaises(sqlq.ConnectionFailed) as cm2:
                await c.health()
        self.assertFalse(cm2.exception.sent)

    async def test_a_send_whose_reply_was_lost_is_stored_once(self) -> None:
        await self.client.queue("jobs").create()
        proxy = test_retries.ReplyEater(self.server.port)
        try:
            async with aio.Client(f"http://127.0.0.1:{proxy.port}",
                                  token=sqlq_server.ADMIN_TOKEN,
                                  backoff=0.01) as c:
                msg_id = await c.queue("jobs").send("once")
        finally:
            proxy.close()
        self.assertEqual(proxy.replies_eaten, 1)
        [m] = await self.client.queue("jobs").claim(5)
        self.assertEqual((m.id, m.payload), (msg_id, "once"))

    async def test_a_send_while_the_server_is_down_gets_through(self) -> None:
        await self.client.queue("jobs").create()
        await asyncio.to_thread(self.server.kill)
        with self.assertLogs("sqlq", level="WARNING") as cm:
            send = asyncio.create_task(self.client.queue("jobs").send("x"))
            await wait_for(lambda: len(cm.records) >= 3, 20, "three retries")
            await asyncio.to_thread(self.server.start)
            msg_id = await asyncio.wait_for(send, 30)
        self.assertRegex(cm.records[0].getMessage(),
                         r"^sqlq: POST /v1/queues/jobs/messages: "
                         r"ConnectionRefusedError: .*; retrying in ")
        [m] = await self.client.queue("jobs").claim(1)
        self.assertEqual(m.id, msg_id)


class AioWorkerTest(AioCase):
    async def test_concurrent_handlers_ack_each_message_once(self) -> None:
        q = self.client.queue("jobs")
        await q.create()
        n = 40
        ids = (await q.send_batch([{"payload": f"m{i}"}
                                   for i in range(n)])).ids
        seen: collections.Counter = collections.Counter()
        # The first four handlers meet: with fewer than four running at
        # once the barrier never opens and the test times out.
        barrier = asyncio.Barrier(4)

        async def handle(m: sqlq.Message) -> None:
            seen[m.id] += 1
            if len(seen) <= 4:
                await asyncio.wait_for(barrier.wait(), 10)
        w = await self.start("jobs", handle, concurrency=4)
        await wait_for(lambda: w.acked == n, 30, "every ack")
        w.stop()
        await asyncio.wait_for(w.join(), 30)
        st = await self.stats("jobs")
        self.assertEqual((st["ready"], st["leased"], st["nacks"],
                          st["claims"], st["acks"]), (0, 0, 0, n, n))
        self.assertEqual(sorted(seen), sorted(ids))
        self.assertEqual(set(seen.values()), {1})

    async def test_failing_handler_is_nacked_then_dead_lettered(self) -> None:
        q = self.client.queue("fails")
        await q.create(max_attempts=2, backoff_base_ms=0)
        i = await q.send("x")
        calls = []

        async def handle(m: sqlq.Message) -> None:
            calls.append(m.attempt)
            raise ValueError(f"bad thing on attempt {m.attempt}")
        with self.assertLogs("sqlq", level="INFO") as cm:
            w = await self.start("fails", handle, concurrency=2, name="w1")
            await wait_for(lambda: w.nacked == 2, 20, "the dead letter")
            w.stop()
            await w.join()
        msg = await q.message(i)
        self.assertEqual((msg["state"], msg["attempts"]), ("dead", 2))
        errs = [e["error"] for e in msg["errors"]]
        self.assertTrue(errs[0].startswith(
            "ValueError: bad thing on attempt 1\n"), errs[0])
        self.assertIn("test_aio.py", errs[0])  # the traceback's tail
        self.assertEqual(calls, [1, 2])
        # The lines of the sync worker (test_worker.WorkerLogTest).
        lines = [f"{r.levelname} {r.getMessage()}" for r in cm.records]
        self.assertEqual(lines[0], "INFO sqlq worker w1: started on queue "
                         "fails (concurrency 2, lease 30000 ms)")
        self.assertIn(f"WARNING sqlq worker w1: message {i} of fails failed "
                      "on attempt 1, retried after the queue's backoff: "
                      "ValueError: bad thing on attempt 1", lines)
        self.assertIn(f"ERROR sqlq worker w1: message {i} of fails failed on "
                      "attempt 2, now a dead letter: ValueError: bad thing "
                      "on attempt 2", lines)
        self.assertEqual(lines[-1], "INFO sqlq worker w1: stopped (acked=0 "
                         "nacked=2 released=0 lost=0)")
        dead = next(r for r in cm.records if "dead letter" in r.getMessage())
        self.assertIn("Traceback (most recent call last)",
                      logging.Formatter().format(dead))

    async def test_a_hung_coroutine_is_cancelled_at_its_timeout(self):
        q = self.client.queue("hung")
        await q.create(max_attempts=3, backoff_base_ms=0)
        i = await q.send("x")
        cancelled = asyncio.Event()
        second = asyncio.Event()
        proceed = asyncio.Event()

        async def handle(m: sqlq.Message) -> None:
            if m.attempt == 1:
                try:
                    await asyncio.Event().wait()  # for ever
                except asyncio.CancelledError:
                    if m.cancelled.is_set():
                        cancelled.set()
                    raise
            second.set()
            await proceed.wait()
        w = await self.start("hung", handle, timeout=0.5, name="w1")
        await asyncio.wait_for(cancelled.wait(), 20)
        await asyncio.wait_for(second.wait(), 20)
        msg = await q.message(i)
        self.assertEqual(msg["attempts"], 2)
        self.assertEqual([e["error"] for e in msg["errors"]],
                         ["timeout after 500 ms"])
        proceed.set()
        await wait_for(lambda: w.acked == 1, 20, "the ack")
        st = await self.stats("hung")
        self.assertEqual((st["claims"], st["acks"], st["nacks"],
                          st["expirations"]), (2, 1, 1, 0))

    async def test_arun_inline(self) -> None:
        from sqlq.testing import arun_inline
        q = self.client.queue("inline")
        await q.create(max_attempts=1)
        a = await q.send("a", kind="email.send")
        b = await q.send("b", kind="email.send")

        async def send_email(m: sqlq.Message) -> None:
            await asyncio.sleep(0)
            if m.payload == "b":
                raise sqlq.Permanent("no such mailbox")
        done = await arun_inline(self.client, "inline",
                                 {"email.send": send_email})
        self.assertEqual([(m.id, out) for m, out in done],
                         [(a, "acked"), (b, "dead")])
        self.assertEqual((await q.message(b))["last_error"],
                         "no such mailbox")

    async def test_long_handler_keeps_its_lease(self) -> None:
        q = self.client.queue("long")
        await q.create(lease_ms=3000)
        i = await q.send("slow")
        runs = []

        async def handle(m: sqlq.Message) -> None:
            runs.append(m.id)
            await asyncio.sleep(7.0)  # more than two leases
        # A second handler claims all the while: it would get the message
        # again if its lease ran out.
        w = await self.start("long", handle, concurrency=2, wait_ms=500)
        await wait_for(lambda: w.acked == 1, 20, "the ack")
        st = await self.stats("long")
        self.assertEqual((st["claims"], st["expirations"], st["nacks"]),
                         (1, 0, 0))
        self.assertEqual((runs, w.lost), ([i], 0))

    async def test_server_killed_mid_run(self) -> None:
        q = self.client.queue("crash")
        await q.create(lease_ms=4000)
        n = 30
        ids = (await q.send_batch([{"payload": str(i)}
                                   for i in range(n)])).ids
        seen: collections.Counter = collections.Counter()
        holding, restarted = asyncio.Event(), asyncio.Event()

        async def handle(m: sqlq.Message) -> None:
            seen[m.id] += 1
            if m.id == ids[10]:
                # In flight across the crash: its lease must be extended
                # again once the server is back, and its ack go through.
                holding.set()
                await asyncio.wait_for(restarted.wait(), 30)
                await asyncio.sleep(8.5)  # two leases more
        w = await self.start("crash", handle, concurrency=3, wait_ms=1000)
        await asyncio.wait_for(holding.wait(), 20)
        await asyncio.to_thread(self.server.kill)
        await asyncio.to_thread(self.server.start)  # same port and database
        restarted.set()
        await wait_for(lambda: set(seen) == set(ids), 60,
                       "every message handled")

        async def settled() -> bool:
            st = await self.stats("crash")
            return st["ready"] == 0 and st["leased"] == 0 and \
                st["delayed"] == 0
        await wait_for(settled, 60, "the queue empty")
        st = await self.stats("crash")
        self.assertEqual(st["dead"], 0)
        self.assertEqual(seen[ids[10]], 1)  # its lease was kept
        # As in test_worker: claims the kill cut off hold their message
        # until the lease runs out (the other two handlers: one each).
        self.assertLessEqual(st["expirations"], 2)

    async def test_a_lost_lease_is_logged_and_its_ack_refused(self) -> None:
        q = self.client.queue("lost")
        await q.create(lease_ms=1000)
        i = await q.send("x")
        started, finish = asyncio.Event(), asyncio.Event()

        async def handle(m: sqlq.Message) -> None:
            started.set()
            await finish.wait()
        with self.assertLogs("sqlq", level="WARNING") as cm:
            w = await self.start("lost", handle, name="w1", wait_ms=500)
            await asyncio.wait_for(started.wait(), 20)
            self.assertEqual(await q.delete_message(i), 1)
            await wait_for(lambda: any("lease of message" in r.getMessage()
                                       for r in cm.records), 20, "the loss")
            finish.set()
            await wait_for(lambda: w.lost == 1, 20, "the refused ack")
        text = "\n".join(r.getMessage() for r in cm.records)
        self.assertIn(f"sqlq worker w1: lease of message {i} lost", text)
        self.assertIn(f"sqlq worker w1: ack of message {i} refused, its "
                      "lease was lost: 404 not_found", text)

    async def test_trace_context_from_send_to_handler(self) -> None:
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        qin, qout = self.client.queue("in"), self.client.queue("out")
        await qin.create()
        await qout.create()
        await qin.send("traced", headers={"traceparent": tp})
        await qin.send("untraced")
        inside = []

        async def handle(m: sqlq.Message) -> None:
            inside.append(tracing.current())
            await asyncio.sleep(0)  # the trace survives awaits
            await qout.send(m.payload)
        w = await self.start("in", handle, wait_ms=500)
        await wait_for(lambda: w.acked == 2, 20, "both handled")
        self.assertEqual(inside, [{"traceparent": tp}, {}])
        out = {m.payload: m.headers for m in await qout.claim(2)}
        self.assertEqual(out, {"traced": {"traceparent": tp},
                               "untraced": {}})


class AioWorkerProcessTest(test_worker.WorkerProcessTests,
                           test_worker.ServerCase):
    """test_worker's process scenarios with sqlq.aio's worker."""
    FLAVOUR = "aio"


if __name__ == "__main__":
    unittest.main()
