// Jobs against a real `sqlq serve`: kinds on messages, handlers per kind
// over several queues, the handlers' outcomes (Snooze, RetryAfter,
// Permanent, Cancel), timeouts, a job's own limits set at send, live
// workers' reports. Each test asserts what the server then shows of the
// message: its attempts, its dead letter, its errors.

import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import {
  Client, Worker, BadRequest, NotFound, Snooze, RetryAfter, Permanent, Cancel,
} from "../index.js";
import { runInline } from "../testing.js";
import { useServer, server, client, waitFor, captureLogger } from "./server.mjs";

useServer((url) => new Client(url));

test("kind: sent alone and in batches, on claims, listings, dead letters, the archive", async () => {
  const q = client.queue("kinds");
  await q.create({ archive: true, maxAttempts: 1 });
  const a = await q.send({ to: "ada" }, { kind: "email.send" });
  const { ids: [b, c, d] } = await q.sendBatch([
    { payload: "inv-1", kind: "billing/invoice" },
    { payload: "plain" },
    { payload: "empty", kind: "" },
  ]);
  assert.equal((await q.message(a)).kind, "email.send");
  assert.equal((await q.message(c)).kind, undefined);
  assert.equal((await q.message(d)).kind, undefined, "an empty kind is no kind");
  assert.equal(await q.count({ kind: "email.send" }), 1);
  assert.deepEqual((await q.messages({ kind: "billing/invoice" })).messages.map((m) => m.id), [b]);
  await assert.rejects(q.send("x", { kind: "no spaces" }), (e) => e instanceof BadRequest &&
                       e.code === "invalid_argument");
  assert.equal(await q.count(), 4, "nothing stored of the refused send");

  const got = await q.claim({ max: 10 });
  const byId = new Map(got.map((m) => [m.id, m]));
  assert.deepEqual([byId.get(a).kind, byId.get(b).kind, byId.get(c).kind],
                   ["email.send", "billing/invoice", undefined]);
  assert.ok(!("kind" in byId.get(c)), "no kind: the field is absent");
  await byId.get(a).ack();
  await byId.get(b).nack({ error: "smtp 451" });
  const dead = await q.dead();
  assert.deepEqual(dead.map((x) => [x.id, x.kind]), [[b, "billing/invoice"]]);
  const archived = await q.archive();
  assert.deepEqual(archived.map((x) => [x.id, x.kind]), [[a, "email.send"]]);
});

test("a job's own limits: sent alone, in batches, by schedules; on claims and on the message", async () => {
  const q = client.queue("limits");
  await q.create();
  const a = await q.send("a", { timeoutMs: 5000, expireAfterMs: 3600000 });
  const { ids: [b, c] } = await q.sendBatch([{ payload: "b", timeoutMs: 7000 }, { payload: "c" }]);
  const info = await q.message(a);
  assert.deepEqual([info.timeoutMs, info.expireAfterMs], [5000, 3600000]);
  assert.equal(Date.parse(info.expiresAt) - Date.parse(info.enqueuedAt), 3600000);
  const none = await q.message(c);
  assert.deepEqual([none.timeoutMs, none.expireAfterMs, none.expiresAt],
                   [undefined, undefined, undefined]);
  const got = new Map((await q.claim({ max: 3, leaseMs: 60000 })).map((m) => [m.id, m]));
  assert.deepEqual([a, b, c].map((id) => [got.get(id).timeoutMs, got.get(id).expiresAt]),
                   [[5000, info.expiresAt], [7000, undefined], [undefined, undefined]]);
  // Leased for at most its own timeout, though the claim asked for longer.
  const lease = (id) => Date.parse(got.get(id).leaseExpiresAt);
  assert.ok(lease(c) - lease(a) >= 50000, `${got.get(a).leaseExpiresAt} ${got.get(c).leaseExpiresAt}`);
  await assert.rejects(q.send("x", { timeoutMs: 0 }), BadRequest);
  await assert.rejects(q.send("x", { expireAfterMs: 1000, delayMs: 5000 }), BadRequest);
  const s = client.schedule("limits-tick");
  const made = await s.create({ cron: "0 0 1 1 *", queue: "limits", payload: "tick",
                                timeoutMs: 2000, expireAfterMs: 60000 });
  assert.deepEqual([made.timeoutMs, made.expireAfterMs], [2000, 60000]);
  await s.drop();
});

// A promise and its resolve, to wait on an event rather than a time.
function signal() {
  let fire;
  const p = new Promise((r) => { fire = r; });
  return Object.assign(p, { fire });
}

test("nack actions: dead now whatever attempts are left; snooze without spending the attempt", async () => {
  const q = client.queue("actions");
  await q.create({ maxAttempts: 5 });
  const [x, y] = (await q.sendBatch([{ payload: "x" }, { payload: "y" }])).ids;
  const got = await q.claim({ max: 2 });
  const m = new Map(got.map((g) => [g.id, g]));
  assert.equal(await m.get(x).nack({ action: "dead", error: "cancelled: user deleted" }), "dead");
  assert.equal(await q.nack(m.get(y).receipt, { action: "snooze", delayMs: 0 }), "snoozed");
  const [dead] = await q.dead();
  assert.deepEqual([dead.id, dead.attempts, dead.lastError], [x, 1, "cancelled: user deleted"]);
  const again = await q.claim();
  assert.deepEqual([again[0].id, again[0].attempt], [y, 1]);
  assert.equal((await q.message(y)).snoozes, 1);
  await assert.rejects(again[0].nack({ action: "later" }), (e) => e instanceof BadRequest);
});

