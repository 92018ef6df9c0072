// The worker runtime: `concurrency` handlers at once on long-poll claims
// of one or several queues, a handler per job kind, each running message's
// lease extended in the background, ack on success, nack by what the
// handler threw (a failed attempt, Snooze, RetryAfter, Permanent, Cancel)
// or at its timeout, graceful shutdown on SIGTERM/SIGINT, reconnection
// with backoff when the server is away.

import os from "node:os";
import { randomBytes } from "node:crypto";

import {
  SqlqError, BadRequest, ConnectionFailed, TooManyRequests, Unavailable, ServerTimeout,
  NotFound, StaleReceipt,
} from "./errors.js";
import { backoffMs, sleep, describe, defaultLogger, silentLogger } from "./http.js";
import { api as tracingApi, handling } from "./tracing.js";
import { Queue } from "./client.js";
import { Snooze, RetryAfter, Permanent, Cancel } from "./outcomes.js";

const STACK_LINES = 8;
export const RELEASED = "released: the worker stopped before the handler finished";

// The text a failed handler leaves on its message: the error's message and
// the top of its stack, at most 4096 bytes (what the server keeps).
export function errorText(err) {
  let text;
  if (err instanceof Error) {
    const stack = typeof err.stack === "string" ? err.stack.split("\n") : [];
    const head = `${err.name || "Error"}: ${err.message}`;
    const frames = stack.filter((l) => /^\s+at /.test(l)).slice(0, STACK_LINES);
    text = [head, ...frames].join("\n");
  } else {
    text = String(err);
  }
  const buf = Buffer.from(text, "utf8");
  if (buf.length <= 4096) return text;
  return buf.subarray(0, 4093).toString("utf8").replace(/\uFFFD$/, "") + "...";
}

// Why a handler's return cannot be its job's result (it is not JSON); null
// when it can. (One larger than the queue keeps is refused by the server.)
function resultError(value) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch (e) {
    return `result is not JSON: ${e.name}: ${e.message}`;
  }
  return text === undefined ? `result is not JSON: a ${typeof value}` : null;
}

// What a worker logs: one method per event, in the words of the Python
// worker (docs/clients.md, "What the workers log"). Each call gives the
// logger the text and the event's fields; a failed handler's error is
// `fields.error`. A worker of several queues names the queue of each
// message and call ("message 7 of emails", "claim of emails").
class WorkerLog {
  // A call that keeps failing is logged on its first failure and then
  // every this many tries, not at each one.
  static EVERY = 10;

  constructor(logger, name, queues) {
    this.logger = logger;
    this.p = `sqlq worker ${name}: `;
    this.queues = queues;
    this.several = queues.length > 1;
  }

  // "message 7", or "message 7 of emails" in a worker of several queues.
  ref(msg, queue) { return `message ${msg.id}` + (this.several ? ` of ${queue}` : ""); }
  // "claim", or "claim of emails" in a worker of several queues.
  call(what, queue) { return what + (this.several ? ` of ${queue}` : ""); }

  started(concurrency, leases) {
    const fields = { queue: this.queues.length === 1 ? this.queues[0] : this.queues,
                     concurrency, leaseMs: leases.length === 1 ? leases[0] : leases };
    if (!this.several) {
      this.logger.info(`${this.p}started on queue ${this.queues[0]} (concurrency ${concurrency}, ` +
                       `lease ${leases[0]} ms)`, fields);
      return;
    }
    const lease = leases.every((l) => l === leases[0]) ? `lease ${leases[0]} ms`
                                                        : `leases ${leases.join(", ")} ms`;
    this.logger.info(`${this.p}started on queues ${this.queues.join(", ")} ` +
                     `(concurrency ${concurrency}, ${lease})`, fields);
  }

  // The handler failed and its message was nacked; outcome is the nack's:
  // "retry", "dead", or undefined when not known. `text` is the error as
  // the message keeps it, `delayMs` the handler's own retry delay.
  handlerFailed(msg, queue, err, outcome, { text = errorText(err), delayMs, how = "" } = {}) {
    const first = text.split("\n")[0];
    const fields = { queue, id: msg.id, attempt: msg.attempt, kind: msg.kind, outcome,
                     error: err };
    const head = `${this.p}message ${msg.id} of ${queue} failed${how} on attempt ${msg.attempt}`;
    if (outcome === "dead") {
      this.logger.error(`${head}, now a dead letter: ${first}`, fields);
    } else {
      const then = outcome !== "retry" ? "nacked"
        : delayMs !== undefined ? `retried in ${delayMs} ms` : "retried after the queue's backoff";
      this.logger.warn(`${head}, ${then}: ${first}`, fields);
    }
  }

  // The handler threw Snooze: the message comes back after delayMs.
  snoozed(msg, queue, delayMs) {
    this.logger.info(`${this.p}message ${msg.id} of ${queue} snoozed for ${delayMs} ms on ` +
                     `attempt ${msg.attempt}`,
                     { queue, id: msg.id, attempt: msg.attempt, kind: msg.kind, delayMs });
  }

