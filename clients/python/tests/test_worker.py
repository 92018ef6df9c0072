"""The worker runtime against a real `sqlq serve`: concurrency, acks,
nacks with the exception's text, leases kept while a handler runs, a
server killed mid-run, a worker process killed mid-message, SIGTERM."""
from __future__ import annotations

import collections
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sqlq_server  # noqa: E402
from sqlq_server import wait_for  # noqa: E402

import sqlq  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class ServerCase(unittest.TestCase):
    """A real server, a client of it, and sync workers started on it that
    are stopped after the test."""

    def setUp(self) -> None:
        self.server = sqlq_server.Server()
        self.client = sqlq.Client(self.server.url,
                                  token=sqlq_server.ADMIN_TOKEN)
        self.workers: list[sqlq.Worker] = []

    def tearDown(self) -> None:
        for w in self.workers:
            w.stop()
            w.join(30)
        self.client.close()
        self.server.close()

    def start(self, *args, **kw) -> sqlq.Worker:
        kw.setdefault("wait_ms", 2000)
        w = sqlq.Worker(self.client, *args, **kw)
        self.workers.append(w)
        w.start()
        return w

    def stats(self, queue: str) -> dict:
        return self.client.queue(queue).stats()["stats"]


class WorkerProcessTests:
    """A worker in a process of its own (worker_proc.py), killed or sent
    SIGTERM; FLAVOUR names the worker it runs: "sync" (sqlq.Worker) or
    "aio" (sqlq.aio.Worker). Mixed into a ServerCase."""
    FLAVOUR = "sync"

    def run_worker_proc(self, d: str, queue: str, shutdown_timeout: float,
                        lease_ms: int) -> subprocess.Popen:
        self.log = open(os.path.join(d, "log"), "w")
        self.addCleanup(self.log.close)
        p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "worker_proc.py"),
             self.server.url, sqlq_server.ADMIN_TOKEN, queue, d,
             str(shutdown_timeout), str(lease_ms), self.FLAVOUR],
            stdout=self.log, stderr=self.log)
        self.addCleanup(lambda: p.poll() is None and p.kill())
        return p

    @staticmethod
    def read(path: str) -> str:
        try:
            with open(path) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def test_worker_killed_mid_message_is_redelivered(self) -> None:
        q = self.client.queue("killed")
        q.create(lease_ms=1000)
        i = q.send("work")
        with tempfile.TemporaryDirectory() as d:
            p = self.run_worker_proc(d, "killed", 30, 1000)
            started = os.path.join(d, "started")
            wait_for(lambda: f"started {i}" in self.read(started), 20,
                     "the handler to start")
            p.send_signal(signal.SIGKILL)
            p.wait(10)
            self.assertEqual(q.message(i)["state"], "leased")
            got: list[sqlq.Message] = []
            w = self.start("killed", lambda m: got.append(m), concurrency=1,
                           wait_ms=500)
            wait_for(lambda: self.stats("killed")["acks"] == 1, 20,
                     "the redelivery")
            self.assertEqual([(m.id, m.attempt) for m in got], [(i, 2)])
            w.stop()
            w.join(30)
            self.assertEqual(self.stats("killed")["expirations"], 1)

    def sigterm_worker(self, queue: str, finish: bool) -> tuple[int, str]:
        q = self.client.queue(queue)
        q.create(lease_ms=60000)
        ids = q.send_batch([{"payload": "a"}, {"payload": "b"},
                            {"payload": "c"}]).ids
        with tempfile.TemporaryDirectory() as d:
            p = self.run_worker_proc(d, queue, 30 if finish else 0.5, 60000)
            started = os.path.join(d, "started")
            wait_for(lambda: f"started {ids[0]}" in self.read(started), 20,
                     "the handler to start")
            p.send_signal(signal.SIGTERM)
            log = os.path.join(d, "log")
            wait_for(lambda: "SIGTERM: stopping" in self.read(log), 20,
                     "the worker to take the signal")
            if finish:
                open(os.path.join(d, "go"), "w").close()
            rc = p.wait(30)
            return rc, self.read(log) + self.read(os.path.join(d, "done"))

    def test_sigterm_finishes_the_running_handler(self) -> None:
        rc, out = self.sigterm_worker("term", finish=True)
        self.assertEqual(rc, 0, out)
        self.assertIn("done 1", out)
        st = self.stats("term")
        # It stopped claiming: one message acked, two never claimed.
        self.assertEqual((st["acks"], st["claims"], st["leased"],
                          st["ready"]), (1, 1, 0, 2), out)

    def test_sigterm_releases_what_misses_the_deadline(self) -> None:
        rc, out = self.sigterm_worker("term2", finish=False)
        self.assertEqual(rc, 0, out)
        st = self.stats("term2")
        self.assertEqual((st["acks"], st["leased"], st["ready"]),
                         (0, 0, 3), out)
        m = self.client.queue("term2").message(1)
        self.assertIn("released", m["last_error"])
        # Ready again at once, not at the end of its minute-long lease.
        self.assertIn(1, [m.id for m in self.client.queue("term2").claim(3)])



