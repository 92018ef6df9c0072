// The client: every operation of the HTTP API of `sqlq serve`.

import { randomUUID } from "node:crypto";

import { Transport, toError, backoffMs, sleep, describe } from "./http.js";
import { ConnectionFailed, JobFailed, NotFound, ResultTimeout, SqlqError } from "./errors.js";
import { fromWire, toWire, payloadField, seg, query } from "./wire.js";
import { inject } from "./tracing.js";

// The longest waitMs of one request for a result (the server's default
// limit); a server with a lower one says so, and the client follows it.
const RESULT_WAIT_MS = 20000;

// Whether an error is for want of the server (unreachable, restarting,
// busy, failing): asked again while awaiting a result.
const passing = (e) => e instanceof ConnectionFailed ||
  (e instanceof SqlqError && (e.status >= 500 || e.status === 429));

// After a wait_too_long error, the waitMs to ask for instead of `chunk`:
// the server's limit ("... exceeds the server's limit of 20000"), or half
// of chunk when it does not say; null when nothing shorter is left.
function waitLimit(e, chunk) {
  const m = /limit of (\d+)/.exec(e.message);
  const smaller = m ? Number(m[1]) : Math.floor(chunk / 2);
  return smaller >= 0 && smaller < chunk ? smaller : null;
}

// A result reply as the client returns it: the job's result and note are
// the application's JSON, kept as they are.
function resultInfo(r) {
  const { result, note, ...rest } = r;
  const out = fromWire(rest);
  if ("result" in r) out.result = result;
  if ("note" in r) out.note = note;
  return out;
}

export class Client {
  // new Client("http://127.0.0.1:8080", {token, timeoutMs, retries, retryForMs,
  //   idempotentSends, ca, agent})
  constructor(url, options = {}) {
    this.http = new Transport(url, options);
    this.url = this.http.url.href;
    // Every message sent without a dedup key gets one of its own, so that a
    // send whose reply was lost is retried and stored once.
    this.idempotentSends = options.idempotentSends ?? true;
  }

  // POST /v1/messages: [{queue, payload, ...a send's options}] → {ids,
  // duplicate}, to several queues in one transaction: all are stored, or
  // none (a missing queue stores nothing). dependsOnBatch indexes count
  // over the whole list.
  async sendAll(messages) {
    for (const m of messages) {
      if (!m.queue) throw new TypeError("a message of sendAll names no queue");
    }
    return this._sendMessages("/v1/messages", messages);
  }
  // Sends a workflow (flow.js: chain, group, chord, Workflow) in one
  // transaction → {ids, duplicate}, ids in the order its jobs were added.
  async sendFlow(flow) { return flow.send(this); }

  // POST /v1/batches: the members ([{queue, payload, ...a send's options}],
  // no dedup) and the callback ({queue, payload, ...}) in one transaction.
  // The callback waits for every member and is ready, once, when the last
  // has completed or died; claimed, its `batch` holds the counts ({id,
  // callback: true, total, completed, dead, cancelled}). `id`: the batch's
  // id (made when none); `retentionMs`: how long its status stays readable
  // once it is done [7 days]. → {id, members: [ids], callbackId}; rejects
  // with AlreadyExists for an id still known.
  async createBatch(members, callback, { id, retentionMs } = {}) {
    for (const m of [...members, callback]) {
      if (!m?.queue) throw new TypeError("a member or the callback of createBatch names no queue");
    }
    const wire = members.map((m) => toWire(m));
    const cb = toWire(callback);
    await inject(wire);
    await inject([cb]);
    const body = { members: wire, callback: cb };
    if (id != null) body.id = id;
    if (retentionMs != null) body.retention_ms = retentionMs;
    return fromWire(await this._post("/v1/batches", body));
  }
  // GET /v1/batches/{id}: {id, total, completed, dead, cancelled, pending,
  // done, callbackQueue, callbackId, queues, createdAt}, and doneAt,
  // expiresAt, cancelledAt once they apply. NotFound for a batch not (or no
  // longer) known.
  async batch(id) { return fromWire(await this._get("/v1/batches/" + seg(id))); }
  // POST /v1/batches/{id}/cancel: cancels the members that have not ended
  // (the callback then comes, with the counts) → the batch after.
  async cancelBatch(id) {
    return fromWire(await this._post("/v1/batches/" + seg(id) + "/cancel", undefined,
                                     { idempotent: true }));
  }

