"""The history check (history.py) over the lab (scripts/ha-lab.sh): two sqlq
serve on a three-node cluster, producers and consumers through them, and
faults in a loop. Runs as root (the lab needs it); SQLQ_HA_KIND (patroni
or galera), SQLQ_HA_FAULTS (comma-separated) and SQLQ_HA_CYCLES choose
the run. Prints the findings as one JSON line per run."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import history  # noqa: E402

LAB = os.path.join(history.ROOT, "scripts", "ha-lab.sh")
KIND = os.environ.get("SQLQ_HA_KIND", "patroni")
FAULTS = os.environ.get("SQLQ_HA_FAULTS", "primary-kill,switchover").split(",")
CYCLES = int(os.environ.get("SQLQ_HA_CYCLES", "2"))
# The cluster's failover (up to 25 s measured in the lab) + the clients'
# retry budget (30 s) + the database's TCP timeouts (10 s) + a margin.
BOUND_S = 70.0


class Lab:
    def __init__(self, kind: str) -> None:
        env = history.script_vars([LAB, "start", kind])
        self.dir = env["SQLQ_HA_DIR"]
        self.url = env["SQLQ_HA_URL"]

    def run(self, *args: str) -> str:
        return subprocess.run([LAB, *args[:1], self.dir, *args[1:]],
                              check=True, capture_output=True,
                              text=True).stdout.strip()

    def fault(self, name: str) -> None:
        """Injects the fault and returns once another node takes writes
        (the fault has made the cluster fail over), or at once for faults
        that leave the writer in place."""
        old = self.run("leader")
        subprocess.run([LAB, "fault", name, self.dir], check=True,
                       capture_output=True)
        if name in ("primary-kill", "primary-partition", "primary-blackhole",
                    "pause", "pause-db", "switchover"):
            self.run("leader", "--not", old, "--timeout", "120")

    def stop(self) -> None:
        subprocess.run([LAB, "stop", self.dir], capture_output=True)


@unittest.skipUnless(os.geteuid() == 0, "the lab needs root")
class LabHistory(unittest.TestCase):
    def test_faults_in_a_loop_lose_nothing(self) -> None:
        lab = Lab(KIND)
        try:
            servers = history.Servers(lab.url, count=2)
            try:
                run = history.Run(servers.urls, lease_ms=30_000)
                run.start()
                self.assertTrue(run.wait_for_progress(50))
                for _ in range(CYCLES):
                    for fault in FAULTS:
                        run.fault(fault, lambda f=fault: lab.fault(f),
                                  lambda: lab.run("heal"))
                        self.assertTrue(run.wait_for_progress(50),
                                        f"no progress after {fault}")
                run.stop_and_drain()
                f = run.check(BOUND_S)
            finally:
                servers.close()
        finally:
            lab.stop()
        print(KIND, history.summary(f), file=sys.stderr)
        history.assert_clean(self, f)


if __name__ == "__main__":
    # A SIGTERM (ctest, a user) unwinds the test, so that it stops what it
    # started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logging.getLogger("sqlq").setLevel(logging.ERROR)
    unittest.main()