class WorkerTest(WorkerProcessTests, ServerCase):
    def test_concurrent_handlers_ack_each_message_once(self) -> None:
        q = self.client.queue("jobs")
        q.create()
        n = 40
        ids = q.send_batch([{"payload": f"m{i}"} for i in range(n)]).ids
        seen: collections.Counter = collections.Counter()
        mu = threading.Lock()
        # The first four handlers meet: with fewer than four running at
        # once the barrier breaks and those messages are nacked.
        barrier = threading.Barrier(4, timeout=10)
        def handle(m: sqlq.Message) -> None:
            with mu:
                seen[m.id] += 1
                first = len(seen) <= 4
            if first:
                barrier.wait()
        w = self.start("jobs", handle, concurrency=4)
        wait_for(lambda: self.stats("jobs")["acks"] == n, 30, "every ack")
        w.stop()
        self.assertTrue(w.join(30))
        st = self.stats("jobs")
        self.assertEqual((st["ready"], st["leased"], st["nacks"],
                          st["claims"]), (0, 0, 0, n))
        self.assertEqual(sorted(seen), sorted(ids))
        self.assertEqual(set(seen.values()), {1})
        self.assertEqual(w.acked, n)

    def test_failing_handler_is_nacked_then_dead_lettered(self) -> None:
        q = self.client.queue("fails")
        q.create(max_attempts=2, backoff_base_ms=0)
        i = q.send("x")
        calls = []
        def handle(m: sqlq.Message) -> None:
            calls.append(m.attempt)
            raise ValueError(f"bad thing on attempt {m.attempt}")
        w = self.start("fails", handle, concurrency=2)
        wait_for(lambda: self.stats("fails")["dead"] == 1, 20,
                 "the dead letter")
        msg = q.message(i)
        self.assertEqual(msg["state"], "dead")
        self.assertEqual(msg["attempts"], 2)
        errs = [e["error"] for e in msg["errors"]]
        self.assertEqual(len(errs), 2)
        self.assertTrue(errs[0].startswith(
            "ValueError: bad thing on attempt 1\n"), errs[0])
        self.assertIn("test_worker.py", errs[0])  # the traceback's tail
        self.assertTrue(errs[1].startswith("ValueError: bad thing on attempt 2"))
        self.assertEqual(q.dead()[0]["last_error"], errs[1])
        self.assertEqual(calls, [1, 2])
        self.assertEqual(w.nacked, 2)

    def test_error_text_is_bounded(self) -> None:
        try:
            raise RuntimeError("x" * 10000)
        except RuntimeError as e:
            text = sqlq.error_text(e)
        self.assertLessEqual(len(text.encode()), 4096)
        self.assertTrue(text.startswith("RuntimeError: xxx"))

    def test_long_handler_keeps_its_lease(self) -> None:
        q = self.client.queue("long")
        # Leases long enough that a loaded machine (the whole suite runs
        # two tests at once) delays no extend past one.
        q.create(lease_ms=3000)
        i = q.send("slow")
        runs = []
        def handle(m: sqlq.Message) -> None:
            runs.append(m.id)
            # More than two leases long.
            t0 = time.monotonic()
            while time.monotonic() - t0 < 7.0:
                time.sleep(0.05)
        # A second handler thread claims all the while: it would get the
        # message again if its lease ran out.
        w = self.start("long", handle, concurrency=2, wait_ms=500)
        wait_for(lambda: self.stats("long")["acks"] == 1, 20, "the ack")
        st = self.stats("long")
        self.assertEqual((st["claims"], st["expirations"], st["nacks"]),
                         (1, 0, 0))
        self.assertEqual(runs, [i])
        self.assertEqual(w.lost, 0)

    def test_server_killed_mid_run(self) -> None:
        q = self.client.queue("crash")
        # Longer than a restart of the server takes on a loaded machine.
        q.create(lease_ms=4000)
        n = 30
        ids = q.send_batch([{"payload": str(i)} for i in range(n)]).ids
        seen: collections.Counter = collections.Counter()
        mu = threading.Lock()
        holding = threading.Event()
        restarted = threading.Event()
        def handle(m: sqlq.Message) -> None:
            with mu:
                seen[m.id] += 1
                hold = m.id == ids[10]
            if hold:
                # In flight across the crash: its lease must be extended
                # again once the server is back, and its ack go through.
                holding.set()
                self.assertTrue(restarted.wait(30))
                # Two leases more: only extensions made to the restarted
                # server keep it.
                t0 = time.monotonic()
                while time.monotonic() - t0 < 8.5:
                    time.sleep(0.05)
        w = self.start("crash", handle, concurrency=3, wait_ms=1000)
        self.assertTrue(holding.wait(20))
        self.server.kill()
        self.server.start()  # same port, same database
        restarted.set()
        wait_for(lambda: set(seen) == set(ids), 60, "every message handled")
        def settled() -> bool:
            st = self.stats("crash")
            return st["ready"] == 0 and st["leased"] == 0 and st["delayed"] == 0
        wait_for(settled, 60, "the queue empty")
        st = self.stats("crash")
        self.assertEqual(st["dead"], 0)
        self.assertEqual(seen[ids[10]], 1)  # its lease was kept
        # A claim the server committed but whose reply the kill cut off
        # holds its message until the lease runs out (the other two
        # handler threads: at most one such claim each); nothing else may
        # expire.
        self.assertLessEqual(st["expirations"], 2)
        w.stop()
        self.assertTrue(w.join(30))