  async _sendMessages(path, messages) {
    const wire = messages.map((m) => toWire(m));
    await inject(wire);
    if (this.idempotentSends) {
      for (const m of wire) m.dedup ??= "idem:" + randomUUID().replaceAll("-", "");
    }
    // With a dedup key on every message a repeat stores nothing twice.
    const idempotent = wire.length > 0 && wire.every((m) => m.dedup != null);
    return await this._post(path, { messages: wire }, { idempotent });
  }

  // Frees the kept-alive connections (the process can then exit).
  close() { this.http.close(); }

  // The same client (connections, token, logger) whose calls are not
  // retried: a worker retries by itself, with its own backoff and logs.
  _withoutRetries() {
    const http = Object.assign(Object.create(Object.getPrototypeOf(this.http)), this.http,
                               { retries: 0, ownAgent: false });
    return Object.assign(Object.create(Object.getPrototypeOf(this)), this, { http });
  }

  async _get(path, opts) {
    return this.http.call("GET", path, { idempotent: true, ...opts });
  }
  async _post(path, body, opts) { return this.http.call("POST", path, { body, ...opts }); }
  async _patch(path, body) { return this.http.call("PATCH", path, { body, idempotent: true }); }
  async _delete(path) { return this.http.call("DELETE", path); }

  queue(name) { return new Queue(this, name); }
  ring(name) { return new Ring(this, name); }
  rotation(name) { return new Rotation(this, name); }
  topic(name) { return new Topic(this, name); }
  schedule(name) { return new Schedule(this, name); }

  async queues() { return fromWire((await this._get("/v1/queues")).queues); }
  async rings() { return fromWire((await this._get("/v1/rings")).rings); }
  async rotations() { return fromWire((await this._get("/v1/rotations")).rotations); }
  async topics() { return fromWire((await this._get("/v1/topics")).topics); }
  async schedules() { return fromWire((await this._get("/v1/schedules")).schedules); }
  // Every queue, ring and rotation the token may see.
  async all() { return fromWire(await this._get("/v1/all")); }
  async overview() { return fromWire(await this._get("/v1/overview")); }

  // The live workers (each Worker reports itself while it runs), of one
  // queue or of every queue the token may see.
  async workers({ queue } = {}) {
    return fromWire((await this._get("/v1/workers" + query({ queue }))).workers);
  }
  // PUT /v1/workers/{id}: a worker's report {name, host, pid, queues, kinds,
  // concurrency, jobs: [{queue, id, since}], startedAt, ttlMs} → {id, ttlMs}.
  async reportWorker(id, report) {
    return fromWire(await this.http.call("PUT", "/v1/workers/" + seg(id),
                                         { body: toWire(report), idempotent: true }));
  }
  // DELETE /v1/workers/{id}: how many reports went (1).
  async removeWorker(id) { return (await this._delete("/v1/workers/" + seg(id))).removed; }

