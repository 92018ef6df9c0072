// The HTTP layer: one keep-alive agent per client, JSON in and out, every
// failure an SqlqError, and the retries that are safe.

import http from "node:http";
import https from "node:https";
import { SqlqError, ConnectionFailed, errorFor, isRetryable } from "./errors.js";

const sleep = (ms, signal) => new Promise((resolve) => {
  if (signal?.aborted) return resolve();
  const t = setTimeout(done, ms);
  function done() {
    clearTimeout(t);
    signal?.removeEventListener("abort", done);
    resolve();
  }
  signal?.addEventListener("abort", done, { once: true });
});
export { sleep };
export { toError };

// An error as the logs show it: "404 not_found: ..." (as the Python
// client's errors print), "connection_failed: ..." when no reply came.
export function describe(e) {
  if (!(e instanceof SqlqError)) return String(e?.message ?? e);
  return `${e.status ? e.status + " " : ""}${e.code}: ${e.message}`;
}

// The logger of clients and workers when none is given: each line on
// stderr, a failed handler's error with its stack under it (as Python's
// logging prints a traceback).
export const defaultLogger = {
  info: (msg) => console.error(msg),
  warn: (msg, fields) => console.error(withError(msg, fields)),
  error: (msg, fields) => console.error(withError(msg, fields)),
};
const withError = (msg, fields) =>
  fields?.error instanceof Error && fields.error.stack ? `${msg}\n${fields.error.stack}` : msg;
export const silentLogger = { info() {}, warn() {}, error() {} };

// Capped exponential backoff with full jitter: attempt 0, 1, 2, ...
export function backoffMs(attempt, baseMs = 100, maxMs = 5000) {
  const cap = Math.min(maxMs, baseMs * 2 ** Math.min(attempt, 30));
  return cap / 2 + Math.random() * (cap / 2);
}

// How long a server has to answer a request whose sending side an abort
// closed (Transport.once, halfClose) before the connection is cut.
const ABORT_GRACE_MS = 2000;

// Errors of connecting, before any byte of the request went out.
const NOT_SENT = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH",
                          "ENETUNREACH", "EADDRNOTAVAIL"]);

export class Transport {
  constructor(url, { token, timeoutMs = 30000, retries = 20, retryForMs = 30000, ca,
                     agent, logger } = {}) {
    const u = new URL(url);
    if (u.protocol !== "http:" && u.protocol !== "https:") {
      throw new SqlqError("invalid_argument", `not an http(s) URL: ${url}`);
    }
    this.url = u;
    this.base = u.pathname.replace(/\/+$/, "");
    this.token = token;
    this.timeoutMs = timeoutMs;
    this.retries = retries;
    this.retryForMs = retryForMs;
    this.mod = u.protocol === "https:" ? https : http;
    this.agent = agent ?? new this.mod.Agent({ keepAlive: true, ca });
    this.ownAgent = !agent;
    this.logger = logger === null ? silentLogger : (logger ?? defaultLogger);
  }

  close() {
    if (this.ownAgent) this.agent.destroy();
  }