test("several queues share one concurrency limit; counters by queue", async () => {
  const [a, b] = [client.queue("share-a"), client.queue("share-b")];
  await a.create();
  await b.create();
  await a.sendBatch(Array.from({ length: 6 }, (_, i) => ({ payload: `a${i}` })));
  await b.sendBatch(Array.from({ length: 6 }, (_, i) => ({ payload: `b${i}` })));
  const seen = new Map();
  let active = 0, peak = 0;
  const two = signal();
  const w = new Worker(client, {
    queues: ["share-a", b], concurrency: 2, waitMs: 1000, logger: null,
    handler: async (msg) => {
      seen.set(msg.payload, (seen.get(msg.payload) ?? 0) + 1);
      active++;
      peak = Math.max(peak, active);
      if (active === 2) two.fire();
      await two;  // the first waits for a second to run beside it
      active--;
      if (seen.size === 12) w.stop();
    },
  });
  await w.run();
  assert.equal(peak, 2);
  assert.deepEqual([...seen.keys()].sort(),
                   [...Array.from({ length: 6 }, (_, i) => `a${i}`),
                    ...Array.from({ length: 6 }, (_, i) => `b${i}`)].sort());
  assert.ok([...seen.values()].every((n) => n === 1));
  assert.deepEqual(w.queues, ["share-a", "share-b"]);
  assert.equal(w.stats.acked, 12);
  assert.equal(w.stats.queues["share-a"].acked, 6);
  assert.equal(w.stats.queues["share-b"].acked, 6);
  // Each claimed message was handled: none waited out a lease.
  for (const q of [a, b]) {
    const st = (await q.stats()).stats;
    assert.deepEqual([st.acks, st.expirations, st.ready, st.leased], [6, 0, 0, 0]);
  }
});

test("several queues: none waits out another's long poll of an empty queue", async () => {
  const [a, b] = [client.queue("poll-a"), client.queue("poll-b")];
  await a.create();
  await b.create();
  const { lines, logger } = captureLogger();
  const waitMs = 20000;
  let active = 0, peak = 0;
  const two = signal();
  const w = new Worker(client, ["poll-a", "poll-b"], async () => {
    active++;
    peak = Math.max(peak, active);
    if (active === 2) two.fire();
    await two;
    active--;
  }, { concurrency: 2, waitMs, name: "w1", logger });
  const run = w.run();
  await waitFor("the start", () => lines.length === 1);
  assert.equal(lines[0].msg, "sqlq worker w1: started on queues poll-a, poll-b " +
                             "(concurrency 2, lease 30000 ms)");
  // Both loops wait in long polls, one slot each. Two messages on one
  // queue: both slots go to it well before the other's poll would end.
  const sentAt = Date.now();
  await a.sendBatch([{ payload: 1 }, { payload: 2 }]);
  await two;
  assert.ok(Date.now() - sentAt < waitMs / 2, `both ran after ${Date.now() - sentAt} ms`);
  await waitFor("the acks", () => w.stats.acked === 2);
  // With one slot for two queues, a message on either is taken soon.
  await w.stop();
  await run;
  assert.equal(peak, 2);

  const one = new Worker(client, ["poll-a", "poll-b"], async () => {}, {
    concurrency: 1, waitMs, logger: null,
  });
  const run1 = one.run();
  for (const q of [b, a, b]) {
    const t0 = Date.now();
    const acked = one.stats.acked;
    await q.send("x");
    await waitFor("the ack", () => one.stats.acked === acked + 1);
    assert.ok(Date.now() - t0 < waitMs / 2, `acked after ${Date.now() - t0} ms`);
  }
  await one.stop();
  await run1;
});

test("timeout: a hung handler is cut off, its message redelivered once; its late return ignored", async () => {
  const q = client.queue("timeouts");
  await q.create({ backoffBaseMs: 0, backoffMaxMs: 0, archive: true });
  const id = await q.send("slow");
  const timeoutMs = 400;
  const attempts = [];
  const late = signal();
  const { lines, logger } = captureLogger();
  const w = new Worker(client, "timeouts", async (msg, { signal: aborted }) => {
    attempts.push({ attempt: msg.attempt, at: Date.now() });
    if (msg.attempt === 1) {
      // Hung: it notices the abort, yet returns only later.
      await new Promise((r) => aborted.addEventListener("abort", r));
      assert.match(String(aborted.reason?.message), /^timeout after 400 ms$/);
      setTimeout(late.fire, 300);
      await late;
    }
  }, { timeoutMs, waitMs: 500, name: "w1", logger });
  const run = w.run();
  await waitFor("the ack", async () => (await q.stats()).stats.acks === 1);
  await late;
  await waitFor("the late return's line", () => lines.some((l) => /after its timeout/.test(l.msg)));
  await w.stop();
  await run;
  assert.deepEqual(attempts.map((a) => a.attempt), [1, 2]);
  assert.ok(attempts[1].at - attempts[0].at >= timeoutMs, "not redelivered before its timeout");
  const [done] = await q.archive();
  assert.equal(done.id, id);
  assert.equal(done.attempts, 2);
  assert.deepEqual(done.errors.map((e) => [e.attempt, e.error]), [[1, "timeout after 400 ms"]]);
  const s = (await q.stats()).stats;
  assert.deepEqual([s.acks, s.nacks, s.expirations, s.ready, s.leased], [1, 1, 0, 0, 0]);
  assert.deepEqual([w.stats.acked, w.stats.nacked, w.stats.failedAcks], [1, 1, 0]);
  const text = lines.map((l) => `${l.level} ${l.msg}`);
  assert.ok(text.includes(`warn sqlq worker w1: message ${id} of timeouts failed on attempt 1, ` +
                          "retried after the queue's backoff: timeout after 400 ms"), text.join("\n"));
  assert.ok(text.includes(`warn sqlq worker w1: message ${id} of timeouts finished after its ` +
                          "timeout of 400 ms; its outcome is dropped"), text.join("\n"));
});