  // Awaits the result of job `id` of `queue`: long polls the server until
  // the job is completed, then resolves with what the server has of it
  // ({id, state: "completed", result, completedAt, progress, note,
  // progressAt, attempts}; no `result` when it was acked without one).
  // Rejects with JobFailed (id, error, attempts) when it became a dead
  // letter, ResultTimeout when it is neither after `timeoutMs` [60000;
  // null: no limit], NotFound when the queue knows nothing of it (never
  // sent, acked without a result, or its result ran out). A server that is
  // restarting, unreachable or answering 5xx meanwhile is asked again,
  // with a short backoff, until the timeout. `signal` aborts the wait.
  async result(queue, id, { timeoutMs = 60000, signal } = {}) {
    const q = typeof queue === "string" ? this.queue(queue) : queue;
    const deadline = timeoutMs == null ? Infinity : Date.now() + Math.max(0, timeoutMs);
    let chunk = RESULT_WAIT_MS;
    let fails = 0;  // failed tries in a row
    let early = 0;  // replies in a row that came back before their wait
    let info = null;
    let last;
    for (;;) {
      const waitMs = Math.floor(Math.max(0, Math.min(deadline - Date.now(), chunk)));
      const asked = Date.now();
      try {
        info = await q._resultOnce(id, waitMs, { retries: 0, signal });
        fails = 0;
        last = undefined;
      } catch (e) {
        if (e instanceof SqlqError && e.code === "wait_too_long") {
          const smaller = waitLimit(e, chunk);
          if (smaller === null) throw e;
          chunk = smaller;
          continue;
        }
        if (!passing(e) || signal?.aborted) throw e;
        last = e;
        const pause = backoffMs(fails++, 50, 1000);
        if (Date.now() + pause >= deadline) throw new ResultTimeout(id, timeoutMs, info, e);
        this.http.logger.warn(`sqlq: waiting for the result of job ${id}: ${describe(e)}; ` +
                              `asking again in ${(pause / 1000).toFixed(2)}s`, { code: e.code, id });
        await sleep(pause, signal);
        continue;
      }
      if (info.state === "completed") return info;
      if (info.state === "dead") throw new JobFailed(id, info.error, info.attempts ?? null, info);
      if (Date.now() >= deadline) throw new ResultTimeout(id, timeoutMs, info, last);
      // A reply long before its wait ended (a server stopping): not asked
      // again at once.
      if (waitMs > 0 && Date.now() - asked < waitMs / 2) {
        await sleep(Math.min(backoffMs(early++, 50, 1000), Math.max(0, deadline - Date.now())),
                    signal);
      } else {
        early = 0;
      }
    }
  }

  // GET /healthz: true when the server answers {"status":"ok"}.
  async health() { return (await this._get("/healthz", { retries: 0 }))?.status === "ok"; }
  // GET /readyz: true when the database takes writes; false on a 503.
  async ready() {
    try {
      return (await this._get("/readyz", { retries: 0 }))?.status === "ready";
    } catch (e) {
      if (e.status === 503) return false;
      throw e;
    }
  }
  // GET /metrics: Prometheus text.
  async metrics() {
    const r = await this.http.once("GET", "/metrics");
    if (r.status !== 200) throw toError("GET", "/metrics", r);
    return typeof r.body === "string" ? r.body : JSON.stringify(r.body);
  }
}

// A claimed message: its fields, and ack/nack/extend through its receipt.
export class Message {
  constructor(queue, m) {
    Object.assign(this, fromWire(m));
    // The [{queue, id}] of the messages it was sent to wait for, completed
    // or not: the server's, with the queue a workflow's header names where
    // the server has none (one that had completed before the send); [] for
    // a message sent without dependencies.
    this.parents = parentsOf(m);
    Object.defineProperty(this, "queue", { value: queue, enumerable: false });
    Object.defineProperty(this, "raw", { value: m, enumerable: false });
  }
  // ack({result, resultTtlMs}): with a result (any JSON value), the job's
  // result is kept for client.result().
  ack(options) { return this.queue.ack(this.receipt, options); }
  // Records how far the job has come: a finite number (a percentage, a
  // count), and an optional note (any JSON value, at most 4 KiB). Each
  // replaces the one before; it does not extend the lease.
  progress(value, note) { return this.queue.progress(this.receipt, value, note); }
  nack(options = {}) { return this.queue.nack(this.receipt, options); }
  // The results of its parents, one request each: a Map of id → result, in
  // the parents' order. A parent has one only when it was acked with a
  // result (a handler that returned a value) not yet run out; the others
  // are left out.
  async parentResults() {
    const out = new Map();
    for (const { queue, id } of this.parents) {
      if (!queue) continue; // its queue is not known: nor is its result
      let info;
      try {
        info = await this.queue.client.queue(queue).resultInfo(id);
      } catch (e) {
        if (e instanceof NotFound) continue;
        throw e;
      }
      if (info.state === "completed" && "result" in info) out.set(id, info.result);
    }
    return out;
  }
  async extend(leaseMs) {
    const until = await this.queue.extend(this.receipt, leaseMs);
    this.leaseExpiresAt = until;
    return until;
  }
}

