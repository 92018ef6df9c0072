// The trace scenario every flavour of the Node.js client passes, given its
// Client and Worker: the caller's traceparent reaches the handler, what the
// handler sends carries it on (a traceparent of the handler's own stays),
// and the trace ends with its handler. tracing.test.mjs runs it in its own
// process and, without OpenTelemetry, in a child process on a copy of the
// package.

import assert from "node:assert/strict";
import { waitFor } from "./server.mjs";

export const TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
export const TS = "vendor=opaque";
export const OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

// Handles `n` messages of `queue` with `handler`, then stops.
export async function handleAll(Worker, c, queue, n, handler) {
  let handled = 0;
  const w = new Worker(c, queue, async (msg) => {
    try {
      return await handler(msg);
    } finally {
      handled++;
    }
  }, { waitMs: 500, logger: null });
  const run = w.run();
  await waitFor(`${n} handled`, () => handled === n && w.stats.acked + w.stats.nacked === n);
  await w.stop();
  await run;
}

export async function carriedScenario({ Worker }, c, prefix) {
  const [qin, qout] = [c.queue(prefix + "in"), c.queue(prefix + "out")];
  await qin.create();
  await qout.create();
  await qout.send("plain");
  await qin.send("traced", { headers: { traceparent: TP, tracestate: TS, tenant: "acme" } });
  await qin.send("untraced");
  await qin.send("malformed", { headers: { traceparent: "00-xyz-01" } });
  const seen = [];
  await handleAll(Worker, c, prefix + "in", 3, async (msg) => {
    seen.push(msg.headers ?? {});
    await qout.send(msg.payload);
    if (msg.payload === "traced") await qout.send("own", { headers: { traceparent: OTHER } });
  });
  assert.deepEqual(seen[0], { traceparent: TP, tracestate: TS, tenant: "acme" });
  const out = Object.fromEntries((await qout.claim({ max: 10 })).map((m) => [m.payload, m.headers ?? {}]));
  assert.deepEqual(out, {
    plain: {},                                    // sent outside any trace
    traced: { traceparent: TP, tracestate: TS },  // carried on
    own: { traceparent: OTHER },                  // the handler's own
    untraced: {},                                 // the trace ended with its handler
    malformed: {},                                // nothing to carry
  });
}