  // The handler threw Cancel: a dead letter now.
  cancelled(msg, queue, reason, outcome) {
    const fields = { queue, id: msg.id, attempt: msg.attempt, kind: msg.kind, outcome, reason };
    const then = outcome === "dead" ? "now a dead letter" : "nacked";
    this.logger.warn(`${this.p}message ${msg.id} of ${queue} cancelled on attempt ` +
                     `${msg.attempt}, ${then}: ${reason}`, fields);
  }

  // No handler for the message's kind, and unknownKind "snooze" or "dead"
  // ("fail" is logged as a failed handler).
  noHandler(msg, queue, outcome, delayMs) {
    const fields = { queue, id: msg.id, attempt: msg.attempt, kind: msg.kind, outcome };
    const head = `${this.p}message ${msg.id} of ${queue} has no handler for ` +
                 (msg.kind === undefined ? "messages without a kind" : `kind '${msg.kind}'`);
    if (outcome === "snoozed") {
      this.logger.info(`${head}, snoozed for ${delayMs} ms`, { ...fields, delayMs });
    } else if (outcome === "dead") {
      this.logger.error(`${head}, now a dead letter`, fields);
    } else {
      this.logger.warn(`${head}, nacked`, fields);
    }
  }

  finishedAfterTimeout(msg, queue, timeoutMs) {
    this.logger.warn(`${this.p}message ${msg.id} of ${queue} finished after its timeout of ` +
                     `${timeoutMs} ms; its outcome is dropped`, { queue, id: msg.id, timeoutMs });
  }

  leaseLost(msg, queue, e) {
    this.logger.warn(`${this.p}lease of ${this.ref(msg, queue)} lost, another worker may have ` +
                     `it (the handler still runs; its outcome will be refused): ${describe(e)}`,
                     { queue, id: msg.id, code: e.code });
  }

  outcomeRefused(what, msg, queue, e) {
    this.logger.warn(`${this.p}${what} of ${this.ref(msg, queue)} refused, its lease was lost: ` +
                     describe(e), { queue, id: msg.id, code: e.code });
  }

  outcomeFailed(what, msg, queue, e) {
    this.logger.error(`${this.p}${what} of ${this.ref(msg, queue)} failed: ${describe(e)}; ` +
                      "it is delivered again when its lease ends",
                      { queue, id: msg.id, code: e.code });
  }

  // A call failed for want of the server; logged on the first failure and
  // every EVERY tries after it.
  retrying(what, e, delayMs, attempt) {
    if (attempt % WorkerLog.EVERY !== 0) return;
    this.logger.warn(`${this.p}${what} failed (${describe(e)}); retrying in ` +
                     `${(delayMs / 1000).toFixed(2)}s (try ${attempt + 1})`,
                     { code: e.code, attempt: attempt + 1 });
  }

  worksAgain(what, attempts) {
    this.logger.info(`${this.p}${what} works again after ${attempts} failed tries`, { attempts });
  }

  extendFailed(msg, queue, e) {
    this.logger.warn(`${this.p}extending the lease of ${this.ref(msg, queue)} failed ` +
                     `(${describe(e)}); retrying`, { queue, id: msg.id, code: e.code });
  }

  // The server has no live workers (older than them): the worker runs
  // without reporting.
  notReporting(e) {
    this.logger.warn(`${this.p}report failed: ${describe(e)}; the worker is not listed among ` +
                     "the live workers", { code: e.code });
  }

  signal(sig) { this.logger.info(`${this.p}${sig}: stopping`, { signal: sig }); }

  signalAgain(sig) {
    this.logger.info(`${this.p}${sig} again: releasing unfinished messages now`, { signal: sig });
  }

  stopping(running) {
    this.logger.info(`${this.p}stopping: no more claims, ${running} handler(s) running`,
                     { running });
  }

  released(msg, queue, unworked) {
    this.logger.warn(`${this.p}${this.ref(msg, queue)} released ` +
                     (unworked ? "unworked: it was claimed as the worker stopped"
                               : "unfinished at the shutdown deadline"), { queue, id: msg.id });
  }

  releaseFailed(msg, queue, e) {
    this.logger.error(`${this.p}release of ${this.ref(msg, queue)} failed (it comes back when ` +
                      `its lease ends): ${describe(e)}`, { queue, id: msg.id, code: e.code });
  }

  finishedAfterRelease(msg, queue) {
    this.logger.warn(`${this.p}${this.ref(msg, queue)} finished after it was released at the ` +
                     "shutdown deadline; its outcome is dropped", { queue, id: msg.id });
  }

  stopped({ acked, nacked, released, lost }) {
    this.logger.info(`${this.p}stopped (acked=${acked} nacked=${nacked} released=${released} ` +
                     `lost=${lost})`, { acked, nacked, released, lost });
  }
}

// True for errors of a receipt that is no longer ours: the lease ran out
// and another consumer took the message, or the message is gone.
const lostReceipt = (e) => e instanceof StaleReceipt || e instanceof NotFound;

// True for errors that pass: no reply, or the server asked to come back.
const transient = (e) => e instanceof ConnectionFailed || e instanceof TooManyRequests ||
  e instanceof Unavailable || e instanceof ServerTimeout ||
  (e instanceof SqlqError && (e.status === 502 || e.status === 504));