test("a job's own timeout: its hung handler cut off there, not at the worker's; redelivered once", async () => {
  const q = client.queue("own-timeout");
  await q.create({ backoffBaseMs: 0, backoffMaxMs: 0, archive: true });
  const id = await q.send("slow", { timeoutMs: 1000 });
  // A kind whose handler's own limit is shorter than the message's: the
  // handler's holds.
  const short = await q.send("short", { kind: "short", timeoutMs: 30000 });
  const runs = [];
  const { lines, logger } = captureLogger();
  const hangOnce = async (msg, { signal: aborted }) => {
    const run = { id: msg.id, attempt: msg.attempt, timeoutMs: msg.timeoutMs, at: Date.now() };
    runs.push(run);
    if (msg.attempt === 1) {
      // Hung until the worker tells it to stop.
      await new Promise((r) => aborted.addEventListener("abort", r));
      run.cutAfterMs = Date.now() - run.at;
      run.reason = aborted.reason?.message;
    }
  };
  const w = new Worker(client, "own-timeout", {
    handlers: { "*": hangOnce, short: { handler: hangOnce, timeoutMs: 300 } },
    timeoutMs: 60000, concurrency: 2, waitMs: 500, name: "w1", logger,
  });
  const run = w.run();
  await waitFor("both acks", async () => (await q.stats()).stats.acks === 2);
  await w.stop();
  await run;
  const of = (x) => runs.filter((r) => r.id === x);
  assert.deepEqual(of(id).map((r) => [r.attempt, r.timeoutMs]), [[1, 1000], [2, 1000]]);
  assert.equal(of(id)[0].reason, "timeout after 1000 ms");
  assert.ok(of(id)[0].cutAfterMs >= 1000 && of(id)[0].cutAfterMs < 10000, String(of(id)[0].cutAfterMs));
  assert.deepEqual(of(short).map((r) => r.attempt), [1, 2]);
  assert.equal(of(short)[0].reason, "timeout after 300 ms");
  const done = new Map((await q.archive()).map((m) => [m.id, m]));
  assert.equal(done.get(id).attempts, 2);
  assert.deepEqual(done.get(id).errors.map((e) => [e.attempt, e.error]),
                   [[1, "timeout after 1000 ms"]]);
  assert.deepEqual(done.get(short).errors.map((e) => [e.attempt, e.error]),
                   [[1, "timeout after 300 ms"]]);
  // Nacked by the worker at the timeout, not lost by an expired lease.
  const st = (await q.stats()).stats;
  assert.deepEqual([st.acks, st.nacks, st.expirations, st.ready, st.leased], [2, 2, 0, 0, 0]);
  assert.deepEqual([w.stats.acked, w.stats.nacked, w.stats.lost, w.stats.failedAcks], [2, 2, 0, 0]);
  const text = lines.map((l) => `${l.level} ${l.msg}`);
  assert.ok(text.includes(`warn sqlq worker w1: message ${id} of own-timeout failed on attempt 1, ` +
                          "retried after the queue's backoff: timeout after 1000 ms"), text.join("\n"));
});

test("a job's own expiry: not started in time, a dead letter its handler never sees", async () => {
  const q = client.queue("own-expiry");
  await q.create();
  const late = await q.send("late", { expireAfterMs: 300 });
  const fresh = await q.send("fresh", { expireAfterMs: 3600000 });
  const { expiresAt } = await q.message(late);
  // No worker runs until its deadline has passed.
  await waitFor("its deadline", () => Date.now() > Date.parse(expiresAt) + 50);
  const seen = [];
  const w = new Worker(client, "own-expiry", (msg) => { seen.push(msg.id); },
                       { waitMs: 500, logger: null });
  const run = w.run();
  const [dead] = await waitFor("its dead letter", async () => {
    const d = await q.dead();
    return d.length > 0 && d;
  });
  await waitFor("the other's ack", () => w.stats.acked === 1);
  await w.stop();
  await run;
  assert.equal(dead.id, late);
  assert.match(dead.lastError, /^expired: not started within 300 ?ms$/);
  assert.deepEqual(seen, [fresh]);
  const st = (await q.stats()).stats;
  assert.deepEqual([st.acks, st.deadLettered, st.dead, st.ready, st.leased], [1, 1, 1, 0, 0]);
  assert.equal(st.expired, 1);
});

test("a job's own expiry with onExpiry 'drop': not started in time, deleted, counted", async () => {
  const q = client.queue("own-expiry-drop");
  await q.create();
  await assert.rejects(q.send("x", { expireAfterMs: 60000, onExpiry: "later" }), BadRequest);
  await assert.rejects(q.send("x", { onExpiry: "drop" }), BadRequest);
  const late = await q.send("late", { expireAfterMs: 300, onExpiry: "drop" });
  const { expiresAt, onExpiry } = await q.message(late);
  assert.equal(onExpiry, "drop");
  // No worker runs until its deadline has passed.
  await waitFor("its deadline", () => Date.now() > Date.parse(expiresAt) + 50);
  const seen = [];
  const w = new Worker(client, "own-expiry-drop", (msg) => { seen.push([msg.payload, msg.onExpiry]); },
                       { waitMs: 500, logger: null });
  const run = w.run();
  // The claim that hands out the next job has found the first.
  await q.send("fresh", { expireAfterMs: 3600000, onExpiry: "drop" });
  await waitFor("the other's ack", () => w.stats.acked === 1);
  await w.stop();
  await run;
  assert.deepEqual(seen, [["fresh", "drop"]]);
  await assert.rejects(q.message(late), NotFound);
  assert.deepEqual(await q.dead(), []);
  const st = (await q.stats()).stats;
  assert.deepEqual([st.expired, st.acks, st.deadLettered, st.dead, st.ready, st.leased],
                   [1, 1, 0, 0, 0, 0]);
});

