// Every operation of the client against a real `sqlq serve`.

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  Client, SqlqError, NotFound, AlreadyExists, BadRequest, Unauthorized, ConnectionFailed,
} from "../index.js";
import { startServer, useServer, server, client, waitFor } from "./server.mjs";

useServer((url) => new Client(url));

test("queues: create, list, stats, change, pause, resume, purge, drop", async () => {
  const q = client.queue("admin-q");
  const made = await q.create({ maxAttempts: 3, leaseMs: 60000, labels: { team: "mail" } });
  assert.equal(made.name, "admin-q");
  assert.equal(made.maxAttempts, 3);
  assert.equal(made.leaseMs, 60000);
  assert.deepEqual(made.labels, { team: "mail" });
  assert.ok((await client.queues()).some((x) => x.name === "admin-q"));
  const changed = await q.change({ maxAttempts: 10, maxLeased: 5 });
  assert.equal(changed.maxAttempts, 10);
  assert.equal(changed.maxLeased, 5);
  assert.equal((await q.change({ maxLeased: null })).maxLeased, null);
  assert.equal((await q.pause()).paused, true);
  assert.equal((await q.resume()).paused, false);
  // Ready, but behind its group's leased head: the claim says why.
  const o = client.queue("admin-ordered");
  await o.create({ groups: "ordered" });
  await o.sendBatch([{ payload: "a1", group: "g" }, { payload: "a2", group: "g" }]);
  assert.equal((await o.claim({ max: 10 })).length, 1);
  const busy = await o.claim({ max: 10 });
  assert.deepEqual([busy.length, busy.groupsBusy], [0, true]);
  await o.drop();
  await q.sendBatch([{ payload: "a" }, { payload: "b" }]);
  const s = await q.stats();
  assert.equal(s.stats.ready, 2);
  assert.equal(s.options.maxAttempts, 10);
  assert.equal(await q.purge(), 2);
  assert.ok(Array.isArray((await q.history()).points));
  await q.drop();
  await assert.rejects(q.stats(), (e) => e instanceof SqlqError && e.code === "not_found" && e.status === 404);
});

test("send with priority, delay, headers, dedup, group; claim, ack, nack, extend", async () => {
  const q = client.queue("ops");
  await q.create({ leaseMs: 30000 });
  const a = await q.send("low");
  const b = await q.send({ n: 1 }, { priority: 5, headers: { tenant: "acme" }, dedup: "k1", group: "g" });
  assert.equal(await q.send("again", { dedup: "k1" }), b);
  const batch = await q.sendBatch([{ payload: "again", dedup: "k1" }, { payload: "new", delayMs: 3600000 }]);
  assert.deepEqual(batch.duplicate, [true, false]);
  assert.equal(batch.ids[0], b);
  const bytes = await q.send(Buffer.from([0xff, 0x00, 0x01]));
  await q.send("later", { delayMs: 3600000 });
  await q.send("at", { runAt: new Date(Date.now() + 7200000) });
  const got = await q.claim({ max: 10, waitMs: 0, worker: "w1" });
  assert.deepEqual(got.map((m) => m.id), [b, a, bytes]);
  assert.equal(got[0].raw.payload.n, 1);
  assert.deepEqual(got[0].payload, { n: 1 });
  assert.equal(got[0].headers.tenant, "acme");
  assert.equal(got[0].group, "g");
  assert.equal(got[0].attempt, 1);
  assert.ok(Buffer.isBuffer(got[2].payload));
  assert.deepEqual([...got[2].payload], [0xff, 0x00, 0x01]);
  const until = await got[1].extend(120000);
  assert.ok(Date.parse(until) > Date.now() + 100000);
  assert.equal(await got[1].nack({ error: "smtp 451", delayMs: 0 }), "retry");
  const results = await q.ackMany([got[0].receipt, got[2].receipt, "bogus"]);
  assert.deepEqual(results.slice(0, 2), [{ ok: true }, { ok: true }]);
  assert.equal(results[2].ok, false);
  assert.equal(results[2].error.code, "invalid_argument");
  // The nacked one comes back with its error in the history.
  const again = await q.claim({ waitMs: 5000 });
  assert.equal(again[0].id, a);
  assert.equal(again[0].attempt, 2);
  await again[0].ack();
  const m = await q.message(a).catch((e) => e);
  assert.ok(m instanceof NotFound && m.code === "not_found");
  // A gone receipt is an SqlqError with the server's code.
  await assert.rejects(again[0].ack(), (e) => e instanceof NotFound && e.status === 404);
  // A long poll is answered by a send.
  const waiting = q.claim({ waitMs: 10000 });
  await q.send("wake");
  const woke = await waiting;
  assert.equal(woke[0].payload, "wake");
  // Ack-and-claim-next in one call.
  await q.send("next");
  const next = await q.claim({ ack: woke[0].receipt });
  assert.equal(next[0].payload, "next");
  await next[0].ack();
});