// A queue's claim loop in a worker: the queue (through the worker's
// client, without retries), its lease, and whether its last claim found
// nothing (a worker of several queues then asks for one message at a time
// there, so that the others get the free handlers).
class Loop {
  constructor(queue, leaseMs) {
    this.queue = queue;
    this.name = queue.name;
    this.leaseMs = leaseMs;
    this.lastEmpty = true;
    this.poll = null;  // {full, lent} while a claim waits
  }
}

// The handler slots of a worker, shared by its claim loops: a loop takes
// the free ones before it claims, a message gives its slot back when it is
// settled. Loops that wait are served in turn.
class Slots {
  constructor(n) {
    this.free = n;
    this.waiting = [];
  }

  // Up to `want` slots, at least one, once free and the loops that waited
  // before were served; 0 when `signal` aborts first.
  take(want, signal) {
    if (signal.aborted) return Promise.resolve(0);
    if (this.free > 0 && this.waiting.length === 0) {
      const n = Math.min(want, this.free);
      this.free -= n;
      return Promise.resolve(n);
    }
    return new Promise((resolve) => {
      const w = { want, resolve: null };
      const abort = () => {
        const i = this.waiting.indexOf(w);
        if (i >= 0) this.waiting.splice(i, 1);
        resolve(0);
      };
      w.resolve = (n) => {
        signal.removeEventListener("abort", abort);
        resolve(n);
      };
      signal.addEventListener("abort", abort, { once: true });
      this.waiting.push(w);
    });
  }

  give(n) {
    this.free += n;
    while (this.free > 0 && this.waiting.length > 0) {
      const w = this.waiting.shift();
      const k = Math.min(w.want, this.free);
      this.free -= k;
      w.resolve(k);
    }
  }
}

// A worker's id: host:pid:random, in the characters a worker id may have.
function workerId() {
  const host = os.hostname().replace(/[^A-Za-z0-9_.:/-]/g, "-").slice(0, 100) || "host";
  return `${host}:${process.pid}:${randomBytes(4).toString("hex")}`;
}

// The claims of a worker of several queues wait at most this long while
// another of its loops waits for a handler slot.
const CONTENDED_WAIT_MS = 1000;
const UNKNOWN_KIND = new Set(["fail", "snooze", "dead"]);
// The error of a snooze the server counted as a failed attempt.
const SNOOZED_TOO_OFTEN = "snoozed 100 times";

// A message's time limit: the shorter of its handler's (or the worker's)
// and the message's own, set at its send (timeoutMs on the claim); null
// when neither has one.
function timeoutOf(route, msg) {
  const own = typeof msg.timeoutMs === "number" ? msg.timeoutMs : null;
  if (route.timeoutMs == null) return own;
  return own === null ? route.timeoutMs : Math.min(route.timeoutMs, own);
}

// True for the options object of `new Worker(client, {queues, handlers})`
// or `new Worker(client, queue, {handlers})`, rather than a queue.
const isOptions = (x) => x !== null && typeof x === "object" && !Array.isArray(x) &&
  !(x instanceof Queue) &&
  ["queues", "queue", "handlers", "handler"].some((k) => Object.hasOwn(x, k));

export class Worker {
  // new Worker(client, "emails", async (msg, {signal}) => {...}, {concurrency, ...})
  // new Worker(client, {queues: ["emails", "sms"], handlers: {"email.send": fn,
  //   "sms.send": {handler: fn, timeoutMs: 10000}, "*": fn}, concurrency, ...})
  // new Worker(client, "emails", {handlers: {...}, ...})
  constructor(client, queue, handler, options) {
    if (isOptions(queue)) {
      options = queue;
      queue = options.queues ?? options.queue;
      handler = options.handler;
    } else if (isOptions(handler)) {
      options = handler;
      handler = options.handler;
    }
    options ??= {};
    this.client = client;
    this.timeoutMs = options.timeoutMs ?? null;
    this.handlers = this._handlers(handler, options.handlers);
    this.handler = typeof handler === "function" ? handler : undefined;
    this.unknownKind = options.unknownKind ?? "fail";
    if (!UNKNOWN_KIND.has(this.unknownKind)) {
      throw new TypeError(`unknownKind must be "fail", "snooze" or "dead", not ${this.unknownKind}`);
    }
    this.unknownKindDelayMs = options.unknownKindDelayMs ?? 30000;
    const names = (Array.isArray(queue) ? queue : [queue])
      .map((q) => (typeof q === "string" ? q : q?.name));
    if (names.length === 0 || names.some((n) => typeof n !== "string")) {
      throw new TypeError("queue must be a queue's name, or queues a list of them");
    }
    if (new Set(names).size !== names.length) throw new TypeError("a queue is named twice");
    // The worker retries its calls by itself (claims with backoff, acks
    // while the lease lasts), and logs it.
    const own = client._withoutRetries();
    this._client = own;
    this.leaseMs = options.leaseMs ?? null;
    this.loops = names.map((n) => new Loop(own.queue(n), this.leaseMs));
    this.queue = this.loops[0].queue;
    this.queues = names;
    this.concurrency = options.concurrency ?? 1;
    this.waitMs = options.waitMs ?? 20000;
    this.extendEvery = options.extendEvery ?? 1 / 3;
    this.shutdownTimeoutMs = options.shutdownTimeoutMs ?? 30000;
    this.maxBackoffMs = options.maxBackoffMs ?? 5000;
    this.name = options.name ?? `${os.hostname()}-${process.pid}`;
    // Unique per process and run: in the worker's reports (live workers)
    // and its claims, so that a leased message leads to its worker.
    this.id = workerId();
    // How long the server keeps a handler's result [its default: a day].
    this.resultTtlMs = options.resultTtlMs ?? null;
    this.report = options.report ?? true;
    this.reportTtlMs = options.reportTtlMs ?? 30000;
    this.logger = options.logger === null ? silentLogger : (options.logger ?? defaultLogger);
    this.log = new WorkerLog(this.logger, this.name, names);
    this.installSignalHandlers = options.installSignalHandlers ?? true;
    this.running = new Set();  // the state of each message in hand
    this.slots = new Slots(this.concurrency);
    this.stopping = false;
    const counters = () => ({ acked: 0, nacked: 0, snoozed: 0, dead: 0, released: 0, lost: 0,
                              failedAcks: 0 });
    this.stats = counters();
    Object.defineProperty(this.stats, "queues", {
      value: Object.fromEntries(names.map((n) => [n, counters()])), enumerable: true,
    });
    this._stopCtl = new AbortController();
    this._pending = new Set();
    this._hurry = null;
    this._hurried = false;
    this._otel = null;  // OpenTelemetry's API, when the application has it
    this._prepared = false;
    this._reportCtl = new AbortController();
    this._middleware = [];
  }

