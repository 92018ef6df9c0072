// Job results and progress against a real `sqlq serve`: a handler's
// return kept as its job's result and awaited by the sender
// (client.result), a dead job's error as a JobFailed rejection, a result
// that cannot be kept failing the attempt, progress read while the handler
// runs, the wait outliving a server restart, and its timeout.

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  Client, Worker, BadRequest, NotFound, JobFailed, ResultTimeout, SqlqError, Permanent,
} from "../index.js";
import { runInline } from "../testing.js";
import { useServer, startServer, client, waitFor, captureLogger } from "./server.mjs";

useServer((url) => new Client(url));

// A worker on `queue` running `handler`, stopped after the test.
function start(t, c, queue, handler, options = {}) {
  const w = new Worker(c, queue, handler, { waitMs: 500, logger: null,
                                            installSignalHandlers: false, ...options });
  const done = w.run();
  t.after(async () => { await w.stop(); await done; });
  return w;
}

test("request/reply: the handler's return is what the sender's result() resolves with", async (t) => {
  const q = client.queue("adds");
  await q.create();
  start(t, client, "adds", (msg) => {
    if (msg.kind !== "add") return msg.payload.v;
    return { sum: msg.payload.a + msg.payload.b, by: ["w1", null, 1.5, true], text: "déjà vu" };
  });
  const id = await q.send({ a: 2, b: 40 }, { kind: "add" });
  const info = await client.result("adds", id, { timeoutMs: 20000 });
  assert.deepEqual(info.result, { sum: 42, by: ["w1", null, 1.5, true], text: "déjà vu" });
  assert.deepEqual([info.id, info.state], [id, "completed"]);
  assert.match(info.completedAt, /Z$/);
  // Asked again, and of the queue: the same, at once.
  assert.equal((await q.result(id, { timeoutMs: 0 })).result.sum, 42);
  // Every JSON value is a result, a falsy one and null too; keys are kept
  // as the handler wrote them.
  const values = ["text", 7, [1, [2]], false, 0, "", null, { snake_case: { camelCase: 1 } }];
  const ids = [];
  for (const v of values) ids.push(await q.send({ v }));
  const got = [];
  for (const i of ids) got.push((await client.result("adds", i, { timeoutMs: 20000 })).result);
  assert.deepEqual(got, values);
});

test("a handler resolving undefined keeps no result: result() is NotFound", async (t) => {
  const q = client.queue("plain");
  await q.create();
  const id = await q.send("x");
  const w = start(t, client, "plain", async () => {});
  await waitFor("the ack", () => w.stats.acked === 1);
  await assert.rejects(client.result("plain", id, { timeoutMs: 0 }), NotFound);
  await assert.rejects(client.result("plain", 123456, { timeoutMs: 0 }), NotFound);
});

test("a dead job: result() rejects with JobFailed carrying its id, error and attempts", async (t) => {
  const q = client.queue("charges");
  await q.create({ maxAttempts: 2, backoffBaseMs: 0, backoffMaxMs: 0 });
  const declined = await q.send({ card: "4000" });
  const flaky = await q.send({ card: "flaky" });
  start(t, client, "charges", (msg) => {
    if (msg.payload.card === "4000") throw new Permanent("card declined");
    throw new Error(`gateway down on attempt ${msg.attempt}`);
  });
  await assert.rejects(client.result("charges", declined, { timeoutMs: 20000 }), (e) => {
    assert.ok(e instanceof JobFailed && e instanceof SqlqError);
    assert.deepEqual([e.id, e.error, e.attempts, e.code], [declined, "card declined", 1,
                                                           "job_failed"]);
    assert.match(e.message, /card declined/);
    return true;
  });
  await assert.rejects(client.result("charges", flaky, { timeoutMs: 20000 }), (e) => {
    assert.deepEqual([e.id, e.attempts], [flaky, 2]);
    assert.match(e.error, /^Error: gateway down on attempt 2\n/);
    return true;
  });
});

test("a result that cannot be kept fails the attempt with the reason", async (t) => {
  const q = client.queue("odd");
  await q.create({ maxAttempts: 1 });
  const [big, cyclic, fn] = (await q.sendBatch([{ payload: "big" }, { payload: "cyclic" },
                                                 { payload: "fn" }])).ids;
  const loop = {};
  loop.self = loop;
  const results = { big: "x".repeat(1 << 20), cyclic: loop, fn: () => 1 };
  const { lines, logger } = captureLogger();
  const w = start(t, client, "odd", (msg) => results[msg.payload], { logger, name: "w1" });
  await waitFor("three failed attempts", () => w.stats.nacked === 3);
  const error = async (id) => {
    try {
      await client.result("odd", id, { timeoutMs: 0 });
    } catch (e) {
      assert.ok(e instanceof JobFailed, String(e));
      return e.error;
    }
    assert.fail("not a JobFailed");
  };
  assert.match(await error(big),
               /^result refused by the server: 413 too_large: a result of 1048578 bytes/);
  assert.match(await error(cyclic), /^result is not JSON: TypeError: /);
  assert.equal(await error(fn), "result is not JSON: a function");
  assert.ok(lines.some((l) => l.msg === `sqlq worker w1: message ${fn} of odd failed on attempt 1, ` +
                              "now a dead letter: result is not JSON: a function"),
            lines.map((l) => l.msg).join("\n"));
  assert.equal(w.stats.acked, 0);
});

