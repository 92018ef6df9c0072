"""Live workers, against a real `sqlq serve`: each worker (sqlq.Worker and
sqlq.aio.Worker) reports itself, and GET /v1/workers lists it with its
queues, kinds, concurrency and the job in its hands, while the leased
message names it; a clean stop removes it at once; a worker process killed
with SIGKILL leaves the list when its report runs out; the server away
and back is logged as any call is, and the worker goes on. And the
clients' report_worker, remove_worker and workers."""
from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import unittest
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sqlq_server  # noqa: E402
from sqlq_server import wait_for  # noqa: E402
from test_jobs import _AioWorker, _ts  # noqa: E402

import sqlq  # noqa: E402
from sqlq import aio  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class ServerCase(unittest.TestCase):
    def setUp(self) -> None:
        self.server, self.client = sqlq_server.serve(self)

    def listed(self, id: str) -> Optional[dict]:
        """The worker id as GET /v1/workers lists it, None when not."""
        return next((w for w in self.client.workers() if w["id"] == id),
                    None)


class ClientTest(ServerCase):
    REPORT = {"name": "mailer", "host": "web-1", "pid": 4242,
              "queues": ["jobs-a"], "kinds": ["email.send"],
              "concurrency": 8, "started_at": "2026-11-22T10:00:00Z",
              "ttl_ms": 30000}

    def test_report_list_remove(self) -> None:
        self.client.queue("jobs-a").create()
        c = self.client
        self.assertEqual(c.report_worker("web-1:4242:9f2c", **self.REPORT),
                         {"id": "web-1:4242:9f2c", "ttl_ms": 30000})
        # A report replaces the last one; None leaves a field out.
        c.report_worker("web-1:4242:9f2c", **dict(
            self.REPORT, jobs=[{"queue": "jobs-a", "id": 7,
                                "since": "2026-11-22T10:00:01Z"}],
            host=None))
        [w] = c.workers()
        self.assertEqual(
            {k: w[k] for k in ("id", "name", "host", "pid", "queues",
                               "kinds", "concurrency", "jobs", "ttl_ms")},
            {"id": "web-1:4242:9f2c", "name": "mailer", "host": "",
             "pid": 4242, "queues": ["jobs-a"], "kinds": ["email.send"],
             "concurrency": 8, "ttl_ms": 30000,
             "jobs": [{"queue": "jobs-a", "id": 7,
                       "since": "2026-11-22T10:00:01.000000Z"}]})
        self.assertEqual([x["id"] for x in c.workers(queue="jobs-a")],
                         ["web-1:4242:9f2c"])
        self.assertEqual(c.workers(queue="other"), [])
        self.assertEqual(c.remove_worker("web-1:4242:9f2c"), 1)
        self.assertEqual(c.workers(), [])
        with self.assertRaises(sqlq.NotFound):
            c.remove_worker("web-1:4242:9f2c")

    def test_a_report_needs_the_claim_permission(self) -> None:
        claimer = sqlq.Client(self.server.url, token=sqlq_server.CLAIM_TOKEN)
        self.addCleanup(claimer.close)
        claimer.report_worker("w:1:a", queues=["jobs-a"])
        with self.assertRaises(sqlq.Forbidden):
            claimer.report_worker("w:1:b", queues=["other"])
        with self.assertRaises(sqlq.BadRequest):
            claimer.report_worker("not an id", queues=["jobs-a"])
        self.assertEqual([w["id"] for w in claimer.workers()], ["w:1:a"])

    def test_the_asyncio_client(self) -> None:
        async def main() -> None:
            async with aio.Client(self.server.url,
                                  token=sqlq_server.ADMIN_TOKEN) as c:
                self.assertEqual(
                    await c.report_worker("web-1:4242:9f2c", **self.REPORT),
                    {"id": "web-1:4242:9f2c", "ttl_ms": 30000})
                [w] = await c.workers(queue="jobs-a")
                self.assertEqual((w["name"], w["queues"]),
                                 ("mailer", ["jobs-a"]))
                self.assertEqual(await c.remove_worker("web-1:4242:9f2c"),
                                 1)
                self.assertEqual(await c.workers(), [])
        asyncio.run(main())