  // The handlers by kind, "*" for the rest: {fn, timeoutMs}.
  _handlers(handler, byKind) {
    const out = new Map();
    if (byKind != null) {
      if (typeof byKind !== "object") throw new TypeError("handlers must be an object of kinds");
      for (const [kind, h] of Object.entries(byKind)) {
        const fn = typeof h === "function" ? h : h?.handler;
        if (typeof fn !== "function") {
          throw new TypeError(`the handler of kind '${kind}' must be a function or {handler, timeoutMs}`);
        }
        const timeoutMs = typeof h === "function" || h.timeoutMs === undefined
          ? this.timeoutMs : h.timeoutMs;
        out.set(kind, { fn, timeoutMs });
      }
    }
    if (typeof handler === "function") {
      if (out.has("*")) throw new TypeError("a handler and handlers['*'] are the same: give one");
      out.set("*", { fn: handler, timeoutMs: this.timeoutMs });
    } else if (handler != null || out.size === 0) {
      throw new TypeError("handler must be a function");
    }
    return out;
  }

  // The handler of a message: its kind's, else the default "*"; undefined
  // when there is none.
  _route(msg) {
    return (msg.kind !== undefined ? this.handlers.get(msg.kind) : undefined) ??
      this.handlers.get("*");
  }

  // Stop claiming; running handlers get until the shutdown deadline, then
  // their messages are released. Resolves when run() is done.
  stop() {
    if (!this.stopping) {
      this.stopping = true;
      this.log.stopping(this.running.size);
      this._stopCtl.abort();
    }
    return this._done ?? Promise.resolve();
  }

  // Runs until stop() (or SIGTERM/SIGINT when installSignalHandlers).
  run() {
    if (this._done) return this._done;
    this._done = this._run();
    return this._done;
  }

  async _run() {
    // A first signal stops gracefully, a second one releases at once.
    const onSignal = (sig) => {
      if (this.stopping) {
        this.log.signalAgain(sig);
        this._hurried = true;  // for a _drain that has not begun waiting
        this._hurry?.();
      } else {
        this.log.signal(sig);
        this.stop();
      }
    };
    if (this.installSignalHandlers) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    try {
      await this._prepare();
      const reporting = this.report && !this.stopping ? this._reporting() : null;
      if (!this.stopping) {
        this.log.started(this.concurrency, this.loops.map((l) => l.leaseMs));
        await Promise.all(this.loops.map((l) => this._claimLoop(l)));
      }
      await this._drain();
      if (reporting) await this._unreport(reporting);
      this.log.stopped(this.stats);
    } finally {
      if (this.installSignalHandlers) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
    }
  }

  // What the worker reports of itself (live workers).
  _report() {
    return {
      name: this.name, host: os.hostname(), pid: process.pid, queues: this.queues,
      kinds: [...this.handlers.keys()].filter((k) => k !== "*"),
      concurrency: this.concurrency,
      jobs: [...this.running].map((st) => ({ queue: st.loop.name, id: st.msg.id, since: st.since })),
      startedAt: this._startedAt, ttlMs: this.reportTtlMs,
    };
  }