test("RetryAfter: retried after the handler's delay, not the queue's backoff; a dead letter at the last attempt", async () => {
  const q = client.queue("retry-after");
  // The queue's own backoff would wait an hour.
  await q.create({ maxAttempts: 2, backoffBaseMs: 3600000, backoffMaxMs: 3600000 });
  const [soon, never] = (await q.sendBatch([{ payload: "soon" }, { payload: "never" }])).ids;
  const failedAt = new Map();
  const { lines, logger } = captureLogger();
  const w = new Worker(client, "retry-after", async (msg) => {
    if (msg.payload === "never") throw new RetryAfter(200, "remote busy");
    if (msg.attempt === 1) {
      failedAt.set(msg.id, Date.now());
      throw new RetryAfter(300, new TypeError("429 from the mail relay"));
    }
    assert.ok(Date.now() - failedAt.get(msg.id) >= 300);
  }, { waitMs: 500, name: "w1", logger });
  const run = w.run();
  const dead = await waitFor("the dead letter", async () => (await q.dead()).find((d) => d.id === never));
  await waitFor("the ack", async () => (await q.stats()).stats.acks === 1);
  await w.stop();
  await run;
  assert.deepEqual(dead.errors.map((e) => e.error), ["remote busy", "remote busy"]);
  await assert.rejects(q.message(soon), (e) => e.code === "not_found");
  const text = lines.map((l) => `${l.level} ${l.msg}`);
  assert.ok(text.includes(`warn sqlq worker w1: message ${soon} of retry-after failed on ` +
                          "attempt 1, retried in 300 ms: TypeError: 429 from the mail relay"),
            text.join("\n"));
  assert.ok(text.includes(`error sqlq worker w1: message ${never} of retry-after failed on ` +
                          "attempt 2, now a dead letter: remote busy"), text.join("\n"));
});

test("handlers per kind over several queues; '*' takes the rest", async () => {
  const [mail, bill] = [client.queue("kinds-mail"), client.queue("kinds-bill")];
  await mail.create();
  await bill.create();
  const [m1, m2] = (await mail.sendBatch([
    { payload: "ada", kind: "email.send" }, { payload: "plain" },
  ])).ids;
  const [b1, b2] = (await bill.sendBatch([
    { payload: "inv-1", kind: "billing/invoice" }, { payload: "odd", kind: "billing/refund" },
  ])).ids;
  const ran = [];
  const note = (name) => async (msg) => {
    ran.push([msg.queue.name, msg.id, msg.kind, name]);
    if (ran.length === 4) w.stop();
  };
  const w = new Worker(client, {
    queues: ["kinds-mail", "kinds-bill"], concurrency: 2, waitMs: 500, logger: null,
    handlers: { "email.send": note("email"), "billing/invoice": { handler: note("invoice") },
                "*": note("default") },
  });
  await w.run();
  ran.sort((x, y) => x[1] - y[1]);
  assert.deepEqual(ran, [
    ["kinds-mail", m1, "email.send", "email"], ["kinds-mail", m2, undefined, "default"],
    ["kinds-bill", b1, "billing/invoice", "invoice"], ["kinds-bill", b2, "billing/refund", "default"],
  ].sort((x, y) => x[1] - y[1]));
  assert.equal((await mail.stats()).stats.acks, 2);
  assert.equal((await bill.stats()).stats.acks, 2);
});

test("a kind without a handler: by default failed attempts, then a dead letter, never lost", async () => {
  const q = client.queue("unknown-fail");
  await q.create({ maxAttempts: 2, backoffBaseMs: 0, backoffMaxMs: 0 });
  const [x, none] = (await q.sendBatch([{ payload: 1, kind: "report.build" }, { payload: 2 }])).ids;
  const { lines, logger } = captureLogger();
  const w = new Worker(client, "unknown-fail", {
    handlers: { "email.send": () => {} }, waitMs: 500, name: "w1", logger,
  });
  const run = w.run();
  await waitFor("two dead letters", async () => (await q.dead()).length === 2);
  await w.stop();
  await run;
  const dead = new Map((await q.dead()).map((d) => [d.id, d]));
  assert.deepEqual(dead.get(x).errors.map((e) => [e.attempt, e.error]),
                   [[1, "no handler for kind 'report.build'"], [2, "no handler for kind 'report.build'"]]);
  assert.equal(dead.get(x).kind, "report.build");
  assert.equal(dead.get(none).lastError, "no handler for messages without a kind");
  const text = lines.map((l) => `${l.level} ${l.msg}`);
  assert.ok(text.includes(`warn sqlq worker w1: message ${x} of unknown-fail failed on attempt 1, ` +
                          "retried after the queue's backoff: no handler for kind 'report.build'"),
            text.join("\n"));
});

test("a kind without a handler, unknownKind 'snooze': given back uncounted until a worker knows it", async () => {
  const q = client.queue("unknown-snooze");
  await q.create({ maxAttempts: 1 });
  const id = await q.send({ n: 1 }, { kind: "report.build" });
  const { lines, logger } = captureLogger();
  // The old version of a rolling deploy knows no "report.build".
  const old = new Worker(client, "unknown-snooze", {
    handlers: { "email.send": () => {} }, unknownKind: "snooze", unknownKindDelayMs: 100,
    waitMs: 500, name: "old", logger,
  });
  const run = old.run();
  const m = await waitFor("two snoozes", async () => {
    const got = await q.message(id);
    return got.snoozes >= 2 && got;
  });
  await old.stop();
  await run;
  assert.equal(m.kind, "report.build");
  assert.ok(old.stats.snoozed >= 2);
  assert.equal(old.stats.nacked, old.stats.snoozed, "every nack a snooze");
  assert.ok(lines.some((l) => l.level === "info" && l.msg ===
                       `sqlq worker old: message ${id} of unknown-snooze has no handler for ` +
                       "kind 'report.build', snoozed for 100 ms"), lines.map((l) => l.msg).join("\n"));
  // The new version has it: the first attempt, though claimed before.
  const got = [];
  const neu = new Worker(client, "unknown-snooze", {
    handlers: { "report.build": (msg) => { got.push(msg.attempt); neu.stop(); } },
    waitMs: 500, logger: null,
  });
  await neu.run();
  assert.deepEqual(got, [1]);
  assert.equal((await q.stats()).stats.acks, 1);
  assert.equal((await q.dead()).length, 0);
});

