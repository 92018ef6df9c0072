// Helpers for an application's tests: run the ready jobs of a queue
// through their handlers, with no worker loop.
//
//   import { runInline } from "sqlq/testing";
//   await signup(client, "ada@example.com");     // sends an email.send job
//   const done = await runInline(client, "emails", { "email.send": sendEmail });
//   assert.deepEqual(done.map((r) => [r.message.kind, r.outcome]), [["email.send", "acked"]]);

import { Worker } from "./src/worker.js";

// Claims every ready message of the queue(s) and runs each once through
// `handlers` (one function for every message, or {kind: handler, "*": ...}
// as a Worker's), as a Worker would settle it: [{message, queue, outcome,
// error}] in the order run. `options` are a Worker's (timeoutMs,
// unknownKind, ...); it logs nothing and reports no live worker unless
// they say otherwise.
export async function runInline(client, queue, handlers, options = {}) {
  const opts = { logger: null, report: false, installSignalHandlers: false, ...options };
  const worker = typeof handlers === "function"
    ? new Worker(client, queue, handlers, opts)
    : new Worker(client, queue, { ...opts, handlers });
  return worker.drainInline();
}