class LiveTests:
    """A worker in this process; mixed into a ServerCase, FLAVOUR "sync"
    (sqlq.Worker) or "aio" (sqlq.aio.Worker on a loop of its own)."""
    FLAVOUR = "sync"

    def start(self, *args: Any, **kw: Any) -> Any:
        kw.setdefault("wait_ms", 500)
        kw.setdefault("name", "mailer")
        if self.FLAVOUR == "sync":
            w: Any = sqlq.Worker(self.client, *args, **kw)
        else:
            w = _AioWorker(self.server.url, args, kw, [])

        def stop() -> None:
            w.stop()
            w.join(30)
        self.addCleanup(stop)
        w.start()
        return w

    def test_a_running_worker_is_listed_with_the_job_in_its_hands(self):
        for q in ("jobs-a", "jobs-b"):
            self.client.queue(q).create()
        running, finish = threading.Event(), threading.Event()

        def handle(m: sqlq.Message) -> None:
            running.set()
            self.assertTrue(finish.wait(30))
        # Reports every second.
        w = self.start(queues=["jobs-a", "jobs-b"], concurrency=3,
                       report_ttl=3, handlers={
                           "email.send": handle, "sms.send": handle,
                           "*": handle})
        self.assertRegex(w.id, "^" + re.escape(re.sub(
            r"[^A-Za-z0-9_.-]", "-", socket.gethostname())[:96]) + ":"
            + str(os.getpid()) + ":[0-9a-f]{8}$")
        # Listed once it started, doing nothing yet.
        idle = wait_for(lambda: self.listed(w.id), 20, "the first report")
        self.assertEqual(
            {k: idle[k] for k in ("name", "host", "pid", "queues", "kinds",
                                  "concurrency", "jobs", "ttl_ms")},
            {"name": "mailer", "host": socket.gethostname(),
             "pid": os.getpid(), "queues": ["jobs-a", "jobs-b"],
             "kinds": ["email.send", "sms.send"], "concurrency": 3,
             "jobs": [], "ttl_ms": 3000})
        i = self.client.queue("jobs-b").send("x", kind="sms.send")
        self.assertTrue(running.wait(20))
        # The leased message names the worker that holds it...
        self.assertEqual(self.client.queue("jobs-b").message(i)["worker"],
                         w.id)
        # ... and the worker's next report shows the job in its hands.
        busy = wait_for(lambda: (self.listed(w.id) or {}).get("jobs"), 20,
                        "a report with the job")
        self.assertEqual([(j["queue"], j["id"]) for j in busy], [("jobs-b",
                                                                  i)])
        self.assertLessEqual(_ts(idle["started_at"]), _ts(busy[0]["since"]))
        self.assertEqual([x["id"] for x in self.client.workers("jobs-b")],
                         [w.id])
        self.assertEqual(self.client.workers("other"), [])
        finish.set()
        wait_for(lambda: w.acked == 1, 20, "the ack")
        wait_for(lambda: self.listed(w.id)["jobs"] == [], 20,
                 "a report without it")

    def test_a_clean_stop_removes_it_at_once(self) -> None:
        self.client.queue("jobs").create()
        w = self.start("jobs", lambda m: None)  # reports every 10 s
        wait_for(lambda: self.listed(w.id), 20, "the first report")
        w.stop()
        self.assertTrue(w.join(30))
        # Not when its 30-second report runs out: now.
        self.assertEqual(self.client.workers(), [])

    def test_report_false(self) -> None:
        q = self.client.queue("jobs")
        q.create()
        running, finish = threading.Event(), threading.Event()

        def handle(m: sqlq.Message) -> None:
            running.set()
            self.assertTrue(finish.wait(30))
        w = self.start("jobs", handle, report=False)
        i = q.send("x")
        self.assertTrue(running.wait(20))
        self.assertEqual(self.client.workers(), [])
        self.assertEqual(q.message(i)["worker"], w.id)
        finish.set()

    def test_the_server_away_and_back(self) -> None:
        q = self.client.queue("jobs")
        q.create()
        with self.assertLogs("sqlq.worker", level="INFO") as cm:
            # Reports every half second.
            w = self.start("jobs", lambda m: None, report_ttl=1.5,
                           max_backoff=0.05)
            wait_for(lambda: self.listed(w.id), 20, "the first report")
            self.server.kill()
            wait_for(lambda: any("report failed" in r.getMessage()
                                 for r in cm.records), 20, "a failed report")
            self.server.start()
            back = wait_for(lambda: next(
                (r for r in cm.records
                 if "report works again" in r.getMessage()), None), 20,
                "the reports back")
            wait_for(lambda: self.listed(w.id), 20, "a report")
            q.send("after")
            wait_for(lambda: w.acked == 1, 20, "the ack")
        failed = [r.getMessage() for r in cm.records
                  if "report failed" in r.getMessage()]
        self.assertRegex(failed[0], r"^sqlq worker mailer: report failed \("
                         r"connection_failed: PUT /v1/workers/.*\); retrying "
                         r"in [0-9.]+s \(try 1\)$")
        n = int(re.fullmatch(r"sqlq worker mailer: report works again after "
                             r"([0-9]+) failed tries",
                             back.getMessage()).group(1))
        # On the first failure and every tenth try after it.
        self.assertEqual(len(failed), len(range(0, n, 10)))
        self.assertEqual(back.levelname, "INFO")

    def test_a_stop_with_the_server_away(self) -> None:
        self.client.queue("jobs").create()
        with self.assertLogs("sqlq.worker", level="INFO") as cm:
            w = self.start("jobs", lambda m: None, max_backoff=0.05)
            wait_for(lambda: self.listed(w.id), 20, "the first report")
            self.server.kill()
            w.stop()
            self.assertTrue(w.join(30))
        lines = [f"{r.levelname} {r.getMessage()}" for r in cm.records]
        # The report could not be removed: it runs out by itself.
        self.assertIn("WARNING sqlq worker mailer: removing its report "
                      "failed: connection_failed: DELETE /v1/workers/"
                      + w.id.replace(":", "%3A") + ": ", "\n".join(lines))
        self.assertRegex(lines[-1], r"^INFO sqlq worker mailer: stopped ")