// The header in which a workflow names a job's parents sent before it by
// queue and id, "fetch:12,resize:14": the queue of one that had completed
// before the send, which the server does not know.
export const PARENTS_HEADER = "sqlq-parents";

export function parseParents(text) {
  const out = [];
  for (const item of text.split(",")) {
    const t = item.trim();
    const at = t.lastIndexOf(":");
    const id = t.slice(at + 1);
    if (at > 0 && /^[0-9]+$/.test(id)) out.push({ queue: t.slice(0, at), id: Number(id) });
  }
  return out;
}

// A claimed message's parents: the server's "parents", with the queue the
// header names where the server has none (a message sent before servers
// kept them: the header's alone).
function parentsOf(m) {
  const named = parseParents(m.headers?.[PARENTS_HEADER] ?? "");
  if (!m.parents?.length) return named;
  const queueOf = new Map(named.map((p) => [p.id, p.queue]));
  return m.parents.map((p) => ({ queue: p.queue || queueOf.get(p.id) || "", id: p.id }));
}

// The listing filter as query parameters.
function filterQuery(f = {}) {
  let header = f.header;
  if (header && typeof header === "object") header = `${header.name}=${header.value}`;
  return {
    state: f.state, min_priority: f.minPriority, max_priority: f.maxPriority,
    dedup: f.dedup, group: f.group, header, payload_prefix: f.payloadPrefix,
    enqueued_after: f.enqueuedAfter, enqueued_before: f.enqueuedBefore, kind: f.kind,
  };
}

export class Queue {
  constructor(client, name) {
    this.client = client;
    this.name = name;
    this.path = "/v1/queues/" + seg(name);
  }

  // POST /v1/queues/{name}: {maxAttempts, leaseMs, ...} → the queue.
  async create(options = {}) {
    return fromWire(await this.client._post(this.path, toWire(options)));
  }
  // GET: {name, kind, stats, options}.
  async stats() { return fromWire(await this.client._get(this.path)); }
  async change(options) { return fromWire(await this.client._patch(this.path, toWire(options))); }
  async pause() { return fromWire(await this.client._post(this.path + "/pause")); }
  async resume() { return fromWire(await this.client._post(this.path + "/resume")); }
  async drop() { await this.client._delete(this.path); }
  async purge() { return (await this.client._post(this.path + "/purge")).purged; }
  async history() { return fromWire(await this.client._get(this.path + "/history")); }

  // One message: send(payload, {kind, timeoutMs, expireAfterMs, onExpiry,
  // maxAttempts, backoffMs, backoffMaxMs, priority, delayMs, runAt, dedup,
  // group, headers}) → its id (that of the message already there when
  // `dedup` matched one; sendBatch says which).
  // timeoutMs: the longest one attempt may run (the server leases it for
  // at most that, a Worker cuts its handler off there); expireAfterMs: a
  // dead letter unless started within it, or deleted instead with
  // onExpiry "drop" ("dead" is the default). A claimed message shows them
  // as timeoutMs, expiresAt and onExpiry ("drop" only). maxAttempts (the smaller of it and the
  // queue's applies), backoffMs and backoffMaxMs (the retry delay's base
  // and cap, instead of the queue's): the job's own retry policy; a
  // claimed message shows maxAttempts.
  async send(payload, options = {}) {
    const r = await this.sendBatch([{ ...options, payload }]);
    return r.ids[0];
  }
  // Many in one commit: [{payload, priority, ...}] → {ids, duplicate}.
  // With a dedup key on every message (one of its own unless the client's
  // idempotentSends is off) a send is retried like any safe request. Each
  // message carries the current trace context (tracing.js) unless its
  // headers have a traceparent.
  // dependsOn (ids), dependsOnBatch (indexes of earlier messages of the
  // batch) and ifDependencyDies ("cancel" [default], "run", "wait") make a
  // message wait for others (docs/semantics.md, "Dependencies").
  async sendBatch(messages) {
    return this.client._sendMessages(this.path + "/messages", messages);
  }

