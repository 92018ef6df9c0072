// A worker in its own process, for the tests that kill or stop one.
// argv: URL QUEUE MODE. It tells the test on IPC what it does:
// {ready} once claiming, {started: id} when a handler begins, {done: id}
// when one finished, then {exited} from run()'s end.
// MODE "hang": handlers finish only when their signal is aborted;
// "stuck": never; "slow": they finish when the test sends {finish: id};
// "throw": they throw; otherwise they return at once. SQLQ_TEST_TIMEOUT_MS
// sets the worker's timeoutMs.
// With SQLQ_TEST_LOGGER=default the worker logs as it does when given no
// logger (on stderr), else not at all.

import { Client, Worker } from "../index.js";

const [url, queue, mode, concurrency = "2", shutdownMs = "10000"] = process.argv.slice(2);
const client = new Client(url);
const finishers = new Map();
process.on("message", (m) => {
  if (m.finish !== undefined) finishers.get(m.finish)?.();
});

const worker = new Worker(client, queue, async (msg) => {
  process.send({ started: msg.id, receipt: msg.receipt, attempt: msg.attempt });
  if (mode === "hang") {
    await new Promise((resolve) => msg.signal.addEventListener("abort", resolve));
  } else if (mode === "stuck") {
    await new Promise(() => {});  // deaf to its signal
  } else if (mode === "slow") {
    await new Promise((resolve) => finishers.set(msg.id, resolve));
  } else if (mode === "throw") {
    process.send({ done: msg.id });
    throw new RangeError(`no route to ${msg.payload}`);
  }
  process.send({ done: msg.id });
}, { concurrency: Number(concurrency), waitMs: 2000, shutdownTimeoutMs: Number(shutdownMs),
     timeoutMs: process.env.SQLQ_TEST_TIMEOUT_MS ? Number(process.env.SQLQ_TEST_TIMEOUT_MS) : null,
     ...(process.env.SQLQ_TEST_LOGGER === "default" ? { name: "w1" } : { logger: null }) });

const done = worker.run();
// After the worker's own handler, which has stopped the claims by then.
process.on("SIGTERM", () => process.send({ stopping: true }));
process.send({ ready: true });
await done;
process.send({ exited: true, stats: worker.stats });
client.close();
process.disconnect();
