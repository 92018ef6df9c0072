"""Dependencies and workflows against a real `sqlq serve`: send with
depends_on and if_dependency_dies, send_batch with depends_on_batch,
send_all over several queues (all or nothing), and sqlq.flow's chain,
group, chord and Workflow run by real workers: in order, a callback once
after its members, a dead member cancelling it (or not, with "run"), a
DAG over two queues, and parent_results(). With sqlq.Client and
sqlq.Worker, and with sqlq.aio's."""
from __future__ import annotations

import os
import sys
import threading
import unittest
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sqlq_server import wait_for  # noqa: E402
from test_aio import AioCase  # noqa: E402
from test_worker import ServerCase  # noqa: E402

import sqlq  # noqa: E402
from sqlq.flow import Job, Workflow, chain, chord, group  # noqa: E402


class Recorder:
    """What the handlers ran, in order (queue, payload, id)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ran: list[tuple[str, Any, int]] = []

    def note(self, m: sqlq.Message) -> int:
        with self.lock:
            self.ran.append((m.queue.name, m.payload, m.id))
            return len(self.ran)

    def ids(self) -> list[int]:
        with self.lock:
            return [i for _, _, i in self.ran]


class FlowsTest(ServerCase):
    def make(self, *names: str, **options: Any) -> None:
        for n in names:
            self.client.queue(n).create(**options)

    def test_send_waits_for_depends_on(self) -> None:
        self.make("a", "b")
        a, b = self.client.queue("a"), self.client.queue("b")
        first = a.send("first")
        then = b.send("then", depends_on=[first], if_dependency_dies="run")
        got = b.message(then)
        self.assertEqual((got["state"], got["waits_for"]),
                         ("waiting", [first]))
        self.assertEqual(self.stats("b")["waiting"], 1)
        batch = a.send_batch([{"payload": "x"},
                              {"payload": "y", "depends_on_batch": [0]}])
        self.assertEqual(a.message(batch.ids[1])["waits_for"],
                         [batch.ids[0]])
        # Acking the first releases the one that waited for it.
        c = a.claim(1)
        self.assertEqual(c[0].id, first)
        c[0].ack()
        self.assertEqual(b.message(then)["state"], "ready")
        with self.assertRaises(sqlq.BadRequest):
            b.send("bad", if_dependency_dies="maybe")

    def test_send_all_stores_all_or_nothing(self) -> None:
        self.make("a", "b")
        r = self.client.send_all([
            {"queue": "a", "payload": 1},
            {"queue": "b", "payload": {"n": 2}, "depends_on_batch": [0],
             "kind": "two"}])
        self.assertEqual(len(r.ids), 2)
        got = self.client.queue("b").message(r.ids[1])
        self.assertEqual((got["state"], got["waits_for"], got["payload"]),
                         ("waiting", [r.ids[0]], {"n": 2}))
        with self.assertRaises(sqlq.NotFound):
            self.client.send_all([{"queue": "a", "payload": 3},
                                  {"queue": "missing", "payload": 4}])
        # Nothing of the refused send was stored.
        self.assertEqual(self.stats("a")["ready"], 1)
        self.assertEqual(self.client.queue("a").count(), 1)
        with self.assertRaises(ValueError):
            self.client.send_all([{"payload": 5}])

    def test_a_chain_runs_in_order(self) -> None:
        self.make("fetch", "resize", "publish")
        rec = Recorder()
        sent = self.client.send_flow(chain(
            Job("fetch", "a.png"), Job("resize", "a.png"),
            Job("publish", "a.png")))
        self.assertEqual(len(sent.ids), 3)
        r = self.client.queue("resize").message(sent.ids[1])
        self.assertEqual((r["state"], r["waits_for"]),
                         ("waiting", [sent.ids[0]]))
        self.start(handler=rec.note,
                   queues=["publish", "resize", "fetch"], concurrency=3)
        wait_for(lambda: len(rec.ran) == 3, 20, "the chain")
        self.assertEqual(rec.ids(), sent.ids)
        self.assertEqual([q for q, _, _ in rec.ran],
                         ["fetch", "resize", "publish"])

    def test_a_chord_calls_back_once_after_its_members(self) -> None:
        self.make("parts", "reports")
        rec = Recorder()
        sent = self.client.send_flow(chord(
            [Job("parts", n) for n in (1, 2, 3)], Job("reports", "sum")))
        members, callback = sent.ids[:3], sent.ids[3]
        self.assertEqual(sorted(self.client.queue("reports")
                                .message(callback)["waits_for"]),
                         sorted(members))
        seen: list[list[Any]] = []

        def handle(m: sqlq.Message) -> Any:
            rec.note(m)
            if m.queue.name == "parts":
                return m.payload * 10
            # Every member completed, with its result: the callback,
            # sent with them, names them and reads their results.
            seen.append([m.parents, m.parent_results()])
            return "done"
        self.start(handler=handle, queues=["reports", "parts"],
                   concurrency=3)
        self.assertEqual(self.client.result("reports", callback,
                                            timeout=20)["result"], "done")
        self.assertEqual(seen, [[[("parts", i) for i in members],
                                 dict(zip(members, [10, 20, 30]))]])
        self.assertEqual(rec.ids()[-1], callback)
        self.assertEqual(sorted(rec.ids()[:3]), sorted(members))
        self.assertEqual(self.stats("reports")["acks"], 1)

    def test_parent_results_of_a_job_sent_after_its_parents(self) -> None:
        self.make("parts", "reports")
        got: list[Any] = []

        def handle(m: sqlq.Message) -> Any:
            if m.queue.name == "parts":
                return None if m.payload == 3 else {"n": m.payload}
            got.append((m.parents, m.parent_results()))
            return None
        r = self.client.send_all([{"queue": "parts", "payload": n}
                                  for n in (1, 2, 3)])
        w = Workflow()
        w.add(Job("reports", "sum"),
              after=[("parts", i) for i in r.ids])
        self.start(handler=handle, queues=["reports", "parts"])
        cb = w.send(self.client).ids[0]
        self.assertEqual(self.client.queue("reports").message(cb)["headers"]
                         .get("sqlq-parents"),
                         ",".join(f"parts:{i}" for i in r.ids))
        wait_for(lambda: got, 20, "the callback")
        # The third parent returned nothing: no result, left out.
        self.assertEqual(got, [([("parts", i) for i in r.ids],
                                {r.ids[0]: {"n": 1}, r.ids[1]: {"n": 2}})])

    def test_a_dead_member_cancels_the_callback(self) -> None:
        self.make("parts", "reports", max_attempts=1)
        rec = Recorder()

        def handle(m: sqlq.Message) -> Any:
            rec.note(m)
            if m.payload == "bad":
                raise sqlq.Permanent("bad part")
        sent = self.client.send_flow(chord(
            [Job("parts", "good"), Job("parts", "bad")],
            Job("reports", "sum")))
        self.start(handler=handle, queues=["parts", "reports"])
        with self.assertRaises(sqlq.JobFailed) as cm:
            self.client.result("reports", sent.ids[2], timeout=20)
        self.assertEqual(cm.exception.error,
                         f"cancelled: message {sent.ids[1]}, which it "
                         "depends on, died")
        self.assertNotIn("reports", [q for q, _, _ in rec.ran])

    def test_if_dependency_dies_run_runs_the_callback(self) -> None:
        self.make("parts", "reports", max_attempts=1)

        def handle(m: sqlq.Message) -> Any:
            if m.payload == "bad":
                raise sqlq.Permanent("bad part")
            return "ran"
        sent = self.client.send_flow(chord(
            [Job("parts", "bad"), Job("parts", "good")],
            Job("reports", "sum", if_dependency_dies="run")))
        self.start(handler=handle, queues=["parts", "reports"])
        self.assertEqual(self.client.result("reports", sent.ids[2],
                                            timeout=20)["result"], "ran")
        with self.assertRaises(sqlq.JobFailed):
            self.client.result("parts", sent.ids[0], timeout=0)

    def test_a_dag_over_two_queues_completes(self) -> None:
        self.make("a", "b")
        rec = Recorder()
        w = Workflow()
        roots = [w.add(Job("a", f"root{i}")) for i in range(2)]
        mids = [w.add(Job("b", f"mid{i}"), after=roots) for i in range(3)]
        pair = [w.add(Job("a", f"pair{i}"), after=mids[i:i + 2])
                for i in range(2)]
        last = w.add(Job("b", "last", kind="end"), after=pair + [roots[0]])
        after = w.add(Job("a", "after"), after=[last])
        self.assertEqual(len(w), 9)
        sent = w.send(self.client)
        self.start(handler=rec.note, queues=["a", "b"], concurrency=4)
        wait_for(lambda: len(rec.ran) == 9, 20, "the DAG")
        order = {i: n for n, i in enumerate(rec.ids())}
        parents = {s.index: w._in[s.index] for s in w.steps}
        for child, ps in parents.items():
            for p in ps:
                self.assertLess(order[sent.ids[p]], order[sent.ids[child]],
                                (p, child))
        self.assertEqual(rec.ids()[-1], sent.ids[after.index])

    def test_a_workflow_is_found_and_cancelled_by_its_id(self) -> None:
        self.make("a", "b")
        w = chord([Job("a", 1), Job("b", 2)],
                  Job("b", "sum", if_dependency_dies="run"))
        other = chain(Job("a", "other"), Job("b", "other"))
        sent = w.send(self.client)
        kept = other.send(self.client)
        self.assertEqual(w.queues(), ["a", "b"])
        found = w.find(self.client)
        self.assertEqual(sorted(m["id"] for m in found), sorted(sent.ids))
        self.assertTrue(all(m["headers"]["sqlq-workflow"] == w.id
                            for m in found))
        self.assertEqual(sqlq.flow.cancel(self.client, w.id, ["a", "b"]), 3)
        self.assertEqual(w.find(self.client), [])
        # The callback that would run when a member dies was cancelled
        # before its members: a dead letter, never ready.
        with self.assertRaises(sqlq.JobFailed) as cm:
            self.client.result("b", sent.ids[2], timeout=0)
        self.assertTrue(cm.exception.error.startswith("cancelled"),
                        cm.exception.error)
        self.assertEqual(sorted(m["id"] for m in other.find(self.client)),
                         sorted(kept.ids))
        self.assertEqual(self.stats("a")["dead"] + self.stats("b")["dead"],
                         3)
        # A chain across the queues, its last one set to run: every one
        # cancelled, the last first, none ever ready.
        deep = chain(Job("b", 1), Job("a", 2),
                     Job("b", 3, if_dependency_dies="run"))
        deep_ids = deep.send(self.client).ids
        self.assertEqual(deep.cancel(self.client), 3)
        for q, i in zip(("b", "a", "b"), deep_ids):
            self.assertEqual(self.client.queue(q).message(i)["state"], "dead")

    def test_a_failed_workflow_is_retried_where_it_failed(self) -> None:
        self.make("a", "b", max_attempts=1)
        rec = Recorder()
        broken = threading.Event()
        broken.set()

        def handle(m: sqlq.Message) -> Any:
            rec.note(m)
            if m.payload == "flaky" and broken.is_set():
                raise sqlq.Permanent("not yet")
            return m.payload
        w = chain(Job("a", "ok"), Job("b", "flaky"), Job("a", "sum"),
                  Job("b", "last"))
        sent = w.send(self.client)
        self.start(handler=handle, queues=["a", "b"])
        # flaky dies; sum and last, which wait for it, are cancelled.
        with self.assertRaises(sqlq.JobFailed) as cm:
            self.client.result("b", sent.ids[3], timeout=20)
        self.assertTrue(cm.exception.error.startswith("cancelled: message"),
                        cm.exception.error)
        broken.clear()
        # The three go back, flaky first; ok is not run again.
        self.assertEqual(w.retry(self.client), 3)
        self.assertEqual(self.client.result("b", sent.ids[3],
                                            timeout=20)["result"], "last")
        self.assertEqual([p for _, p, _ in rec.ran],
                         ["ok", "flaky", "flaky", "sum", "last"])
        self.assertEqual(w.retry(self.client), 0)
        self.assertEqual(self.stats("a")["dead"] + self.stats("b")["dead"],
                         0)

    def test_composed_workflows(self) -> None:
        w = chain(Job("a", 0), group(Job("b", 1), chain(Job("b", 2),
                                                        Job("b", 3))),
                  Job("a", 4))
        m = w.messages()
        self.assertEqual([x.get("depends_on_batch") for x in m],
                         [None, [0], [0], [2], [1, 3]])
        other = Workflow()
        s = other.add(Job("a", 1))
        with self.assertRaises(ValueError):
            Workflow().add(Job("a", 2), after=[s])
        with self.assertRaises(ValueError):
            Job("a", 1, depends_on_batch=[0])
        with self.assertRaises(ValueError):
            Workflow().send(self.client)


class AioFlowsTest(AioCase):
    async def test_a_chain_with_parent_results(self) -> None:
        for n in ("fetch", "sizes"):
            await self.client.queue(n).create()
        ran: list[Any] = []

        async def handle(m: Any) -> Any:
            ran.append(m.payload)
            if m.queue.name == "fetch":
                return len(m.payload)
            return await m.parent_results()
        first = await self.client.queue("fetch").send("a.png")
        w = chain(Job("fetch", "bb.png"), Job("fetch", "ccc.png"))
        w.add(Job("sizes", "sum"), after=[w.steps[-1], ("fetch", first)])
        sent = await self.client.send_flow(w)
        await self.start("fetch", handle)
        await self.start("sizes", handle)
        info = await self.client.result("sizes", sent.ids[2], timeout=20)
        # Both parents: the one sent before, and the chain's last job sent
        # with it.
        self.assertEqual(info["result"], {str(first): 5, str(sent.ids[1]): 7})
        self.assertEqual(await w.find(self.client), [])
        self.assertEqual(await sqlq.flow.cancel(self.client, w.id,
                                                w.queues()), 0)
        self.assertEqual(await w.retry(self.client), 0)
        self.assertLess(ran.index("bb.png"), ran.index("ccc.png"))
        self.assertEqual(ran[-1], "sum")
        r = await self.client.send_all([{"queue": "fetch", "payload": "x"}])
        self.assertEqual(len(r.ids), 1)


if __name__ == "__main__":
    unittest.main()