// Runs a worker "w1" of `options` on q until q has a dead letter: the
// letter, the worker and its log lines.
async function untilDeadLetter(q, options) {
  const { lines, logger } = captureLogger();
  const w = new Worker(client, q.name, { waitMs: 500, name: "w1", logger, ...options });
  const run = w.run();
  const [dead] = await waitFor("the dead letter", async () => (await q.dead()).length && q.dead());
  await w.stop();
  await run;
  return { dead, w, lines };
}

test("a kind no worker knows, snoozed for ever: a dead letter after 100 snoozes", async () => {
  const q = client.queue("unknown-forever");
  await q.create({ maxAttempts: 1 });
  const id = await q.send("x", { kind: "report.build" });
  const { dead, w, lines } = await untilDeadLetter(q, {
    handlers: { "email.send": () => {} }, unknownKind: "snooze", unknownKindDelayMs: 0,
  });
  assert.deepEqual([dead.id, dead.attempts, dead.lastError, dead.kind],
                   [id, 1, "snoozed 100 times", "report.build"]);
  assert.deepEqual([w.stats.snoozed, w.stats.nacked, w.stats.dead], [100, 101, 0]);
  assert.equal(lines.filter((l) => /snoozed for 0 ms$/.test(l.msg)).length, 100);
  assert.ok(lines.some((l) => l.level === "error" && l.msg ===
                       `sqlq worker w1: message ${id} of unknown-forever failed on attempt 1, ` +
                       "now a dead letter: snoozed 100 times"), lines.map((l) => l.msg).join("\n"));
});

test("a kind without a handler, unknownKind 'dead': a dead letter at once", async () => {
  const q = client.queue("unknown-dead");
  await q.create({ maxAttempts: 5 });
  const id = await q.send("x", { kind: "report.build" });
  const { dead, lines } = await untilDeadLetter(q, {
    handlers: { "email.send": () => {} }, unknownKind: "dead",
  });
  assert.deepEqual([dead.id, dead.attempts, dead.lastError, dead.kind],
                   [id, 1, "no handler for kind 'report.build'", "report.build"]);
  assert.ok(lines.some((l) => l.level === "error" && l.msg ===
                       `sqlq worker w1: message ${id} of unknown-dead has no handler for kind ` +
                       "'report.build', now a dead letter"), lines.map((l) => l.msg).join("\n"));
});

test("outcomes: Snooze (the attempt not counted), Permanent and Cancel (dead letters now), per-kind timeouts", async () => {
  const q = client.queue("outcomes");
  await q.create({ maxAttempts: 5, backoffBaseMs: 0, backoffMaxMs: 0, archive: true });
  const [sn, pe, ca, sl] = (await q.sendBatch([
    { payload: 1, kind: "later" }, { payload: 2, kind: "bad" }, { payload: 3, kind: "gone" },
    { payload: 4, kind: "slow" },
  ])).ids;
  const snoozeAttempts = [];
  const { lines, logger } = captureLogger();
  const w = new Worker(client, "outcomes", {
    concurrency: 4, waitMs: 500, name: "w1", logger, timeoutMs: 60000,
    handlers: {
      later: (msg) => {
        snoozeAttempts.push(msg.attempt);
        if (snoozeAttempts.length === 1) throw new Snooze(200);
      },
      bad: () => { throw new Permanent(new RangeError("no such mailbox")); },
      gone: () => { throw new Cancel("user deleted"); },
      // Hangs on its first attempt: cut off by its own timeout.
      slow: { handler: (msg, { signal: s }) => msg.attempt === 1 &&
                new Promise((r) => s.addEventListener("abort", r)), timeoutMs: 300 },
    },
  });
  const run = w.run();
  await waitFor("two acks", async () => (await q.stats()).stats.acks === 2);
  await waitFor("two dead letters", async () => (await q.dead()).length === 2);
  await w.stop();
  await run;
  assert.deepEqual(snoozeAttempts, [1, 1]);
  const dead = new Map((await q.dead()).map((d) => [d.id, d]));
  assert.equal(dead.get(pe).attempts, 1);
  assert.match(dead.get(pe).lastError, /^RangeError: no such mailbox\n\s+at /);
  assert.deepEqual([dead.get(ca).attempts, dead.get(ca).lastError], [1, "cancelled: user deleted"]);
  // A failed attempt at its own timeout, not the worker's: retried.
  const done = new Map((await q.archive()).map((a) => [a.id, a]));
  assert.deepEqual(done.get(sl).errors.map((e) => [e.attempt, e.error]),
                   [[1, "timeout after 300 ms"]]);
  assert.equal(done.get(sn).attempts, 1, "the snooze did not count");
  assert.deepEqual([w.stats.snoozed, w.stats.dead, w.stats.nacked, w.stats.acked], [1, 2, 4, 2]);
  const text = lines.map((l) => `${l.level} ${l.msg}`);
  const has = (line) => assert.ok(text.includes(line), `${line}\nnot in\n${text.join("\n")}`);
  has(`info sqlq worker w1: message ${sn} of outcomes snoozed for 200 ms on attempt 1`);
  has(`error sqlq worker w1: message ${pe} of outcomes failed permanently on attempt 1, now a ` +
      "dead letter: RangeError: no such mailbox");
  has(`warn sqlq worker w1: message ${ca} of outcomes cancelled on attempt 1, now a dead ` +
      "letter: user deleted");
  has(`warn sqlq worker w1: message ${sl} of outcomes failed on attempt 1, retried after the ` +
      "queue's backoff: timeout after 300 ms");
  const pf = lines.find((l) => l.msg.includes("failed permanently")).fields;
  assert.ok(pf.error instanceof RangeError);
  assert.deepEqual([pf.queue, pf.id, pf.kind, pf.outcome], ["outcomes", pe, "bad", "dead"]);
});