  // Reports the worker every ttl/3 until it stops. A failed report is
  // logged as any call's (on the first and every tenth try, and once when
  // the reports work again) and tried again: sooner, with backoff, when
  // the server was away; at the next report's time when it refused it (a
  // token without the grant may get it later). Only a server without live
  // workers (no such route: an older one) ends the reports, said once.
  async _reporting() {
    this._startedAt = new Date().toISOString();
    const every = Math.max(100, Math.floor(this.reportTtlMs / 3));
    const until = this._reportCtl.signal;
    for (let failures = 0; !until.aborted;) {
      let delayMs = every;
      try {
        await this._client.reportWorker(this.id, this._report());
        if (failures > 0) this.log.worksAgain("report", failures);
        failures = 0;
      } catch (e) {
        if (until.aborted) break;
        if (e instanceof NotFound && e.code === "no_route") {
          this.log.notReporting(e);
          return;
        }
        if (this._transient(e)) {
          delayMs = Math.min(every, Math.max(backoffMs(failures, 50, this.maxBackoffMs),
                                             e.retryAfterMs ?? 0));
        }
        this.log.retrying("report", e, delayMs, failures++);
      }
      await sleep(delayMs, until);
    }
  }

  // Reports go on while the running handlers finish; after them, the
  // report goes at once (else it would run out by its ttl).
  async _unreport(reporting) {
    this._reportCtl.abort();
    await reporting;
    try {
      await this._client.removeWorker(this.id);
    } catch (e) {
      if (!(e instanceof NotFound)) {
        this.logger.warn(`${this.log.p}removing its report failed: ${describe(e)}`,
                         { code: e.code });
      }
    }
  }

  // OpenTelemetry's API and the queues' leases, once.
  async _prepare() {
    this._otel = await tracingApi();
    for (const loop of this.loops) {
      if (loop.leaseMs === null) loop.leaseMs = await this._queueLease(loop);
    }
    if (this.loops.length === 1) this.leaseMs = this.loops[0].leaseMs;
    this._prepared = true;
  }

  _count(st, what) {
    this.stats[what]++;
    this.stats.queues[st.loop.name][what]++;
  }

  // The queue's own lease, asked of the server (retried until it answers).
  async _queueLease(loop) {
    const what = this.log.call("stats", loop.name);
    for (let attempt = 0; !this.stopping; attempt++) {
      try {
        const s = await loop.queue.stats();
        if (attempt > 0) this.log.worksAgain(what, attempt);
        return s.options?.leaseMs ?? 30000;
      } catch (e) {
        if (!this._transient(e)) throw e;
        await this._pause(what, attempt, e);
      }
    }
    return 30000;
  }

  _transient(e) { return transient(e); }

  async _pause(what, attempt, e) {
    const ms = e?.retryAfterMs ?? backoffMs(attempt, 100, this.maxBackoffMs);
    this.log.retrying(what, e, ms, attempt);
    await sleep(ms, this._stopCtl.signal);
  }

  // A loop that finds every slot taken may take the slot of another
  // loop's long poll that began while the worker was idle: that poll goes
  // on, and a message it brings waits for a slot (its lease extended), so
  // that no queue waits out another's poll of an empty queue.
  _borrowIdlePoll(self) {
    if (this.slots.free > 0) return false;
    const idle = this.loops.find((l) => l !== self && l.poll?.full && !l.poll.lent);
    if (!idle) return false;
    idle.poll.lent = true;
    return true;
  }

  async _claimLoop(loop) {
    const several = this.loops.length > 1;
    const what = this.log.call("claim", loop.name);
    let failures = 0;
    while (!this.stopping) {
      // Alone, a claim asks for as many messages as there are free slots
      // and waits its full long poll. Beside other queues, a claim waits
      // its full long poll (for one message) only while the worker is
      // idle, and a queue whose last claim found nothing asks for one.
      const idle = () => this.running.size === 0 && this.slots.waiting.length === 0;
      const n = several && this._borrowIdlePoll(loop) ? 1
        : await this.slots.take(several && (loop.lastEmpty || idle()) ? 1 : this.concurrency,
                                this._stopCtl.signal);
      if (n === 0) break;  // stopping
      const full = !several || (n === 1 && idle());
      const poll = { full, lent: false };
      loop.poll = poll;
      let batch;
      try {
        batch = await loop.queue.claim({
          max: n, waitMs: full ? this.waitMs : Math.min(this.waitMs, CONTENDED_WAIT_MS),
          leaseMs: loop.leaseMs, worker: this.id, signal: this._stopCtl.signal,
        });
      } catch (e) {
        if (!poll.lent) this.slots.give(n);
        if (this.stopping) break;
        if (!this._transient(e)) {
          this.logger.error(`${this.log.p}${what} failed: ${describe(e)}`,
                            { queue: loop.name, code: e.code });
        }
        await this._pause(what, failures++, e);
        continue;
      } finally {
        loop.poll = null;
      }
      if (failures > 0) this.log.worksAgain(what, failures);
      failures = 0;
      loop.lastEmpty = batch.length === 0;
      const slots = poll.lent ? n - 1 : n;  // the slots this claim still has
      if (slots > batch.length) this.slots.give(slots - batch.length);
      batch.forEach((msg, i) => {
        if (this.stopping) {
          // Claimed as we stopped: give it back unworked.
          this._pending.add(this._release(loop, msg, true));
          if (i < slots) this.slots.give(1);
        } else {
          this._start(loop, msg, i < slots);
        }
      });
      if (batch.limitedBy && batch.length === 0 && batch.retryAfterMs) {
        await sleep(batch.retryAfterMs, this._stopCtl.signal);
      }
    }
  }

