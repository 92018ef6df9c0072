"""A worker process for the tests: python3 worker_proc.py URL TOKEN QUEUE
DIR SHUTDOWN_TIMEOUT LEASE_MS [sync|aio] [REPORT_TTL]. Its handler appends
"started ID" to DIR/started, then waits until DIR/go exists (for ever when
it never does), then appends "done ID" to DIR/done. "aio" runs sqlq.aio's worker
with a coroutine handler instead of sqlq's; REPORT_TTL (seconds) is the
worker's report_ttl."""
from __future__ import annotations

import asyncio
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sqlq  # noqa: E402
from sqlq import aio  # noqa: E402


def main() -> None:
    url, token, queue, d, timeout, lease_ms = sys.argv[1:7]
    flavour = sys.argv[7] if len(sys.argv) > 7 else "sync"
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(levelname)s %(message)s")

    def handle(m: sqlq.Message) -> None:
        with open(os.path.join(d, "started"), "a") as f:
            f.write(f"started {m.id}\n")
        while not os.path.exists(os.path.join(d, "go")):
            time.sleep(0.01)
        with open(os.path.join(d, "done"), "a") as f:
            f.write(f"done {m.id}\n")

    async def handle_async(m: sqlq.Message) -> None:
        with open(os.path.join(d, "started"), "a") as f:
            f.write(f"started {m.id}\n")
        while not os.path.exists(os.path.join(d, "go")):
            await asyncio.sleep(0.01)
        with open(os.path.join(d, "done"), "a") as f:
            f.write(f"done {m.id}\n")

    opts = dict(concurrency=1, wait_ms=5000, lease_ms=int(lease_ms),
                shutdown_timeout=float(timeout))
    if len(sys.argv) > 8:
        opts["report_ttl"] = float(sys.argv[8])
    if flavour == "aio":
        async def run() -> None:
            async with aio.Client(url, token=token) as c:
                await aio.Worker(c, queue, handle_async, **opts).run()
        asyncio.run(run())
    else:
        sqlq.Worker(sqlq.Client(url, token=token), queue, handle,
                    **opts).run()


if __name__ == "__main__":
    main()
