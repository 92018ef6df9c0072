// Type-checked only (`npm run typecheck`, tsc --noEmit): every operation
// as a TypeScript program would use it, so index.d.ts cannot drift from
// the API without this file failing to compile. exports.test.mjs checks
// that the declared methods are the ones the code has.

import {
  Client, Worker, Message, SqlqError, NotFound, StaleReceipt, ConnectionFailed,
  errorText, Snooze, RetryAfter, Permanent, Cancel, type QueueInfo, type MessageInfo,
  JobFailed, ResultTimeout, type ResultInfo, type Json,
  Workflow, Step, chain, group, chord, findWorkflow, cancelWorkflow, retryWorkflow,
} from "sqlq";
import { runInline } from "sqlq/testing";

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
  const expired: number = st.stats.expired;
  await q.pause(); await q.resume();
  const id: number = await q.send("hello", { priority: 5, delayMs: 0, dedup: "k", group: "g",
                                              headers: { tenant: "acme" } });
  await q.send({ to: "ada@example.com" }, { runAt: new Date() });
  await q.send(Buffer.from([0xff]));
  const sent = await q.sendBatch([{ payload: "a" }, { payload: new Uint8Array([1]), priority: 1 },
                                  { payload: { to: "ada" }, kind: "email.send" }]);
  await q.send({ to: "ada" }, { kind: "email.send", timeoutMs: 10000, expireAfterMs: 3600000 });
  await q.sendBatch([{ payload: "b", timeoutMs: 500 }, { payload: "c", expireAfterMs: 60000 }]);
  await q.send("stale later", { expireAfterMs: 60000, onExpiry: "drop" });
  await q.send("once", { maxAttempts: 1, backoffMs: 30000, backoffMaxMs: 600000 });
  await q.sendBatch([{ payload: "d", maxAttempts: 3, backoffMs: 1000 }]);
  await q.send("then", { dependsOn: [id], ifDependencyDies: "run" });
  await q.sendBatch([{ payload: "x" }, { payload: "y", dependsOnBatch: [0], ifDependencyDies: "wait" }]);
  const all2: number[] = (await client.sendAll([{ queue: "a", payload: 1 },
                                                { queue: "b", payload: 2, dependsOnBatch: [0] }])).ids;
  const flow: Workflow = chain({ queue: "fetch", payload: "a.png" },
                               group({ queue: "resize", payload: 1 }, { queue: "resize", payload: 2 }));
  const step: Step = flow.add({ queue: "mail", payload: "done", kind: "mail" },
                              { after: [flow.steps[0], 12, { queue: "fetch", id: all2[0] }] });
  const flowIds: number[] = (await client.sendFlow(chord([{ queue: "p", payload: 1 }], flow))).ids;
  const wid: number = (await flow.send(client)).ids[step.index] + flowIds.length;
  const waits: number[] | undefined = (await q.message(wid)).waitsFor;
  const found: number = (await flow.find(client)).length + (await findWorkflow(client, flow.id, flow.queues())).length;
  const cancelled: number = (await flow.cancel(client)) + (await cancelWorkflow(client, flow.id, ["a"])) + found;
  const retried: number = (await flow.retry(client)) + (await retryWorkflow(client, flow.id, ["a"])) + cancelled;
  const waitingNow: number = (await q.stats()).stats.waiting + (waits?.length ?? 0);
  const dup: boolean = sent.duplicate[0];
  const msgs = await q.claim({ max: 10, waitMs: 20000, leaseMs: 30000, worker: "w1" });
  const limitedBy: string | undefined = msgs.limitedBy;
  const m: Message = msgs[0];
  const payload = m.payload;
  if (Buffer.isBuffer(payload)) payload.readUInt8(0);
  const until: string = await m.extend(60000);
  await m.ack();
  const parentQueues: string[] = m.parents.map((p) => p.queue);
  const parentResults: Map<number, unknown> = await m.parentResults();
  const outcome: "retry" | "dead" = await m.nack({ error: "smtp 451", delayMs: 1000 });
  const kind: string | undefined = m.kind;
  const limits: [number | undefined, string | undefined] = [m.timeoutMs, m.expiresAt];
  const dropped: "drop" | undefined = m.onExpiry;
  const ownAttempts: number | undefined = m.maxAttempts;
  const snoozed: "retry" | "dead" | "snoozed" = await m.nack({ action: "snooze", delayMs: 5000 });
  await q.nack(m.receipt, { action: "dead", error: "cancelled: user deleted" });
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
  const n: number = await q.count({ enqueuedAfter: new Date(), kind: "email.send" });
  await q.messages({ kind: "email.send" });
  const kinds: Array<string | undefined> = [one.kind, (await q.dead())[0].kind, (await q.archive())[0].kind];
  const ownLimits: Array<number | string | undefined> = [one.timeoutMs, one.expireAfterMs, one.expiresAt];
  const ownPolicy: Array<number | undefined> = [one.maxAttempts, one.backoffMs, one.backoffMaxMs];
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
                   payload: { report: "daily" }, catchUp: 1, kind: "report.daily",
                   timeoutMs: 60000, expireAfterMs: 600000 });
  const next: string | null = (await s.get()).nextTick;
  const tickTimeout: number | undefined = (await s.get()).timeoutMs;
  // A schedule's messages take the queue's retry policy.
  // @ts-expect-error
  await s.create({ cron: "* * * * *", queue: "emails", maxAttempts: 1 });
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

  const jobs = new Worker(client, {
    queues: ["emails", q],
    handlers: {
      "email.send": async (msg, { signal }) => {
        signal.throwIfAborted();
        if (msg.kind === "email.send" && msg.attempt > 5) throw new Permanent(new Error("bounced"));
        if (msg.attempt > 3) throw new RetryAfter(60000, "rate limited");
      },
      "billing/invoice": { handler: async () => { throw new Snooze(1000); }, timeoutMs: 10000 },
      "*": () => { throw new Cancel("nobody wants it"); },
    },
    concurrency: 8, timeoutMs: 30000, unknownKind: "snooze", unknownKindDelayMs: 10000,
  });
  new Worker(client, "emails", { handlers: { "email.send": () => {} }, unknownKind: "dead" });
  new Worker(client, ["emails", "sms"], async (_m, ctx) => ctx.signal.aborted, { timeoutMs: 5 });
  const perQueue: number = jobs.stats.queues["emails"].snoozed;
  jobs.use({ before: (msg, ctx) => console.log(msg.id, ctx.queue) })
    .use({ onError: (_msg, e) => { if (e instanceof TypeError) throw new Permanent(e); } });
  const inline = await jobs.drainInline({ queue: "emails" });
  const firstOutcome: "acked" | "retry" | "dead" | "snoozed" | null = inline[0].outcome;
  const firstResult: unknown = inline[0].result;
  const res: ResultInfo = await client.result("emails", 7, { timeoutMs: 30000 });
  const state: "ready" | "delayed" | "leased" | "completed" | "dead" = res.state;
  const kept: Json | undefined = (await q.result(7, { timeoutMs: null })).result;
  const now = await q.resultInfo(7, { waitMs: 1000 });
  console.log(firstResult, state, kept, now.progress, now.note, now.progressAt, now.completedAt);
  await m.progress(10); await m.progress(20, "note"); await m.ack({ result: [1, "a"], resultTtlMs: 60000 });
  await q.ack(m.receipt, { result: null }); await q.progress(m.receipt, 1.5, { any: ["json"] });
  try {
    await client.result(q, 7);
  } catch (e) {
    if (e instanceof JobFailed) console.log(e.id, e.error, e.attempts);
    if (e instanceof ResultTimeout) console.log(e.id, e.info?.state);
  }
  new Worker(client, "emails", async (msg) => {
    await msg.progress(50, { step: "render" });
    return { pages: 3 };
  }, { resultTtlMs: 3600000 });
  console.log(firstOutcome, inline[0].message.kind, inline[0].error);
  const ran = await runInline(client, "emails", { "email.send": async (msg, { signal }) => msg.id },
                              { unknownKind: "dead" });
  await runInline(client, ["emails", "sms"], () => {});
  console.log(ran.map((r) => [r.message.id, r.outcome]));
  const queueNames: string[] = jobs.queues;
  const live = await client.workers({ queue: "emails" });
  const inHand: number[] = live.flatMap((lw) => lw.jobs.map((j) => j.id));
  await client.reportWorker(jobs.id, { name: "mailer", queues: ["emails"], ttlMs: 30000 });
  const removed: number = await client.removeWorker(jobs.id);
  new Worker(client, "emails", () => {}, { report: false, reportTtlMs: 3000 });
  console.log(inHand, removed);

  try {
    await q.stats();
  } catch (e) {
    if (e instanceof NotFound || e instanceof StaleReceipt) console.log(e.code, e.status);
    else if (e instanceof ConnectionFailed) console.log(e.sent);
    else if (e instanceof SqlqError) console.log(e.retryAfterMs, errorText(e));
  }
  client.close();
  console.log(ok, text, names, info, ready, dup, limitedBy, until, outcome, one, cursor, n,
              lastError, completedAt, purged, parked, next, acked, kind, snoozed, kinds, perQueue,
              queueNames, limits, ownLimits, tickTimeout);
}