// Regression: a claim aborted as the server was taking a message for it
// lost the answer, and the message stayed leased to no one until its
// lease ran out (with maxAttempts 1, a dead letter). Now the claim is
// still answered: each time, the message is in its answer or still ready.
test("a waiting claim cut short by its signal answers with what the server took", async () => {
  const q = client.queue("cut-claims");
  await q.create({ maxAttempts: 1 });
  const waiting = async () => Number(/^sqlq_server_waiting_consumers (\d+)/m.exec(await client.metrics())?.[1]);
  let answered = 0;
  for (let i = 0; i < 20; i++) {
    const ctl = new AbortController();
    const claim = q.claim({ waitMs: 30000, signal: ctl.signal });
    await waitFor("the claim to wait", async () => (await waiting()) === 1);
    await q.send(`m${i}`);
    ctl.abort();
    const got = await claim;
    if (got.length === 1) {
      answered++;
      assert.equal(got[0].payload, `m${i}`);
      await got[0].ack();
    } else {
      const { stats } = await q.stats();
      assert.equal(stats.leased, 0, JSON.stringify(stats));
      const [m] = await q.claim();
      assert.equal(m.payload, `m${i}`);
      await m.ack();
    }
  }
  const { stats } = await q.stats();
  assert.equal(stats.acks, 20, JSON.stringify(stats));
  assert.equal(stats.ready + stats.leased, 0, JSON.stringify(stats));
  assert.equal((await q.dead()).length, 0);
  // Aborted before it went out: refused at once, nothing claimed.
  const early = new AbortController();
  early.abort();
  await assert.rejects(q.claim({ waitMs: 30000, signal: early.signal }),
                       (e) => e instanceof SqlqError && e.code === "aborted");
  await q.drop();
});

test("messages: by id, listing, count, changes, bulk", async () => {
  const q = client.queue("msgs");
  await q.create();
  const ids = [];
  for (let i = 0; i < 5; i++) {
    ids.push((await q.send(`m${i}`, { delayMs: 3600000, headers: { tenant: i % 2 ? "acme" : "other" } })));
  }
  const one = await q.message(ids[0]);
  assert.equal(one.state, "delayed");
  assert.equal(one.payload, "m0");
  const page = await q.messages({ state: "delayed", limit: 2 });
  assert.equal(page.messages.length, 2);
  assert.ok(page.nextCursor);
  const all = [];
  for await (const m of q.iterMessages({ state: "delayed", limit: 2 })) all.push(m.id);
  assert.deepEqual(all, ids);
  assert.equal(await q.count({ header: { name: "tenant", value: "acme" } }), 2);
  assert.equal(await q.count({ payloadPrefix: "m1" }), 1);
  assert.equal(await q.retryMessage(ids[0]), 1);
  assert.equal((await q.message(ids[0])).state, "ready");
  assert.equal(await q.setPriority(ids[1], 7), 1);
  assert.equal((await q.message(ids[1])).priority, 7);
  assert.equal(await q.rescheduleMessage(ids[1], new Date(Date.now() + 60000)), 1);
  assert.equal(await q.deleteMessage(ids[2]), 1);
  assert.equal(await q.bulk("priority", { ids: [ids[3], ids[4]], priority: -1 }), 2);
  assert.equal(await q.bulk("reschedule", { filter: { minPriority: -1, maxPriority: -1 },
                                            runAt: new Date(Date.now() + 120000) }), 2);
  assert.equal(await q.bulk("retry", { ids: [ids[3]] }), 1);
  assert.equal(await q.cancelMessage(ids[3]), 1);
  assert.equal((await q.message(ids[3])).state, "dead");
  assert.equal(await q.bulk("cancel", { filter: { header: { name: "tenant", value: "acme" } } }), 1);
  assert.equal(await q.bulk("delete", { ids: [ids[3]], state: "dead" }), 1);
  assert.equal(await q.bulk("delete", { filter: {} }), 2);
});