test("drainInline: every ready job run once through the handlers, without the loop", async () => {
  const q = client.queue("inline");
  await q.create({ maxAttempts: 3, backoffBaseMs: 0, backoffMaxMs: 0 });
  const [ok, fails, later, bad] = (await q.sendBatch([
    { payload: "ok", kind: "email.send" }, { payload: "fails", kind: "email.send" },
    { payload: "later", kind: "email.send" }, { payload: "bad", kind: "billing/invoice" },
  ])).ids;
  await q.send("not yet", { kind: "email.send", delayMs: 3600000 });
  let snoozes = 0;
  const w = new Worker(client, "inline", {
    logger: null,
    handlers: {
      "email.send": (msg) => {
        if (msg.payload === "fails") throw new Error("smtp 451");
        if (msg.payload === "later" && snoozes++ === 0) throw new Snooze(0);
      },
      "billing/invoice": () => { throw new Permanent("no such customer"); },
    },
  });
  const got = await w.drainInline();
  assert.deepEqual(got.map((r) => [r.message.id, r.queue, r.outcome]), [
    [ok, "inline", "acked"], [fails, "inline", "retry"], [later, "inline", "snoozed"],
    [bad, "inline", "dead"],
  ]);
  assert.match(got[1].error, /^Error: smtp 451\n/);
  // Each ran once: the failed and the snoozed are ready again, for the
  // next drain.
  assert.deepEqual([(await q.message(fails)).state, (await q.message(later)).state],
                   ["ready", "ready"]);
  assert.equal((await q.dead())[0].lastError, "no such customer");
  const again = await w.drainInline({ queue: "inline" });
  assert.deepEqual(again.map((r) => [r.message.id, r.message.attempt, r.outcome]).sort(),
                   [[fails, 2, "retry"], [later, 1, "acked"]].sort());
  assert.equal(await q.count({ state: "delayed" }), 1, "a delayed job is not run");
});

test("runInline (sqlq/testing): a queue's ready jobs through handlers, no worker", async () => {
  const q = client.queue("run-inline");
  await q.create({ maxAttempts: 3 });
  const [a, b, c] = (await q.sendBatch([
    { payload: { to: "ada" }, kind: "email.send" }, { payload: "?", kind: "fax.send" },
    { payload: "plain" },
  ])).ids;
  const sent = [];
  const done = await runInline(client, "run-inline", {
    "email.send": (msg) => { sent.push(msg.payload.to); },
    "*": () => { throw new Cancel("unsupported"); },
  }, { unknownKind: "dead" });
  assert.deepEqual(done.map((r) => [r.message.id, r.message.kind, r.outcome]),
                   [[a, "email.send", "acked"], [b, "fax.send", "dead"], [c, undefined, "dead"]]);
  assert.deepEqual(sent, ["ada"]);
  assert.deepEqual((await q.dead()).map((d) => d.lastError), ["cancelled: unsupported",
                                                               "cancelled: unsupported"]);
  assert.deepEqual(await runInline(client, "run-inline", () => {}), []);
  assert.ok(!(await client.workers()).some((x) => x.queues.includes("run-inline")),
            "no live worker reported");
});

test("middleware: before, after and onError around every handler; onError may settle otherwise", async () => {
  const q = client.queue("hooks");
  await q.create({ maxAttempts: 5 });
  const [a, b, c] = (await q.sendBatch([
    { payload: "fine" }, { payload: "typo" }, { payload: "flaky" },
  ])).ids;
  const calls = [];
  const w = new Worker(client, "hooks", async (msg) => {
    calls.push(`handler ${msg.id}`);
    if (msg.payload === "typo") throw new TypeError("x is not a function");
    if (msg.payload === "flaky") throw new Error("flaky");
    return msg.payload.length;
  }, { logger: null });
  w.use({
    before: (msg, ctx) => calls.push(`before ${msg.id} ${ctx.queue} ${ctx.signal.aborted}`),
    after: (msg, result) => calls.push(`after ${msg.id} ${result}`),
  }).use({
    onError: (msg, e) => {
      calls.push(`onError ${msg.id} ${e.message}`);
      // A bug is not retried.
      if (e instanceof TypeError) throw new Permanent(e);
    },
  });
  const got = await w.drainInline();
  assert.deepEqual(got.map((r) => r.outcome), ["acked", "dead", "retry"]);
  assert.deepEqual(calls, [
    `before ${a} hooks false`, `handler ${a}`, `after ${a} 4`,
    `before ${b} hooks false`, `handler ${b}`, `onError ${b} x is not a function`,
    `before ${c} hooks false`, `handler ${c}`, `onError ${c} flaky`,
  ]);
  const [dead] = await q.dead();
  assert.deepEqual([dead.id, dead.attempts], [b, 1]);
  assert.match(dead.lastError, /^TypeError: x is not a function\n/);
  assert.equal((await q.message(c)).attempts, 1);
});

