// The worker runtime against a real `sqlq serve`: concurrency, failures,
// leases, a server killed mid-run, a worker killed mid-message, SIGTERM.

import { test } from "node:test";
import assert from "node:assert/strict";
import { fork } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Client, Worker } from "../index.js";
import { RELEASED } from "../src/worker.js";
import {
  startServer, waitFor, useServer, server, client, captureLogger, DEADLINE_MS,
} from "./server.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const quiet = null;  // logger: none

useServer((url) => new Client(url));

test("N concurrent handlers process every message, each acked once", async () => {
  const q = client.queue("conc");
  await q.create();
  const N = 40;
  await q.sendBatch(Array.from({ length: N }, (_, i) => ({ payload: `job ${i}` })));
  const seen = new Map();
  let active = 0, peak = 0;
  let release;
  const gate = new Promise((r) => { release = r; });
  const w = new Worker(client, "conc", async (msg) => {
    seen.set(msg.payload, (seen.get(msg.payload) ?? 0) + 1);
    active++;
    peak = Math.max(peak, active);
    if (peak < 4) await gate;  // hold the first ones until four run at once
    else release();
    active--;
    if ([...seen.values()].reduce((a, b) => a + b, 0) === N) w.stop();
  }, { concurrency: 4, waitMs: 1000, logger: quiet });
  await w.run();
  assert.equal(peak, 4);
  assert.equal(seen.size, N);
  assert.ok([...seen.values()].every((n) => n === 1));
  assert.equal(w.stats.acked, N);
  const s = (await q.stats()).stats;
  assert.deepEqual([s.ready, s.leased, s.delayed, s.acks], [0, 0, 0, N]);
});

test("a throwing handler: nack with its text, then a dead letter after max_attempts", async () => {
  const q = client.queue("fails");
  await q.create({ maxAttempts: 2, backoffBaseMs: 0, backoffMaxMs: 0 });
  const id = await q.send("bad");
  const attempts = [];
  const w = new Worker(client, "fails", async (msg) => {
    attempts.push(msg.attempt);
    throw new TypeError(`smtp 451 on attempt ${msg.attempt}`);
  }, { waitMs: 500, logger: quiet });
  const run = w.run();
  const dead = await waitFor("the dead letter", async () => (await q.dead()).find((d) => d.id === id));
  await w.stop();
  await run;
  assert.deepEqual(attempts, [1, 2]);
  assert.equal(w.stats.nacked, 2);
  assert.match(dead.lastError, /^TypeError: smtp 451 on attempt 2\n\s+at /);
  assert.deepEqual(dead.errors.map((e) => e.error.split("\n")[0]),
                   ["TypeError: smtp 451 on attempt 1", "TypeError: smtp 451 on attempt 2"]);
  assert.ok(dead.errors[0].error.includes("worker.test.mjs"), "the stack's tail names the handler's file");
});

test("a handler that runs longer than the lease keeps its message", async () => {
  const q = client.queue("slow");
  // Long enough that a loaded machine delays no extend past a lease.
  const leaseMs = 2000;
  await q.create({ leaseMs });
  const id = await q.send("long");
  let runs = 0;
  let finish;
  const finished = new Promise((r) => { finish = r; });
  let started;
  const begun = new Promise((r) => { started = r; });
  const w = new Worker(client, "slow", async () => {
    runs++;
    started();
    await finished;
  }, { waitMs: 500, logger: quiet });
  const run = w.run();
  await begun;
  // For four leases' time, another consumer finds nothing to claim.
  const until = Date.now() + 4 * leaseMs;
  let looks = 0;
  while (Date.now() < until) {
    assert.deepEqual(await q.claim({ waitMs: 200 }), []);
    looks++;
  }
  const m = await q.message(id);
  assert.equal(m.state, "leased");
  assert.equal(m.attempts, 1);
  finish();
  await waitFor("the ack", async () => (await q.stats()).stats.acks === 1);
  await w.stop();
  await run;
  assert.equal(runs, 1);
  assert.ok(looks >= 4);
  assert.equal(w.stats.lost, 0);
  assert.equal((await q.stats()).stats.expirations, 0);
});