  // One round trip. `opts.timeoutMs` bounds the whole exchange; `signal`
  // aborts it. Resolves with {status, body, headers}. With `halfClose`, an
  // abort that comes once the request went out whole closes only the
  // sending side and the reply is read as usual: the server ends a waiting
  // claim at once and answers with what it took, so that a message it was
  // claiming as the abort came is not left leased to no one. A server
  // that does not answer within ABORT_GRACE_MS even so is cut off.
  once(method, path, { body, timeoutMs, signal, halfClose = false } = {}) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        return reject(new SqlqError("aborted", `${method} ${path}: aborted`, 0));
      }
      const data = body === undefined ? null : Buffer.from(JSON.stringify(body));
      const headers = { accept: "application/json" };
      if (data) {
        headers["content-type"] = "application/json";
        headers["content-length"] = data.length;
      }
      if (this.token) headers.authorization = `Bearer ${this.token}`;
      let settled = false;
      const req = this.mod.request({
        protocol: this.url.protocol,
        hostname: this.url.hostname,
        port: this.url.port,
        method,
        path: this.base + path,
        headers,
        agent: this.agent,
      });
      const limit = timeoutMs ?? this.timeoutMs;
      const timer = setTimeout(() => {
        const e = new Error(`no reply within ${limit} ms`);
        e.code = "ETIMEDOUT";
        req.destroy(e);
      }, limit);
      let grace = null;
      const onAbort = () => {
        const cut = () => {
          const e = new Error("aborted");
          e.code = "ABORT_ERR";
          req.destroy(e);
        };
        if (halfClose && req.writableFinished && req.socket && !req.socket.destroyed) {
          req.socket.end();
          grace = setTimeout(cut, ABORT_GRACE_MS);
        } else {
          cut();
        }
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      const settle = () => {
        settled = true;
        clearTimeout(timer);
        clearTimeout(grace);
        signal?.removeEventListener("abort", onAbort);
      };
      const fail = (err) => {
        if (settled) return;
        settle();
        const text = `${method} ${path}: ${err.message || err.code || "connection failed"}`;
        if (signal?.aborted) {
          return reject(new SqlqError("aborted", text, 0, { cause: err }));
        }
        const e = new ConnectionFailed(text, !NOT_SENT.has(err.code), err);
        // A kept-alive connection the server had closed while idle: the
        // request was never read, so it is safe to send again.
        e.staleSocket = req.reusedSocket && (err.code === "ECONNRESET" || err.code === "EPIPE");
        reject(e);
      };
      req.on("error", fail);
      req.on("response", (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("error", fail);
        res.on("aborted", () => fail(new Error("reply cut short")));
        res.on("end", () => {
          if (settled) return;
          settle();
          const text = Buffer.concat(chunks).toString("utf8");
          let parsed = null;
          if (text) {
            try { parsed = JSON.parse(text); } catch { parsed = text; }
          }
          resolve({ status: res.statusCode, body: parsed, headers: res.headers });
        });
      });
      req.end(data);
    });
  }

  // A call: the reply's JSON, or an SqlqError. Retries, with capped
  // exponential backoff, what is safe to send again: a refused connection
  // (nothing reached the server), a kept-alive connection found closed, a
  // reply that says the request was not carried out (503, 429); with
  // `idempotent`, also a connection lost mid-request and outcome_unknown.
  // At most `retries` times, and none that would start more than
  // `retryForMs` after the first try: the default outlasts a database
  // failover (10 to 15 s) or a server restart.
  async call(method, path, { body, timeoutMs, signal, halfClose, idempotent = false,
                             retries = this.retries } = {}) {
    const deadline = Date.now() + this.retryForMs;
    for (let attempt = 0; ; attempt++) {
      let err;
      try {
        const r = await this.once(method, path, { body, timeoutMs, signal, halfClose });
        if (r.status >= 200 && r.status < 300) return r.body;
        err = toError(method, path, r);
      } catch (e) {
        if (!(e instanceof SqlqError)) throw e;
        err = e;
      }
      if (err.code === "aborted") throw err;
      if (err.staleSocket && attempt === 0) continue;
      const safe = isRetryable(err) ||
        (idempotent && (err instanceof ConnectionFailed || err.code === "outcome_unknown"));
      const delay = err.retryAfterMs ?? backoffMs(attempt);
      if (!safe || attempt >= retries || Date.now() + delay > deadline || signal?.aborted) {
        throw err;
      }
      // As the Python client says it: a connection's failure names the
      // request already.
      const what = err instanceof ConnectionFailed ? err.message
                                                   : `${method} ${path}: ${describe(err)}`;
      this.logger.warn(`sqlq: ${what}; retrying in ${(delay / 1000).toFixed(2)}s`,
                       { code: err.code, attempt: attempt + 1 });
      await sleep(delay, signal);
    }
  }
}

function toError(method, path, r) {
  const ra = r.headers["retry-after"];
  const retryAfterMs = ra !== undefined && /^\d+$/.test(ra) ? Number(ra) * 1000 : null;
  const e = r.body && typeof r.body === "object" && r.body.error;
  if (e && typeof e.code === "string") {
    return errorFor(r.status, e.code, e.message ?? e.code, retryAfterMs);
  }
  return errorFor(r.status, "http_" + r.status,
    `${method} ${path}: HTTP ${r.status}` +
    (typeof r.body === "string" && r.body ? `: ${r.body.slice(0, 200)}` : ""),
    retryAfterMs);
}