class CutClaimTest(ServerCase):
    """Regression: a long poll cut short (a worker's stop) as the server was
    taking a message for it lost the answer, and the message stayed leased
    to no one until its lease ran out (with max_attempts 1, a dead letter).
    Cut now by closing the sending side only, the claim is still answered:
    each time, the message is in its answer or still ready."""

    def test_a_cut_claim_answers_with_what_the_server_took(self) -> None:
        self.cut_claims(self.client)

    def test_a_cut_claim_over_tls_answers_too(self) -> None:
        # Over HTTPS the sending side is shut under the TLS layer, whose
        # state the answer still needs.
        server = sqlq_server.Server(tls=True)
        self.addCleanup(server.close)
        client = sqlq.Client(server.url, token=sqlq_server.ADMIN_TOKEN,
                             ssl_context=server.ssl_context())
        self.addCleanup(client.close)
        self.cut_claims(client)

    def cut_claims(self, client: sqlq.Client) -> None:
        q = client.queue("cut")
        q.create(max_attempts=1)
        poller = client.clone()  # its own connections, as a worker's
        self.addCleanup(poller.close)

        def waiting() -> int:
            m = re.search(r"^sqlq_server_waiting_consumers (\d+)",
                          client.metrics(), re.M)
            return int(m.group(1)) if m else -1

        # Nothing sent: the cut claim ends its wait at once, answered with
        # no message, which the client reads (over TLS too).
        got: list = []
        t = threading.Thread(target=lambda: got.append(
            poller.queue("cut").claim(1, wait_ms=30000)))
        t.start()
        wait_for(lambda: waiting() == 1, what="the claim to wait")
        poller._abort_polls()
        t.join(10)
        self.assertFalse(t.is_alive(), "the cut claim waited on")
        self.assertEqual(got, [[]], "the cut claim raised")
        for i in range(15):
            got = []
            t = threading.Thread(target=lambda: got.append(
                poller.queue("cut").claim(1, wait_ms=30000)))
            t.start()
            wait_for(lambda: waiting() == 1, what="the claim to wait")
            q.send(f"m{i}")
            poller._abort_polls()
            t.join(10)
            self.assertFalse(t.is_alive())
            self.assertEqual(len(got), 1, "the cut claim raised")
            if got[0]:
                self.assertEqual(got[0][0].payload, f"m{i}")
                got[0][0].ack()
            else:
                self.assertEqual(q.stats()["stats"]["leased"], 0)
                (m,) = q.claim(1)
                self.assertEqual(m.payload, f"m{i}")
                m.ack()
        st = q.stats()["stats"]
        self.assertEqual(st["acks"], 15, st)
        self.assertEqual(st["ready"] + st["leased"], 0, st)
        self.assertEqual(q.dead(), [])


