// Dependencies and workflows against a real `sqlq serve`: send with
// dependsOn and ifDependencyDies, sendBatch with dependsOnBatch, sendAll
// over several queues (all or nothing), and chain, group, chord and
// Workflow run by real workers: in order, a callback once after its
// members, a dead member cancelling it (or not, with "run"), a DAG over
// two queues, and message.parentResults().

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  Client, Worker, NotFound, JobFailed, Permanent, Workflow, chain, group, chord, cancelWorkflow,
  retryWorkflow,
} from "../index.js";
import { useServer, client, waitFor } from "./server.mjs";

useServer((url) => new Client(url));

// A worker on `queues` running `handler`, stopped after the test.
function start(t, queues, handler, options = {}) {
  const w = new Worker(client, queues, handler, { waitMs: 500, logger: null,
                                                  installSignalHandlers: false, ...options });
  const done = w.run();
  t.after(async () => { await w.stop(); await done; });
  return w;
}

async function make(names, options = {}) {
  for (const n of names) await client.queue(n).create(options);
}

// What the handlers ran, in order.
function recorder() {
  const ran = [];
  return { ran, note: (m) => { ran.push({ queue: m.queue.name, payload: m.payload, id: m.id }); } };
}

test("send with dependsOn waits; sendBatch with dependsOnBatch; the ack releases", async () => {
  await make(["da", "db"]);
  const a = client.queue("da");
  const b = client.queue("db");
  const first = await a.send("first");
  const then = await b.send("then", { dependsOn: [first], ifDependencyDies: "run" });
  const got = await b.message(then);
  assert.deepEqual([got.state, got.waitsFor], ["waiting", [first]]);
  assert.equal((await b.stats()).stats.waiting, 1);
  const batch = await a.sendBatch([{ payload: "x" }, { payload: "y", dependsOnBatch: [0] }]);
  assert.deepEqual((await a.message(batch.ids[1])).waitsFor, [batch.ids[0]]);
  const [m] = await a.claim({ max: 1 });
  assert.equal(m.id, first);
  await m.ack();
  assert.equal((await b.message(then)).state, "ready");
});

test("sendAll stores every message or none", async () => {
  await make(["sa", "sb"]);
  const r = await client.sendAll([{ queue: "sa", payload: 1 },
                                  { queue: "sb", payload: { n: 2 }, dependsOnBatch: [0], kind: "two" }]);
  assert.equal(r.ids.length, 2);
  const got = await client.queue("sb").message(r.ids[1]);
  assert.deepEqual([got.state, got.waitsFor, got.payload], ["waiting", [r.ids[0]], { n: 2 }]);
  await assert.rejects(client.sendAll([{ queue: "sa", payload: 3 }, { queue: "missing", payload: 4 }]),
                       NotFound);
  assert.equal(await client.queue("sa").count(), 1);
  await assert.rejects(client.sendAll([{ payload: 5 }]), TypeError);
});

test("a chain runs in order", async (t) => {
  await make(["fetch", "resize", "publish"]);
  const rec = recorder();
  const sent = await client.sendFlow(chain({ queue: "fetch", payload: "a.png" },
                                           { queue: "resize", payload: "a.png" },
                                           { queue: "publish", payload: "a.png" }));
  const r = await client.queue("resize").message(sent.ids[1]);
  assert.deepEqual([r.state, r.waitsFor], ["waiting", [sent.ids[0]]]);
  start(t, ["publish", "resize", "fetch"], rec.note, { concurrency: 3 });
  await waitFor("the chain", () => rec.ran.length === 3);
  assert.deepEqual(rec.ran.map((x) => x.id), sent.ids);
  assert.deepEqual(rec.ran.map((x) => x.queue), ["fetch", "resize", "publish"]);
});

test("a chord calls back once, after every member, which it can read the results of", async (t) => {
  await make(["parts", "reports"]);
  const rec = recorder();
  const sent = await client.sendFlow(chord([1, 2, 3].map((n) => ({ queue: "parts", payload: n })),
                                           { queue: "reports", payload: "sum" }));
  const members = sent.ids.slice(0, 3);
  const callback = sent.ids[3];
  assert.deepEqual([...(await client.queue("reports").message(callback)).waitsFor].sort(),
                   [...members].sort());
  const seen = [];
  start(t, ["reports", "parts"], async (m) => {
    rec.note(m);
    if (m.queue.name === "parts") return m.payload * 10;
    // Sent with its members, it names them and reads their results.
    seen.push([m.parents, await m.parentResults()]);
    return "done";
  }, { concurrency: 3 });
  assert.equal((await client.result("reports", callback, { timeoutMs: 20000 })).result, "done");
  assert.deepEqual(seen, [[members.map((id) => ({ queue: "parts", id })),
                           new Map(members.map((id, i) => [id, (i + 1) * 10]))]]);
  assert.equal(rec.ran.at(-1).id, callback);
  assert.equal((await client.queue("reports").stats()).stats.acks, 1);
});

