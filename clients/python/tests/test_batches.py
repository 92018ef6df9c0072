"""Batches against a real `sqlq serve`: members in two queues run by real
workers at once (one of them dying), the callback claimed once with the
counts; the status by id; a cancel; a taken id and bad input refused and
nothing stored. With sqlq.Client and sqlq.Worker, and with sqlq.aio's."""
from __future__ import annotations

import os
import sys
import threading
import unittest
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_aio import AioCase  # noqa: E402
from test_worker import ServerCase  # noqa: E402

import sqlq  # noqa: E402


class BatchesTest(ServerCase):
    def test_workers_end_the_members_and_the_callback_comes_once(self) -> None:
        for n in ("images", "mail", "done"):
            self.client.queue(n).create(max_attempts=1)
        members = ([{"queue": "images", "payload": f"{i}.png"}
                    for i in range(20)]
                   + [{"queue": "images", "payload": "corrupt.png"}]
                   + [{"queue": "mail", "payload": {"to": i}}
                      for i in range(10)])
        sent = self.client.create_batch(
            members, {"queue": "done", "payload": {"album": 7},
                      "kind": "album.done"}, id="album-7")
        self.assertEqual(sent["id"], "album-7")
        self.assertEqual(len(sent["members"]), 31)
        st = self.client.batch("album-7")
        self.assertEqual((st["total"], st["pending"], st["done"]),
                         (31, 31, False))
        self.assertEqual(st["queues"], ["images", "mail"])
        with self.assertRaises(sqlq.AlreadyExists):
            self.client.create_batch(members[:1], {"queue": "done",
                                                   "payload": "x"},
                                     id="album-7")

        lock = threading.Lock()
        seen: list[Any] = []

        def handle(m: sqlq.Message) -> None:
            with lock:
                seen.append(m.batch)
            if m.payload == "corrupt.png":
                raise ValueError("corrupt")
        # Two workers on each member queue: acks meet at the server.
        for q in ("images", "images", "mail", "mail"):
            self.start(q, handle)
        got = self.client.queue("done").claim(wait_ms=20000)
        self.assertEqual(len(got), 1)
        cb = got[0]
        self.assertEqual(cb.id, sent["callback_id"])
        self.assertEqual(cb.kind, "album.done")
        self.assertEqual(cb.payload, {"album": 7})
        self.assertEqual(cb.batch, {"id": "album-7", "callback": True,
                                    "total": 31, "completed": 30, "dead": 1,
                                    "cancelled": 0})
        cb.ack()
        with lock:
            self.assertEqual(len(seen), 31)
            self.assertTrue(all(b == {"id": "album-7"} for b in seen))
        st = self.client.batch("album-7")
        self.assertEqual((st["completed"], st["dead"], st["pending"],
                          st["done"]), (30, 1, 0, True))
        self.assertIn("done_at", st)
        # Once, whatever: nothing more comes.
        self.assertEqual(len(self.client.queue("done").claim(wait_ms=200)),
                         0)

    def test_cancel_and_bad_input(self) -> None:
        for n in ("jobs", "done"):
            self.client.queue(n).create()
        sent = self.client.create_batch(
            [{"queue": "jobs", "payload": str(i)} for i in range(3)],
            {"queue": "done", "payload": "cb"}, retention=60)
        self.assertEqual(len(sent["id"]), 32)
        m = self.client.queue("jobs").claim()[0]
        self.assertEqual(m.batch, {"id": sent["id"]})
        m.ack()
        st = self.client.cancel_batch(sent["id"])
        self.assertEqual((st["completed"], st["cancelled"], st["done"]),
                         (1, 2, True))
        self.assertIn("cancelled_at", st)
        cb = self.client.queue("done").claim()[0]
        self.assertEqual(cb.batch["cancelled"], 2)
        with self.assertRaises(sqlq.NotFound):
            self.client.batch("nope")
        with self.assertRaises(sqlq.NotFound):
            self.client.create_batch([{"queue": "nope", "payload": "x"}],
                                     {"queue": "done", "payload": "cb"})
        with self.assertRaises(sqlq.BadRequest):
            self.client.create_batch([{"queue": "jobs", "payload": "x",
                                       "dedup": "k"}],
                                     {"queue": "done", "payload": "cb"})
        with self.assertRaises(ValueError):
            self.client.create_batch([{"payload": "x"}],
                                     {"queue": "done", "payload": "cb"})
        self.assertEqual(self.stats("jobs")["sends"], 3)


class AioBatchesTest(AioCase):
    async def test_a_batch_through_the_asyncio_client(self) -> None:
        for n in ("jobs", "done"):
            await self.client.queue(n).create()
        sent = await self.client.create_batch(
            [{"queue": "jobs", "payload": str(i)} for i in range(6)],
            {"queue": "done", "payload": "cb"}, id="aio-1")

        async def handle(m: Any) -> None:
            return None
        await self.start("jobs", handle)
        await self.start("jobs", handle)
        got = await self.client.queue("done").claim(wait_ms=20000)
        self.assertEqual(len(got), 1)
        self.assertEqual(got[0].id, sent["callback_id"])
        self.assertEqual(got[0].batch, {"id": "aio-1", "callback": True,
                                        "total": 6, "completed": 6,
                                        "dead": 0, "cancelled": 0})
        st = await self.client.batch("aio-1")
        self.assertTrue(st["done"])
        with self.assertRaises(sqlq.NotFound):
            await self.client.cancel_batch("nope")


if __name__ == "__main__":
    unittest.main()
