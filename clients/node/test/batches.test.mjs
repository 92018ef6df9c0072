// Batches against a real `sqlq serve`: members in two queues run by real
// workers at once (one of them dying), the callback claimed once with the
// counts; the status by id; a cancel; a taken id and bad input refused and
// nothing stored.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, Worker, NotFound, AlreadyExists, BadRequest, Permanent } from "../index.js";
import { useServer, client } from "./server.mjs";

useServer((url) => new Client(url));

function start(t, queues, handler) {
  const w = new Worker(client, queues, handler, { waitMs: 500, logger: null,
                                                  installSignalHandlers: false });
  const done = w.run();
  t.after(async () => { await w.stop(); await done; });
  return w;
}

test("workers end the members; the callback comes once, with the counts", async (t) => {
  for (const n of ["b-images", "b-mail", "b-done"]) await client.queue(n).create({ maxAttempts: 3 });
  const members = [
    ...Array.from({ length: 20 }, (_, i) => ({ queue: "b-images", payload: `${i}.png` })),
    { queue: "b-images", payload: "corrupt.png" },
    ...Array.from({ length: 10 }, (_, i) => ({ queue: "b-mail", payload: { to: i } })),
  ];
  const sent = await client.createBatch(members, { queue: "b-done", payload: { album: 7 }, kind: "album.done" },
                                        { id: "album-7" });
  assert.equal(sent.id, "album-7");
  assert.equal(sent.members.length, 31);
  let st = await client.batch("album-7");
  assert.deepEqual([st.total, st.pending, st.done], [31, 31, false]);
  assert.deepEqual(st.queues, ["b-images", "b-mail"]);
  assert.equal(st.callbackQueue, "b-done");
  await assert.rejects(client.createBatch(members.slice(0, 1), { queue: "b-done", payload: "x" },
                                          { id: "album-7" }), AlreadyExists);

  const seen = [];
  const handle = async (m) => {
    seen.push(m.batch);
    if (m.payload === "corrupt.png") throw new Permanent("corrupt");
  };
  // Two workers on each member queue: their acks meet at the server.
  start(t, ["b-images", "b-mail"], handle);
  start(t, ["b-images", "b-mail"], handle);
  const got = await client.queue("b-done").claim({ waitMs: 20000 });
  assert.equal(got.length, 1);
  const cb = got[0];
  assert.equal(cb.id, sent.callbackId);
  assert.equal(cb.kind, "album.done");
  assert.deepEqual(cb.payload, { album: 7 });
  assert.deepEqual(cb.batch, { id: "album-7", callback: true, total: 31, completed: 30, dead: 1,
                               cancelled: 0 });
  await cb.ack();
  assert.equal(seen.length, 31);
  assert.ok(seen.every((b) => b.id === "album-7" && !b.callback));
  st = await client.batch("album-7");
  assert.deepEqual([st.completed, st.dead, st.pending, st.done], [30, 1, 0, true]);
  assert.ok(st.doneAt);
  assert.equal((await client.queue("b-done").claim({ waitMs: 200 })).length, 0);
});

test("a cancel releases the callback; bad input stores nothing", async () => {
  for (const n of ["c-jobs", "c-done"]) await client.queue(n).create();
  const sent = await client.createBatch(
    Array.from({ length: 3 }, (_, i) => ({ queue: "c-jobs", payload: String(i) })),
    { queue: "c-done", payload: "cb" }, { retentionMs: 60000 });
  assert.equal(sent.id.length, 32);
  const [m] = await client.queue("c-jobs").claim();
  assert.deepEqual(m.batch, { id: sent.id });
  await m.ack();
  const st = await client.cancelBatch(sent.id);
  assert.deepEqual([st.completed, st.cancelled, st.done], [1, 2, true]);
  assert.ok(st.cancelledAt);
  const [cb] = await client.queue("c-done").claim();
  assert.equal(cb.batch.cancelled, 2);
  await assert.rejects(client.batch("nope"), NotFound);
  await assert.rejects(client.createBatch([{ queue: "nope", payload: "x" }], { queue: "c-done", payload: "cb" }),
                       NotFound);
  await assert.rejects(client.createBatch([{ queue: "c-jobs", payload: "x", dedup: "k" }],
                                          { queue: "c-done", payload: "cb" }), BadRequest);
  await assert.rejects(client.createBatch([{ payload: "x" }], { queue: "c-done", payload: "cb" }), TypeError);
  assert.equal((await client.queue("c-jobs").stats()).stats.sends, 3);
});
