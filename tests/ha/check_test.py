"""The history check itself (history.py), on histories written out by hand:
that it finds what it must (so a clean matrix means something) and accepts
what a fault legitimately causes. No server is involved."""
from __future__ import annotations

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import history  # noqa: E402
from history import Op  # noqa: E402


def claim(worker: str, t: float, mid: int, receipt: str, at: float,
          lease: float = 10.0) -> Op:
    """A claim at client time t of message `mid`, on the database's clock
    claimed at `at` with a lease of `lease` seconds."""
    op = Op("claim", worker, t, end=t + 0.01, ok=True)
    op.claimed.append((mid, f"p{mid}", receipt, at + lease, at))
    return op


def send(t: float, mid: int) -> Op:
    return Op("send", "producer0", t, end=t + 0.01, ok=True,
              payload=f"p{mid}", msg_id=mid)


def ack(worker: str, t: float, mid: int, receipt: str, ok: bool = True,
        code: str = "") -> Op:
    return Op("ack", worker, t, end=t + 0.01, ok=ok, code=code, msg_id=mid,
              receipt=receipt)


class CheckTest(unittest.TestCase):
    def check(self, ops: list[Op]) -> dict:
        run = history.Run([])
        run.ops = ops
        return run.check(bound=35.0)

    def test_a_gap_past_the_clusters_outage_plus_the_margin_is_reported(self):
        run = history.Run([])
        # Two faults at t=10 and t=40, each with a 4 s cluster outage; sends
        # and claims come back 3 s after the first (within the goal) and
        # 12 s after the second (past it).
        times = [t for t in range(60)
                 if not 10 <= t < 13 and not 40 <= t < 52]
        run.ops = [send(t, i) for i, t in enumerate(times)]
        run.ops += [claim("consumer0", t + 0.1, i, f"r{i}", at=1000.0 + t)
                    for i, t in enumerate(times)]
        run.faults = [("primary-kill", 10.0, 20.0), ("pause", 40.0, 50.0)]
        run.outages = [4.0, 4.0]
        f = run.check(bound=35.0)
        self.assertEqual([g["fault"] for g in f["over_goal"]], ["pause"])
        self.assertAlmostEqual(f["over_goal"][0]["send_gap"], 12.01)
        # A plain client's writes stalled 10 s after the second fault (the
        # cluster stalled again after its failover): 12 s is within 10 + 5.
        run.cluster_writes = lambda: [t + 0.5 for t in range(60)
                                      if not 10 <= t < 12
                                      and not 41 <= t < 50]
        f = run.check(bound=35.0)
        self.assertEqual(f["over_goal"], [])
        self.assertEqual([g["write_outage"] for g in f["gaps"]], [2.5, 10.0])

    def test_a_stale_ack_after_the_lease_ran_out_and_a_new_claim_is_right(self):
        f = self.check([
            send(0, 1),
            claim("consumer0", 1, 1, "r1", at=1000.0),
            # The fault outlasts the 10 s lease: another consumer claims
            # the message again at 1012, and the first one's ack, retried
            # across the fault, is refused as stale.
            claim("consumer1", 13, 1, "r2", at=1012.0),
            ack("consumer1", 13.1, 1, "r2"),
            ack("consumer0", 14, 1, "r1", ok=False,
                code="failed_precondition"),
        ])
        self.assertEqual(f["bad_errors"], {})
        self.assertEqual(f["stale_acks"], 1)
        self.assertEqual(f["errors"], {"failed_precondition": 1})

    def test_the_command_line_workers_stale_exit_code_counts_the_same(self):
        f = self.check([
            send(0, 1),
            claim("w2-cli", 1, 1, "r1", at=1000.0),
            claim("consumer1", 13, 1, "r2", at=1011.0),
            ack("w2-cli", 14, 1, "r1", ok=False, code="stale_receipt"),
        ])
        self.assertEqual(f["bad_errors"], {})
        self.assertEqual(f["stale_acks"], 1)

    def test_an_ack_after_the_new_claims_ack_finds_the_message_gone(self):
        # The other consumer's ack of the second delivery came first: the
        # message is gone, and the first consumer's ack answers not_found.
        f = self.check([
            send(0, 1),
            claim("consumer0", 1, 1, "r1", at=1000.0),
            claim("consumer1", 13, 1, "r2", at=1012.0),
            ack("consumer1", 13.1, 1, "r2"),
            ack("consumer0", 14, 1, "r1", ok=False, code="not_found"),
        ])
        self.assertEqual(f["bad_errors"], {})
        self.assertEqual(f["stale_acks"], 1)

    def test_not_found_for_an_ack_of_the_only_delivery_is_a_failure(self):
        f = self.check([
            send(0, 1),
            claim("consumer0", 1, 1, "r1", at=1000.0),
            ack("consumer0", 2, 1, "r1", ok=False, code="not_found"),
        ])
        self.assertEqual(f["bad_errors"], {"not_found": 1})
        self.assertEqual(f["stale_acks"], 0)

    def test_a_stale_ack_of_a_lease_that_still_held_is_a_failure(self):
        f = self.check([
            send(0, 1),
            claim("consumer0", 1, 1, "r1", at=1000.0),
            ack("consumer0", 2, 1, "r1", ok=False,
                code="failed_precondition"),
        ])
        self.assertEqual(f["bad_errors"], {"failed_precondition": 1})
        self.assertEqual(f["stale_acks"], 0)
        self.assertEqual([(o["kind"], o["worker"], o["msg_id"])
                          for o in f["bad_ops"]],
                         [("ack", "consumer0", 1)])

    def test_a_stale_ack_with_a_new_claim_inside_the_lease_is_a_failure(self):
        # The second claim came before the first lease ran out: that is an
        # overlap, and it does not excuse the refusal.
        f = self.check([
            send(0, 1),
            claim("consumer0", 1, 1, "r1", at=1000.0),
            claim("consumer1", 5, 1, "r2", at=1004.0),
            ack("consumer0", 6, 1, "r1", ok=False,
                code="failed_precondition"),
        ])
        self.assertEqual(f["bad_errors"], {"failed_precondition": 1})
        self.assertEqual(f["overlaps"], [1])

    def test_a_refused_send_is_a_failure_whatever_its_code(self):
        f = self.check([
            Op("send", "producer0", 0, end=0.1, ok=False,
               code="failed_precondition", payload="p9"),
        ])
        self.assertEqual(f["bad_errors"], {"failed_precondition": 1})
        self.assertEqual(f["bad_ops"][0]["kind"], "send")

    def test_failover_codes_are_not_failures_and_a_lost_send_is(self):
        f = self.check([
            send(0, 1),
            Op("send", "producer1", 0, end=0.2, ok=False,
               code="outcome_unknown", payload="p2"),
        ])
        self.assertEqual(f["bad_errors"], {})
        self.assertEqual(f["lost"], ["p1"])


if __name__ == "__main__":
    unittest.main()
