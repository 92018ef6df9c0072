// The worker runtime: `concurrency` handlers at once on long-poll claims,
// each running message's lease extended in the background, ack on
// success, nack with the error's text on failure, graceful shutdown on
// SIGTERM/SIGINT, reconnection with backoff when the server is away.

import os from "node:os";

import {
  SqlqError, ConnectionFailed, TooManyRequests, Unavailable, ServerTimeout,
  NotFound, StaleReceipt,
} from "./errors.js";
import { backoffMs, sleep, describe, defaultLogger, silentLogger } from "./http.js";
import { api as tracingApi, handling } from "./tracing.js";

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

// What a worker logs: one method per event, in the words of the Python
// worker (docs/clients.md, "What the workers log"). Each call gives the
// logger the text and the event's fields; a failed handler's error is
// `fields.error`.
class WorkerLog {
  // A call that keeps failing is logged on its first failure and then
  // every this many tries, not at each one.
  static EVERY = 10;

  constructor(logger, name, queue) {
    this.logger = logger;
    this.p = `sqlq worker ${name}: `;
    this.queue = queue;
  }

  started(concurrency, leaseMs) {
    this.logger.info(`${this.p}started on queue ${this.queue} (concurrency ${concurrency}, ` +
                     `lease ${leaseMs} ms)`, { queue: this.queue, concurrency, leaseMs });
  }

  // The handler threw and its message was nacked; outcome is the nack's:
  // "retry", "dead", or undefined when not known.
  handlerFailed(msg, err, outcome) {
    const first = errorText(err).split("\n")[0];
    const fields = { queue: this.queue, id: msg.id, attempt: msg.attempt, outcome, error: err };
    const head = `${this.p}message ${msg.id} of ${this.queue} failed on attempt ${msg.attempt}`;
    if (outcome === "dead") {
      this.logger.error(`${head}, now a dead letter: ${first}`, fields);
    } else {
      const then = outcome === "retry" ? "retried after the queue's backoff" : "nacked";
      this.logger.warn(`${head}, ${then}: ${first}`, fields);
    }
  }

  leaseLost(msg, e) {
    this.logger.warn(`${this.p}lease of message ${msg.id} lost, another worker may have it ` +
                     `(the handler still runs; its outcome will be refused): ${describe(e)}`,
                     { id: msg.id, code: e.code });
  }

  outcomeRefused(what, msg, e) {
    this.logger.warn(`${this.p}${what} of message ${msg.id} refused, its lease was lost: ` +
                     describe(e), { id: msg.id, code: e.code });
  }

