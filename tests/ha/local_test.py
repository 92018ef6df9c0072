"""The history check (history.py) on one PostgreSQL server that crashes
and restarts under load, through two sqlq serve: nothing acknowledged is
lost, no message is stored twice or leased twice, every call ends within
its bound. And its negative control: the same run on a server that
acknowledges commits before they are durable (synchronous_commit = off)
must show loss, or the check would be blind to it."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import history  # noqa: E402

PG_SCRIPT = os.path.join(history.ROOT, "scripts", "pg-test-server.sh")
# retry_for of the clients (30 s) + the database's connect and TCP
# timeouts (10 s) + a margin.
BOUND_S = 45.0
CYCLES = 2


class PrivatePg:
    def __init__(self) -> None:
        env = history.script_vars([PG_SCRIPT, "start"])
        self.dir = env["SQLQ_TEST_PG_DIR"]
        self.url = env["SQLQ_TEST_PG_URL"]

    def sql(self, statement: str) -> None:
        subprocess.run(["psql", "-q", "-X", self.url, "-c", statement],
                       check=True, capture_output=True)

    def crash_and_restart(self) -> None:
        """The server killed (immediate shutdown: no checkpoint, WAL
        buffers not yet written are gone) and started again."""
        subprocess.run([PG_SCRIPT, "restart", self.dir, "immediate"],
                       check=True, capture_output=True)

    def stop(self) -> None:
        subprocess.run([PG_SCRIPT, "stop", self.dir], capture_output=True)


def run_with_crashes(pg: PrivatePg, prepare=None) -> dict:
    servers = history.Servers(pg.url, count=2)
    try:
        run = history.Run(servers.urls)
        run.start()
        assert run.wait_for_progress(50), "no progress before the faults"
        if prepare is not None:
            prepare()
            assert run.wait_for_progress(50), "no progress after prepare"
        for _ in range(CYCLES):
            run.fault("crash-restart", pg.crash_and_restart, lambda: None)
            assert run.wait_for_progress(50), "no progress after a fault"
        assert not run.lab_errors, run.lab_errors
        run.stop_and_drain()
        return run.check(BOUND_S)
    finally:
        servers.close()


class LocalHistory(unittest.TestCase):
    def test_crashes_of_a_durable_server_lose_nothing(self) -> None:
        pg = PrivatePg()
        try:
            f = run_with_crashes(pg)
        finally:
            pg.stop()
        print(history.summary(f), file=sys.stderr)
        history.assert_clean(self, f)

    def test_the_check_sees_loss_when_commits_are_not_durable(self) -> None:
        pg = PrivatePg()
        try:
            # Once sqlq's tables are made and flushed: commits acknowledged
            # before their WAL is written, and written only every 10 s, so
            # that a crash loses the last seconds of them.
            def async_commits() -> None:
                pg.sql("CHECKPOINT")
                pg.sql("ALTER SYSTEM SET synchronous_commit = off")
                pg.sql("ALTER SYSTEM SET wal_writer_delay = '10s'")
                pg.sql("SELECT pg_reload_conf()")
            f = run_with_crashes(pg, async_commits)
        finally:
            pg.stop()
        print(history.summary(f), file=sys.stderr)
        self.assertNotEqual(f["lost"], [], "the check saw no loss")


if __name__ == "__main__":
    # A SIGTERM (ctest, a user) unwinds the test, so that it stops what it
    # started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # The clients' retry warnings during the faults are expected.
    logging.getLogger("sqlq").setLevel(logging.ERROR)
    unittest.main()