test("dead letters and archive", async () => {
  const q = client.queue("dl");
  await q.create({ maxAttempts: 1, archive: true });
  await q.sendBatch([{ payload: "x" }, { payload: "y" }, { payload: "z" }]);
  const got = await q.claim({ max: 3 });
  assert.equal(await got[0].nack({ error: "bad x" }), "dead");
  assert.equal(await got[1].nack({ error: "bad y" }), "dead");
  await got[2].ack();
  const dead = await q.dead({ limit: 10 });
  assert.deepEqual(dead.map((d) => d.lastError), ["bad x", "bad y"]);
  assert.equal(dead[0].errors[0].error, "bad x");
  assert.equal((await q.dead({ afterId: dead[0].id })).length, 1);
  assert.equal(await q.redrive({ ids: [dead[0].id] }), 1);
  const back = await q.claim();
  assert.equal(back[0].payload, "x");
  await back[0].nack({ error: "again" });
  assert.equal(await q.redrive({ all: true }), 2);
  for (const m of await q.claim({ max: 2 })) await m.nack({ error: "last" });
  assert.equal(await q.purgeDead(), 2);
  const arch = await q.archive({ limit: 10 });
  assert.equal(arch.length, 1);
  assert.equal(arch[0].payload, "z");
});

test("topics: create, subscribe with a filter, publish, unsubscribe, drop", async () => {
  const t = client.topic("signups");
  assert.deepEqual(await t.create(), { name: "signups", kind: "topic" });
  await assert.rejects(t.create(), AlreadyExists);
  const mail = client.queue("t-mail"), crm = client.queue("t-crm");
  await mail.create();
  await crm.create();
  // Nobody subscribes: nothing is stored.
  assert.deepEqual(await t.publish("x"), []);
  assert.equal((await t.subscribe("t-mail")).created, true);
  const sub = await t.subscribe("t-crm", { filter: { tenant_id: "eu" } });
  assert.deepEqual(sub.filter, { tenant_id: "eu" });
  await assert.rejects(t.subscribe("t-crm", { filter: { "bad key": "x" } }), BadRequest);
  await assert.rejects(t.subscribe("t-nope"), NotFound);
  const subs = await t.subscriptions();
  assert.deepEqual(subs.map((s) => s.queue), ["t-crm", "t-mail"]);
  assert.deepEqual(subs[0].filter, { tenant_id: "eu" });
  assert.ok(subs[0].subscribedAt);
  assert.equal((await client.topics()).find((x) => x.name === "signups").subscriptions, 2);
  let d = await t.publish({ user: 7 }, { headers: { tenant_id: "eu" }, priority: 3 });
  assert.deepEqual(d.map((x) => x.queue).sort(), ["t-crm", "t-mail"]);
  d = await t.publishBatch([{ payload: "a", headers: { tenant_id: "us" } },
                            { payload: "b", headers: { tenant_id: "eu" } }]);
  assert.deepEqual(d.map((x) => [x.queue, x.message]).sort(),
                   [["t-crm", 1], ["t-mail", 0], ["t-mail", 1]]);
  const got = await crm.claim({ max: 10 });
  assert.deepEqual(got.map((m) => m.payload), [{ user: 7 }, "b"]);
  assert.equal(got[0].priority, 3);
  assert.equal((await mail.claim({ max: 10 })).length, 3);
  await t.unsubscribe("t-crm");
  await assert.rejects(t.unsubscribe("t-crm"), NotFound);
  await t.drop();
  await assert.rejects(t.publish("x"), NotFound);
});