test("live workers: a running worker listed with its queues, kinds and jobs in hand; gone at its stop", async () => {
  const [a, b] = [client.queue("live-a"), client.queue("live-b")];
  await a.create();
  await b.create();
  const id = await a.send("x", { kind: "email.send" });
  const started = signal();
  const finish = signal();
  const w = new Worker(client, {
    queues: ["live-a", "live-b"], concurrency: 3, name: "mailer", waitMs: 500, logger: null,
    handlers: { "email.send": async () => { started.fire(); await finish; }, "sms.send": () => {} },
  });
  const run = w.run();
  await started;
  const me = await waitFor("its report with the job in hand", async () => {
    const got = (await client.workers({ queue: "live-b" })).find((x) => x.id === w.id);
    return got?.jobs.length === 1 && got;
  });
  assert.match(w.id, /^[A-Za-z0-9_.:/-]+:\d+:[0-9a-f]{8}$/);
  assert.deepEqual([me.name, me.pid, me.queues, me.kinds, me.concurrency, me.ttlMs],
                   ["mailer", process.pid, ["live-a", "live-b"], ["email.send", "sms.send"], 3,
                    30000]);
  assert.deepEqual([me.jobs[0].queue, me.jobs[0].id], ["live-a", id]);
  // The leased message leads to its worker.
  assert.equal((await a.message(id)).worker, w.id);
  finish.fire();
  await waitFor("the ack", () => w.stats.acked === 1);
  await w.stop();
  await run;
  assert.ok(!(await client.workers()).some((x) => x.id === w.id), "its report removed at the stop");
});

test("live workers: a refused report is tried again every ttl/3, logged on the first and every tenth try", async () => {
  const q = client.queue("live-refused");
  await q.create();
  const { lines, logger } = captureLogger();
  // The server takes reports of 1 s and more: each of these is refused.
  const w = new Worker(client, "live-refused", () => {},
                       { waitMs: 200, name: "w1", logger, reportTtlMs: 600 });
  const run = w.run();
  await q.send("x");
  await waitFor("the ack", () => w.stats.acked === 1);
  await waitFor("the eleventh try's line", () => lines.some((l) => /\(try 11\)$/.test(l.msg)));
  await w.stop();
  await run;
  const said = lines.filter((l) => /report/.test(l.msg)).map((l) => `${l.level} ${l.msg}`);
  assert.match(said[0], /^warn sqlq worker w1: report failed \(400 invalid_argument: .*\); retrying in 0\.20s \(try 1\)$/);
  assert.match(said[1], /^warn sqlq worker w1: report failed \(400 invalid_argument: .*\); retrying in 0\.20s \(try 11\)$/);
  assert.ok(!said.some((l) => /not listed among the live workers/.test(l)), said.join("\n"));
  // The worker worked on: the message acked.
  assert.deepEqual([(await q.stats()).stats.acks, (await q.count())], [1, 0]);
  assert.ok(!(await client.workers()).some((x) => x.id === w.id));
});

