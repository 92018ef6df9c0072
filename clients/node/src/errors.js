// Every failure of a call is an SqlqError: the server's error code and
// message, the HTTP status (0 when no reply came) and Retry-After. One
// subclass per kind of error reply, as in the Python client.

export class SqlqError extends Error {
  constructor(code, message, status = 0, { retryAfterMs = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.retryAfterMs = retryAfterMs;
  }
}

// 400, 413, 415, 431, 501: the request is wrong; retrying will not help.
export class BadRequest extends SqlqError {}
// 401: no token, or an unknown one.
export class Unauthorized extends SqlqError {}
// 403: the token lacks the permission (or host/origin not allowed).
export class Forbidden extends SqlqError {}
// 404: no such queue, ring, rotation, message; a receipt of a message that
// is gone (acked, dead-lettered, purged).
export class NotFound extends SqlqError {}
// 409 already_exists: the name is taken.
export class AlreadyExists extends SqlqError {}
// 409 failed_precondition: the receipt's lease ran out and another consumer
// claimed the message (or a name of another kind).
export class StaleReceipt extends SqlqError {}
// Another 409.
export class Conflict extends SqlqError {}
// 429: too many waiting polls or failed authentications; see retryAfterMs.
export class TooManyRequests extends SqlqError {}
// 503: the server is busy, stopping, or its database is unreachable.
export class Unavailable extends SqlqError {}
// 504: a deadline ran out inside the store.
export class ServerTimeout extends SqlqError {}
// 500 outcome_unknown: the connection to the database was lost while
// committing; the write may or may not have happened.
export class OutcomeUnknown extends SqlqError {}
// Another 5xx: corruption, internal.
export class ServerError extends SqlqError {}
// No reply came: the server is unreachable, or the connection broke.
// `sent` says whether the request may have reached the server.
export class ConnectionFailed extends SqlqError {
  constructor(message, sent, cause) {
    super("connection_failed", message, 0, { cause });
    this.sent = sent;
  }
}

// What awaiting a job's result (client.result) rejects with when the job
// became a dead letter: its attempts used up, its handler threw Permanent
// or Cancel, or it expired. `id`: the job's; `error`: its last error;
// `attempts`: how many it had (null when not known); `info`: the server's
// whole reply.
export class JobFailed extends SqlqError {
  constructor(id, error, attempts = null, info = {}) {
    const first = String(error ?? "").split("\n")[0];
    super("job_failed", `job ${id} failed` +
          (attempts != null ? ` after ${attempts} attempt(s)` : "") + (first ? `: ${first}` : ""));
    this.id = id;
    this.error = error ?? null;
    this.attempts = attempts;
    this.info = info;
  }
}

// What awaiting a job's result (client.result) rejects with when the job
// was neither completed nor dead within the timeout. `id`: the job's;
// `info`: the server's last reply about it (its state, progress), null
// when none came (the server was unreachable all along).
export class ResultTimeout extends SqlqError {
  constructor(id, timeoutMs, info = null, cause) {
    super("result_timeout", `no result for job ${id} within ${timeoutMs} ms` +
          (info?.state ? ` (still ${info.state})` : ""), 0, { cause });
    this.id = id;
    this.info = info;
  }
}

const BY_CODE = {
  not_found: NotFound, no_route: NotFound, already_exists: AlreadyExists,
  failed_precondition: StaleReceipt, outcome_unknown: OutcomeUnknown,
};
const BY_STATUS = {
  401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
  429: TooManyRequests, 503: Unavailable, 504: ServerTimeout,
};

// The error for an error reply.
export function errorFor(status, code, message, retryAfterMs = null) {
  const Cls = BY_CODE[code] ?? BY_STATUS[status] ?? (status >= 500 ? ServerError : BadRequest);
  return new Cls(code, message, status, { retryAfterMs });
}

// An error after which the same request may be sent again as it is: no
// reply came and the request never reached the server, or the reply says
// it was not carried out (429, 503).
export function isRetryable(err) {
  return (err instanceof ConnectionFailed && !err.sent) ||
         err instanceof TooManyRequests || err instanceof Unavailable;
}
