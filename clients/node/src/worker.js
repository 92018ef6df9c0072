// The worker runtime: `concurrency` handlers at once on long-poll claims,
// each running message's lease extended in the background, ack on
// success, nack with the error's text on failure, graceful shutdown on
// SIGTERM/SIGINT, reconnection with backoff when the server is away.

import {
  SqlqError, ConnectionFailed, TooManyRequests, Unavailable, ServerTimeout,
  NotFound, StaleReceipt,
} from "./errors.js";
import { backoffMs, sleep } from "./http.js";

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

const defaultLogger = {
  info: (msg, fields) => console.error(`sqlq worker: ${msg}`, fields ?? ""),
  warn: (msg, fields) => console.error(`sqlq worker: ${msg}`, fields ?? ""),
  error: (msg, fields) => console.error(`sqlq worker: ${msg}`, fields ?? ""),
};

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
    this.queue = typeof queue === "string" ? client.queue(queue) : queue;
    this.handler = handler;
    this.concurrency = options.concurrency ?? 1;
    this.waitMs = options.waitMs ?? 20000;
    this.leaseMs = options.leaseMs ?? null;
    this.extendEvery = options.extendEvery ?? 1 / 3;
    this.shutdownTimeoutMs = options.shutdownTimeoutMs ?? 30000;
    this.maxBackoffMs = options.maxBackoffMs ?? 5000;
    this.name = options.name;
    this.logger = options.logger === null ? { info() {}, warn() {}, error() {} }
                                          : (options.logger ?? defaultLogger);
    this.installSignalHandlers = options.installSignalHandlers ?? true;
    this.running = new Map();  // receipt -> state of one message in hand
    this.stopping = false;
    this.stats = { acked: 0, nacked: 0, released: 0, lost: 0, failedAcks: 0 };
    this._stopCtl = new AbortController();
    this._slotFreed = null;
    this._pending = new Set();
    this._hurry = null;
    this._hurried = false;
  }

  // Stop claiming; running handlers get until the shutdown deadline, then
  // their messages are released. Resolves when run() is done.
  stop() {
    if (!this.stopping) {
      this.stopping = true;
      this.logger.info("stopping: no more claims", { running: this.running.size });
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
        this.logger.info(`${sig} again: releasing unfinished messages now`);
        this._hurried = true;  // for a _drain that has not begun waiting
        this._hurry?.();
      } else {
        this.logger.info(`${sig}: shutting down`);
        this.stop();
      }
    };
    if (this.installSignalHandlers) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    try {
      if (this.leaseMs === null) this.leaseMs = await this._queueLease();
      if (!this.stopping) await this._claimLoop();
      await this._drain();
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
        return s.options?.leaseMs ?? 30000;
      } catch (e) {
        if (!this._transient(e)) throw e;
        await this._pause(attempt, e);
      }
    }
    return 30000;
  }

  _transient(e) { return transient(e); }

  async _pause(attempt, e) {
    const ms = e?.retryAfterMs ?? backoffMs(attempt, 100, this.maxBackoffMs);
    if (attempt === 0 || attempt % 10 === 0) {
      this.logger.warn(`server unreachable or busy (${e.code}): retrying in ${Math.round(ms)} ms`,
                       { attempt });
    }
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
          this.logger.error(`claim failed: ${e.message}`, { code: e.code });
        }
        await this._pause(failures++, e);
        continue;
      }
      if (failures > 0) this.logger.info("connected again");
      failures = 0;
      for (const msg of batch) {
        if (this.stopping) {
          // Claimed as we stopped: give it back unworked.
          this._pending.add(this._release(msg));
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
        await this.handler(msg);
        outcome = { ok: true };
      } catch (err) {
        outcome = { ok: false, err };
      }
      clearTimeout(st.timer);
      if (!st.released) {
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
          this.logger.warn(`lease of message ${st.msg.id} lost: ${e.message}`, { code: e.code });
          st.released = true;
          st.ctl.abort(e);
          return;
        }
        this.logger.warn(`extending message ${st.msg.id} failed: ${e.message}; trying again`,
                         { code: e.code });
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
    await this._settle(st, "nack",
      () => this.queue.nack(st.msg.receipt, { error: errorText(err) }));
  }

  async _settle(st, what, call) {
    const deadline = st.extendedAt + this.leaseMs;
    for (let attempt = 0; ; attempt++) {
      try {
        await call();
        if (what === "ack") this.stats.acked++;
        else this.stats.nacked++;
        return;
      } catch (e) {
        if (lostReceipt(e)) {
          // Either an earlier try of this call went through before its
          // reply was lost, or the lease ran out and someone else has the
          // message: both are logged, the worker goes on.
          this.stats.failedAcks++;
          this.logger.warn(`${what} of message ${st.msg.id} refused: ${e.message}`,
                           { code: e.code });
          return;
        }
        if (!this._transient(e) || Date.now() > deadline) {
          this.stats.failedAcks++;
          this.logger.error(`${what} of message ${st.msg.id} failed: ${e.message}; ` +
                            "it will be delivered again when its lease ends", { code: e.code });
          return;
        }
        await sleep(e.retryAfterMs ?? backoffMs(attempt, 100, this.maxBackoffMs));
      }
    }
  }

  // Gives a message back unfinished: ready again at once, for another
  // consumer. The HTTP API has no release that leaves the attempt
  // uncounted, so this is a nack with no delay and an error text that says
  // why (the attempt counts, as an expired lease's would).
  async _release(msg) {
    this.stats.released++;
    try {
      await this.queue.nack(msg.receipt, { delayMs: 0, error: RELEASED });
    } catch (e) {
      this.logger.warn(`releasing message ${msg.id} failed: ${e.message}; ` +
                       "it comes back when its lease ends", { code: e.code });
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
      this.logger.warn(`shutdown deadline: releasing ${left.length} unfinished message(s)`);
      await Promise.all(left.map((s) => {
        s.released = true;
        clearTimeout(s.timer);
        s.ctl.abort(new SqlqError("shutting_down", "the worker is stopping"));
        return this._release(s.msg);
      }));
    }
  }
}