test("the server killed mid-run and restarted: every message processed, none lost", async () => {
  const s1 = await startServer();
  const c = new Client(s1.url);
  const q = c.queue("restart");
  await q.create({ leaseMs: 20000 });
  const N = 30;
  const sent = (await q.sendBatch(Array.from({ length: N }, (_, i) => ({ payload: String(i) })))).ids;
  const done = new Set();
  let s2;
  let killed = false;
  let killing;
  const w = new Worker(c, "restart", async (msg) => {
    if (done.size === 10 && !killed) {
      killed = true;
      // The server dies while this handler (and others) hold messages.
      killing = (async () => {
        await s1.kill("SIGKILL");
        s2 = await s1.restart();
      })();
      await killing;
    }
    done.add(msg.id);
    if (done.size === N) w.stop();
  }, { concurrency: 3, waitMs: 1000, maxBackoffMs: 300, logger: quiet });
  await w.run();
  assert.ok(killed && s2);
  assert.deepEqual([...done].sort((a, b) => a - b), sent);
  const st = (await q.stats()).stats;
  assert.deepEqual([st.ready, st.leased, st.delayed, st.dead], [0, 0, 0, 0]);
  c.close();
  await s2.stop();
});

// A worker in a child process; `events` resolves waits on its IPC messages.
function spawnWorker(url, queue, mode, concurrency = 1, shutdownMs = 10000,
                     { env, stderr = "inherit" } = {}) {
  const child = fork(path.join(here, "worker_proc.mjs"),
                     [url, queue, mode, String(concurrency), String(shutdownMs)],
                     { stdio: ["ignore", "inherit", stderr, "ipc"],
                       env: { ...process.env, ...env } });
  const log = [];
  const waiters = [];
  child.on("message", (m) => {
    log.push(m);
    for (const w of [...waiters]) if (w.pred(m)) { waiters.splice(waiters.indexOf(w), 1); w.resolve(m); }
  });
  const exit = new Promise((r) => child.on("exit", (code, signal) => r({ code, signal })));
  return {
    child, log, exit,
    next(what, pred, ms = 20000) {
      const hit = log.find(pred);
      if (hit) return Promise.resolve(hit);
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
        waiters.push({ pred, resolve: (m) => { clearTimeout(t); resolve(m); } });
      });
    },
  };
}

test("a worker killed mid-message: the message is redelivered after its lease", async () => {
  const q = client.queue("crash");
  const leaseMs = 1500;
  await q.create({ leaseMs });
  const id = await q.send("survive me");
  const w = spawnWorker(server.url, "crash", "hang");
  const started = await w.next("the handler to start", (m) => m.started === id);
  assert.equal(started.attempt, 1);
  const killedAt = Date.now();
  w.child.kill("SIGKILL");
  assert.equal((await w.exit).signal, "SIGKILL");
  const got = await q.claim({ waitMs: 10000 });
  assert.equal(got.length, 1);
  assert.equal(got[0].id, id);
  assert.equal(got[0].attempt, 2);
  assert.equal(got[0].payload, "survive me");
  // Not before the first lease ran out (the dead worker extended it last at
  // most a lease before it died).
  assert.ok(Date.now() - killedAt >= leaseMs / 2 - 50);
  await got[0].ack();
  const s = (await q.stats()).stats;
  assert.deepEqual([s.ready, s.leased, s.acks, s.expirations], [0, 0, 1, 1]);
});