class LiveTest(LiveTests, ServerCase):
    pass


class AioLiveTest(LiveTests, ServerCase):
    FLAVOUR = "aio"


class LiveProcessTests:
    """A worker in a process of its own (worker_proc.py), killed; mixed
    into a ServerCase, FLAVOUR "sync" or "aio"."""
    FLAVOUR = "sync"

    def test_a_killed_worker_leaves_when_its_report_runs_out(self) -> None:
        q = self.client.queue("killed")
        q.create()
        i = q.send("work")
        with tempfile.TemporaryDirectory() as d:
            log = open(os.path.join(d, "log"), "w")
            self.addCleanup(log.close)
            # Reports every 2/3 s, each lasting 2 s.
            p = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "worker_proc.py"),
                 self.server.url, sqlq_server.ADMIN_TOKEN, "killed", d, "30",
                 "30000", self.FLAVOUR, "2"], stdout=log, stderr=log)
            self.addCleanup(lambda: p.poll() is None and p.kill())

            def mine() -> Optional[dict]:
                return next((w for w in self.client.workers()
                             if w["pid"] == p.pid and w["jobs"]), None)
            w = wait_for(mine, 20, "a report with the job in its hands")
            self.assertEqual((w["queues"], w["concurrency"], w["ttl_ms"]),
                             (["killed"], 1, 2000))
            self.assertEqual([(j["queue"], j["id"]) for j in w["jobs"]],
                             [("killed", i)])
            self.assertEqual(q.message(i)["worker"], w["id"])
            p.send_signal(signal.SIGKILL)
            p.wait(10)
            # No goodbye: it is listed until its last report runs out.
            wait_for(lambda: self.listed(w["id"]) is None, 2 + 10,
                     "its report to run out")
            self.assertEqual(q.message(i)["state"], "leased")


class LiveProcessTest(LiveProcessTests, ServerCase):
    pass


class AioLiveProcessTest(LiveProcessTests, ServerCase):
    FLAVOUR = "aio"


if __name__ == "__main__":
    unittest.main()
