// Type-checked only (`npm run typecheck`, tsc --noEmit): every operation
// as a TypeScript program would use it, so index.d.ts cannot drift from
// the API without this file failing to compile. exports.test.mjs checks
// that the declared methods are the ones the code has.

import {
  Client, Worker, Message, SqlqError, NotFound, StaleReceipt, ConnectionFailed,
  errorText, type QueueInfo, type MessageInfo,
} from "sqlq";

export async function everything(url: string): Promise<void> {
  const client = new Client(url, { token: "secret-token", timeoutMs: 5000, retries: 2 });
  const ok: boolean = (await client.health()) && (await client.ready());
  const text: string = await client.metrics();
  const all = await client.all();
  const names: string[] = all.queues.map((q: QueueInfo) => q.name);
  await client.overview();
  await client.queues(); await client.rings(); await client.rotations(); await client.schedules();

  const q = client.queue("emails");
  const info: QueueInfo = await q.create({ maxAttempts: 3, leaseMs: 60000, labels: { team: "mail" } });
  await q.change({ maxLeased: null, rateLimit: 5, groups: "fair" });
  const st = await q.stats();
  const ready: number = st.stats.ready + st.options.leaseMs;
  await q.pause(); await q.resume();
  const id: number = await q.send("hello", { priority: 5, delayMs: 0, dedup: "k", group: "g",
                                              headers: { tenant: "acme" } });
  await q.send({ to: "ada@example.com" }, { runAt: new Date() });
  await q.send(Buffer.from([0xff]));
  const sent = await q.sendBatch([{ payload: "a" }, { payload: new Uint8Array([1]), priority: 1 }]);
  const dup: boolean = sent.duplicate[0];
  const msgs = await q.claim({ max: 10, waitMs: 20000, leaseMs: 30000, worker: "w1" });
  const limitedBy: string | undefined = msgs.limitedBy;
  const m: Message = msgs[0];
  const payload = m.payload;
  if (Buffer.isBuffer(payload)) payload.readUInt8(0);
  const until: string = await m.extend(60000);
  await m.ack();
  const outcome: "retry" | "dead" = await m.nack({ error: "smtp 451", delayMs: 1000 });
  await q.ack(m.receipt);
  const results = await q.ackMany([m.receipt]);
  if (!results[0].ok) console.log(results[0].error.code);
  await q.nack(m.receipt, { error: "x" });
  await q.extend(m.receipt, 1000);
  await q.claim({ ack: m.receipt, waitMs: 1000 });
  const one: MessageInfo = await q.message(id);
  const page = await q.messages({ state: "ready", header: { name: "tenant", value: "acme" }, limit: 10 });
  const cursor: string | null = page.nextCursor;
  for await (const x of q.iterMessages({ minPriority: 1, payloadPrefix: "he" })) console.log(x.id);
  const n: number = await q.count({ enqueuedAfter: new Date() });
  await q.deleteMessage(id); await q.retryMessage(id); await q.cancelMessage(id);
  await q.rescheduleMessage(id, new Date()); await q.setPriority(id, 3);
  await q.bulk("retry", { filter: { state: "dead" } });
  await q.bulk("priority", { ids: [1, 2], priority: -1 });
  await q.bulk("delete", { ids: [1], state: "dead" });
  const dead = await q.dead({ limit: 10, afterId: 0 });
  const lastError: string = dead[0].lastError;
  await q.redrive({ ids: [dead[0].id] }); await q.redrive({ all: true });
  await q.purgeDead();
  const arch = await q.archive({ limit: 10 });
  const completedAt: string = arch[0].completedAt;
  await q.history();
  const purged: number = await q.purge();
  await q.drop();

  const r = client.ring("views");
  await r.create({ capacity: 10 });
  const entry = await r.push("article-42", "ada");
  await r.read("article-42", { limit: 10, order: "newest", afterSeq: entry.seq });
  await r.groups(); await r.stats();
  await r.deleteEntry("article-42", entry.seq); await r.deleteGroup("article-42"); await r.drop();

  const rot = client.rotation("relays");
  await rot.create({ maxFailures: 3 });
  await rot.add("smtp1", "10.0.0.1:25");
  const [item] = await rot.next(1);
  const parked: boolean = (await rot.fail(item.key)).parked;
  await rot.ok("smtp1"); await rot.reset("smtp1"); await rot.items(); await rot.stats();
  await rot.remove("smtp1"); await rot.drop();

  const s = client.schedule("daily");
  await s.create({ cron: "30 9 * * mon-fri", queue: "emails", timeZone: "Europe/Berlin",
                   payload: { report: "daily" }, catchUp: 1 });
  const next: string | null = (await s.get()).nextTick;
  await s.pause(); await s.resume(); await s.drop();

  const w = new Worker(client, "emails", async (msg: Message) => {
    msg.signal?.throwIfAborted();
    if (msg.attempt > 2) throw new Error("give up");
  }, { concurrency: 4, waitMs: 20000, shutdownTimeoutMs: 30000, name: "host-7", logger: null });
  new Worker(new Client(url, { logger: console }), "emails", () => {}, { logger: console });
  const done: Promise<void> = w.run();
  await w.stop();
  await done;
  const acked: number = w.stats.acked;

  try {
    await q.stats();
  } catch (e) {
    if (e instanceof NotFound || e instanceof StaleReceipt) console.log(e.code, e.status);
    else if (e instanceof ConnectionFailed) console.log(e.sent);
    else if (e instanceof SqlqError) console.log(e.retryAfterMs, errorText(e));
  }
  client.close();
  console.log(ok, text, names, info, ready, dup, limitedBy, until, outcome, one, cursor, n,
              lastError, completedAt, purged, parked, next, acked);
}