  // claim({max, leaseMs, waitMs, worker, ack, signal}) → [Message], with
  // `limitedBy`, `retryAfterMs`, `limited`, `paused` and `groupsBusy` set
  // when the server said so. `signal` ends a waiting claim early: once the
  // request went out, the claim is still answered, with the messages the
  // server took for it, if any (they are the caller's to work or give
  // back), else none.
  async claim({ max, leaseMs, waitMs, worker, ack, signal } = {}) {
    const body = toWire({ max, leaseMs, waitMs, worker, ack });
    const r = await this.client._post(this.path + "/claim", body, {
      signal,
      halfClose: true,
      timeoutMs: (waitMs ?? 0) + this.client.http.timeoutMs,
    });
    const out = r.messages.map((m) => new Message(this, m));
    if (r.limited_by !== undefined) out.limitedBy = r.limited_by;
    if (r.retry_after_ms !== undefined) out.retryAfterMs = r.retry_after_ms;
    if (r.limited !== undefined) out.limited = r.limited;
    if (r.paused !== undefined) out.paused = r.paused;
    if (r.groups_busy !== undefined) out.groupsBusy = r.groups_busy;
    return out;
  }

  // ack(receipt, {result, resultTtlMs}) → undefined, or throws. With a
  // result (any JSON value, null too; as large as the queue's
  // maxPayloadBytes, else a 413 BadRequest and nothing acked), the job's
  // result is kept in the ack's
  // transaction for resultTtlMs (1000 ms to 30 days; the server's default:
  // a day).
  async ack(receipt, { result, resultTtlMs } = {}) {
    const body = { receipt };
    if (result !== undefined) {
      body.result = result;
      if (resultTtlMs != null) body.result_ttl_ms = resultTtlMs;
    }
    await this.client._post(this.path + "/ack", body);
  }
  // progress(receipt, progress, note): the progress of a leased message, a
  // finite number, and an optional note (any JSON value, at most 4 KiB).
  // The latest replaces the one before; the lease is not extended.
  async progress(receipt, progress, note) {
    if (typeof progress !== "number" || !Number.isFinite(progress)) {
      throw new TypeError(`progress must be a finite number, not ${String(progress)}`);
    }
    const body = { receipt, progress };
    if (note !== undefined) body.note = note;
    await this.client._post(this.path + "/progress", body, { idempotent: true });
  }
  // resultInfo(id, {waitMs}): what the server has of job `id` now (one
  // request; with waitMs, held until it is completed or dead, or waitMs ran
  // out): {id, state, result, completedAt, progress, note, progressAt,
  // error, attempts}, each when known. NotFound when the queue knows
  // nothing of it.
  async resultInfo(id, { waitMs } = {}) { return this._resultOnce(id, waitMs); }
  async _resultOnce(id, waitMs, opts = {}) {
    const r = await this.client._get(`${this.path}/messages/${seg(id)}/result` +
                                     query({ wait_ms: waitMs || undefined }),
                                     { timeoutMs: (waitMs ?? 0) + this.client.http.timeoutMs,
                                       ...opts });
    return resultInfo(r);
  }
  // result(id, {timeoutMs, signal}): client.result(queue, id, ...) of this queue.
  async result(id, options) { return this.client.result(this, id, options); }
  // ackMany([receipts]) in one commit → one result per receipt:
  // {ok: true} or {ok: false, error: {code, message}}.
  async ackMany(receipts) {
    return (await this.client._post(this.path + "/ack", { receipts })).results;
  }
  // nack(receipt, {error, delayMs, action}) → "retry", "dead" or
  // "snoozed". action: "retry" (the default: a failed attempt), "dead" (a
  // dead letter now) or "snooze" (back after delayMs, the attempt not
  // counted).
  async nack(receipt, { error, delayMs, action } = {}) {
    const r = await this.client._post(this.path + "/nack",
                                      toWire({ receipt, error, delayMs, action }));
    return r.outcome;
  }
  // extend(receipt, leaseMs) → the new lease end (RFC 3339).
  async extend(receipt, leaseMs) {
    const r = await this.client.http.call("POST", this.path + "/extend",
      { body: { receipt, lease_ms: leaseMs }, idempotent: true });
    return r.lease_expires_at;
  }