  outcomeFailed(what, msg, e) {
    this.logger.error(`${this.p}${what} of message ${msg.id} failed: ${describe(e)}; ` +
                      "it is delivered again when its lease ends", { id: msg.id, code: e.code });
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

  extendFailed(msg, e) {
    this.logger.warn(`${this.p}extending the lease of message ${msg.id} failed ` +
                     `(${describe(e)}); retrying`, { id: msg.id, code: e.code });
  }

  signal(sig) { this.logger.info(`${this.p}${sig}: stopping`, { signal: sig }); }

  signalAgain(sig) {
    this.logger.info(`${this.p}${sig} again: releasing unfinished messages now`, { signal: sig });
  }

  stopping(running) {
    this.logger.info(`${this.p}stopping: no more claims, ${running} handler(s) running`,
                     { running });
  }

  released(msg, unworked) {
    this.logger.warn(`${this.p}message ${msg.id} released ` +
                     (unworked ? "unworked: it was claimed as the worker stopped"
                               : "unfinished at the shutdown deadline"), { id: msg.id });
  }

  releaseFailed(msg, e) {
    this.logger.error(`${this.p}release of message ${msg.id} failed (it comes back when its ` +
                      `lease ends): ${describe(e)}`, { id: msg.id, code: e.code });
  }

  finishedAfterRelease(msg) {
    this.logger.warn(`${this.p}message ${msg.id} finished after it was released at the ` +
                     "shutdown deadline; its outcome is dropped", { id: msg.id });
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

export class Worker {
  // new Worker(client, "emails", async (msg) => {...}, {concurrency, ...})
  constructor(client, queue, handler, options = {}) {
    if (typeof handler !== "function") throw new TypeError("handler must be a function");
    this.client = client;
    // The worker retries its calls by itself (claims with backoff, acks
    // while the lease lasts), and logs it.
    this.queue = client._withoutRetries().queue(typeof queue === "string" ? queue : queue.name);
    this.handler = handler;
    this.concurrency = options.concurrency ?? 1;
    this.waitMs = options.waitMs ?? 20000;
    this.leaseMs = options.leaseMs ?? null;
    this.extendEvery = options.extendEvery ?? 1 / 3;
    this.shutdownTimeoutMs = options.shutdownTimeoutMs ?? 30000;
    this.maxBackoffMs = options.maxBackoffMs ?? 5000;
    this.name = options.name ?? `${os.hostname()}-${process.pid}`;
    this.logger = options.logger === null ? silentLogger : (options.logger ?? defaultLogger);
    this.log = new WorkerLog(this.logger, this.name, this.queue.name);
    this.installSignalHandlers = options.installSignalHandlers ?? true;
    this.running = new Map();  // receipt -> state of one message in hand
    this.stopping = false;
    this.stats = { acked: 0, nacked: 0, released: 0, lost: 0, failedAcks: 0 };
    this._stopCtl = new AbortController();
    this._slotFreed = null;
    this._pending = new Set();
    this._hurry = null;
    this._hurried = false;
    this._otel = null;  // OpenTelemetry's API, when the application has it
  }

  // Stop claiming; running handlers get until the shutdown deadline, then
  // their messages are released. Resolves when run() is done.
  stop() {
    if (!this.stopping) {
      this.stopping = true;
      this.log.stopping(this.running.size);
      this._stopCtl.abort();
      this._wake();
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
      this._otel = await tracingApi();
      if (this.leaseMs === null) this.leaseMs = await this._queueLease();
      if (!this.stopping) {
        this.log.started(this.concurrency, this.leaseMs);
        await this._claimLoop();
      }
      await this._drain();
      this.log.stopped(this.stats);
    } finally {
      if (this.installSignalHandlers) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
    }
  }

  _wake() {
    const f = this._slotFreed;
    this._slotFreed = null;
    f?.();
  }

  // The queue's own lease, asked of the server (retried until it answers).
  async _queueLease() {
    for (let attempt = 0; !this.stopping; attempt++) {
      try {
        const s = await this.queue.stats();
        if (attempt > 0) this.log.worksAgain("stats", attempt);
        return s.options?.leaseMs ?? 30000;
      } catch (e) {
        if (!this._transient(e)) throw e;
        await this._pause("stats", attempt, e);
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

  async _claimLoop() {
    let failures = 0;
    while (!this.stopping) {
      const free = this.concurrency - this.running.size;
      if (free <= 0) {
        await new Promise((r) => { this._slotFreed = r; });
        continue;
      }
      let batch;
      try {
        batch = await this.queue.claim({
          max: free, waitMs: this.waitMs, leaseMs: this.leaseMs,
          worker: this.name, signal: this._stopCtl.signal,
        });
      } catch (e) {
        if (this.stopping) break;
        if (!this._transient(e)) {
          this.logger.error(`${this.log.p}claim failed: ${describe(e)}`, { code: e.code });
        }
        await this._pause("claim", failures++, e);
        continue;
      }
      if (failures > 0) this.log.worksAgain("claim", failures);
      failures = 0;
      for (const msg of batch) {
        if (this.stopping) {
          // Claimed as we stopped: give it back unworked.
          this._pending.add(this._release(msg, true));
        } else {
          this._start(msg);
        }
      }
      if (batch.limitedBy && batch.length === 0 && batch.retryAfterMs) {
        await sleep(batch.retryAfterMs, this._stopCtl.signal);
      }
    }
  }

  _start(msg) {
    const ctl = new AbortController();
    const st = { msg, ctl, released: false, timer: null, done: null, extendedAt: Date.now() };
    Object.defineProperty(msg, "signal", { value: ctl.signal, enumerable: false });
    this.running.set(msg.receipt, st);
    this._scheduleExtend(st);
    st.done = (async () => {
      let outcome;
      try {
        await handling(this._otel, this.queue.name, msg, () => this.handler(msg));
        outcome = { ok: true };
      } catch (err) {
        outcome = { ok: false, err };
      }
      clearTimeout(st.timer);
      if (st.released && !st.lost) {
        this.log.finishedAfterRelease(msg);
      } else {
        // After a lost lease too: the server then says whether the
        // message is still this worker's (and the log says it was not).
        if (outcome.ok) await this._ack(st);
        else await this._nack(st, outcome.err);
      }
      this.running.delete(msg.receipt);
      this._wake();
    })();
  }

  // Extends the lease at `extendEvery` of it while the handler runs; a
  // failed extension is tried again sooner, a refused one means the
  // message is no longer ours (the handler's signal is aborted).
  _scheduleExtend(st, soon = false) {
    const every = Math.max(1, Math.floor(this.leaseMs * this.extendEvery));
    st.timer = setTimeout(async () => {
      if (st.released || !this.running.has(st.msg.receipt)) return;
      try {
        await this.queue.extend(st.msg.receipt, this.leaseMs);
        st.msg.leaseExpiresAt = new Date(Date.now() + this.leaseMs).toISOString();
        st.extendedAt = Date.now();
        if (!st.released) this._scheduleExtend(st);
      } catch (e) {
        if (lostReceipt(e)) {
          this.stats.lost++;
          this.log.leaseLost(st.msg, e);
          st.released = true;
          st.lost = true;
          st.ctl.abort(e);
          return;
        }
        this.log.extendFailed(st.msg, e);
        if (!st.released) this._scheduleExtend(st, true);
      }
    }, soon ? Math.min(every, 200 + Math.random() * 300) : every);
  }

  // Acks, retrying transient failures while the lease lasts; a refused
  // receipt is logged (the message comes back to someone), never thrown.
  async _ack(st) {
    await this._settle(st, "ack", () => this.queue.ack(st.msg.receipt));
  }

  async _nack(st, err) {
    const outcome = await this._settle(st, "nack",
      () => this.queue.nack(st.msg.receipt, { error: errorText(err) }));
    if (outcome !== null) this.log.handlerFailed(st.msg, err, outcome);
  }

  // The call's result (undefined when not known), or null when it did
  // not go through.
  async _settle(st, what, call) {
    const deadline = st.extendedAt + this.leaseMs;
    for (let attempt = 0; ; attempt++) {
      try {
        const r = await call();
        if (what === "ack") this.stats.acked++;
        else this.stats.nacked++;
        if (attempt > 0) this.log.worksAgain(`${what} of message ${st.msg.id}`, attempt);
        return r;
      } catch (e) {
        if (lostReceipt(e)) {
          // Either an earlier try of this call went through before its
          // reply was lost, or the lease ran out and someone else has the
          // message: both are logged, the worker goes on.
          this.stats.failedAcks++;
          this.log.outcomeRefused(what, st.msg, e);
          return null;
        }
        if (!this._transient(e) || Date.now() > deadline) {
          this.stats.failedAcks++;
          this.log.outcomeFailed(what, st.msg, e);
          return null;
        }
        const ms = e.retryAfterMs ?? backoffMs(attempt, 100, this.maxBackoffMs);
        this.log.retrying(`${what} of message ${st.msg.id}`, e, ms, attempt);
        await sleep(ms);
      }
    }
  }

  // Gives a message back unfinished: ready again at once, for another
  // consumer. The HTTP API has no release that leaves the attempt
  // uncounted, so this is a nack with no delay and an error text that says
  // why (the attempt counts, as an expired lease's would).
  async _release(msg, unworked = false) {
    this.stats.released++;
    try {
      await this.queue.nack(msg.receipt, { delayMs: 0, error: RELEASED });
      this.log.released(msg, unworked);
    } catch (e) {
      this.log.releaseFailed(msg, e);
    }
  }

  // After the claims stopped: running handlers get until the shutdown
  // deadline; the messages of those still running then are released and
  // their handlers' signals aborted.
  async _drain() {
    await Promise.all(this._pending);
    if (this.running.size === 0) return;
    const all = () => Promise.all([...this.running.values()].map((s) => s.done));
    let timer;
    const timeout = new Promise((r) => {
      this._hurry = r;
      timer = setTimeout(r, this._hurried ? 0 : this.shutdownTimeoutMs);
    });
    await Promise.race([all(), timeout]);
    clearTimeout(timer);
    const left = [...this.running.values()].filter((s) => !s.released);
    if (left.length) {
      await Promise.all(left.map((s) => {
        s.released = true;
        clearTimeout(s.timer);
        s.ctl.abort(new SqlqError("shutting_down", "the worker is stopping"));
        return this._release(s.msg);
      }));
    }
  }
}
