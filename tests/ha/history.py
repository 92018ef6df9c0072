"""A Jepsen-style history of a queue under faults, and its check.

Producers and consumers run through one or more real `sqlq serve` with the
Python client while faults are injected; every call is recorded with its
start, end and outcome. Then the queue is drained, and the history is
checked for what a user must never see (docs/deploying.md): an
acknowledged send lost, a message stored twice for one send, a delivery of
something never sent, two live leases on one message, an ack accepted and
its message delivered again, a call that took longer than the bound, or an
error other than those a failover may give. An ack refused as stale is
right, not an error, when its lease had run out and the message was claimed
again: a fault that outlasts a lease causes exactly that.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
import sqlq  # noqa: E402

BIN = os.environ.get("SQLQ_BIN") or os.path.join(ROOT, "build", "dev", "sqlq")

# Error codes a call may end in while the database fails over: the call
# did nothing (retry), or its outcome is unknown.
# A consumer long-polling across a fault gets a message sent after it
# within this many seconds of the send's reply (the server wakes waiting
# claims on a send; a claim cut off by the fault is made again by the
# consumer at once).
WAKE_BOUND_S = 5.0

FAILOVER_CODES = {"unavailable", "outcome_unknown", "timeout", "busy",
                  "connection_failed", "shutting_down",
                  # A load balancer's own answer while it has no server up
                  # (HAProxy's "No server is available"): the client
                  # raises Unavailable.
                  "http_502", "http_503", "http_504"}

# An ack's refusal as stale: the HTTP clients' failed_precondition, the
# command-line program's exit code 5 (worker.py); or not_found, when the
# message's later delivery was acked first (docs/semantics.md: a receipt of
# a message that was acked answers not_found).
STALE_CODES = {"failed_precondition", "stale_receipt", "not_found"}

# How long a fault stays in place once another node takes writes, for sqlq
# to write through it (Run.fault).
SERVE_WAIT_S = 30.0
# The goal for the gap from a fault to the next successful send (claim):
# within the cluster's own outage plus this.
GAP_MARGIN_S = 5.0


def server_time(s: str) -> float:
    """Seconds since the epoch of an RFC 3339 time of the server."""
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


@dataclasses.dataclass
class Op:
    kind: str          # send, claim, ack
    worker: str
    start: float       # client clock, monotonic seconds
    end: float = 0.0
    ok: bool = False
    code: str = ""     # error code when not ok
    wait: float = 0.0  # the part of the call spent waiting by request
    payload: str = ""  # send
    msg_id: int = 0    # send, ack
    receipt: str = ""  # ack
    # claim: (id, payload, receipt, lease expiry and claim time on the
    # database's clock)
    claimed: list = dataclasses.field(default_factory=list)


class Servers:
    """`count` sqlq serve processes on one database, on loopback."""

    def __init__(self, db_url: str, count: int = 2) -> None:
        self.bin = BIN
        self.dir = tempfile.TemporaryDirectory(prefix="sqlq-ha-")
        self.procs: list[subprocess.Popen] = []
        self.urls: list[str] = []
        for i in range(count):
            port_file = os.path.join(self.dir.name, f"port{i}")
            log = open(os.path.join(self.dir.name, f"log{i}"), "w")
            self.procs.append(subprocess.Popen(
                [self.bin, "--db", db_url, "serve", "--port", "0",
                 "--port-file", port_file], stdout=log, stderr=log))
            log.close()
            deadline = time.monotonic() + 60
            while True:
                if self.procs[-1].poll() is not None:
                    raise RuntimeError("sqlq serve exited: " + self.log(i))
                try:
                    with open(port_file) as f:
                        port = int(f.read().strip() or 0)
                    if port:
                        break
                except FileNotFoundError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("sqlq serve did not start: " +
                                       self.log(i))
                time.sleep(0.01)
            self.urls.append(f"http://127.0.0.1:{port}")

    def log(self, i: int) -> str:
        with open(os.path.join(self.dir.name, f"log{i}")) as f:
            return f.read()

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        self.dir.cleanup()


class Run:
    """Producers and consumers on queue `queue` through `urls`, recording
    every call, with faults injected by `faults`."""

    def __init__(self, urls: list[str], queue: str = "ha", *,
                 producers: int = 2, consumers: int = 2,
                 lease_ms: int = 10_000, wait_ms: int = 1000,
                 token: str | None = None) -> None:
        self.urls = urls
        self.token = token
        self.queue = queue
        self.producers = producers
        self.consumers = consumers
        self.lease_ms = lease_ms
        self.wait_ms = wait_ms
        self.ops: list[Op] = []
        # Successful sends so far, kept as they are recorded: counting them
        # in self.ops while the clients run would hold the lock (and the
        # interpreter) for longer as the history grows, slowing the clients
        # it measures.
        self._ok_sends = 0
        self.faults: list[tuple[str, float, float]] = []  # name, at, healed
        # name, seconds from a send after the fault to its delivery to a
        # consumer that was long-polling across the fault (None: never)
        self.wakes: list[tuple[str, float | None]] = []
        # name, seconds from another node taking writes to sqlq's first
        # write through it while the fault was still in place (None: not
        # within SERVE_WAIT_S, or no node took writes before the heal)
        self.served: list[tuple[str, float | None]] = []
        # For each fault, seconds from its injection until the cluster took
        # writes again by the lab's account (a new leader, or the heal when
        # no node could take writes before it): the cluster's own failover
        # time, against which the clients' gaps are judged.
        self.outages: list[float] = []
        # When set: the times at which a write of a plain client of the
        # database (not sqlq) succeeded, for the cluster's own write
        # availability (`write_outage` in the findings).
        self.cluster_writes: Callable[[], list[float]] | None = None
        # Faults the lab could not inject or the cluster did not recover
        # from in time (Run.fault).
        self.lab_errors: list[dict] = []
        self.stopped_at: float | None = None  # when producers were told to
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _record(self, op: Op) -> None:
        with self._lock:
            self.ops.append(op)
            if op.kind == "send" and op.ok:
                self._ok_sends += 1

    def _call(self, op: Op, fn: Callable[[], object]) -> object:
        """Runs one call of the history: records `op` with its end and
        outcome; returns what `fn` returned, or None after an error."""
        result = None
        try:
            result = fn()
            op.ok = True
        except sqlq.SqlqError as e:
            op.code = e.code
        op.end = time.monotonic()
        self._record(op)
        return result

    def _client(self, i: int) -> sqlq.Client:
        return sqlq.Client(self.urls[i % len(self.urls)], token=self.token,
                           backoff=0.05, max_backoff=1.0)

    def _produce(self, n: int) -> None:
        c = self._client(n)
        q = c.queue(self.queue)
        i = 0
        while not self._stop.is_set():
            payload = f"p{n}-{i}"
            i += 1
            op = Op("send", f"producer{n}", time.monotonic(), payload=payload)
            op.msg_id = self._call(op, lambda: q.send(payload)) or 0
        c.close()

    def _consume(self, n: int, stop: threading.Event) -> None:
        c = self._client(n + 1)
        q = c.queue(self.queue)
        while not stop.is_set():
            op = Op("claim", f"consumer{n}", time.monotonic(),
                    wait=self.wait_ms / 1000)
            got = self._call(op, lambda: q.claim(
                5, wait_ms=self.wait_ms, lease_ms=self.lease_ms)) or []
            for m in got:
                exp = server_time(m.lease_expires_at)
                op.claimed.append((m.id, m.payload, m.receipt, exp,
                                   exp - self.lease_ms / 1000))
            for m in got:
                a = Op("ack", f"consumer{n}", time.monotonic(), msg_id=m.id,
                       receipt=m.receipt)
                self._call(a, lambda: q.ack(m.receipt))
        c.close()

    def start(self) -> None:
        admin = self._client(0)
        for name in (self.queue, self.queue + "-wake"):
            try:
                # A dedup window longer than the clients' retry budget: a
                # send whose reply a fault cut off, retried after its
                # message was already claimed and acked, is then still
                # recognised by its key and stored once (docs/clients.md,
                # "Retries").
                admin.queue(name).create(unique_for_ms=300_000)
            except sqlq.AlreadyExists:
                pass
        admin.close()
        # Daemon threads: a test that fails midway still ends (and stops
        # the servers and the lab it started) instead of waiting for them.
        for n in range(self.producers):
            self._threads.append(threading.Thread(
                target=self._produce, args=(n,), daemon=True))
        for n in range(self.consumers):
            self._threads.append(threading.Thread(
                target=self._consume, args=(n, self._stop), daemon=True))
        for t in self._threads:
            t.start()

    def wait_for_progress(self, sends: int, timeout: float = 60) -> bool:
        """Waits until `sends` more sends succeeded."""
        def ok_sends() -> int:
            with self._lock:
                return self._ok_sends
        target = ok_sends() + sends
        deadline = time.monotonic() + timeout
        while ok_sends() < target:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def fault(self, name: str, inject: Callable[[], None],
              heal: Callable[[], None], *,
              writable_after_inject: bool = True) -> None:
        """Injects a fault, then heals it. A consumer long-polls the queue
        QUEUE-wake across it; once `inject` has returned (the lab's returns
        when another node takes writes), a message is sent there, and the
        time from that send's reply to its delivery is recorded. For a
        fault after which no node takes writes until it is healed
        (writable_after_inject false), the message is sent after the heal."""
        at = time.monotonic()
        probe = _WakeProbe(self, f"{name}-{len(self.faults)}")
        try:
            inject()
        except subprocess.CalledProcessError as e:
            # The fault was not injected, or the cluster did not fail over
            # in time: a finding of its own. The heal still runs, and the
            # history stays to be checked.
            self.lab_errors.append({"fault": name, "cycle": len(self.faults),
                                    "error": (e.stderr or str(e)).strip()})
            writable_after_inject = False
        served = None
        if writable_after_inject:
            # The cluster's own outage: until another node took writes.
            self.outages.append(time.monotonic() - at)
            led = time.monotonic()
            probe.start_send()
            # The fault stays in place while sqlq is given SERVE_WAIT_S to
            # write through the new leader: what a user sees when the old
            # primary stays as the fault left it (frozen, cut off). The
            # heal never waits for more (a send that cannot succeed before
            # the heal must not hold the fault in place).
            if probe.sent.wait(SERVE_WAIT_S):
                served = probe.sent_at - led
        heal()
        if not writable_after_inject:
            # No node takes writes before the heal has brought them back.
            self.outages.append(time.monotonic() - at)
            probe.start_send()
        self.served.append((name, served))
        self.wakes.append((name, probe.result(60)))
        self.faults.append((name, at, time.monotonic()))

    def merge(self, path: str) -> None:
        """Adds the calls a worker elsewhere (worker.py) wrote to `path`."""
        with open(path) as f:
            for line in f:
                d = json.loads(line)
                d["claimed"] = [tuple(c) for c in d["claimed"]]
                self._record(Op(**d))

    def stop_and_drain(self, timeout: float = 120) -> None:
        """Stops the producers and consumers, then claims until the queue
        holds nothing: no message ready, delayed or leased (leases of
        claims whose replies a fault cut off run out meanwhile)."""
        self.stopped_at = time.monotonic()
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        stop = threading.Event()
        drainers = [threading.Thread(target=self._consume, args=(n, stop),
                                     daemon=True)
                    for n in range(self.consumers)]
        for t in drainers:
            t.start()
        admin = self._client(0)
        deadline = time.monotonic() + timeout + self.lease_ms / 1000

        def empty() -> bool:
            st = admin.queue(self.queue).stats()["stats"]
            return st["ready"] + st["delayed"] + st["leased"] == 0

        while not empty() and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()
        for t in drainers:
            t.join(timeout)
        admin.close()

    def check(self, bound: float) -> dict:
        """The findings; the run is clean when lost, duplicate_stores,
        unexpected, overlaps, acked_redelivered, over_bound and
        bad_errors are all zero."""
        sends = [o for o in self.ops if o.kind == "send"]
        attempted = {o.payload for o in sends}
        acked_sends = {o.payload for o in sends if o.ok}
        claims = [o for o in self.ops if o.kind == "claim"]
        deliveries: dict[int, list] = {}  # id -> [(claimed at, expiry, receipt)]
        ids_of: dict[str, set] = {}
        claimed_by: dict[str, str] = {}  # receipt -> worker
        for o in claims:
            for (mid, payload, receipt, exp, at) in o.claimed:
                deliveries.setdefault(mid, []).append((at, exp, receipt))
                ids_of.setdefault(payload, set()).add(mid)
                claimed_by[receipt] = o.worker
        seen = set(ids_of)
        lost = sorted(acked_sends - seen)
        unexpected = sorted(seen - attempted)
        duplicate_stores = sorted(p for p, ids in ids_of.items()
                                  if len(ids) > 1)
        # Two deliveries of one message whose leases overlap, on the
        # database's clock: the second was claimed before the first's lease
        # ran out (no nack in this workload ends a lease early).
        overlaps = []
        for mid, ds in deliveries.items():
            ds.sort()
            for (_, e1, _), (a2, _, _) in zip(ds, ds[1:]):
                if a2 < e1 - 1e-3:
                    overlaps.append(mid)
        # What happened to each overlapping message, to explain it: every
        # delivery (who, claimed at, lease until, on the database's clock)
        # and every ack of it (who, when sent and answered, on this
        # process's monotonic clock, and how it ended).
        overlap_detail = {
            mid: {"deliveries": [
                {"worker": claimed_by.get(r), "at": a, "until": e,
                 "receipt": r} for a, e, r in deliveries[mid]],
                  "acks": [{"worker": o.worker, "start": o.start,
                            "end": o.end, "ok": o.ok, "code": o.code,
                            "receipt": o.receipt}
                           for o in self.ops
                           if o.kind == "ack" and o.msg_id == mid]}
            for mid in sorted(set(overlaps))[:5]}
        # An ack accepted, and its message delivered again after the claim
        # it acked: the ack was lost (a failover) or a stale one accepted.
        acked_redelivered = []
        for o in self.ops:
            if o.kind != "ack" or not o.ok:
                continue
            ds = deliveries.get(o.msg_id, [])
            at = next((a for a, _, r in ds if r == o.receipt), None)
            if at is not None and any(a > at for a, _, _ in ds):
                acked_redelivered.append(o.msg_id)
        over_bound = [dataclasses.asdict(o) for o in self.ops
                      if o.end - o.start - o.wait > bound]
        # An ack refused as stale: right when the lease it held ran out and
        # the message was claimed again (a fault outlasted the lease while
        # the ack was retried); a failure otherwise.
        def justified_stale(o: Op) -> bool:
            if o.kind != "ack" or o.code not in STALE_CODES:
                return False
            ds = deliveries.get(o.msg_id, [])
            mine = next(((a, e) for a, e, r in ds if r == o.receipt), None)
            return mine is not None and any(
                a2 >= mine[1] - 1e-3 for a2, _, _ in ds if a2 > mine[0])

        codes: dict[str, int] = {}
        bad_ops = []
        stale_acks = 0
        for o in self.ops:
            if o.ok:
                continue
            codes[o.code] = codes.get(o.code, 0) + 1
            if justified_stale(o):
                stale_acks += 1
            elif o.code not in FAILOVER_CODES:
                bad_ops.append(o)
        bad_errors: dict[str, int] = {}
        for o in bad_ops:
            bad_errors[o.code] = bad_errors.get(o.code, 0) + 1
        # For each fault: the longest stretch, from the fault on, in which
        # no send (claim) succeeded, up to the first success after the
        # heal. None: none succeeded after the fault.
        def longest_gap(ends: list[float], at: float, healed: float):
            after = sorted(e for e in ends if e > at)
            if not after:
                return None
            gap, last = 0.0, at
            for e in after:
                gap = max(gap, e - last)
                last = e
                if e > healed:
                    break
            return gap

        send_ends = [o.end for o in sends if o.ok]
        claim_ends = [o.end for o in claims if o.ok and o.claimed]
        writes = sorted(self.cluster_writes()) if self.cluster_writes else []
        gaps = [{"fault": name,
                 "send_gap": longest_gap(send_ends, at, healed),
                 "claim_gap": longest_gap(claim_ends, at, healed),
                 "cluster_outage": round(outage, 2),
                 "write_outage": (longest_gap(writes, at, healed)
                                  if writes else None)}
                for (name, at, healed), outage in zip(self.faults,
                                                      self.outages)]
        # The goal for each fault: sends and claims again within the
        # cluster's own outage plus GAP_MARGIN_S. The outage is the longer
        # of the lab's account (until another node took writes) and, when
        # measured, the longest stretch in which a plain client's writes
        # failed (a cluster that stalls again after its failover). Reported,
        # not asserted.
        def outage_of(g: dict) -> float:
            return max(g["cluster_outage"], g["write_outage"] or 0.0)
        over_goal = [g for g in gaps
                     if any(g[k] is not None and
                            g[k] > outage_of(g) + GAP_MARGIN_S
                            for k in ("send_gap", "claim_gap"))]
        # Acked sends a second by the producers, before the first fault
        # and after the last heal.
        def rate(lo: float, hi: float) -> float | None:
            n = sum(1 for e in send_ends if lo <= e < hi)
            return round(n / (hi - lo), 1) if hi > lo else None

        throughput = {}
        if self.faults and send_ends:
            throughput = {
                "before": rate(min(o.start for o in sends), self.faults[0][1]),
                "after": rate(self.faults[-1][2],
                              self.stopped_at or max(send_ends))}
        return {
            "sends": len(sends), "acked_sends": len(acked_sends),
            "throughput": throughput,
            "delivered": len(seen), "lost": lost,
            "duplicate_stores": duplicate_stores, "unexpected": unexpected,
            "overlaps": sorted(set(overlaps)),
            "overlap_detail": overlap_detail,
            "acked_redelivered": acked_redelivered,
            "over_bound": over_bound, "bad_errors": bad_errors,
            # The first of them whole, to say which call and message.
            "bad_ops": [dataclasses.asdict(o) for o in bad_ops[:10]],
            "stale_acks": stale_acks,
            "errors": codes, "gaps": gaps, "over_goal": over_goal,
            "wakes": [{"fault": n, "wake": w} for n, w in self.wakes],
            "served": [{"fault": n, "after_leader": w}
                       for n, w in self.served],
            "longest_call": max((o.end - o.start - o.wait for o in self.ops),
                                default=0.0),
        }


class _WakeProbe:
    """A consumer long-polling QUEUE-wake for one message, and the send of
    that message."""

    def __init__(self, run: Run, payload: str) -> None:
        self.payload = payload
        self.sent_at: float | None = None
        self.got_at: float | None = None
        self._client = run._client(0)
        self._queue = self._client.queue(run.queue + "-wake")
        self._sender = run._client(1)
        self._done = threading.Event()
        self.sent = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                for m in self._queue.claim(1, wait_ms=20_000):
                    m.ack()
                    if m.payload == self.payload:
                        self.got_at = time.monotonic()
                        self._done.set()
                        return
            except sqlq.SqlqError:
                time.sleep(0.05)  # the client retried for 30 s already

    def start_send(self) -> None:
        """Sends the message, on a thread of its own (retrying for up to
        120 s); `sent` is set once it succeeded."""
        threading.Thread(target=self._send, daemon=True).start()

    def _send(self) -> None:
        deadline = time.monotonic() + 120
        while self.sent_at is None and time.monotonic() < deadline:
            try:
                self._sender.queue(self._queue.name).send(self.payload)
                self.sent_at = time.monotonic()
                self.sent.set()
            except sqlq.SqlqError:
                pass

    def result(self, timeout: float) -> float | None:
        """Seconds from the send's reply to the delivery, or None."""
        self.sent.wait(timeout)
        self._done.wait(timeout)
        self._client.close()
        self._sender.close()
        if self.sent_at is None or self.got_at is None:
            return None
        return self.got_at - self.sent_at


