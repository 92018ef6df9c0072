"""Every operation of the Python client against a real `sqlq serve`."""
from __future__ import annotations

import datetime
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sqlq_server  # noqa: E402  (puts the package's source on sys.path)

import sqlq  # noqa: E402


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.server = sqlq_server.Server()
        cls.client = sqlq.Client(cls.server.url,
                                 token=sqlq_server.ADMIN_TOKEN)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.close()
        cls.server.close()

    def test_queue_lifecycle(self) -> None:
        q = self.client.queue("life")
        made = q.create(max_attempts=3, lease_ms=60000, labels={"team": "a"})
        self.assertEqual(made["name"], "life")
        self.assertEqual(made["max_attempts"], 3)
        with self.assertRaises(sqlq.AlreadyExists) as cm:
            q.create()
        self.assertEqual((cm.exception.status, cm.exception.code),
                         (409, "already_exists"))
        self.assertIn("life", [x["name"] for x in self.client.queues()])
        self.assertIn("life", [x["name"] for x in self.client.all()["queues"]])
        self.assertEqual(q.change(max_attempts=10)["max_attempts"], 10)
        self.assertTrue(q.pause()["paused"])
        self.assertTrue(q.stats()["stats"]["paused"])
        q.send("held")
        held = q.claim()
        self.assertEqual((list(held), held.paused), ([], True))
        self.assertFalse(q.resume()["paused"])
        self.assertFalse(q.claim().paused)
        # Ready, but behind its group's leased head: the claim says why.
        o = self.client.queue("ordered")
        o.create(groups="ordered")
        o.send("a1", group="g")
        o.send("a2", group="g")
        self.assertEqual([m.payload for m in o.claim(10)], ["a1"])
        busy = o.claim(10)
        self.assertEqual((list(busy), busy.groups_busy), ([], True))
        q.purge()
        q.send("a")
        q.send("b")
        self.assertEqual(q.purge(), 2)
        self.assertEqual(q.stats()["stats"]["ready"], 0)
        self.assertIn("points", q.history())
        # The overview is read at most once a second.
        sqlq_server.wait_for(lambda: "life" in [
            x["name"] for x in self.client.overview()["queues"]], 5,
            "the queue in the overview")
        self.assertEqual(q.drop(), {"dropped": "life"})
        with self.assertRaises(sqlq.NotFound) as cm:
            q.stats()
        self.assertEqual(cm.exception.code, "not_found")
        self.assertEqual(cm.exception.status, 404)
        self.assertIn("life", cm.exception.message)

    def test_send_claim_ack_nack_extend(self) -> None:
        q = self.client.queue("msgs")
        q.create(max_attempts=2, lease_ms=30000)
        i1 = q.send("hello", headers={"tenant": "acme"})
        i2 = q.send(b"\xff\x00\x01", priority=5)
        i3 = q.send({"to": "ada", "n": 3}, group="g1")
        i4 = q.send("later", delay_ms=600000)
        i5 = q.send("once", dedup="k1")
        self.assertEqual(q.send("twice", dedup="k1"), i5)
        r = q.send_batch([{"payload": "x"}, {"payload": "y", "dedup": "k1"}])
        self.assertEqual(r.duplicate, [False, True])
        self.assertEqual(r.ids[1], i5)
        msgs = q.claim(10, wait_ms=0)
        by_id = {m.id: m for m in msgs}
        self.assertEqual(msgs[0].id, i2)  # highest priority first
        self.assertEqual(by_id[i2].payload, b"\xff\x00\x01")
        self.assertEqual(by_id[i1].payload, "hello")
        self.assertEqual(by_id[i1].headers, {"tenant": "acme"})
        self.assertEqual(by_id[i3].payload, {"to": "ada", "n": 3})
        self.assertEqual(by_id[i3].group, "g1")
        self.assertNotIn(i4, by_id)  # delayed
        self.assertEqual(len(msgs), 5)
        self.assertTrue(all(m.attempt == 1 for m in msgs))
        before = by_id[i1].lease_expires_at
        self.assertGreater(by_id[i1].extend(120000), before)
        by_id[i1].ack()
        with self.assertRaises(sqlq.NotFound):
            by_id[i1].ack()
        self.assertEqual(q.nack(by_id[i2].receipt, error="smtp 451",
                                delay_ms=0), "retry")
        m = q.message(i2)
        self.assertEqual(m["last_error"], "smtp 451")
        self.assertEqual(m["errors"][0]["error"], "smtp 451")
        # The second attempt is the last: its nack dead-letters.
        again = q.claim(1, wait_ms=2000)
        self.assertEqual([x.id for x in again], [i2])
        self.assertEqual(again[0].attempt, 2)
        self.assertEqual(again[0].nack(error="no"), "dead")
        # A batch ack answers per receipt.
        results = q.ack_many([by_id[i3].receipt, "bogus"])
        self.assertEqual(results[0], {"ok": True})
        self.assertEqual(results[1]["error"]["code"], "invalid_argument")
        # Ack and claim the next in one request.
        rest = [x for x in msgs if x.id not in (i1, i2, i3)]
        nxt = q.claim(1, ack=rest[0].receipt)
        self.assertEqual(len(nxt), 0)  # only the delayed one is left
        with self.assertRaises(sqlq.NotFound):
            q.ack(rest[0].receipt)
        q.extend(rest[1].receipt, 1000)
        q.ack(rest[1].receipt)
        st = q.stats()["stats"]
        self.assertEqual((st["leased"], st["delayed"], st["dead"]), (0, 1, 1))

    def test_stale_receipt(self) -> None:
        q = self.client.queue("stale")
        q.create(lease_ms=1)
        q.send("x")
        first = q.claim(1)[0]
        second = sqlq_server.wait_for(lambda: q.claim(1), 10,
                                      "the message again after its lease")[0]
        self.assertEqual(second.attempt, 2)
        with self.assertRaises(sqlq.StaleReceipt) as cm:
            first.ack()
        self.assertEqual((cm.exception.status, cm.exception.code),
                         (409, "failed_precondition"))
        second.ack()

    def test_long_poll_waits_for_a_send(self) -> None:
        import threading
        q = self.client.queue("poll")
        q.create()
        got: list[sqlq.Message] = []
        t = threading.Thread(target=lambda: got.extend(q.claim(1,
                                                               wait_ms=20000)))
        t.start()
        sqlq_server.wait_for(
            lambda: self.client.overview()["waiting_consumers"] >= 1,
            10, "the claim to wait")
        q.send("wake")
        t.join(10)
        self.assertEqual([m.payload for m in got], ["wake"])
        self.assertEqual(q.claim(1, wait_ms=50), [])

    def test_messages_listing_and_changes(self) -> None:
        q = self.client.queue("admin")
        q.create(max_attempts=1)
        ids = [q.send(f"p{i}", headers={"tenant": "acme" if i % 2 else "x"})
               for i in range(6)]
        page = q.messages(limit=2, state="ready")
        self.assertEqual(len(page["messages"]), 2)
        self.assertTrue(page["next_cursor"])
        self.assertEqual([m["id"] for m in q.iter_messages(limit=2)], ids)
        self.assertEqual(q.count(header=("tenant", "acme")), 3)
        self.assertEqual(q.count(payload_prefix="p1"), 1)
        self.assertEqual(q.set_priority(ids[0], 9), 1)
        self.assertEqual(q.message(ids[0])["priority"], 9)
        import datetime
        later = (datetime.datetime.now(datetime.timezone.utc)
                 + datetime.timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.assertEqual(q.reschedule_message(ids[1], later), 1)
        self.assertEqual(q.message(ids[1])["state"], "delayed")
        self.assertEqual(q.retry_message(ids[1]), 1)
        self.assertEqual(q.message(ids[1])["state"], "ready")
        self.assertEqual(q.cancel_message(ids[2]), 1)
        self.assertEqual(q.message(ids[2])["state"], "dead")
        self.assertEqual(q.delete_message(ids[3]), 1)
        with self.assertRaises(sqlq.NotFound):
            q.message(ids[3])
        self.assertEqual(q.bulk("priority", ids=[ids[4], ids[5]],
                                priority=-1), 2)
        self.assertEqual(q.bulk("cancel", filter={"state": "ready",
                                                  "max_priority": -1}), 2)
        dead = q.dead(limit=10)
        self.assertEqual(sorted(d["id"] for d in dead),
                         sorted([ids[2], ids[4], ids[5]]))
        self.assertEqual(q.redrive(ids=[ids[2]]), 1)
        self.assertEqual(q.message(ids[2])["state"], "ready")
        self.assertEqual(q.bulk("retry", filter={"state": "dead"}), 2)
        self.assertEqual(q.dead(), [])
        self.assertEqual(q.claim(1)[0].nack(error="x"), "dead")
        self.assertEqual(q.redrive(all=True), 1)
        self.assertEqual(q.claim(1)[0].nack(error="y"), "dead")
        self.assertEqual(q.purge_dead(), 1)
        self.assertEqual(q.bulk("delete", filter={}), 4)
        with self.assertRaises(ValueError):
            q.bulk("explode", ids=[1])

    def test_archive(self) -> None:
        q = self.client.queue("arch")
        q.create(archive=True)
        i = q.send(b"\xffbytes")
        q.claim(1, worker="w-1")[0].ack()
        a = q.archive(limit=10)
        self.assertEqual([x["id"] for x in a], [i])
        self.assertEqual(sqlq.payload_of(a[0]), b"\xffbytes")
        self.assertEqual(a[0]["worker"], "w-1")

    def test_kinds(self) -> None:
        q = self.client.queue("kinds")
        q.create(archive=True, max_attempts=1)
        a = q.send({"to": "ada"}, kind="email.send")
        b, c = q.send_batch([{"payload": "inv", "kind": "billing/invoice"},
                             {"payload": "plain"}]).ids
        d = q.send("empty kind", kind="")  # the same as none
        with self.assertRaises(sqlq.BadRequest) as cm:
            q.send("x", kind="no spaces")
        self.assertEqual(cm.exception.code, "invalid_argument")
        self.assertEqual(q.count(), 4)  # the bad one stored nothing
        self.assertEqual(q.message(a)["kind"], "email.send")
        self.assertNotIn("kind", q.message(c))
        self.assertEqual(q.count(kind="email.send"), 1)
        self.assertEqual([m["id"] for m in q.iter_messages(
            kind="billing/invoice")], [b])
        got = {m.id: m for m in q.claim(10)}
        self.assertEqual({i: m.kind for i, m in got.items()},
                         {a: "email.send", b: "billing/invoice", c: None,
                          d: None})
        got[a].ack()
        self.assertEqual(got[b].nack(error="no"), "dead")
        self.assertEqual(q.archive()[0]["kind"], "email.send")
        self.assertEqual([(x["id"], x["kind"]) for x in q.dead()],
                         [(b, "billing/invoice")])

    def test_job_limits(self) -> None:
        q = self.client.queue("limits")
        q.create(lease_ms=60000)
        a = q.send("a", timeout=1.5,
                   expire_after=datetime.timedelta(minutes=10))
        b, c = q.send_batch([{"payload": "b", "timeout": 0.25},
                             {"payload": "c", "expire_after": 3600}]).ids
        d = q.send("d")
        shown = {i: q.message(i) for i in (a, b, c, d)}
        self.assertEqual((shown[a]["timeout_ms"],
                          shown[a]["expire_after_ms"]), (1500, 600000))
        self.assertEqual(shown[b]["timeout_ms"], 250)
        self.assertNotIn("expire_after_ms", shown[b])
        self.assertEqual(shown[c]["expire_after_ms"], 3600000)
        self.assertNotIn("timeout_ms", shown[c])
        for key in ("timeout_ms", "expire_after_ms", "expires_at"):
            self.assertNotIn(key, shown[d])
        before = time.time()
        got = {m.id: m for m in q.claim(4)}
        self.assertEqual({i: (m.timeout, m.expires_at)
                          for i, m in got.items()},
                         {a: (1.5, shown[a]["expires_at"]),
                          b: (0.25, None),
                          c: (None, shown[c]["expires_at"]),
                          d: (None, None)})
        # Leased for its own timeout, not the queue's 60 s.
        lease_end = datetime.datetime.fromisoformat(
            got[a].lease_expires_at.replace("Z", "+00:00")).timestamp()
        self.assertLess(lease_end - before, 10)
        with self.assertRaises(sqlq.BadRequest) as cm:
            q.send("x", timeout=0)
        self.assertEqual(cm.exception.code, "invalid_argument")

    def test_job_retry_policy(self) -> None:
        q = self.client.queue("policy")
        q.create(max_attempts=5, backoff_base_ms=10, backoff_max_ms=10)
        a = q.send("a", max_attempts=1, backoff=60,
                   backoff_max=datetime.timedelta(minutes=2))
        b, c = q.send_batch([{"payload": "b", "max_attempts": 3,
                              "backoff": 0.25, "backoff_max": 0.5},
                             {"payload": "c"}]).ids
        shown = {i: q.message(i) for i in (a, b, c)}
        keys = ("max_attempts", "backoff_ms", "backoff_max_ms")
        self.assertEqual([shown[a][k] for k in keys], [1, 60000, 120000])
        self.assertEqual([shown[b][k] for k in keys], [3, 250, 500])
        for key in keys:
            self.assertNotIn(key, shown[c])
        got = {m.id: m for m in q.claim(3)}
        self.assertEqual({i: m.max_attempts for i, m in got.items()},
                         {a: 1, b: 3, c: None})
        # Its own single attempt, though the queue allows five.
        self.assertEqual(got[a].nack(), "dead")
        dead = q.message(a)
        self.assertEqual((dead["state"], dead["last_error"]),
                         ("dead", "failed attempt 1 of 1"))
        # Bad values: refused with the server's 400, nothing stored.
        stored = q.count()
        for bad in ({"max_attempts": 0}, {"max_attempts": 1000001},
                    {"backoff": -1},
                    {"backoff": 5, "backoff_max": 1}):
            with self.subTest(bad=bad):
                with self.assertRaises(sqlq.BadRequest) as cm:
                    q.send("x", **bad)
                self.assertEqual((cm.exception.status, cm.exception.code),
                                 (400, "invalid_argument"))
                with self.assertRaises(sqlq.BadRequest):
                    q.send_batch([{"payload": "ok"},
                                  dict(bad, payload="x")])
        self.assertEqual(q.count(), stored)

    def test_rings(self) -> None:
        r = self.client.ring("views")
        self.assertEqual(r.create(capacity=2)["capacity"], 2)
        self.assertIn("views", [x["name"] for x in self.client.rings()])
        for who in ("ada", "bob", "cy"):
            e = r.push("article 1", who)
        self.assertEqual(e["group"], "article 1")
        self.assertEqual([x["payload"] for x in r.read("article 1",
                                                        order="newest")],
                         ["cy", "bob"])
        self.assertEqual(r.groups(), [{"group": "article 1", "entries": 2}])
        self.assertEqual(r.delete_entry("article 1", e["seq"]), 1)
        self.assertEqual(r.stats()["pushes"], 3)
        self.assertEqual(r.delete_group("article 1"), 1)
        self.assertEqual(r.drop(), {"dropped": "views"})

    def test_topics(self) -> None:
        t = self.client.topic("signups")
        self.assertEqual(t.create(), {"name": "signups", "kind": "topic"})
        with self.assertRaises(sqlq.AlreadyExists):
            t.create()
        mail, crm = self.client.queue("t-mail"), self.client.queue("t-crm")
        mail.create()
        crm.create()
        # Nobody subscribes: nothing is stored.
        self.assertEqual(t.publish("x"), [])
        self.assertTrue(t.subscribe("t-mail")["created"])
        sub = t.subscribe("t-crm", filter={"region": "eu"})
        self.assertEqual(sub["filter"], {"region": "eu"})
        with self.assertRaises(sqlq.BadRequest):
            t.subscribe("t-crm", filter={"bad key": "x"})
        with self.assertRaises(sqlq.NotFound):
            t.subscribe("t-nope")
        self.assertEqual([s["queue"] for s in t.subscriptions()],
                         ["t-crm", "t-mail"])
        listed = [x for x in self.client.topics() if x["name"] == "signups"]
        self.assertEqual(listed[0]["subscriptions"], 2)
        d = t.publish({"user": 7}, headers={"region": "eu"}, priority=3)
        self.assertEqual(sorted(x["queue"] for x in d), ["t-crm", "t-mail"])
        d = t.publish_batch([{"payload": "a", "headers": {"region": "us"}},
                             {"payload": "b", "headers": {"region": "eu"}}])
        self.assertEqual(sorted((x["queue"], x["message"]) for x in d),
                         [("t-crm", 1), ("t-mail", 0), ("t-mail", 1)])
        got = crm.claim(10)
        self.assertEqual([m.payload for m in got], [{"user": 7}, "b"])
        self.assertEqual(got[0].priority, 3)
        self.assertEqual(len(mail.claim(10)), 3)
        t.unsubscribe("t-crm")
        with self.assertRaises(sqlq.NotFound):
            t.unsubscribe("t-crm")
        self.assertEqual(t.drop(), {"dropped": "signups"})
        with self.assertRaises(sqlq.NotFound):
            t.publish("x")

    def test_rotations(self) -> None:
        rot = self.client.rotation("relays")
        rot.create(max_failures=1)
        self.assertIn("relays", [x["name"] for x in self.client.rotations()])
        rot.add("smtp1", "10.0.0.1:25")
        rot.add("smtp2", b"\x01")
        self.assertEqual(len(rot.items()), 2)
        served = rot.next(n=1)
        self.assertEqual(len(served), 1)
        self.assertTrue(rot.fail("smtp1")["parked"])
        self.assertEqual([x["key"] for x in rot.next(n=2)], ["smtp2"])
        self.assertFalse(rot.reset("smtp1")["parked"])
        self.assertEqual(rot.ok("smtp1")["failures"], 0)
        self.assertEqual(rot.stats()["items"], 2)
        rot.remove("smtp2")
        self.assertEqual([x["key"] for x in rot.items()], ["smtp1"])
        rot.drop()

    def test_schedules(self) -> None:
        self.client.queue("reports").create()
        s = self.client.schedule("daily")
        made = s.create(cron="0 9 * * *", queue="reports",
                        payload={"report": "daily"}, time_zone="UTC",
                        kind="report.build", timeout=300,
                        expire_after=datetime.timedelta(hours=1))
        self.assertEqual(made["payload"], {"report": "daily"})
        self.assertEqual(made["kind"], "report.build")
        self.assertEqual((made["timeout_ms"], made["expire_after_ms"]),
                         (300000, 3600000))
        self.assertIn("daily", [x["name"] for x in self.client.schedules()])
        self.assertTrue(s.pause()["paused"])
        self.assertFalse(s.resume()["paused"])
        self.assertEqual(s.get()["cron"], "0 9 * * *")
        s.drop()

    def test_health_and_metrics(self) -> None:
        self.assertEqual(self.client.health(), {"status": "ok"})
        self.assertEqual(self.client.ready(), {"status": "ready"})
        self.assertIn("sqlq_", self.client.metrics())

    def test_errors_carry_code_message_status(self) -> None:
        anon = sqlq.Client(self.server.url)
        with self.assertRaises(sqlq.Unauthorized) as cm:
            anon.queues()
        self.assertEqual((cm.exception.status, cm.exception.code),
                         (401, "unauthorized"))
        claimer = sqlq.Client(self.server.url,
                              token=sqlq_server.CLAIM_TOKEN)
        with self.assertRaises(sqlq.Forbidden) as cm:
            claimer.queue("jobs-x").create()
        self.assertEqual(cm.exception.code, "forbidden")
        with self.assertRaises(sqlq.BadRequest) as cm:
            self.client.queue("bad name!").create()
        self.assertEqual(cm.exception.code, "invalid_argument")
        with self.assertRaises(sqlq.BadRequest) as cm:
            self.client.queue("x").create(no_such_option=1)
        self.assertEqual(cm.exception.code, "unknown_field")
        q = self.client.queue("errs")
        q.create()
        with self.assertRaises(sqlq.BadRequest) as cm:
            q.claim(1, wait_ms=3600_000)
        self.assertEqual(cm.exception.code, "wait_too_long")
        self.assertIsInstance(cm.exception, sqlq.SqlqError)

    def test_unreachable_server_is_connection_failed(self) -> None:
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nobody listens there now
        c = sqlq.Client(f"http://127.0.0.1:{port}", retries=2, backoff=0.01)
        with self.assertRaises(sqlq.ConnectionFailed) as cm:
            c.health()
        self.assertFalse(cm.exception.sent)


if __name__ == "__main__":
    unittest.main()