test("parentResults() reads the results of the parents named by queue and id", async (t) => {
  await make(["pparts", "preports"]);
  const got = [];
  const r = await client.sendAll([1, 2, 3].map((n) => ({ queue: "pparts", payload: n })));
  start(t, ["preports", "pparts"], async (m) => {
    if (m.queue.name === "pparts") return m.payload === 3 ? undefined : { n: m.payload };
    got.push([m.parents, await m.parentResults()]);
  });
  const w = new Workflow();
  w.add({ queue: "preports", payload: "sum" }, { after: r.ids.map((id) => ({ queue: "pparts", id })) });
  const cb = (await w.send(client)).ids[0];
  assert.equal((await client.queue("preports").message(cb)).headers["sqlq-parents"],
               r.ids.map((i) => `pparts:${i}`).join(","));
  await waitFor("the callback", () => got.length === 1);
  // The third parent resolved nothing: no result, left out.
  assert.deepEqual(got[0], [r.ids.map((id) => ({ queue: "pparts", id })),
                            new Map([[r.ids[0], { n: 1 }], [r.ids[1], { n: 2 }]])]);
});

test("a dead member cancels the callback, whose error names it", async (t) => {
  await make(["cparts", "creports"], { maxAttempts: 1 });
  const rec = recorder();
  const sent = await client.sendFlow(chord([{ queue: "cparts", payload: "good" },
                                            { queue: "cparts", payload: "bad" }],
                                           { queue: "creports", payload: "sum" }));
  start(t, ["cparts", "creports"], (m) => {
    rec.note(m);
    if (m.payload === "bad") throw new Permanent("bad part");
  });
  await assert.rejects(client.result("creports", sent.ids[2], { timeoutMs: 20000 }), (e) => {
    assert.ok(e instanceof JobFailed);
    assert.equal(e.error, `cancelled: message ${sent.ids[1]}, which it depends on, died`);
    return true;
  });
  assert.ok(!rec.ran.some((x) => x.queue === "creports"));
});

test('ifDependencyDies "run" runs the callback anyway', async (t) => {
  await make(["rparts", "rreports"], { maxAttempts: 1 });
  const sent = await client.sendFlow(chord([{ queue: "rparts", payload: "bad" },
                                            { queue: "rparts", payload: "good" }],
                                           { queue: "rreports", payload: "sum", ifDependencyDies: "run" }));
  start(t, ["rparts", "rreports"], (m) => {
    if (m.payload === "bad") throw new Permanent("bad part");
    return "ran";
  });
  assert.equal((await client.result("rreports", sent.ids[2], { timeoutMs: 20000 })).result, "ran");
  await assert.rejects(client.result("rparts", sent.ids[0], { timeoutMs: 0 }), JobFailed);
});

test("a DAG of four layers over two queues completes, each job after its parents", async (t) => {
  await make(["ga", "gb"]);
  const rec = recorder();
  const w = new Workflow();
  const roots = [0, 1].map((i) => w.add({ queue: "ga", payload: `root${i}` }));
  const mids = [0, 1, 2].map((i) => w.add({ queue: "gb", payload: `mid${i}` }, { after: roots }));
  const pair = [0, 1].map((i) => w.add({ queue: "ga", payload: `pair${i}` }, { after: mids.slice(i, i + 2) }));
  const last = w.add({ queue: "gb", payload: "last", kind: "end" }, { after: [...pair, roots[0]] });
  assert.equal(w.length, 8);
  const sent = await w.send(client);
  start(t, ["ga", "gb"], rec.note, { concurrency: 4 });
  await waitFor("the DAG", () => rec.ran.length === 8);
  const order = new Map(rec.ran.map((x, n) => [x.id, n]));
  w.steps.forEach((s, child) => {
    for (const p of w._in[child]) assert.ok(order.get(sent.ids[p]) < order.get(sent.ids[child]), `${p} → ${child}`);
  });
  assert.equal(rec.ran.at(-1).id, sent.ids[last.index]);
});