test("SIGTERM: the worker stops claiming, finishes or releases, exits 0, nothing left leased", async () => {
  const q = client.queue("term");
  await q.create();
  const [a, b, c] = (await q.sendBatch([{ payload: "a" }, { payload: "b" }, { payload: "c" }])).ids;
  const w = spawnWorker(server.url, "term", "slow", 2, 1500);
  await w.next("a to start", (m) => m.started === a);
  await w.next("b to start", (m) => m.started === b);
  w.child.kill("SIGTERM");
  await w.next("the worker to stop claiming", (m) => m.stopping);
  // One handler finishes within the deadline, the other does not.
  w.child.send({ finish: a });
  const ended = await w.next("run() to end", (m) => m.exited);
  assert.deepEqual(await w.exit, { code: 0, signal: null });
  assert.equal(ended.stats.acked, 1);
  assert.equal(ended.stats.released, 1);
  assert.ok(!w.log.some((m) => m.started === c), "no claim after SIGTERM");
  const s = (await q.stats()).stats;
  assert.deepEqual([s.leased, s.ready, s.acks], [0, 2, 1]);
  const mb = await q.message(b);
  assert.equal(mb.state, "ready");
  assert.equal(mb.lastError, RELEASED);
  assert.equal((await q.message(c)).attempts, 0);
  await assert.rejects(q.message(a), (e) => e.code === "not_found");
});


test("SIGTERM with a stuck handler far from its timeout: released at the deadline, the process exits", async () => {
  const q = client.queue("term-stuck");
  await q.create();
  const id = await q.send("stuck");
  const w = spawnWorker(server.url, "term-stuck", "stuck", 1, 200,
                        { env: { SQLQ_TEST_TIMEOUT_MS: "600000" } });
  await w.next("the handler to start", (m) => m.started === id);
  w.child.kill("SIGTERM");
  const ended = await w.next("run() to end", (m) => m.exited);
  assert.equal(ended.stats.released, 1);
  // No timer of the ten-minute timeout keeps the process.
  let bound;
  const late = new Promise((r) => { bound = setTimeout(() => r("still running"), DEADLINE_MS); });
  const exited = await Promise.race([w.exit, late]);
  clearTimeout(bound);
  w.child.kill("SIGKILL");
  assert.deepEqual(exited, { code: 0, signal: null });
  const m = await q.message(id);
  assert.deepEqual([m.state, m.lastError], ["ready", RELEASED]);
});

test("logs: a throwing handler's error, its dead letter, start and stop", async () => {
  const q = client.queue("logfails");
  await q.create({ maxAttempts: 2, backoffBaseMs: 0, backoffMaxMs: 0 });
  const id = await q.send("x");
  const { lines, logger } = captureLogger();
  const w = new Worker(client, "logfails", async (msg) => {
    throw new TypeError(`smtp 451 on attempt ${msg.attempt}`);
  }, { waitMs: 500, name: "w1", logger });
  const run = w.run();
  await waitFor("the dead letter's line", () => lines.some((l) => /dead letter/.test(l.msg)));
  await w.stop();
  await run;
  const text = lines.map((l) => `${l.level} ${l.msg}`);
  assert.deepEqual(text, [
    "info sqlq worker w1: started on queue logfails (concurrency 1, lease 30000 ms)",
    `warn sqlq worker w1: message ${id} of logfails failed on attempt 1, retried after the ` +
      "queue's backoff: TypeError: smtp 451 on attempt 1",
    `error sqlq worker w1: message ${id} of logfails failed on attempt 2, now a dead letter: ` +
      "TypeError: smtp 451 on attempt 2",
    "info sqlq worker w1: stopping: no more claims, 0 handler(s) running",
    "info sqlq worker w1: stopped (acked=0 nacked=2 released=0 lost=0)",
  ]);
  // The error itself goes with the line, for the logger to print its stack.
  const dead = lines[2].fields;
  assert.ok(dead.error instanceof TypeError);
  assert.match(dead.error.stack, /worker\.test\.mjs/);
  assert.deepEqual([dead.queue, dead.id, dead.attempt, dead.outcome], ["logfails", id, 2, "dead"]);
});