// An HTTP proxy in front of the server that answers the live-worker
// reports itself while `state.refuse` is [status, code] (an error reply),
// and passes everything else on; it counts the reports and the claims.
async function reportsProxy(upstreamPort) {
  const state = { refuse: null, reports: 0, claims: 0 };
  const proxy = http.createServer((req, res) => {
    if (req.method === "PUT" && req.url.startsWith("/v1/workers/")) state.reports++;
    if (req.url.endsWith("/claim")) state.claims++;
    if (state.refuse && req.url.startsWith("/v1/workers")) {
      const [status, code] = state.refuse;
      req.resume();
      req.on("end", () => {
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { code, message: `refused by the test's proxy` } }));
      });
      return;
    }
    const up = http.request({ host: "127.0.0.1", port: upstreamPort, method: req.method,
                              path: req.url, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
  state.url = `http://127.0.0.1:${proxy.address().port}`;
  state.close = () => new Promise((r) => { proxy.closeAllConnections?.(); proxy.close(r); });
  return state;
}

test("live workers: reports refused for a while work again; a server without them is told once", async () => {
  await client.queue("live-proxy").create();
  const proxy = await reportsProxy(server.port);
  const c = new Client(proxy.url);
  try {
    // Refused (403), then taken: the worker is listed, the log says so.
    proxy.refuse = [403, "forbidden"];
    const one = captureLogger();
    const w1 = new Worker(c, "live-proxy", () => {},
                          { waitMs: 100, name: "w1", logger: one.logger, reportTtlMs: 1000 });
    const run1 = w1.run();
    await waitFor("three refused reports", () => proxy.reports >= 3);
    proxy.refuse = null;
    await waitFor("its listing", async () => (await client.workers()).some((x) => x.id === w1.id));
    await w1.stop();
    await run1;
    const said1 = one.lines.filter((l) => /report/.test(l.msg)).map((l) => `${l.level} ${l.msg}`);
    assert.match(said1[0], /^warn sqlq worker w1: report failed \(403 forbidden: refused by the test's proxy\); retrying in 0\.33s \(try 1\)$/);
    assert.match(said1[1], /^info sqlq worker w1: report works again after \d+ failed tries$/);
    assert.equal(said1.length, 2, said1.join("\n"));

    // No such route (a server older than live workers): one line, no more
    // reports, and the worker works on.
    proxy.refuse = [404, "no_route"];
    proxy.reports = 0;
    const two = captureLogger();
    const w2 = new Worker(c, "live-proxy", () => {},
                          { waitMs: 100, name: "w2", logger: two.logger, reportTtlMs: 1000 });
    const run2 = w2.run();
    await waitFor("its first report", () => proxy.reports === 1);
    // Ten claims of 100 ms each: three reports' time.
    const claims = proxy.claims;
    await waitFor("ten more claims", () => proxy.claims >= claims + 10);
    await c.queue("live-proxy").send("x");
    await waitFor("the ack", () => w2.stats.acked === 1);
    await w2.stop();
    await run2;
    assert.equal(proxy.reports, 1);
    const said2 = two.lines.filter((l) => /report/.test(l.msg)).map((l) => `${l.level} ${l.msg}`);
    assert.deepEqual(said2, ["warn sqlq worker w2: report failed: 404 no_route: refused by the " +
                             "test's proxy; the worker is not listed among the live workers"]);
  } finally {
    c.close();
    await proxy.close();
  }
});

test("a job's own retry policy: sent alone and in batches; on claims and on the message; bad values refused", async () => {
  const q = client.queue("own-policy");
  await q.create({ maxAttempts: 5, backoffBaseMs: 10, backoffMaxMs: 10 });
  const a = await q.send("a", { maxAttempts: 1, backoffMs: 60000, backoffMaxMs: 120000 });
  const { ids: [b, c] } = await q.sendBatch([
    { payload: "b", maxAttempts: 3, backoffMs: 250, backoffMaxMs: 500 }, { payload: "c" }]);
  const policy = async (id) => {
    const m = await q.message(id);
    return [m.maxAttempts, m.backoffMs, m.backoffMaxMs];
  };
  assert.deepEqual(await policy(a), [1, 60000, 120000]);
  assert.deepEqual(await policy(b), [3, 250, 500]);
  assert.deepEqual(await policy(c), [undefined, undefined, undefined]);
  const got = new Map((await q.claim({ max: 3 })).map((m) => [m.id, m]));
  assert.deepEqual([a, b, c].map((id) => got.get(id).maxAttempts), [1, 3, undefined]);
  // Its own single attempt, though the queue allows five.
  assert.equal(await got.get(a).nack(), "dead");
  const dead = await q.message(a);
  assert.deepEqual([dead.state, dead.lastError], ["dead", "failed attempt 1 of 1"]);
  // Out of range: the server's 400, and nothing of the send or its batch stored.
  const stored = await q.count();
  for (const bad of [{ maxAttempts: 0 }, { maxAttempts: 1000001 }, { backoffMs: -1 },
                     { backoffMs: 5000, backoffMaxMs: 1000 }]) {
    await assert.rejects(q.send("x", bad),
                         (e) => e instanceof BadRequest && e.status === 400 && e.code === "invalid_argument",
                         JSON.stringify(bad));
    await assert.rejects(q.sendBatch([{ payload: "ok" }, { payload: "x", ...bad }]), BadRequest);
  }
  assert.equal(await q.count(), stored);
});

test("a job's own max attempts: a dead letter at its handler's first failure, though the queue allows five", async () => {
  const q = client.queue("own-attempts");
  await q.create({ maxAttempts: 5, backoffBaseMs: 0, backoffMaxMs: 0 });
  const id = await q.send("once", { maxAttempts: 1 });
  const seen = [];
  const { lines, logger } = captureLogger();
  const w = new Worker(client, "own-attempts", (msg) => {
    seen.push([msg.attempt, msg.maxAttempts]);
    throw new Error("smtp 451");
  }, { waitMs: 500, name: "w1", logger });
  const run = w.run();
  await waitFor("the nack", () => w.stats.nacked === 1);
  await w.stop();
  await run;
  assert.deepEqual(seen, [[1, 1]]);
  const msg = await q.message(id);
  assert.deepEqual([msg.state, msg.attempts], ["dead", 1]);
  assert.deepEqual((await q.dead()).map((d) => d.id), [id]);
  const text = lines.map((l) => `${l.level} ${l.msg}`);
  assert.ok(text.some((l) => l.startsWith(`error sqlq worker w1: message ${id} of own-attempts failed on ` +
                                          "attempt 1, now a dead letter: ")), text.join("\n"));
});

test("a job's own backoff: its retry waits for it, not for the queue's", async () => {
  const q = client.queue("own-backoff");
  // The queue retries after 10 ms at most; the job after 30 to 60 s (its
  // backoff of a minute, with the server's jitter).
  await q.create({ maxAttempts: 3, backoffBaseMs: 10, backoffMaxMs: 10 });
  const before = Date.now();
  const id = await q.send("later", { backoffMs: 60000, backoffMaxMs: 60000 });
  const w = new Worker(client, "own-backoff", () => { throw new Error("not yet"); },
                       { waitMs: 500, logger: null });
  const run = w.run();
  await waitFor("the nack", () => w.stats.nacked === 1);
  await w.stop();
  await run;
  const msg = await q.message(id);
  assert.deepEqual([msg.state, msg.attempts], ["delayed", 1]);
  const readyAt = Date.parse(msg.readyAt);
  assert.ok(readyAt - before >= 30000, msg.readyAt);
  assert.ok(readyAt - Date.now() <= 60000, msg.readyAt);
});

test("a job's own timeout shorter than the lease: its lease extended by the timeout, never by the queue's lease", async () => {
  const q = client.queue("own-timeout-lease");
  await q.create({ leaseMs: 60000 });
  const timeoutMs = 3000;
  const id = await q.send("x", { timeoutMs });
  let seen;
  const w = new Worker(client, "own-timeout-lease", async (msg) => {
    // The worker's first extension, at a third of the job's timeout.
    const claimed = msg.leaseExpiresAt;
    await waitFor("an extension", () => msg.leaseExpiresAt !== claimed);
    const info = await q.message(msg.id);
    seen = { leaseEnd: Date.parse(info.leaseExpiresAt), now: Date.now(), at: info.leaseExpiresAt };
  }, { waitMs: 500, logger: null });
  const run = w.run();
  await waitFor("the ack", () => w.stats.acked === 1);
  await w.stop();
  await run;
  // Leased for at most the timeout from the extension, not for 60 s.
  assert.ok(seen.leaseEnd - seen.now <= timeoutMs, `${seen.at}, ${seen.leaseEnd - seen.now} ms left`);
  await assert.rejects(q.message(id), (e) => e.code === "not_found");
});