class WorkerLogTest(unittest.TestCase):
    """What a worker says on the "sqlq.worker" logger, as a user running
    it with logging.basicConfig() reads it: the handler's failure with its
    traceback, the dead letter, a lost lease, the server away and back,
    the stop."""

    def setUp(self) -> None:
        self.server, self.client = sqlq_server.serve(self)

    def worker(self, queue: str, handler, **kw) -> sqlq.Worker:
        kw.setdefault("wait_ms", 500)
        w = sqlq.Worker(self.client, queue, handler, name="w1", **kw)
        w.start()

        def stop() -> None:
            w.stop()
            w.join(30)
        self.addCleanup(stop)
        return w

    @staticmethod
    def lines(cm) -> list[str]:
        return [f"{r.levelname} {r.getMessage()}" for r in cm.records]

    def wait_line(self, cm, text: str, timeout: float = 20) -> logging.LogRecord:
        return wait_for(lambda: next((r for r in cm.records
                                      if text in r.getMessage()), None),
                        timeout, repr(text))

    def test_a_failing_handler_is_logged_with_its_traceback(self) -> None:
        q = self.client.queue("fails")
        q.create(max_attempts=2, backoff_base_ms=0)
        i = q.send("x")

        def handle(m: sqlq.Message) -> None:
            raise ValueError(f"smtp 451 on attempt {m.attempt}")
        with self.assertLogs("sqlq", level="INFO") as cm:
            w = self.worker("fails", handle)
            self.wait_line(cm, "now a dead letter")
            # The line is logged before the handler's thread gives its
            # slot back; stopped in between, the worker rightly says one
            # handler is still running. Stopped once it is idle:
            wait_for(lambda: w._active == 0 or None, 20, "an idle worker")
            w.stop()
            self.assertTrue(w.join(30))
        lines = self.lines(cm)
        self.assertEqual(lines[0], "INFO sqlq worker w1: started on queue "
                         "fails (concurrency 1, lease 30000 ms)")
        self.assertIn(f"WARNING sqlq worker w1: message {i} of fails failed "
                      "on attempt 1, retried after the queue's backoff: "
                      "ValueError: smtp 451 on attempt 1", lines)
        self.assertIn(f"ERROR sqlq worker w1: message {i} of fails failed on "
                      "attempt 2, now a dead letter: ValueError: smtp 451 on "
                      "attempt 2", lines)
        self.assertEqual(lines[-2:], [
            "INFO sqlq worker w1: stopping: no more claims, 0 handler(s) "
            "running",
            "INFO sqlq worker w1: stopped (acked=0 nacked=2 released=0 "
            "lost=0)"])
        # The record carries the exception: the usual formatters print the
        # handler's traceback under the line.
        dead = next(r for r in cm.records if "dead letter" in r.getMessage())
        self.assertIsInstance(dead.exc_info[1], ValueError)
        text = logging.Formatter().format(dead)
        self.assertIn("Traceback (most recent call last)", text)
        self.assertIn('test_worker.py", line', text)
        self.assertIn("in handle", text)

    def test_a_lost_lease_and_the_refused_ack_are_logged(self) -> None:
        q = self.client.queue("lost")
        q.create(lease_ms=1000)
        i = q.send("x")
        started, finish = threading.Event(), threading.Event()

        def handle(m: sqlq.Message) -> None:
            started.set()
            self.assertTrue(finish.wait(30))
        with self.assertLogs("sqlq", level="INFO") as cm:
            w = self.worker("lost", handle)
            self.assertTrue(started.wait(20))
            # Someone deletes the message under the running handler: its
            # next extension is refused.
            self.assertEqual(q.delete_message(i), 1)
            self.wait_line(cm, "lease of message")
            finish.set()
            self.wait_line(cm, "ack of message")
        lines = self.lines(cm)
        self.assertIn(f"WARNING sqlq worker w1: lease of message {i} lost, "
                      "another worker may have it (the handler still runs; "
                      "its outcome will be refused): 404 not_found: ", "\n".join(lines))
        self.assertIn(f"WARNING sqlq worker w1: ack of message {i} refused, "
                      "its lease was lost: 404 not_found: ", "\n".join(lines))
        self.assertEqual(w.lost, 1)

    def test_the_server_away_and_back_is_logged_once_each(self) -> None:
        q = self.client.queue("away")
        q.create()
        with self.assertLogs("sqlq", level="INFO") as cm:
            w = self.worker("away", lambda m: None, wait_ms=200,
                            max_backoff=0.05)
            self.wait_line(cm, "started on queue")
            self.server.kill()
            self.wait_line(cm, "claim failed")
            # Ten tries later it says so again, and no more often.
            wait_for(lambda: sum("claim failed" in r.getMessage()
                                 for r in cm.records) == 2, 20,
                     "the eleventh try")
            self.server.start()
            back = self.wait_line(cm, "claim works again")
            q.send("after")
            wait_for(lambda: w.acked == 1, 20, "the ack")
        failed = [r for r in cm.records if "claim failed" in r.getMessage()]
        self.assertEqual({r.levelname for r in failed}, {"WARNING"})
        self.assertRegex(failed[0].getMessage(),
                         r"^sqlq worker w1: claim failed \(connection_failed: "
                         r"POST /v1/queues/away/claim: .*\); retrying in "
                         r"[0-9.]+s \(try 1\)$")
        tries = [int(r.getMessage().rsplit(" ", 1)[1].strip("()"))
                 for r in failed]
        self.assertEqual(tries, list(range(1, 10 * len(failed), 10)))
        self.assertEqual(back.levelname, "INFO")
        self.assertRegex(back.getMessage(), r"^sqlq worker w1: claim works "
                         r"again after [0-9]+ failed tries$")

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING,
                        format="%(threadName)s %(levelname)s %(message)s")
    unittest.main()