test("logs: a lost lease and the refused ack", async () => {
  const q = client.queue("loglost");
  await q.create({ leaseMs: 1000 });
  const id = await q.send("x");
  const { lines, logger } = captureLogger();
  let started, finish;
  const begun = new Promise((r) => { started = r; });
  const finished = new Promise((r) => { finish = r; });
  const w = new Worker(client, "loglost", async () => {
    started();
    await finished;
  }, { waitMs: 500, name: "w1", logger });
  const run = w.run();
  await begun;
  // Someone deletes the message under the running handler: its next
  // extension is refused.
  assert.equal(await q.deleteMessage(id), 1);
  await waitFor("the lost lease", () => lines.some((l) => /lease of message/.test(l.msg)));
  finish();
  await waitFor("the refused ack", () => lines.some((l) => /ack of message/.test(l.msg)));
  await w.stop();
  await run;
  const text = lines.map((l) => `${l.level} ${l.msg}`).join("\n");
  assert.ok(text.includes(`warn sqlq worker w1: ack of message ${id} refused, its lease was ` +
                          "lost: 404 not_found: "), text);
  assert.ok(text.includes(`warn sqlq worker w1: lease of message ${id} lost, another worker may ` +
                          "have it (the handler still runs; its outcome will be refused): " +
                          "404 not_found: "), text);
  assert.equal(w.stats.lost, 1);
});

test("logs: the server away and back, once every ten tries", async () => {
  const s1 = await startServer();
  const c = new Client(s1.url, { logger: null });
  await c.queue("away").create();
  const { lines, logger } = captureLogger();
  const w = new Worker(c, "away", async () => {}, {
    waitMs: 200, maxBackoffMs: 50, name: "w1", logger,
  });
  const run = w.run();
  await waitFor("the start", () => lines.length === 1);
  await s1.kill("SIGKILL");
  const failed = () => lines.filter((l) => /claim failed/.test(l.msg));
  await waitFor("the eleventh try", () => failed().length === 2);
  const s2 = await s1.restart();
  await waitFor("the claims back", () => lines.some((l) => /claim works again/.test(l.msg)));
  await c.queue("away").send("after");
  await waitFor("the ack", () => w.stats.acked === 1);
  await w.stop();
  await run;
  c.close();
  await s2.stop();
  const f = failed();
  assert.ok(f.every((l) => l.level === "warn"));
  assert.match(f[0].msg, /^sqlq worker w1: claim failed \(connection_failed: POST \/v1\/queues\/away\/claim: .*\); retrying in [0-9.]+s \(try 1\)$/);
  assert.deepEqual(f.map((l) => l.fields.attempt),
                   Array.from({ length: f.length }, (_, i) => 1 + 10 * i));
  const back = lines.find((l) => /claim works again/.test(l.msg));
  assert.equal(back.level, "info");
  assert.match(back.msg, /^sqlq worker w1: claim works again after \d+ failed tries$/);
  // Its reports, tried again meanwhile, are logged by the same rule.
  const reports = lines.filter((l) => /report failed/.test(l.msg));
  assert.deepEqual(reports.map((l) => l.fields.attempt),
                   Array.from({ length: reports.length }, (_, i) => 1 + 10 * i));
});

test("logs: without a logger, the lines and the handler's stack go to stderr", async () => {
  const q = client.queue("logstderr");
  await q.create({ maxAttempts: 1 });
  const id = await q.send("mars");
  const w = spawnWorker(server.url, "logstderr", "throw", 1, 10000,
                        { env: { SQLQ_TEST_LOGGER: "default" }, stderr: "pipe" });
  let err = "";
  w.child.stderr.on("data", (d) => { err += d; });
  await waitFor("the dead letter's line", () => /dead letter/.test(err));
  w.child.kill("SIGTERM");
  assert.deepEqual(await w.exit, { code: 0, signal: null });
  const lines = err.split("\n");
  const at = lines.findIndex((l) => l.startsWith(`sqlq worker w1: message ${id} `));
  assert.equal(lines[at], `sqlq worker w1: message ${id} of logstderr failed on attempt 1, ` +
                          "now a dead letter: RangeError: no route to mars");
  assert.equal(lines[at + 1], "RangeError: no route to mars");
  assert.match(lines[at + 2], /^\s+at .*worker_proc\.mjs/);
  assert.ok(lines.includes("sqlq worker w1: SIGTERM: stopping"), err);
  assert.ok(lines.includes("sqlq worker w1: stopped (acked=0 nacked=1 released=0 lost=0)"), err);
});
