"""A worker of the history check (history.py) as a separate machine runs
one: started on a worker node of the lab (scripts/ha-lab.sh exec DIR w1 --
...), it consumes the queue until SIGTERM and writes every call it made,
one JSON object per line, for the check to merge into its history.

  worker.py python HTTP_URL TOKEN QUEUE LEASE_MS OUT NAME
      the Python client's worker runtime (sqlq.Worker) through sqlq serve;
      it records each message its handler gets (its acks are its own)
  worker.py cli SQLQ_BIN DB_URL QUEUE LEASE_MS OUT NAME
      the command-line program on the database itself: `sqlq claim`, then
      `sqlq ack` of what it got; it records both
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import history  # noqa: E402
import sqlq  # noqa: E402

# The command-line program's exit codes (docs/cli.md) as the error codes
# the history knows.
CLI_CODES = {8: "unavailable", 9: "outcome_unknown", 5: "stale_receipt",
             3: "not_found", 7: "permission_denied", 1: "internal"}


class Log:
    def __init__(self, path: str) -> None:
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, op: history.Op) -> None:
        with self.lock:
            self.f.write(json.dumps(dataclasses.asdict(op)) + "\n")


def run_python(url: str, token: str, queue: str, lease_ms: int, log: Log,
               name: str) -> None:
    def handler(m: sqlq.Message) -> None:
        now = time.monotonic()
        exp = history.server_time(m.lease_expires_at)
        op = history.Op("claim", name, now, end=now, ok=True)
        op.claimed.append((m.id, m.payload, m.receipt, exp,
                           exp - lease_ms / 1000))
        log.write(op)

    client = sqlq.Client(url, token=token)
    w = sqlq.Worker(client, queue, handler, concurrency=2, wait_ms=1000,
                    lease_ms=lease_ms, name=name, max_backoff=1.0)
    w.run()  # until SIGTERM


def run_cli(binary: str, db: str, queue: str, lease_ms: int, log: Log,
            name: str) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def call(op: history.Op, args: list[str]) -> str:
        p = subprocess.run([binary, "--db", db, "--json", *args],
                           capture_output=True, text=True)
        op.end = time.monotonic()
        op.ok = p.returncode == 0
        if not op.ok:
            op.code = CLI_CODES.get(p.returncode, f"exit {p.returncode}")
            print(f"{name}: {args[0]}: {p.stderr.strip()}", file=sys.stderr)
        return p.stdout

    while not stop.is_set():
        op = history.Op("claim", name, time.monotonic(), wait=1.0)
        out = call(op, ["claim", queue, "--max", "5", "--wait", "1s",
                        "--lease", f"{lease_ms}ms", "--worker", name])
        got = [json.loads(line) for line in out.splitlines() if line]
        for m in got:
            exp = history.server_time(m["lease_expires_at"])
            op.claimed.append((m["id"], m["payload"], m["receipt"], exp,
                               exp - lease_ms / 1000))
        log.write(op)
        for m in got:
            a = history.Op("ack", name, time.monotonic(), msg_id=m["id"],
                           receipt=m["receipt"])
            call(a, ["ack", queue, m["receipt"]])
            log.write(a)


def main() -> None:
    mode, a, b, queue, lease_ms, out, name = sys.argv[1:8]
    log = Log(out)
    if mode == "python":
        run_python(a, b, queue, int(lease_ms), log, name)
    elif mode == "cli":
        run_cli(a, b, queue, int(lease_ms), log, name)
    else:
        sys.exit(f"worker.py: unknown mode {mode!r} (python or cli)")


if __name__ == "__main__":
    main()
