// What a handler throws to say what becomes of its message, other than a
// failed attempt: the job runtime's outcomes (docs/clients.md, "Jobs").
// The names are the Python worker's.

// Give the message back to be claimed again after `delayMs`, the attempt
// not counted (nack action "snooze"). A message snoozed 100 times has each
// further snooze counted as a failed attempt.
export class Snooze extends Error {
  constructor(delayMs = 0) {
    super(`snoozed for ${delayMs} ms`);
    this.name = "Snooze";
    this.delayMs = delayMs;
  }
}

// A failed attempt, retried after `delayMs` rather than the queue's
// backoff (a dead letter when it was the last attempt). `error` (an Error
// or a text) is what the message keeps as its error.
export class RetryAfter extends Error {
  constructor(delayMs, error) {
    super(error instanceof Error ? error.message : (error ?? `retry after ${delayMs} ms`),
          error instanceof Error ? { cause: error } : undefined);
    this.name = "RetryAfter";
    this.delayMs = delayMs;
    this.error = error;
  }
}

// A failure that no retry mends: a dead letter now, whatever attempts are
// left, with `error` as its last error.
export class Permanent extends Error {
  constructor(error) {
    super(error instanceof Error ? error.message : String(error ?? "permanent failure"),
          error instanceof Error ? { cause: error } : undefined);
    this.name = "Permanent";
    this.error = error;
  }
}

// The job is no longer wanted: a dead letter now, with the error
// "cancelled: REASON".
export class Cancel extends Error {
  constructor(reason = "") {
    super(`cancelled: ${reason}`);
    this.name = "Cancel";
    this.reason = String(reason);
  }
}
