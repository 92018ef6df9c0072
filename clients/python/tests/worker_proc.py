"""A worker process for the tests: python3 worker_proc.py URL TOKEN QUEUE
DIR SHUTDOWN_TIMEOUT LEASE_MS. Its handler appends "started ID" to
DIR/started, then waits until DIR/go exists (for ever when it never does),
then appends "done ID" to DIR/done."""
from __future__ import annotations

import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sqlq  # noqa: E402


def main() -> None:
    url, token, queue, d, timeout, lease_ms = sys.argv[1:7]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(levelname)s %(message)s")

    def handle(m: sqlq.Message) -> None:
        with open(os.path.join(d, "started"), "a") as f:
            f.write(f"started {m.id}\n")
        while not os.path.exists(os.path.join(d, "go")):
            time.sleep(0.01)
        with open(os.path.join(d, "done"), "a") as f:
            f.write(f"done {m.id}\n")

    w = sqlq.Worker(sqlq.Client(url, token=token), queue, handle,
                    concurrency=1, wait_ms=5000, lease_ms=int(lease_ms),
                    shutdown_timeout=float(timeout))
    w.run()


if __name__ == "__main__":
    main()