  // Runs a claimed message's handler in one of the slots (once one is
  // free, when it came without one), and settles the message by its
  // outcome.
  _start(loop, msg, hasSlot = true) {
    const st = this._state(loop, msg);
    this.running.add(st);
    st.done = (async () => {
      if (!hasSlot) {
        this._scheduleExtend(st);
        const got = this._borrowIdlePoll(loop) ? 1 : await this.slots.take(1, this._stopCtl.signal);
        clearTimeout(st.timer);
        if (got === 0) {
          this.running.delete(st);
          return this._release(loop, msg, true);
        }
      }
      try {
        return await this._process(st);
      } finally {
        this.running.delete(st);
        this.slots.give(1);
      }
    })();
  }

  _state(loop, msg) {
    const ctl = new AbortController();
    Object.defineProperty(msg, "signal", { value: ctl.signal, enumerable: false });
    // The lease in hand: the claim's, but at most the message's own
    // timeout (the server leases such a job for no longer).
    const leaseMs = typeof msg.timeoutMs === "number" ? Math.min(loop.leaseMs, msg.timeoutMs)
                                                      : loop.leaseMs;
    return { loop, msg, ctl, released: false, lost: false, timedOut: false, timer: null,
             done: null, extendedAt: Date.now(), leaseMs, since: new Date().toISOString() };
  }

  // The handler's run and the message's settlement: {outcome, error?},
  // outcome "acked", or the nack's reply ("retry", "dead", "snoozed"), or
  // "released", or null when the server refused or did not take it.
  async _process(st) {
    const { msg, loop } = st;
    const route = this._route(msg);
    if (!route) return this._noHandler(st);
    this._scheduleExtend(st);
    const ctx = { signal: st.ctl.signal, queue: loop.name };
    const run = (async () => handling(this._otel, loop.name, msg,
                                      () => this._invoke(route.fn, msg, ctx)))()
      .then((value) => ({ ok: true, value }), (err) => ({ ok: false, err }));
    const timeoutMs = timeoutOf(route, msg);
    let result;
    if (timeoutMs != null) {
      let timer, released;
      const limit = new Promise((r) => {
        timer = setTimeout(() => r(null), timeoutMs);
        // Released at the shutdown deadline: no timer keeps the process.
        released = () => { if (st.released && !st.lost) r(null); };
        st.ctl.signal.addEventListener("abort", released);
      });
      result = await Promise.race([run, limit]);
      clearTimeout(timer);
      st.ctl.signal.removeEventListener("abort", released);
      if (result === null && st.released) return { outcome: "released" };
      if (result === null) {
        // Cut off: no more extensions, the signal aborted, a failed
        // attempt; whatever the handler does later is dropped.
        st.timedOut = true;
        clearTimeout(st.timer);
        const text = `timeout after ${timeoutMs} ms`;
        st.ctl.abort(new SqlqError("timeout", text));
        run.then(() => this.log.finishedAfterTimeout(msg, loop.name, timeoutMs));
        return this._nack(st, { error: text }, (outcome) =>
          this.log.handlerFailed(msg, loop.name, null, outcome, { text }));
      }
    } else {
      result = await run;
    }
    clearTimeout(st.timer);
    if (st.released && !st.lost) {
      this.log.finishedAfterRelease(msg, loop.name);
      return { outcome: "released" };
    }
    // After a lost lease too: the server then says whether the message is
    // still this worker's (and the log says it was not).
    if (result.ok) return this._ack(st, result.value);
    return this._failed(st, result.err);
  }

  // The handler inside the middleware: every `before` in the order of
  // use(), the handler, every `after`; when one of them throws, every
  // `onError`, each of which may throw another error in its place.
  async _invoke(fn, msg, ctx) {
    try {
      for (const m of this._middleware) if (m.before) await m.before(msg, ctx);
      const result = await fn(msg, ctx);
      for (const m of this._middleware) if (m.after) await m.after(msg, result, ctx);
      return result;
    } catch (err) {
      let e = err;
      for (const m of this._middleware) {
        if (!m.onError) continue;
        try {
          await m.onError(msg, e, ctx);
        } catch (instead) {
          e = instead;
        }
      }
      throw e;
    }
  }

  // Adds hooks around every handler: {before(msg, ctx), after(msg, result,
  // ctx), onError(msg, error, ctx)}, each optional and awaited; a throw in
  // before or after is the handler's. Returns the worker.
  use(hooks) {
    if (hooks === null || typeof hooks !== "object" ||
        !["before", "after", "onError"].some((k) => typeof hooks[k] === "function")) {
      throw new TypeError("use() takes {before, after, onError}, at least one a function");
    }
    this._middleware.push(hooks);
    return this;
  }