test("a workflow is found and cancelled by its id, the waiting jobs first", async () => {
  await make(["wa", "wb"]);
  const w = chord([{ queue: "wa", payload: 1 }, { queue: "wb", payload: 2 }],
                  { queue: "wb", payload: "sum", ifDependencyDies: "run" });
  const other = chain({ queue: "wa", payload: "other" }, { queue: "wb", payload: "other" });
  const sent = await w.send(client);
  const kept = await other.send(client);
  assert.deepEqual(w.queues(), ["wa", "wb"]);
  const found = await w.find(client);
  assert.deepEqual(found.map((m) => m.id).sort(), [...sent.ids].sort());
  assert.ok(found.every((m) => m.headers["sqlq-workflow"] === w.id));
  assert.equal(await cancelWorkflow(client, w.id, ["wa", "wb"]), 3);
  assert.deepEqual(await w.find(client), []);
  // The callback that would run when a member dies was cancelled before
  // its members: a dead letter, never ready.
  await assert.rejects(client.result("wb", sent.ids[2], { timeoutMs: 0 }),
                       (e) => e instanceof JobFailed && e.error.startsWith("cancelled"));
  assert.deepEqual((await other.find(client)).map((m) => m.id).sort(), [...kept.ids].sort());
  // Retried, it is back as it was sent: the members ready, the callback
  // waiting for both (its policy, "run", kept).
  assert.equal(await retryWorkflow(client, w.id, w.queues()), 3);
  const back = new Map((await w.find(client)).map((m) => [m.id, m]));
  assert.equal(back.size, 3);
  assert.equal(back.get(sent.ids[0]).state, "ready");
  assert.equal(back.get(sent.ids[1]).state, "ready");
  assert.equal(back.get(sent.ids[2]).state, "waiting");
  assert.deepEqual([...(await client.queue("wb").message(sent.ids[2])).waitsFor].sort(),
                   [sent.ids[0], sent.ids[1]].sort());
  assert.equal(await w.cancel(client), 3);
  // A chain across the queues, its last one set to run: every one
  // cancelled, the last first.
  const deep = chain({ queue: "wb", payload: 1 }, { queue: "wa", payload: 2 },
                     { queue: "wb", payload: 3, ifDependencyDies: "run" });
  const deepIds = (await deep.send(client)).ids;
  assert.equal(await deep.cancel(client), 3);
  for (const [i, q] of ["wb", "wa", "wb"].entries()) {
    assert.equal((await client.queue(q).message(deepIds[i])).state, "dead");
  }
});

test("a failed workflow is retried where it failed; what completed is not run again", async (t) => {
  await make(["fa", "fb"], { maxAttempts: 1 });
  const rec = recorder();
  let broken = true;
  const w = chain({ queue: "fa", payload: "ok" }, { queue: "fb", payload: "flaky" },
                  { queue: "fa", payload: "sum" }, { queue: "fb", payload: "last" });
  const sent = await w.send(client);
  start(t, ["fa", "fb"], (m) => {
    rec.note(m);
    if (m.payload === "flaky" && broken) throw new Permanent("not yet");
    return m.payload;
  });
  await assert.rejects(client.result("fb", sent.ids[3], { timeoutMs: 20000 }),
                       (e) => e instanceof JobFailed && e.error.startsWith("cancelled: message"));
  broken = false;
  assert.equal(await w.retry(client), 3);
  assert.equal((await client.result("fb", sent.ids[3], { timeoutMs: 20000 })).result, "last");
  assert.deepEqual(rec.ran.map((x) => x.payload), ["ok", "flaky", "flaky", "sum", "last"]);
  assert.equal(await w.retry(client), 0);
});

test("workflows compose; a parent of another workflow is refused", () => {
  const w = chain({ queue: "a", payload: 0 },
                  group({ queue: "b", payload: 1 }, chain({ queue: "b", payload: 2 }, { queue: "b", payload: 3 })),
                  { queue: "a", payload: 4 });
  assert.deepEqual(w.messages().map((m) => m.dependsOnBatch), [undefined, [0], [0], [2], [1, 3]]);
  const other = new Workflow();
  const s = other.add({ queue: "a", payload: 1 });
  assert.throws(() => new Workflow().add({ queue: "a", payload: 2 }, { after: [s] }));
  assert.throws(() => new Workflow().add({ queue: "a", payload: 2, dependsOnBatch: [0] }), TypeError);
  assert.throws(() => new Workflow().add({ payload: 2 }), TypeError);
});
