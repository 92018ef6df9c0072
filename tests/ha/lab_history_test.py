"""The history check (history.py) over the lab (scripts/ha-lab.sh): a
three-node cluster; two sqlq serve on nodes of their own behind an HTTP
HAProxy; producers and consumers through it with the Python client, plus a
Python worker (sqlq.Worker) and a command-line worker (`sqlq claim`/`ack`
on the database) on two more nodes, as separate machines; faults in a loop;
then a drain, the check of the history, and a check that every database
node holds the same rows. Runs as root (the lab needs it); SQLQ_HA_KIND
(patroni or galera), SQLQ_HA_FAULTS (comma-separated) and SQLQ_HA_CYCLES
choose the run. Prints the findings as one JSON line per run."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import history  # noqa: E402

LAB = os.path.join(history.ROOT, "scripts", "ha-lab.sh")
KIND = os.environ.get("SQLQ_HA_KIND", "patroni")
# More arguments for `start`: --async (Patroni) or --unsafe-flush (Galera)
# make the negative controls, which must report loss (SQLQ_HA_EXPECT_LOSS).
START_ARGS = os.environ.get("SQLQ_HA_START", "").split()
EXPECT_LOSS = os.environ.get("SQLQ_HA_EXPECT_LOSS") == "1"
FAULTS = os.environ.get("SQLQ_HA_FAULTS", "primary-kill,switchover").split(",")
CYCLES = int(os.environ.get("SQLQ_HA_CYCLES", "2"))
KEEP_LOGS = os.environ.get("SQLQ_HA_KEEP_LOGS") == "1"
# The cluster's failover (up to 25 s measured in the lab) + the clients'
# retry budget (30 s) + the database's TCP timeouts (10 s) + a margin.
BOUND_S = 70.0
LEASE_MS = 30_000
THROUGHPUT_SENDS = 2000

# A digest of each sqlq table's rows, as one query per database.
PG_DIGEST = r"""
SELECT string_agg(format(
  'SELECT %L, count(*), md5(coalesce(string_agg(t::text, %L ORDER BY t::text), %L)) FROM %I t',
  c.relname, '|', '', c.relname), ' UNION ALL ' ORDER BY c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND c.relpersistence = 'p' AND n.nspname = 'public'
  AND c.relname LIKE 'sqlq\_%'
"""
MY_TABLES = r"""
SELECT GROUP_CONCAT(table_name ORDER BY table_name)
FROM information_schema.tables
WHERE table_schema = DATABASE() AND engine = 'InnoDB'
  AND table_name LIKE 'sqlq\_%'
"""


def _out(args: list[str]) -> str:
    return subprocess.run(args, check=True, capture_output=True,
                          text=True).stdout.strip()


def mariadb_command(url: str, host: str | None = None) -> list[str]:
    """The mariadb command-line client's arguments for the database of a
    mysql:// URL (on `host` instead of the URL's host and port when
    given), up to `-e`, which takes the statements."""
    user, pw, url_host, port, db = re.match(
        r"mysql://([^:]+):([^@]+)@([^:/]+)(?::(\d+))?/(\w+)", url).groups()
    where = ["-h", host] if host else ["-h", url_host, "-P", port or "3306"]
    return ["mariadb", "--no-defaults", "-N", "-B", "--connect-timeout=2",
            *where, "-u", user, f"-p{pw}", db, "-e"]


class Lab:
    def __init__(self, kind: str) -> None:
        env = history.script_vars([LAB, "start", kind, *START_ARGS])
        self.dir = env["SQLQ_HA_DIR"]
        self.url = env["SQLQ_HA_URL"]
        self.kind = kind
        self.nodes = env["SQLQ_HA_NODES"].split()

    def start_sqlq(self) -> None:
        env = history.script_vars([LAB, "sqlq", self.dir, "--servers", "2",
                                   "--workers", "2", "--bin", history.BIN])
        self.http = env["SQLQ_HA_HTTP"]
        self.token = env["SQLQ_HA_TOKEN"]
        self.db_url = env["SQLQ_HA_DB_URL"]
        self.worker_nodes = env["SQLQ_HA_WORKER_NODES"].split()

    def run(self, *args: str) -> str:
        p = subprocess.run([LAB, *args[:1], self.dir, *args[1:]],
                           check=True, capture_output=True, text=True)
        if args[0] == "heal":
            # The lab's own account of the heal, for the test's output.
            print(p.stderr.strip(), file=sys.stderr)
        return p.stdout.strip()

    def fault(self, name: str) -> None:
        """Injects the fault and returns once another node takes writes
        (the fault has made the cluster fail over), or at once for faults
        that leave the writer in place."""
        old = self.run("leader")
        p = subprocess.run([LAB, "fault", name, self.dir], check=True,
                           capture_output=True, text=True)
        print(f"{time.monotonic():.1f}", p.stderr.strip(), file=sys.stderr)
        if name in ("primary-kill", "primary-partition", "primary-blackhole",
                    "pause", "pause-db", "switchover"):
            new = self.run("leader", "--not", old, "--timeout", "120")
            if self.kind.startswith("patroni") and "--async" not in START_ARGS:
                self.wait_for_a_sync_standby(new)
        elif name == "replica-kill" and self.kind.startswith("patroni") \
                and "--async" not in START_ARGS:
            # When the killed replica was the synchronous standby, the
            # primary holds every commit until Patroni names another one.
            killed = re.search(r"\((\d+\.\d+\.\d+\.\d+)\)", p.stderr)
            self.wait_for_a_sync_standby(
                old, not_addr=killed.group(1) if killed else None)

    def wait_for_a_sync_standby(self, leader: str,
                                not_addr: str | None = None) -> None:
        """Waits until a standby (other than `not_addr`) replicates
        synchronously from `leader`: with synchronous replication a primary
        acknowledges no commit before, so the cluster takes no write until
        then."""
        url = re.sub(r"@[^/]*/", f"@{leader}:5432/", self.url)
        other = f" AND client_addr <> '{not_addr}'" if not_addr else ""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                p = subprocess.run(
                    ["psql", "-XAtq", url, "-c",
                     "SELECT count(*) FROM pg_stat_replication "
                     "WHERE sync_state = 'sync'" + other],
                    capture_output=True, text=True,
                    env=dict(os.environ, PGCONNECT_TIMEOUT="2"), timeout=10)
                if p.returncode == 0 and p.stdout.strip() not in ("", "0"):
                    return
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.1)
        raise subprocess.CalledProcessError(
            1, "wait for a sync standby", stderr=f"{leader} has no "
            "synchronous standby 120 s after it took over")

    def start_worker(self, node: str, mode: str, out: str,
                     queue: str) -> subprocess.Popen:
        """A worker.py on a worker node of the lab."""
        where = ((self.http, self.token) if mode == "python" else
                 (history.BIN, self.db_url))
        return subprocess.Popen(
            [LAB, "exec", self.dir, node, "--", sys.executable,
             os.path.join(history.HERE, "worker.py"), mode, *where, queue,
             str(LEASE_MS), out, f"{node}-{mode}"])

    def checksums(self) -> list[str]:
        """A digest of the rows of every sqlq table, read on each node."""
        sums = []
        for node in self.nodes:
            if self.kind.startswith("patroni"):
                url = re.sub(r"@[^/]*/", f"@{node}:5432/", self.url)
                query = _out(["psql", "-XAtq", url, "-c", PG_DIGEST])
                sums.append(_out(["psql", "-XAtq", url, "-c", query]))
            else:
                base = mariadb_command(self.url, host=node)
                tables = _out(base + [MY_TABLES])
                sums.append(_out(base + [f"CHECKSUM TABLE {tables}"]))
        return sums

    def converged(self, timeout: float = 60) -> bool:
        """Waits until every node holds the same rows in the sqlq tables
        (replicas apply the last commits after the drain)."""
        deadline = time.monotonic() + timeout
        while True:
            sums = self.checksums()
            if sums[0] and all(x == sums[0] for x in sums):
                return True
            if time.monotonic() > deadline:
                print("checksums differ:", sums, file=sys.stderr)
                return False
            time.sleep(0.5)

    def keep_logs(self) -> str:
        """Copies the lab's logs and configuration (not the databases) to a
        directory that outlives `stop`, and returns its path."""
        dest = tempfile.mkdtemp(prefix="sqlq-ha-logs-")

        def skip(d: str, names: list[str]) -> list[str]:
            return [n for n in names
                    if not os.path.isdir(os.path.join(d, n)) and
                    not n.endswith((".log", ".err", ".yml", ".cnf", ".env",
                                    ".cfg"))]
        shutil.copytree(self.dir, os.path.join(dest, "lab"), ignore=skip,
                        symlinks=True, ignore_dangling_symlinks=True,
                        dirs_exist_ok=True)
        return dest

    def stop(self) -> None:
        subprocess.run([LAB, "stop", self.dir], capture_output=True)


class WriteProbe:
    """A plain client of a Galera cluster (the mariadb command-line
    client, through the cluster's HAProxy, a new connection each time)
    writing one row about five times a second: the cluster's own write
    availability, which can stall again after its failover (a new view
    that fails to install) where the lab's account of the failover ends.
    The table is not an sqlq one, so the nodes' digests leave it out."""

    def __init__(self, url: str) -> None:
        self._base = mariadb_command(url)
        self.times: list[float] = []
        self._stop = threading.Event()
        _out(self._base + ["CREATE TABLE IF NOT EXISTS ha_probe "
                           "(id INT PRIMARY KEY, at DATETIME(6))"])
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                p = subprocess.run(
                    self._base + ["SET SESSION innodb_lock_wait_timeout = 2; "
                                  "REPLACE INTO ha_probe VALUES (1, NOW(6))"],
                    capture_output=True, timeout=5)
                if p.returncode == 0:
                    self.times.append(time.monotonic())
            except subprocess.TimeoutExpired:
                pass
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@unittest.skipUnless(os.geteuid() == 0, "the lab needs root")
class LabHistory(unittest.TestCase):
    @staticmethod
    def stalls(fault: str) -> bool:
        """Whether no write can succeed until the fault is healed: every
        node crashed. (On Patroni, a frozen Patroni (pause) leaves its
        PostgreSQL running as a primary that takes connections and holds
        every commit waiting for a standby that now follows the new leader;
        sqlq's leader watch tells it from the new leader by its older
        timeline, docs/engines/postgres.md.)"""
        return fault == "all-kill"

    def test_faults_in_a_loop_lose_nothing(self) -> None:
        lab = Lab(KIND)
        probe: WriteProbe | None = None
        workers: list[subprocess.Popen] = []
        logs = tempfile.TemporaryDirectory(prefix="sqlq-ha-workers-")
        finished = False
        try:
            lab.start_sqlq()
            run = history.Run([lab.http], lease_ms=LEASE_MS, token=lab.token)
            if KIND == "galera":
                probe = WriteProbe(lab.url)
                run.cluster_writes = lambda: list(probe.times)
            run.start()
            outs = []
            for node, mode in zip(lab.worker_nodes, ("python", "cli")):
                outs.append(os.path.join(logs.name, f"{node}.jsonl"))
                workers.append(lab.start_worker(node, mode, outs[-1],
                                                run.queue))
            # The throughput before the first fault and after the last
            # heal is measured over these sends (about 7 s here).
            self.assertTrue(run.wait_for_progress(THROUGHPUT_SENDS))
            for _ in range(CYCLES):
                for fault in FAULTS:
                    run.fault(fault, lambda f=fault: lab.fault(f),
                              lambda: lab.run("heal"),
                              writable_after_inject=not self.stalls(fault))
                    self.assertTrue(run.wait_for_progress(50),
                                    f"no progress after {fault}")
            self.assertTrue(run.wait_for_progress(THROUGHPUT_SENDS))
            run.stop_and_drain()
            for w in workers:
                w.terminate()
            for w in workers:
                self.assertEqual(w.wait(60), 0, "a worker failed")
            for out in outs:
                run.merge(out)
            f = run.check(BOUND_S)
            f["converged"] = lab.converged()
            f["lab_errors"] = run.lab_errors
            finished = True
        finally:
            if probe is not None:
                probe.stop()
            for w in workers:
                if w.poll() is None:
                    w.kill()
            # The logs are kept when something is to be explained, or when
            # asked for (SQLQ_HA_KEEP_LOGS=1). A negative control's loss is
            # expected, not to be explained.
            if (not finished or run.lab_errors or KEEP_LOGS
                    or (not EXPECT_LOSS and (not history.is_clean(f)
                                             or f["over_goal"]))):
                kept = lab.keep_logs()
                # Every call of the run beside them (history.jsonl, one
                # Op a line, client clock), so that a finding can be
                # traced to the calls and servers behind it.
                with open(os.path.join(kept, "history.jsonl"), "w") as h:
                    for o in list(run.ops):
                        h.write(json.dumps(dataclasses.asdict(o)) + "\n")
                print("the lab's logs:", kept, file=sys.stderr)
            lab.stop()
            logs.cleanup()
        by_worker: dict[str, int] = {}
        for o in run.ops:
            if o.kind == "claim" and o.claimed:
                by_worker[o.worker] = by_worker.get(o.worker, 0) + 1
        f["claims_by_worker"] = by_worker
        print(KIND, *START_ARGS, history.summary(f), file=sys.stderr)
        if EXPECT_LOSS:
            # The negative control: the check must see what was lost.
            self.assertGreater(f["acked_sends"], 100)
            self.assertTrue(f["lost"] or f["acked_redelivered"],
                            "the control lost nothing the check could see")
            return
        history.assert_clean(self, f)
        self.assertTrue(f["converged"], "the nodes hold different rows")
        self.assertEqual(f["lab_errors"], [],
                         "faults the cluster did not recover from in time")
        for node, mode in zip(lab.worker_nodes, ("python", "cli")):
            self.assertGreater(by_worker.get(f"{node}-{mode}", 0), 0,
                               f"the {mode} worker on {node} got nothing")


if __name__ == "__main__":
    # A SIGTERM (ctest, a user) unwinds the test, so that it stops what it
    # started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logging.getLogger("sqlq").setLevel(logging.ERROR)
    unittest.main()