def summary(findings: dict) -> str:
    out = dict(findings)
    for k in ("lost", "duplicate_stores", "unexpected", "overlaps",
              "acked_redelivered", "over_bound"):
        out[k] = len(findings[k])
    return json.dumps(out, indent=None, default=str)


def script_vars(command: list[str]) -> dict[str, str]:
    """The `export KEY='value'` lines a lab or test-server script prints
    for eval, as a dict."""
    out = subprocess.run(command, check=True, capture_output=True,
                         text=True).stdout
    found = {}
    for word in shlex.split(out):
        if "=" in word and word != "export":
            key, value = word.split("=", 1)
            found[key] = value
    return found


def is_clean(findings: dict) -> bool:
    """What assert_clean checks, as a yes or no."""
    try:
        assert_clean(unittest.TestCase(), findings)
    except AssertionError:
        return False
    return True


def assert_clean(test, findings: dict) -> None:
    """Fails `test` (a unittest.TestCase) unless the run did real work and
    showed nothing a user must never see, and every fault was followed by a
    successful send and claim."""
    test.assertGreater(findings["acked_sends"], 100)
    for key in ("lost", "duplicate_stores", "unexpected", "overlaps",
                "acked_redelivered", "over_bound"):
        test.assertEqual(findings[key], [], key)
    test.assertEqual(findings["bad_errors"], {})
    for g in findings["gaps"]:
        test.assertIsNotNone(g["send_gap"], g)
        test.assertIsNotNone(g["claim_gap"], g)
    for w in findings["wakes"]:
        test.assertIsNotNone(w["wake"], w)
        test.assertLess(w["wake"], WAKE_BOUND_S, w)