test("progress recorded by a handler is read while it runs", async (t) => {
  const q = client.queue("reports");
  await q.create();
  const id = await q.send("r");
  let recorded, finish;
  const wasRecorded = new Promise((r) => { recorded = r; });
  const finished = new Promise((r) => { finish = r; });
  t.after(() => finish());
  start(t, client, "reports", async (msg) => {
    await msg.progress(10);
    await msg.progress(37.5, { step: "rendering", page_no: 3 });
    recorded();
    await finished;
    return "report.pdf";
  });
  await wasRecorded;
  const info = await q.resultInfo(id);
  assert.deepEqual([info.state, info.progress, info.note], ["leased", 37.5,
                                                            { step: "rendering", page_no: 3 }]);
  assert.ok(!("result" in info));
  assert.match(info.progressAt, /Z$/);
  finish();
  const done = await client.result("reports", id, { timeoutMs: 20000 });
  assert.deepEqual([done.result, done.progress], ["report.pdf", 37.5]);
});

test("progress: a finite number, of a message still leased", async () => {
  const q = client.queue("p");
  await q.create();
  await q.send("x");
  const [m] = await q.claim();
  for (const bad of [NaN, Infinity, "50%", undefined]) {
    await assert.rejects(m.progress(bad), TypeError);
  }
  await m.ack();
  await assert.rejects(m.progress(50), NotFound);
});

test("ack with a result by hand; one too large is refused and nothing acked", async () => {
  const q = client.queue("manual");
  await q.create();
  const i = await q.send("x");
  const [m] = await q.claim();
  await m.ack({ result: null, resultTtlMs: 60000 });
  const info = await q.resultInfo(i);
  assert.deepEqual([info.state, info.result], ["completed", null]);
  const j = await q.send("y");
  const [n] = await q.claim();
  await assert.rejects(n.ack({ result: "x".repeat(1 << 20) }),
                       (e) => e instanceof BadRequest && e.status === 413);
  assert.equal((await q.message(j)).state, "leased");
  await n.ack({ result: { ok: true } });
  assert.deepEqual((await client.result("manual", j)).result, { ok: true });
});

test("result() times out with ResultTimeout when no worker runs", async () => {
  const q = client.queue("idle");
  await q.create();
  const id = await q.send("x");
  const t0 = Date.now();
  await assert.rejects(client.result("idle", id, { timeoutMs: 500 }), (e) => {
    assert.ok(e instanceof ResultTimeout, String(e));
    assert.deepEqual([e.id, e.code, e.info.state], [id, "result_timeout", "ready"]);
    return true;
  });
  // Held by the server for the whole wait, not asked in a loop.
  const took = Date.now() - t0;
  assert.ok(took >= 500 && took < 10000, `took ${took} ms`);
});

test("result() survives a server restart", async (t) => {
  const s1 = await startServer();
  let s2;
  t.after(async () => { await s1.kill(); await s2?.stop(); });
  const { lines, logger } = captureLogger();
  const c = new Client(s1.url, { logger });
  t.after(() => c.close());
  const q = c.queue("restart");
  await q.create();
  const id = await q.send(21);
  const waiting = c.result("restart", id, { timeoutMs: 60000 });
  await s1.kill();
  // The sender asked while the server was down, and goes on.
  await waitFor("a failed ask", () =>
    lines.some((l) => l.msg.startsWith(`sqlq: waiting for the result of job ${id}: `)));
  s2 = await s1.restart();  // the same port and database
  start(t, c, "restart", (msg) => msg.payload * 2);
  assert.equal((await waiting).result, 42);
});

test("drainInline and runInline record each handler's result", async () => {
  const q = client.queue("inline");
  await q.create({ maxAttempts: 1 });
  const [a, b, c] = (await q.sendBatch([{ payload: { n: 1 } }, { payload: { n: 0 } },
                                        { payload: { n: -1 } }])).ids;
  const done = await runInline(client, "inline", async (msg) => {
    await msg.progress(50, "half");
    if (msg.payload.n < 0) throw new Permanent("negative");
    return msg.payload.n * 10 || undefined;
  });
  assert.deepEqual(done.map((r) => [r.message.id, r.outcome, r.result]),
                   [[a, "acked", 10], [b, "acked", undefined], [c, "dead", undefined]]);
  const info = await client.result("inline", a, { timeoutMs: 0 });
  assert.deepEqual([info.result, info.progress, info.note], [10, 50, "half"]);
});