  // Claims every ready message of the worker's queues (or of `queue`) and
  // runs each through the handlers, one at a time, without the worker's
  // loop: for tests. Each message runs at most once per call: one ready
  // again at once (a failed attempt without backoff, a Snooze(0)) is held
  // when claimed again, and given back uncounted at the end. Resolves with [{message, queue, outcome, error}] in the
  // order run; outcome is "acked", "retry", "dead", "snoozed", or null when
  // the server refused the outcome.
  async drainInline({ queue } = {}) {
    if (!this._prepared) await this._prepare();
    const loops = queue === undefined ? this.loops
      : this.loops.filter((l) => l.name === (typeof queue === "string" ? queue : queue.name));
    if (loops.length === 0) throw new TypeError(`not a queue of this worker: ${queue}`);
    const out = [];
    for (const loop of loops) {
      const seen = new Set();
      const again = [];  // claimed a second time: held, then given back
      for (;;) {
        const [msg] = await loop.queue.claim({ max: 1, waitMs: 0, leaseMs: loop.leaseMs,
                                                worker: this.id });
        if (!msg) break;
        if (seen.has(msg.id)) {
          again.push(msg);
          continue;
        }
        seen.add(msg.id);
        const st = this._state(loop, msg);
        this.running.add(st);
        try {
          const r = await this._process(st);
          out.push({ message: msg, queue: loop.name, outcome: r.outcome, error: r.error,
                     result: r.result });
        } finally {
          this.running.delete(st);
        }
      }
      // Uncounted, as they were not run (a receipt whose lease ran out in
      // the meantime is refused: the message is ready anyway).
      await Promise.all(again.map((m) => loop.queue.nack(m.receipt, { action: "snooze", delayMs: 0 })
        .catch((e) => { if (!lostReceipt(e)) throw e; })));
    }
    return out;
  }

  // Settles a message whose handler threw, by what it threw.
  async _failed(st, err) {
    const { msg, loop } = st;
    const q = loop.name;
    if (err instanceof Snooze) {
      const delayMs = err.delayMs;
      return this._nack(st, { action: "snooze", delayMs }, (outcome) => {
        if (outcome === "snoozed") this.log.snoozed(msg, q, delayMs);
        // Snoozed too often: the server counted it as a failed attempt.
        else this.log.handlerFailed(msg, q, err, outcome, { text: SNOOZED_TOO_OFTEN });
      });
    }
    if (err instanceof RetryAfter) {
      const text = errorText(err.error ?? err);
      return this._nack(st, { error: text, delayMs: err.delayMs }, (outcome) =>
        this.log.handlerFailed(msg, q, err.error ?? err, outcome, { text, delayMs: err.delayMs }));
    }
    if (err instanceof Permanent) {
      const text = errorText(err.error ?? err);
      return this._nack(st, { action: "dead", error: text }, (outcome) =>
        this.log.handlerFailed(msg, q, err.error ?? err, outcome, { text, how: " permanently" }));
    }
    if (err instanceof Cancel) {
      return this._nack(st, { action: "dead", error: err.message }, (outcome) =>
        this.log.cancelled(msg, q, err.reason, outcome));
    }
    const text = errorText(err);
    return this._nack(st, { error: text }, (outcome) =>
      this.log.handlerFailed(msg, q, err, outcome, { text }));
  }

  // A message no handler takes, settled by unknownKind: a failed attempt
  // (retried, then a dead letter: never lost), a snooze (for a rolling
  // deploy whose newer workers know the kind), or a dead letter now.
  async _noHandler(st) {
    const { msg, loop } = st;
    const text = msg.kind === undefined ? "no handler for messages without a kind"
                                        : `no handler for kind '${msg.kind}'`;
    if (this.unknownKind === "snooze") {
      const delayMs = this.unknownKindDelayMs;
      return this._nack(st, { action: "snooze", delayMs }, (outcome) => {
        if (outcome === "snoozed") this.log.noHandler(msg, loop.name, outcome, delayMs);
        else this.log.handlerFailed(msg, loop.name, null, outcome, { text: SNOOZED_TOO_OFTEN });
      });
    }
    if (this.unknownKind === "dead") {
      return this._nack(st, { action: "dead", error: text }, (outcome) =>
        this.log.noHandler(msg, loop.name, outcome));
    }
    return this._nack(st, { error: text }, (outcome) =>
      this.log.handlerFailed(msg, loop.name, null, outcome, { text }));
  }

  // Extends the lease at `extendEvery` of it while the handler runs, by
  // the lease in hand (a job's own timeout when shorter than the claim's:
  // never past it, as the server leased it); a failed extension is tried
  // again sooner, a refused one means the message is no longer ours (the
  // handler's signal is aborted).
  _scheduleExtend(st, soon = false) {
    const leaseMs = st.leaseMs;
    const every = Math.max(1, Math.floor(st.leaseMs * this.extendEvery));
    st.timer = setTimeout(async () => {
      if (st.released || st.timedOut || !this.running.has(st)) return;
      try {
        await st.loop.queue.extend(st.msg.receipt, leaseMs);
        st.msg.leaseExpiresAt = new Date(Date.now() + leaseMs).toISOString();
        st.extendedAt = Date.now();
        if (!st.released && !st.timedOut) this._scheduleExtend(st);
      } catch (e) {
        if (st.timedOut) return;
        if (lostReceipt(e)) {
          this._count(st, "lost");
          this.log.leaseLost(st.msg, st.loop.name, e);
          st.released = true;
          st.lost = true;
          st.ctl.abort(e);
          return;
        }
        this.log.extendFailed(st.msg, st.loop.name, e);
        if (!st.released) this._scheduleExtend(st, true);
      }
    }, soon ? Math.min(every, 200 + Math.random() * 300) : every);
  }