test("rings, rotations, schedules, /v1/all, health, metrics", async () => {
  const r = client.ring("views");
  assert.equal((await r.create({ capacity: 2 })).capacity, 2);
  for (const v of ["a", "b", "c"]) await r.push("article 1", v);
  const e = await r.read("article 1", { order: "newest", limit: 10 });
  assert.deepEqual(e.map((x) => x.payload), ["c", "b"]);
  assert.deepEqual((await r.read("article 1", { order: "oldest", afterSeq: e[1].seq })).map((x) => x.payload), ["c"]);
  assert.deepEqual(await r.groups(), [{ group: "article 1", entries: 2 }]);
  assert.equal((await r.stats()).pushes, 3);
  assert.equal(await r.deleteEntry("article 1", e[0].seq), 1);
  assert.equal(await r.deleteGroup("article 1"), 1);
  assert.ok((await client.rings()).some((x) => x.name === "views"));

  const rot = client.rotation("relays");
  await rot.create({ maxFailures: 1 });
  await rot.add("smtp1", "10.0.0.1:25");
  await rot.add("smtp2", "10.0.0.2:25");
  const [first] = await rot.next(1);
  assert.equal(first.key, "smtp1");
  assert.equal((await rot.fail("smtp1")).parked, true);
  assert.equal((await rot.reset("smtp1")).parked, false);
  assert.equal((await rot.ok("smtp2")).failures, 0);
  assert.equal((await rot.items()).length, 2);
  await rot.remove("smtp2");
  assert.equal((await rot.stats()).items, 1);
  assert.ok((await client.rotations()).some((x) => x.name === "relays"));

  await client.queue("reports").create();
  const sch = client.schedule("daily");
  const made = await sch.create({ cron: "30 9 * * mon-fri", queue: "reports", timeZone: "Europe/Berlin",
                                  payload: { report: "daily" }, kind: "report.daily" });
  assert.equal(made.timeZone, "Europe/Berlin");
  assert.equal(made.kind, "report.daily");
  assert.deepEqual(made.payload, { report: "daily" });
  assert.equal((await sch.pause()).paused, true);
  assert.equal((await sch.resume()).paused, false);
  assert.equal((await sch.get()).queue, "reports");
  assert.equal((await client.schedules()).length, 1);
  await sch.drop();

  const all = await client.all();
  assert.ok(all.queues.some((x) => x.name === "reports"), JSON.stringify(all));
  assert.deepEqual([all.rings.map((x) => x.name), all.rotations.map((x) => x.name)], [["views"], ["relays"]]);
  const ov = await client.overview();  // read at most once a second: may lag
  assert.ok(Array.isArray(ov.queues) && typeof ov.at === "string");
  assert.equal(await client.health(), true);
  assert.equal(await client.ready(), true);
  assert.match(await client.metrics(), /sqlq_/);
  await r.drop();
  await rot.drop();
});

test("errors carry the server's code, message and status", async () => {
  const q = client.queue("errs");
  await q.create();
  await assert.rejects(q.create(), (e) => e instanceof AlreadyExists && e.code === "already_exists" && e.status === 409 &&
                                          /errs/.test(e.message));
  await assert.rejects(q.claim({ max: 0 }), (e) => e instanceof BadRequest && e.code === "invalid_argument" && e.status === 400);
  await assert.rejects(q.claim({ waitMs: 10 ** 9 }), (e) => e.code === "wait_too_long");
  await assert.rejects(client.queue("bad name!").create(), (e) => e.code === "invalid_argument");
  // Nothing listening: a connection error, status 0, after the safe retries.
  const gone = new Client("http://127.0.0.1:9", { retries: 1 });
  await assert.rejects(gone.queues(), (e) => e instanceof ConnectionFailed && e instanceof SqlqError &&
                                             e.status === 0 && e.sent === false);
  gone.close();
});

test("tokens: sent as a bearer, refused without", async () => {
  const fs = await import("node:fs");
  const path = await import("node:path");
  const { tempDir } = await import("./server.mjs");
  const dir = tempDir();
  fs.writeFileSync(path.join(dir, "tokens.txt"), "secret-token-1 admin:*\n");
  const s = await startServer(dir, { args: ["--tokens", path.join(dir, "tokens.txt")] });
  try {
    const anon = new Client(s.url);
    await assert.rejects(anon.queues(), (e) => e instanceof Unauthorized && e.code === "unauthorized" && e.status === 401);
    anon.close();
    const c = new Client(s.url, { token: "secret-token-1" });
    await c.queue("t").create();
    assert.equal((await c.queues()).length, 1);
    c.close();
  } finally {
    await s.stop();
  }
});