  // Messages by id, listing and changes.
  async message(id) { return fromWire(await this.client._get(`${this.path}/messages/${seg(id)}`)); }
  // messages({state, minPriority, ..., limit, cursor}) → {messages, nextCursor}.
  async messages(filter = {}) {
    const q = query({ ...filterQuery(filter), limit: filter.limit, cursor: filter.cursor });
    return fromWire(await this.client._get(this.path + "/messages" + q));
  }
  // Every message the filter selects, page by page.
  async *iterMessages(filter = {}) {
    let cursor;
    do {
      const page = await this.messages({ ...filter, cursor });
      yield* page.messages;
      cursor = page.nextCursor;
    } while (cursor);
  }
  async count(filter = {}) {
    return (await this.client._get(this.path + "/messages/count" + query(filterQuery(filter)))).count;
  }
  async deleteMessage(id) { return (await this.client._delete(`${this.path}/messages/${seg(id)}`)).deleted; }
  async retryMessage(id) { return this._change(`/${seg(id)}/retry`); }
  async cancelMessage(id) { return this._change(`/${seg(id)}/cancel`); }
  async rescheduleMessage(id, runAt) { return this._change(`/${seg(id)}/reschedule`, toWire({ runAt })); }
  async setPriority(id, priority) { return this._change(`/${seg(id)}/priority`, { priority }); }
  // bulk("delete"|"cancel"|"retry"|"reschedule"|"priority",
  //      {ids, state} | {filter}, plus runAt or priority) → how many changed.
  async bulk(action, { ids, filter, state, runAt, priority } = {}) {
    return this._change("/" + seg(action), toWire({ ids, filter, state, runAt, priority }));
  }
  async _change(tail, body) {
    return (await this.client._post(this.path + "/messages" + tail, body)).changed;
  }

  // Dead letters and archive.
  async dead({ limit, afterId } = {}) {
    return fromWire((await this.client._get(this.path + "/dead" + query({ limit, after_id: afterId }))).dead);
  }
  // redrive({ids: [...]}) or redrive({all: true}) → how many went back.
  async redrive({ ids, all } = {}) {
    const body = all ? { all: true } : { ids };
    return (await this.client._post(this.path + "/dead/redrive", body)).redriven;
  }
  async purgeDead() { return (await this.client._delete(this.path + "/dead")).purged; }
  async archive({ limit, afterId } = {}) {
    return fromWire((await this.client._get(this.path + "/archive" + query({ limit, after_id: afterId }))).archive);
  }
}

export class Ring {
  constructor(client, name) {
    this.client = client;
    this.name = name;
    this.path = "/v1/rings/" + seg(name);
  }
  async create(options = {}) { return fromWire(await this.client._post(this.path, toWire(options))); }
  async stats() { return fromWire(await this.client._get(this.path)); }
  async drop() { await this.client._delete(this.path); }
  // push(group, payload) → the entry {seq, group, payload, pushedAt}.
  async push(group, payload) {
    return fromWire(await this.client._post(`${this.path}/groups/${seg(group)}`, payloadField(payload)));
  }
  // read(group, {limit, order: "newest"|"oldest", afterSeq}) → [entries].
  async read(group, { limit, order, afterSeq } = {}) {
    const q = query({ limit, order, after_seq: afterSeq });
    return fromWire((await this.client._get(`${this.path}/groups/${seg(group)}${q}`)).entries);
  }
  async groups() { return fromWire((await this.client._get(this.path + "/groups")).groups); }
  async deleteGroup(group) { return (await this.client._delete(`${this.path}/groups/${seg(group)}`)).deleted; }
  async deleteEntry(group, seq) {
    return (await this.client._delete(`${this.path}/groups/${seg(group)}/${seg(seq)}`)).deleted;
  }
}