  // Acks, with what the handler returned (`value`, unless undefined) as
  // the job's result, retrying transient failures while the lease lasts; a
  // refused receipt is logged (the message comes back to someone), never
  // thrown. A value that cannot be a result (not JSON, or refused by the
  // server: too large) fails the attempt instead, with the reason as its
  // error.
  async _ack(st, value) {
    let options;
    if (value !== undefined) {
      const why = resultError(value);
      if (why !== null) return this._resultFailed(st, why);
      options = { result: value, resultTtlMs: this.resultTtlMs };
    }
    let refused = null;
    const r = await this._settle(st, "ack", "acked", () => st.loop.queue.ack(st.msg.receipt, options),
                                 (e) => (refused = options && e instanceof BadRequest ? e : null));
    if (refused) return this._resultFailed(st, `result refused by the server: ${describe(refused)}`);
    return { outcome: r === null ? null : "acked", result: r === null ? undefined : value };
  }

  // A failed attempt for a result that cannot be kept (`text` says why).
  _resultFailed(st, text) {
    return this._nack(st, { error: text }, (outcome) =>
      this.log.handlerFailed(st.msg, st.loop.name, null, outcome, { text }));
  }

  // Nacks with `options` (error, delayMs, action); `said(outcome)` logs
  // what the server did with it.
  async _nack(st, options, said) {
    const outcome = await this._settle(st, "nack", "nacked",
                                       () => st.loop.queue.nack(st.msg.receipt, options));
    if (outcome !== null) {
      // Of the nacks, those the handler snoozed (and the server did not
      // count as failed), and those it dead-lettered.
      if (options.action === "snooze" && outcome === "snoozed") this._count(st, "snoozed");
      if (options.action === "dead") this._count(st, "dead");
      said(outcome);
    }
    return { outcome, error: options.error };
  }

  // The call's result (undefined when not known), or null when it did
  // not go through (or when `refused(error)` says the caller takes that
  // error over).
  async _settle(st, what, counter, call, refused = () => false) {
    const { msg, loop } = st;
    const deadline = st.extendedAt + st.leaseMs;
    const name = `${what} of ${this.log.ref(msg, loop.name)}`;
    for (let attempt = 0; ; attempt++) {
      try {
        const r = await call();
        this._count(st, counter);
        if (attempt > 0) this.log.worksAgain(name, attempt);
        return r;
      } catch (e) {
        if (refused(e)) return null;
        if (lostReceipt(e)) {
          // Either an earlier try of this call went through before its
          // reply was lost, or the lease ran out and someone else has the
          // message: both are logged, the worker goes on.
          this._count(st, "failedAcks");
          this.log.outcomeRefused(what, msg, loop.name, e);
          return null;
        }
        if (!this._transient(e) || Date.now() > deadline) {
          this._count(st, "failedAcks");
          this.log.outcomeFailed(what, msg, loop.name, e);
          return null;
        }
        const ms = e.retryAfterMs ?? backoffMs(attempt, 100, this.maxBackoffMs);
        this.log.retrying(name, e, ms, attempt);
        await sleep(ms);
      }
    }
  }

  // Gives a message back unfinished: ready again at once, for another
  // consumer, as a nack with no delay and an error text that says why
  // (the attempt counts, as an expired lease's would).
  async _release(loop, msg, unworked = false) {
    this.stats.released++;
    this.stats.queues[loop.name].released++;
    try {
      await loop.queue.nack(msg.receipt, { delayMs: 0, error: RELEASED });
      this.log.released(msg, loop.name, unworked);
    } catch (e) {
      this.log.releaseFailed(msg, loop.name, e);
    }
  }

  // After the claims stopped: running handlers get until the shutdown
  // deadline; the messages of those still running then are released and
  // their handlers' signals aborted.
  async _drain() {
    await Promise.all(this._pending);
    if (this.running.size === 0) return;
    const all = () => Promise.all([...this.running].map((s) => s.done));
    let timer;
    const timeout = new Promise((r) => {
      this._hurry = r;
      timer = setTimeout(r, this._hurried ? 0 : this.shutdownTimeoutMs);
    });
    await Promise.race([all(), timeout]);
    clearTimeout(timer);
    const left = [...this.running].filter((s) => !s.released && !s.timedOut);
    if (left.length) {
      await Promise.all(left.map((s) => {
        s.released = true;
        clearTimeout(s.timer);
        s.ctl.abort(new SqlqError("shutting_down", "the worker is stopping"));
        return this._release(s.loop, s.msg);
      }));
    }
  }
}
