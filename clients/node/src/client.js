// The client: every operation of the HTTP API of `sqlq serve`.

import { randomUUID } from "node:crypto";

import { Transport, toError } from "./http.js";
import { fromWire, toWire, payloadField, seg, query } from "./wire.js";
import { inject } from "./tracing.js";

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
  schedule(name) { return new Schedule(this, name); }

  async queues() { return fromWire((await this._get("/v1/queues")).queues); }
  async rings() { return fromWire((await this._get("/v1/rings")).rings); }
  async rotations() { return fromWire((await this._get("/v1/rotations")).rotations); }
  async schedules() { return fromWire((await this._get("/v1/schedules")).schedules); }
  // Every queue, ring and rotation the token may see.
  async all() { return fromWire(await this._get("/v1/all")); }
  async overview() { return fromWire(await this._get("/v1/overview")); }

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
    Object.defineProperty(this, "queue", { value: queue, enumerable: false });
    Object.defineProperty(this, "raw", { value: m, enumerable: false });
  }
  ack() { return this.queue.ack(this.receipt); }
  nack(options = {}) { return this.queue.nack(this.receipt, options); }
  async extend(leaseMs) {
    const until = await this.queue.extend(this.receipt, leaseMs);
    this.leaseExpiresAt = until;
    return until;
  }
}

// The listing filter as query parameters.
function filterQuery(f = {}) {
  let header = f.header;
  if (header && typeof header === "object") header = `${header.name}=${header.value}`;
  return {
    state: f.state, min_priority: f.minPriority, max_priority: f.maxPriority,
    dedup: f.dedup, group: f.group, header, payload_prefix: f.payloadPrefix,
    enqueued_after: f.enqueuedAfter, enqueued_before: f.enqueuedBefore,
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

  // One message: send(payload, {priority, delayMs, runAt, dedup, group,
  // headers}) → its id (that of the message already there when `dedup`
  // matched one; sendBatch says which).
  async send(payload, options = {}) {
    const r = await this.sendBatch([{ ...options, payload }]);
    return r.ids[0];
  }
  // Many in one commit: [{payload, priority, ...}] → {ids, duplicate}.
  // With a dedup key on every message (one of its own unless the client's
  // idempotentSends is off) a send is retried like any safe request. Each
  // message carries the current trace context (tracing.js) unless its
  // headers have a traceparent.
  async sendBatch(messages) {
    const wire = messages.map((m) => toWire(m));
    await inject(wire);
    if (this.client.idempotentSends) {
      for (const m of wire) m.dedup ??= "idem:" + randomUUID().replaceAll("-", "");
    }
    const idempotent = wire.length > 0 && wire.every((m) => m.dedup != null);
    return await this.client._post(this.path + "/messages", { messages: wire }, { idempotent });
  }

  // claim({max, leaseMs, waitMs, worker, ack, signal}) → [Message], with
  // `limitedBy`, `retryAfterMs`, `limited`, `paused` and `groupsBusy` set
  // when the server said so.
  async claim({ max, leaseMs, waitMs, worker, ack, signal } = {}) {
    const body = toWire({ max, leaseMs, waitMs, worker, ack });
    const r = await this.client._post(this.path + "/claim", body, {
      signal,
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

  // ack(receipt) → undefined, or throws.
  async ack(receipt) {
    await this.client._post(this.path + "/ack", { receipt });
  }
  // ackMany([receipts]) in one commit → one result per receipt:
  // {ok: true} or {ok: false, error: {code, message}}.
  async ackMany(receipts) {
    return (await this.client._post(this.path + "/ack", { receipts })).results;
  }
  // nack(receipt, {error, delayMs}) → "retry" or "dead".
  async nack(receipt, { error, delayMs } = {}) {
    const r = await this.client._post(this.path + "/nack", toWire({ receipt, error, delayMs }));
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
  // create({cron, queue, timeZone, payload, priority, headers, group, catchUp}).
  async create(options) { return fromWire(await this.client._post(this.path, toWire(options))); }
  async get() { return fromWire(await this.client._get(this.path)); }
  async pause() { return fromWire(await this.client._post(this.path + "/pause")); }
  async resume() { return fromWire(await this.client._post(this.path + "/resume")); }
  async drop() { await this.client._delete(this.path); }
}