// A subscription as the server gives it: camelCase fields, the filter's
// header names as they are.
const subscriptionOf = (s) => ({ ...fromWire(s), filter: s.filter });

// A topic: one publish stored in every subscribed queue whose header filter
// it matches, in one transaction (docs/semantics.md, "Topics").
export class Topic {
  constructor(client, name) {
    this.client = client;
    this.name = name;
    this.path = "/v1/topics/" + seg(name);
  }
  // AlreadyExists when a queue, ring, rotation or topic has the name.
  async create() { return fromWire(await this.client._post(this.path)); }
  // The subscriptions go; the queues stay.
  async drop() { await this.client._delete(this.path); }
  // subscribe(queue, {filter}) → {topic, queue, filter, created}: subscribes
  // the queue, or replaces its filter (created false), the headers a
  // message must carry with exactly these values to be delivered to it
  // (none: every message).
  async subscribe(queue, { filter } = {}) {
    const r = await this.client.http.call("PUT", `${this.path}/subscriptions/${seg(queue)}`, {
      body: filter ? { filter } : undefined, idempotent: true });
    return subscriptionOf(r);
  }
  // NotFound when the queue is not subscribed.
  async unsubscribe(queue) { await this.client._delete(`${this.path}/subscriptions/${seg(queue)}`); }
  // [{topic, queue, filter, subscribedAt}] by queue.
  async subscriptions() {
    return (await this.client._get(this.path + "/subscriptions")).subscriptions.map(subscriptionOf);
  }
  // publish(payload, {headers, priority, dedup, group, kind, ...}: a send's
  // options) → [{queue, message, id, duplicate}], one per queue that stored
  // it; [] when no subscription takes it (nothing stored).
  async publish(payload, options = {}) { return this.publishBatch([{ ...options, payload }]); }
  // Many in one commit; each delivery's `message` is its index in messages.
  async publishBatch(messages) {
    return fromWire((await this.client._sendMessages(this.path + "/messages", messages)).deliveries);
  }
}

export class Rotation {
  constructor(client, name) {
    this.client = client;
    this.name = name;
    this.path = "/v1/rotations/" + seg(name);
  }
  async create(options = {}) { return fromWire(await this.client._post(this.path, toWire(options))); }
  async stats() { return fromWire(await this.client._get(this.path)); }
  async drop() { await this.client._delete(this.path); }
  async add(key, payload) {
    await this.client._post(this.path + "/items", { key, ...payloadField(payload) });
  }
  async items() { return fromWire((await this.client._get(this.path + "/items")).items); }
  async remove(key) { await this.client._delete(`${this.path}/items/${seg(key)}`); }
  // next(n) → the n least recently served eligible items.
  async next(n = 1) { return fromWire((await this.client._post(this.path + "/next", { n })).items); }
  async fail(key) { return fromWire(await this.client._post(`${this.path}/items/${seg(key)}/fail`)); }
  async ok(key) { return fromWire(await this.client._post(`${this.path}/items/${seg(key)}/ok`)); }
  async reset(key) { return fromWire(await this.client._post(`${this.path}/items/${seg(key)}/reset`)); }
}

export class Schedule {
  constructor(client, name) {
    this.client = client;
    this.name = name;
    this.path = "/v1/schedules/" + seg(name);
  }
  // create({cron, queue, timeZone, payload, priority, headers, group, kind,
  // timeoutMs, expireAfterMs, onExpiry, catchUp}).
  async create(options) { return fromWire(await this.client._post(this.path, toWire(options))); }
  async get() { return fromWire(await this.client._get(this.path)); }
  async pause() { return fromWire(await this.client._post(this.path + "/pause")); }
  async resume() { return fromWire(await this.client._post(this.path + "/resume")); }
  async drop() { await this.client._delete(this.path); }
}
