"""The worker runtime: a long-poll claim loop per queue feeding up to N
handler threads, handlers chosen by the message's kind, leases extended in
the background, the handler's outcome (ack on return, nack on failure, or
what it raised: Snooze, RetryAfter, Permanent, Cancel), per-handler
timeouts, graceful stop on SIGTERM, reconnection with backoff, and a
report of the worker to the server while it runs (a live worker)."""
from __future__ import annotations

import collections
import datetime
import json
import logging
import math
import os
import re
import secrets
import signal
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from typing import (Any, Callable, Generator, Mapping, Optional, Sequence,
                    Union)

from . import tracing
from .client import NO_RESULT, Client, Json, Message, Queue, backoff_delay
from .errors import (BadRequest, ConnectionFailed, NotFound, OutcomeUnknown,
                     ServerTimeout, SqlqError, StaleReceipt, TooManyRequests,
                     Unavailable)
from .outcomes import (Cancel, HandlerSpec, Permanent, RetryAfter, Snooze)

log = logging.getLogger("sqlq.worker")

Handler = Callable[[Message], Any]

# The server keeps at most 4096 bytes of each error text.
MAX_ERROR_BYTES = 4096
TRACEBACK_LINES = 12

# What a worker's report holds at most (the server's limits).
MAX_REPORT_TEXT = 255  # bytes of name and host
MAX_REPORT_KINDS = 256
MAX_REPORT_JOBS = 10000
MAX_REPORT_CONCURRENCY = 1000000
_KIND = re.compile(r"[A-Za-z0-9_.:/-]{1,128}\Z")
_NOT_IN_ID = re.compile(r"[^A-Za-z0-9_.-]")

# Errors after which trying again later is the right thing: the server was
# unreachable, restarting, busy, or timed out.
_TRANSIENT = (ConnectionFailed, Unavailable, TooManyRequests, ServerTimeout,
              OutcomeUnknown)


def error_text(exc: BaseException) -> str:
    """The text a failed handler leaves on its message: the exception's
    repr, then the tail of its traceback, at most 4096 bytes (UTF-8)."""
    head = f"{type(exc).__name__}: {exc}"
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    tail = "".join(tb).rstrip().splitlines()[-TRACEBACK_LINES:]
    text = head + "\n" + "\n".join(tail)
    b = text.encode("utf-8", "replace")
    if len(b) > MAX_ERROR_BYTES:
        # Keep the head and the end of the traceback, where the error is.
        keep_head = head.encode("utf-8", "replace")[:1024]
        room = MAX_ERROR_BYTES - len(keep_head) - 5
        b = keep_head + b"\n...\n" + b[-room:]
        text = b.decode("utf-8", "ignore")
    return text


def worker_id() -> str:
    """A new worker id, "host:pid:random": unique per process and run, in
    the characters the server takes (A-Z a-z 0-9 _ - . : /, at most 128)."""
    host = _NOT_IN_ID.sub("-", socket.gethostname())[:96] or "host"
    return f"{host}:{os.getpid()}:{secrets.token_hex(4)}"


def rfc3339(t: float) -> str:
    """A time.time() as the server's RFC 3339 (UTC, milliseconds)."""
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc) \
        .isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _clip(text: str, limit: int = MAX_REPORT_TEXT) -> str:
    """text cut to at most limit bytes of UTF-8, at a character."""
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore")


def release_text(name: str, shutdown_timeout: float) -> str:
    """The error a message released at the shutdown deadline gets."""
    return (f"released: worker {name} stopped before the handler finished "
            f"(shutdown timeout {shutdown_timeout:g}s)")


@dataclass
class Decision:
    """What becomes of a message after its handler: action "ack", "retry"
    (a failed attempt), "snooze" (back after delay_ms, the attempt not
    counted) or "dead" (a dead letter now); error, the text left on the
    message; why, what the logs say: "failed", "permanent", "cancelled",
    "snoozed", "unknown_kind", "timeout"; result, what an ack keeps as
    the job's result (NO_RESULT: none)."""
    action: str
    error: Optional[str] = None
    delay_ms: Optional[int] = None
    why: str = ""
    exc: Optional[BaseException] = None  # the handler's, for the log
    reason: str = ""  # a Cancel's
    result: Any = NO_RESULT

    @property
    def outcome(self) -> str:
        """The name of the outcome (sqlq.testing's), before the server's
        reply: "ack", "retry", "snooze" or "dead"."""
        return self.action


class WorkerLog:
    """What a worker logs, on the "sqlq.worker" logger: one method per
    event, so that every worker flavour says the same thing in the same
    words (the Node.js worker's texts are the same too). A worker of
    several queues names the queue of each message and call ("message 7
    of emails", "claim of emails")."""

    # A call that keeps failing is logged on its first failure and then
    # every this many tries, not at each one.
    EVERY = 10

    def __init__(self, name: str, queue: Union[str, Sequence[str]]) -> None:
        self.name = name
        self.queues = [queue] if isinstance(queue, str) else list(queue)
        self.queue = self.queues[0]
        self.several = len(self.queues) > 1

    def _p(self) -> str:
        return f"sqlq worker {self.name}: "

    def ref(self, m: Message) -> str:
        """"message 7", or "message 7 of emails" in a worker of several
        queues."""
        return f"message {m.id}" + (f" of {m.queue.name}" if self.several
                                    else "")

    def call(self, what: str, queue: str) -> str:
        """"claim", or "claim of emails" in a worker of several queues."""
        return what + (f" of {queue}" if self.several else "")

    def started(self, concurrency: int, leases: Sequence[int]) -> None:
        if not self.several:
            log.info("%sstarted on queue %s (concurrency %d, lease %d ms)",
                     self._p(), self.queue, concurrency, leases[0])
            return
        lease = (f"lease {leases[0]} ms" if len(set(leases)) == 1 else
                 "leases " + ", ".join(str(ms) for ms in leases) + " ms")
        log.info("%sstarted on queues %s (concurrency %d, %s)", self._p(),
                 ", ".join(self.queues), concurrency, lease)

    def handler_failed(self, m: Message, exc: BaseException,
                       outcome: str) -> None:
        """The handler raised and its message was nacked; outcome is the
        nack's: "retry", "dead", or anything else when not known. The
        record carries the exception (exc_info), so that handlers print its
        traceback."""
        self.failed(m, Decision("retry", error_text(exc), exc=exc), outcome)

    def failed(self, m: Message, d: Decision, outcome: Any) -> None:
        """A failed attempt (the handler raised, timed out, or has no
        handler for its kind) or a permanent failure was nacked; outcome
        is the nack's reply."""
        how = " permanently" if d.why == "permanent" else ""
        head = (f"{self._p()}message {m.id} of {m.queue.name} failed{how} "
                f"on attempt {m.attempt}")
        first = (d.error or "").split("\n")[0]
        if outcome == "dead":
            log.error("%s, now a dead letter: %s", head, first,
                      exc_info=d.exc)
        else:
            then = ("nacked" if outcome != "retry" else
                    "retried after the queue's backoff" if d.delay_ms is None
                    else f"retried in {d.delay_ms} ms")
            log.warning("%s, %s: %s", head, then, first, exc_info=d.exc)

    def snoozed(self, m: Message, d: Decision) -> None:
        """The handler raised Snooze: the message comes back later."""
        log.info("%smessage %d of %s snoozed for %d ms on attempt %d",
                 self._p(), m.id, m.queue.name, d.delay_ms or 0, m.attempt)

    def cancelled(self, m: Message, d: Decision, outcome: Any) -> None:
        """The handler raised Cancel: a dead letter now."""
        then = "now a dead letter" if outcome == "dead" else "nacked"
        log.warning("%smessage %d of %s cancelled on attempt %d, %s: %s",
                    self._p(), m.id, m.queue.name, m.attempt, then, d.reason)

    def no_handler(self, m: Message, d: Decision, outcome: Any) -> None:
        """No handler for the message's kind, and unknown_kind "snooze" or
        "dead" ("fail" is logged as a failed handler)."""
        head = (f"{self._p()}message {m.id} of {m.queue.name} has no handler "
                "for " + ("messages without a kind" if m.kind is None
                          else f"kind '{m.kind}'"))
        if outcome == "snoozed":
            log.info("%s, snoozed for %d ms", head, d.delay_ms or 0)
        elif outcome == "dead":
            log.error("%s, now a dead letter", head)
        else:
            log.warning("%s, nacked", head)

    def finished_after_timeout(self, m: Message, timeout: float) -> None:
        log.warning("%smessage %d of %s finished after its timeout of %d "
                    "ms; its outcome is dropped", self._p(), m.id,
                    m.queue.name, round(timeout * 1000))

    def lease_lost(self, m: Message, e: BaseException) -> None:
        log.warning("%slease of %s lost, another worker may have "
                    "it (the handler still runs; its outcome will be "
                    "refused): %s", self._p(), self.ref(m), e)

    def outcome_refused(self, what: str, m: Message,
                        e: BaseException) -> None:
        log.warning("%s%s of %s refused, its lease was lost: %s",
                    self._p(), what, self.ref(m), e)

    def outcome_repeated(self, what: str, m: Message,
                         e: BaseException) -> None:
        log.info("%s%s of %s: %s (an earlier try went through)",
                 self._p(), what, self.ref(m), e)

    def outcome_failed(self, what: str, m: Message, e: BaseException) -> None:
        log.error("%s%s of %s failed: %s; it is delivered again "
                  "when its lease ends", self._p(), what, self.ref(m), e)

    def retrying(self, what: str, e: BaseException, delay: float,
                 attempt: int) -> None:
        """A call failed for want of the server; logged on the first
        failure and every EVERY tries after it."""
        if attempt % self.EVERY == 0:
            log.warning("%s%s failed (%s); retrying in %.2fs (try %d)",
                        self._p(), what, e, delay, attempt + 1)

    def gave_up(self, what: str, e: BaseException) -> None:
        log.error("%s%s failed at the shutdown deadline (%s); the message "
                  "comes back when its lease ends", self._p(), what, e)

    def works_again(self, what: str, attempts: int) -> None:
        log.info("%s%s works again after %d failed tries", self._p(), what,
                 attempts)

    def signal(self, name: str) -> None:
        log.info("%s%s: stopping", self._p(), name)

    def stopping(self, running: int) -> None:
        log.info("%sstopping: no more claims, %d handler(s) running",
                 self._p(), running)

    def released(self, m: Message, unworked: bool = False) -> None:
        log.warning("%s%s released %s", self._p(), self.ref(m),
                    "unworked: it was claimed as the worker stopped"
                    if unworked else "unfinished at the shutdown deadline")

    def release_failed(self, m: Message, e: BaseException) -> None:
        log.error("%srelease of %s failed (it comes back when its "
                  "lease ends): %s", self._p(), self.ref(m), e)

    def finished_after_release(self, m: Message) -> None:
        log.warning("%s%s finished after it was released at the "
                    "shutdown deadline; its outcome is dropped", self._p(),
                    self.ref(m))

    def extend_failed(self, m: Message, e: BaseException) -> None:
        log.warning("%sextending the lease of %s failed (%s); "
                    "retrying", self._p(), self.ref(m), e)

    def not_reporting(self, e: BaseException) -> None:
        """The server has no live workers (older than them): the worker
        runs without reporting."""
        log.warning("%sreport failed: %s; the worker is not listed among "
                    "the live workers", self._p(), e)

    def report_not_removed(self, e: BaseException) -> None:
        """At the stop; the report runs out by itself."""
        log.warning("%sremoving its report failed: %s", self._p(), e)

    def stopped(self, acked: int, nacked: int, released: int,
                lost: int) -> None:
        log.info("%sstopped (acked=%d nacked=%d released=%d lost=%d)",
                 self._p(), acked, nacked, released, lost)



UNKNOWN_KIND = ("fail", "snooze", "dead")


def no_handler_text(kind: Optional[str]) -> str:
    """The error of a message no handler takes."""
    return (f"no handler for kind {kind!r}" if kind is not None
            else "no handler for messages without a kind")


def timeout_text(timeout: float) -> str:
    """The error of an attempt cut off at its timeout (seconds), in the
    Node.js worker's words: "timeout after 1000 ms"."""
    return f"timeout after {round(timeout * 1000)} ms"


def lease_of(m: Message, lease_ms: int) -> int:
    """The lease a worker keeps on m: the claim's, or the job's own
    timeout when shorter (the server leased it for that long), so that
    the lease is extended before it runs out and the message is still
    the worker's when its timeout cuts it off."""
    if m.timeout is None:
        return lease_ms
    return max(1, min(lease_ms, round(m.timeout * 1000)))


def result_error(result: Any) -> Optional[str]:
    """Why result cannot be a job's result (it is not JSON), None when it
    can. (One larger than the queue keeps is refused by the server:
    result_refused.)"""
    try:
        json.dumps(result, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        return f"result is not JSON: {type(e).__name__}: {e}"
    return None


def decide(exc: Optional[BaseException], result: Any = None) -> Decision:
    """What a handler's return (exc None; result, what it returned) or
    exception makes of its message: a return other than None is acked as
    the job's result; one that is not JSON fails the attempt with the
    reason."""
    if exc is None:
        if result is None:
            return Decision("ack")
        why = result_error(result)
        if why is not None:
            return Decision("retry", why, why="failed")
        return Decision("ack", result=result)
    if isinstance(exc, Snooze):
        return Decision("snooze", None, round(exc.delay * 1000), "snoozed")
    # An outcome's log line carries the error it was raised from, if any.
    cause = exc.__cause__ or exc.__context__
    if isinstance(exc, RetryAfter):
        return Decision("retry", exc.error, round(exc.delay * 1000),
                        "failed", cause)
    if isinstance(exc, Cancel):
        return Decision("dead", exc.error, why="cancelled",
                        reason=exc.reason)
    if isinstance(exc, Permanent):
        return Decision("dead", exc.error, why="permanent", exc=cause)
    return Decision("retry", error_text(exc), why="failed", exc=exc)


Plan = Generator[tuple[Callable[..., Any], tuple], Any, Any]


def drive(plan: Plan) -> Any:
    """Makes the calls a plan yields ((function, args) each), sending it
    each call's result or throwing it the call's exception, and returns
    what the plan returns (sqlq.aio's drive awaits each call)."""
    resume: Callable[[Any], Any] = plan.send  # or plan.throw
    got: Any = None
    while True:
        try:
            call, args = resume(got)
        except StopIteration as done:
            return done.value
        try:
            got, resume = call(*args), plan.send
        except Exception as e:
            got, resume = e, plan.throw


def _spec(h: Union[Handler, HandlerSpec]) -> HandlerSpec:
    if isinstance(h, HandlerSpec):
        return h
    if not callable(h):
        raise TypeError(f"a handler must be callable, not {h!r}")
    return HandlerSpec(h)


class _Router:
    """The handlers of a worker by kind, and what becomes of a message
    none takes (shared by the workers and sqlq.testing)."""

    def __init__(self, handler: Optional[Union[Handler, HandlerSpec]],
                 handlers: Optional[Mapping[str, Union[Handler, HandlerSpec]]],
                 timeout: Optional[float], unknown_kind: str,
                 unknown_kind_delay: float) -> None:
        self.handlers = {k: _spec(v) for k, v in (handlers or {}).items()}
        default = self.handlers.pop("*", None)
        if handler is not None:
            if default is not None:
                raise ValueError('give handler= or a "*" handler, not both')
            default = _spec(handler)
        if default is None and not self.handlers:
            raise ValueError("a worker needs handler= or handlers=")
        self.default = default
        if unknown_kind not in UNKNOWN_KIND:
            raise ValueError(f"unknown_kind must be one of {UNKNOWN_KIND}")
        self.unknown_kind = unknown_kind
        self.unknown_kind_delay = float(unknown_kind_delay)
        self.timeout = None if timeout is None else float(timeout)

    def route(self, m: Message) -> Optional[HandlerSpec]:
        """The handler of m: the one of its kind, else the default one;
        None when there is none."""
        if m.kind is not None and m.kind in self.handlers:
            return self.handlers[m.kind]
        return self.default

    def timeout_of(self, spec: HandlerSpec,
                   m: Optional[Message] = None) -> Optional[float]:
        """The seconds spec's handler may run on m: the handler's timeout
        (else the worker's), or m's own timeout when shorter."""
        t = spec.timeout if spec.timeout is not None else self.timeout
        if m is not None and m.timeout is not None:
            t = m.timeout if t is None else min(t, m.timeout)
        return t

    def unknown(self, m: Message) -> Decision:
        """The outcome of a message no handler takes."""
        error = no_handler_text(m.kind)
        if self.unknown_kind == "snooze":
            return Decision("snooze", error,
                            round(self.unknown_kind_delay * 1000),
                            "unknown_kind")
        if self.unknown_kind == "dead":
            return Decision("dead", error, why="unknown_kind")
        return Decision("retry", error, why="unknown_kind")


def send_decision(m: Message, d: Decision,
                  result_ttl: Optional[float] = None) -> Any:
    """The ack or nack of a decision: True for an ack (with the
    decision's result, kept result_ttl seconds), else the nack's outcome
    ("retry", "dead", "snoozed"); with sqlq.aio, a coroutine of the
    same."""
    if d.action == "ack":
        return m.queue.client._map(m.ack(d.result, result_ttl=result_ttl),
                                   lambda _: True)
    # A plain failure sends no action, as before there were others.
    return m.nack(error=d.error, delay_ms=d.delay_ms,
                  action=None if d.action == "retry" else d.action)


def result_refused(d: Decision, e: SqlqError) -> Optional[Decision]:
    """After the ack of d failed with e: when the server refused its
    result (larger than the queue's max_payload_bytes, say), the failed
    attempt to send instead, with the server's reason; None otherwise."""
    if d.action != "ack" or d.result is NO_RESULT or \
            not isinstance(e, BadRequest):
        return None
    return Decision("retry", f"result refused by the server: {e}",
                    why="failed")


class _WorkerBase:
    """What the workers of sqlq and sqlq.aio share: the settings, the
    handlers, the counters, the log, and the decisions about retries and
    outcomes; each flavour adds its threads or tasks."""

    def __init__(self, client: Any, queue: Optional[str] = None,
                 handler: Optional[Union[Handler, HandlerSpec]] = None, *,
                 handlers: Optional[Mapping[str, Union[Handler,
                                                       HandlerSpec]]] = None,
                 queues: Optional[Sequence[str]] = None,
                 concurrency: int = 1, wait_ms: int = 20000,
                 lease_ms: Optional[int] = None,
                 shutdown_timeout: float = 30.0,
                 name: Optional[str] = None,
                 max_backoff: float = 5.0,
                 timeout: Optional[float] = None,
                 unknown_kind: str = "fail",
                 unknown_kind_delay: float = 30.0,
                 report: bool = True,
                 report_ttl: float = 30.0,
                 result_ttl: Optional[float] = None) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 1.0 <= report_ttl <= 3600.0:
            raise ValueError("report_ttl must be 1 to 3600 seconds")
        if (queue is None) == (queues is None):
            raise ValueError("give one queue, or queues=[...]")
        names = [queue] if queue is not None else list(queues or [])
        if not names or len(set(names)) != len(names):
            raise ValueError("queues must be distinct, and at least one")
        self.router = _Router(handler, handlers, timeout, unknown_kind,
                              unknown_kind_delay)
        # Own connections, so that stop() can cut its long polls short.
        self.client = client.clone()
        # The worker retries by itself, with its own backoff.
        self.client.retries = 0
        self.queues: list[Queue] = [self.client.queue(n) for n in names]
        self.queue = self.queues[0]
        self.handler = handler
        self.handlers = self.router.handlers
        self.concurrency = concurrency
        self.wait_ms = wait_ms
        self.lease_ms = lease_ms
        self.leases: dict[str, int] = {}  # each queue's, once started
        self.shutdown_timeout = shutdown_timeout
        self.timeout = self.router.timeout
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.max_backoff = max_backoff
        self.log = WorkerLog(self.name, names)
        # The worker's id: its report's, and the worker of its claims.
        self.id = worker_id()
        self.reporting = report  # turned off when the server has no reports
        self.report_ttl = float(report_ttl)
        # How long the server keeps a handler's result (None: its default).
        self.result_ttl = result_ttl
        self.started_at: Optional[float] = None  # time.time() of start
        self._report_fails = 0
        self._deadline = float("inf")  # of the shutdown, once stopping
        # Counters, for logs and tests: in all, and by queue.
        self._count_mu = threading.Lock()
        self.acked = 0
        self.nacked = 0  # every nack: failed, snoozed, dead-lettered
        self.snoozed = 0
        self.dead = 0  # dead-lettered by the handler (Permanent, Cancel)
        self.released = 0
        self.lost = 0
        self.by_queue: dict[str, collections.Counter] = {
            n: collections.Counter() for n in names}
        self._hooks: list[tuple[Any, Any, Any]] = []  # use()'s
        self._init_runtime()

    def _init_runtime(self) -> None:
        """The flavour's threads or tasks, events and locks."""

    def use(self, before: Optional[Callable[[Message], Any]] = None,
            after: Optional[Callable[[Message, Any], Any]] = None,
            on_error: Optional[Callable[[Message, BaseException], Any]] = None
            ) -> "_WorkerBase":
        """Adds middleware around every handler (call before start; hooks
        run in the order they were added, on the handler's thread or task,
        within its timeout; with sqlq.aio a hook may be a coroutine
        function):

        before(message): before the handler; what it raises is what the
        handler would have raised (Snooze, Permanent, ...), and the
        handler does not run.
        after(message, result): after the handler returned result; what
        it raises counts as the handler's.
        on_error(message, exc): when the handler or a hook raised exc;
        what it returns is ignored, what it raises replaces exc (turn a
        ValueError into sqlq.Permanent, say).

        Returns the worker."""
        self._hooks.append((before, after, on_error))
        return self

    def _middleware(self, fn: Callable[..., Any], m: Message) -> Plan:
        """The calls of one handling within the middleware (use()),
        without making them: yields each (function, args), is sent its
        result or thrown its exception, and returns (what the handling
        raised in the end, None when it returned; what the handler
        returned). Both workers drive it, sqlq.aio's awaiting what a call
        returns."""
        try:
            for before, _, _ in self._hooks:
                if before is not None:
                    yield before, (m,)
            result = yield fn, (m,)
            for _, after, _ in self._hooks:
                if after is not None:
                    yield after, (m, result)
            return None, result
        except Exception as e:
            exc: Exception = e
        for _, _, on_error in self._hooks:
            if on_error is not None:
                try:
                    yield on_error, (m, exc)
                except Exception as e:
                    exc = e
        return exc, None

    def _invoke(self, fn: Callable[[Message], Any], m: Message
                ) -> tuple[Optional[BaseException], Any]:
        """fn(m) within the middleware; returns (what was raised, an
        Exception, None when it returned; what it returned)."""
        return drive(self._middleware(fn, m))

    def _count(self, m: Message, *keys: str) -> None:
        with self._count_mu:
            for k in keys:
                setattr(self, k, getattr(self, k) + 1)
                self.by_queue[m.queue.name][k] += 1

    # The worker's report (live workers).
    def _report_body(self, running: Sequence[Any]) -> dict[str, Json]:
        """The report of the worker with the messages running in its hands
        (the flavour's _Running)."""
        jobs = [{"queue": r.msg.queue.name, "id": r.msg.id,
                 "since": rfc3339(r.since)}
                for r in running if not (r.lost or r.released)]
        return {"name": _clip(self.name),
                "host": _clip(socket.gethostname()),
                "pid": os.getpid(),
                "queues": [q.name for q in self.queues],
                # A kind no message can have is left out, not refused.
                "kinds": [k for k in self.handlers
                          if _KIND.match(k)][:MAX_REPORT_KINDS],
                "concurrency": min(self.concurrency,
                                   MAX_REPORT_CONCURRENCY),
                "jobs": jobs[:MAX_REPORT_JOBS],
                "started_at": rfc3339(self.started_at or time.time()),
                "ttl_ms": round(self.report_ttl * 1000)}

    def _reported(self, e: Optional[BaseException]) -> Optional[float]:
        """After a report: e is its error, None when it went through.
        Returns the seconds until the next one (every report_ttl / 3;
        sooner, with backoff, after a failure for want of the server), or
        None when the server has no live workers. A failure is logged as
        any call's: on the first and every tenth try, and once when the
        reports work again; it never stops the worker."""
        every = self.report_ttl / 3
        if e is None:
            if self._report_fails:
                self.log.works_again("report", self._report_fails)
            self._report_fails = 0
            return every
        if isinstance(e, NotFound) and e.code == "no_route":
            self.reporting = False
            self.log.not_reporting(e)
            return None
        delay = every
        if isinstance(e, _TRANSIENT):
            delay = min(every, max(backoff_delay(self._report_fails, 0.05,
                                                 self.max_backoff),
                                   e.retry_after or 0.0))
        self.log.retrying("report", e, delay, self._report_fails)
        self._report_fails += 1
        return delay

    def _unreported(self, e: Optional[BaseException]) -> None:
        """After the report was removed at the stop (e None), or not: none
        to remove (NotFound) is as good; else it runs out by itself."""
        if e is not None and not isinstance(e, NotFound):
            self.log.report_not_removed(e)

    def _claim_what(self, q: Queue) -> str:
        return self.log.call("claim", q.name)

    def _claim_max(self, free: int) -> int:
        """How many one claim asks for when free handlers are free: all of
        them with one queue; one with several, so that at most one message
        per other queue waits for a handler when the claims of several
        queues come back at once."""
        return free if len(self.queues) == 1 else 1

    def _retry_delay(self, what: str, e: BaseException, attempt: int,
                     deadline: float = float("inf")) -> Optional[float]:
        """How long to wait before trying `what` again after the transient
        error e (logged), at most until deadline; None (logged) when the
        deadline has passed."""
        if time.monotonic() >= deadline:
            self.log.gave_up(what, e)
            return None
        delay = backoff_delay(attempt, 0.05, self.max_backoff)
        if isinstance(e, SqlqError) and e.retry_after:
            delay = max(delay, e.retry_after)
        delay = min(delay, max(0.001, deadline - time.monotonic()))
        self.log.retrying(what, e, delay, attempt)
        return delay

    def _refused(self, what: str, m: Message, e: SqlqError,
                 sent_before: bool) -> bool:
        """After the ack or nack of m failed for good with e: logs and
        counts it; True when it counts as done all the same (a try whose
        reply was lost went through)."""
        if isinstance(e, NotFound) and sent_before:
            self.log.outcome_repeated(what, m, e)
            return True
        if isinstance(e, (NotFound, StaleReceipt)):
            self.log.outcome_refused(what, m, e)
            self._count(m, "lost")
        else:
            self.log.outcome_failed(what, m, e)
        return False

    def _sent(self, m: Message, d: Decision, what: str, sent_before: bool,
              out: Any) -> None:
        """After the ack or nack of d: out is its reply (None: given up at
        the shutdown deadline), or the SqlqError that refused it."""
        if isinstance(out, SqlqError):
            if not self._refused(what, m, out, sent_before):
                return
            out = True
        if out is not None:
            self._settled(m, d, out)

    def _settled(self, m: Message, d: Decision, out: Any) -> None:
        """Counts and logs an ack or nack that went through; out is the
        nack's outcome (True when not known: a repeat that went through)."""
        if d.action == "ack":
            self._count(m, "acked")
            return
        if out is True:  # a repeated nack: the first one's reply was lost
            out = {"snooze": "snoozed", "dead": "dead"}.get(d.action, None)
        # Logged, then counted: once a count shows it, so does the log.
        self._log_nack(m, d, out)
        if out == "snoozed":
            self._count(m, "nacked", "snoozed")
        elif d.action == "dead" and out == "dead":
            self._count(m, "nacked", "dead")
        else:
            self._count(m, "nacked")

    def _log_nack(self, m: Message, d: Decision, out: Any) -> None:
        if d.action == "snooze" and out != "snoozed":
            # Snoozed too often: the server counted it as a failed attempt.
            self.log.failed(m, Decision("retry", "snoozed 100 times"), out)
        elif d.why == "unknown_kind" and d.action != "retry":
            self.log.no_handler(m, d, out)
        elif d.why == "snoozed":
            self.log.snoozed(m, d)
        elif d.why == "cancelled":
            self.log.cancelled(m, d, out)
        else:
            self.log.failed(m, d, out)


class _Running:
    """A message in the worker's hands: waiting for a handler thread,
    running, or with its ack or nack pending."""

    def __init__(self, msg: Message, lease_ms: int) -> None:
        self.msg = msg
        self.lease_ms = lease_ms
        self.since = time.time()  # claimed
        lease_s = lease_ms / 1000.0
        self.next_extend = time.monotonic() + lease_s / 3
        self.lease_end = time.monotonic() + lease_s
        self.lost = False  # the lease was lost: another worker has it
        self.released = False  # given back at the shutdown deadline
        self.extending = False  # an extend of it is on its way
        self.slot = False  # holds one of the worker's concurrency slots
        self.timeout: Optional[float] = None  # seconds, while it runs
        self.timeout_at = math.inf
        self.timing_out = False  # its timeout passed: being nacked
        self.timed_out = False  # nacked at its timeout
        self.lock = threading.Lock()  # one outcome: ack, nack or release

    def watched(self) -> bool:
        """Whether the heartbeat still looks after it."""
        return not (self.lost or self.released or self.timing_out)


class Worker(_WorkerBase):
    """Runs a handler for each message of one queue or several, up to
    concurrency at a time.

    Worker(client, "emails", handle) runs handle(message) for every
    message; Worker(client, queues=["emails", "sms"], handlers={
    "email.send": send_email, "sms.send": send_sms}) picks the handler by
    the message's kind ("*" for the rest; a message no handler takes gets
    the unknown_kind outcome: "fail", "snooze" or "dead").

    - One claim loop per queue asks for messages with a long poll of
      wait_ms milliseconds whenever a handler is free; at most concurrency
      handlers run at once, over all the queues.
    - While a handler runs, a heartbeat thread extends the message's lease
      (to lease_ms) each time a third of it has passed.
    - A handler that returns acks its message; what it returns, when not
      None, is kept as the job's result (any JSON value, as large as the
      queue's max_payload_bytes; kept result_ttl seconds, None: the
      server's default of a day), which client.result() awaits. A
      return that is not JSON, or that the server refuses (too large),
      fails the attempt with the reason as its error. A
      handler may say how far it has come with message.progress(value,
      note=None). One that raises Snooze,
      RetryAfter, Permanent or Cancel (sqlq's) gets that outcome; any
      other exception nacks the message with the exception's text and
      traceback tail (then retried after the queue's backoff, or
      dead-lettered on its last attempt).
    - timeout (or sqlq.handler(fn, timeout=...)): seconds a handler may
      run (a message sent with a timeout of its own, message.timeout,
      gets the shorter of the two); then its lease is no longer extended,
      message.cancelled is set (the handler should stop), and the message
      is nacked with "timeout after N ms"; what the handler does after
      that is ignored.
    - stop() (or SIGTERM/SIGINT, when run() runs in the main thread) stops
      claiming; handlers get shutdown_timeout seconds to finish, then the
      messages still unfinished are released (nacked with delay 0, so they
      are delivered again at once rather than when their lease ends).
    - When the server cannot be reached (restarting, busy) the worker
      retries with capped exponential backoff and jitter, logging it, and
      keeps extending the leases of running messages once it is back.

    - The worker reports itself to the server (GET /v1/workers lists the
      live workers): at start and every report_ttl / 3 seconds its id
      (worker.id, "host:pid:random", also the worker of its claims),
      name, host, pid, queues, kinds, concurrency and the messages in its
      hands; each report lasts report_ttl seconds, and a clean stop
      removes it. report=False: no reports.

    lease_ms: the lease of each claim; None takes each queue's.
    """

    def _init_runtime(self) -> None:
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._mu = threading.Lock()
        self._cv = threading.Condition(self._mu)
        self._running: dict[str, _Running] = {}  # every message in hand
        self._ready: collections.deque[_Running] = collections.deque()
        self._active = 0  # slots taken by handlers
        self._idle = 0  # handler threads waiting for a message
        self._handoff: collections.deque[_Running] = collections.deque()
        self._threads: list[threading.Thread] = []  # the claim loops
        self._heartbeat: Optional[threading.Thread] = None
        self._supervisor: Optional[threading.Thread] = None
        self._wake = threading.Event()
        self._beat_stop = threading.Event()
        self._reporter: Optional[threading.Thread] = None
        self._report_stop = threading.Event()

    # Lifecycle.
    def start(self) -> None:
        """Starts the claim, handler and heartbeat threads; returns at
        once."""
        if self._threads or self._stopped.is_set():
            raise RuntimeError("worker already started")
        self.started_at = time.time()
        for q in self.queues:
            lease = self.lease_ms
            if lease is None:
                lease = self._with_retry(
                    lambda: q.stats()["options"]["lease_ms"],
                    self.log.call("stats", q.name))
                if lease is None:  # stopped while the server was away
                    self._stopped.set()
                    return
            self.leases[q.name] = lease
        # Said before the first claim, so that it is the first line.
        self.log.started(self.concurrency, list(self.leases.values()))
        for q in self.queues:
            t = threading.Thread(target=self._loop, args=(q,),
                                 name=f"sqlq-claim-{q.name}", daemon=True)
            self._threads.append(t)
            t.start()
        self._heartbeat = threading.Thread(target=self._beat,
                                           name="sqlq-heartbeat", daemon=True)
        self._heartbeat.start()
        if self.reporting:
            self._reporter = threading.Thread(target=self._report_loop,
                                              name="sqlq-report",
                                              daemon=True)
            self._reporter.start()
        self._supervisor = threading.Thread(target=self._supervise,
                                            name="sqlq-supervisor",
                                            daemon=True)
        self._supervisor.start()

    def stop(self) -> None:
        """Stops claiming; running handlers get shutdown_timeout seconds
        before their messages are released. Returns at once (see join).
        Safe to call from a signal handler."""
        self._stopping.set()
        self._wake.set()

    def join(self, timeout: Optional[float] = None) -> bool:
        """Waits until the worker has stopped; True when it has."""
        return self._stopped.wait(timeout)

    def run(self) -> None:
        """start(), then wait until stop(), SIGTERM or SIGINT (the signals
        are handled when run() is called in the main thread) and the
        shutdown is done."""
        old: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                old[sig] = signal.signal(sig, self._on_signal)
        try:
            self.start()
            # Wait in slices, so that signal handlers run promptly.
            while not self._stopped.wait(0.2):
                pass
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.log.signal(signal.Signals(signum).name)
        self.stop()

    def _supervise(self) -> None:
        self._stopping.wait()
        with self._cv:
            running = self._active
            self._cv.notify_all()  # claim loops waiting for a handler
        self.log.stopping(running)
        self.client._abort_polls()  # cut waiting claims short
        deadline = time.monotonic() + self.shutdown_timeout
        self._deadline = deadline
        for t in self._threads:
            # A claim that was answered as the poll was cut is handled too.
            while t.is_alive() and time.monotonic() < deadline:
                self.client._abort_polls()
                t.join(min(0.1, max(0.0, deadline - time.monotonic())))
        # Claimed as the worker stopped, no handler free: given back now.
        with self._cv:
            unworked, self._ready = list(self._ready), collections.deque()
        for r in unworked:
            self._release(r, unworked=True)
            self._forget(r)
        with self._cv:
            while self._active and time.monotonic() < deadline:
                self._cv.wait(max(0.0, deadline - time.monotonic()))
            left = [r for r in self._running.values() if r.slot]
        for r in left:
            self._release(r)
        self._beat_stop.set()
        self._wake.set()
        if self._heartbeat:
            self._heartbeat.join(5)
        self._unreport()
        self.log.stopped(self.acked, self.nacked, self.released, self.lost)
        self._stopped.set()

    # The report.
    def _report_loop(self) -> None:
        """Reports the worker at once and every report_ttl / 3 until the
        worker has stopped."""
        try:
            delay: Optional[float] = 0.0
            while delay is not None and not self._report_stop.wait(delay):
                with self._mu:
                    running = list(self._running.values())
                try:
                    self.client.report_worker(self.id,
                                              **self._report_body(running))
                    delay = self._reported(None)
                except Exception as e:
                    delay = self._reported(e)
        finally:
            self.client._close_local()

    def _unreport(self) -> None:
        """At the stop: no more reports, and the last one removed."""
        self._report_stop.set()
        if self._reporter is None:
            return
        # A report on its way lands first (a hung one is not waited for
        # long: it runs out by itself).
        self._reporter.join(min(5.0, self.client.timeout))
        if not self.reporting:
            return
        try:
            self.client.remove_worker(self.id)
            self._unreported(None)
        except Exception as e:
            self._unreported(e)
        finally:
            self.client._close_local()

    # Claim loops.
    def _with_retry(self, fn: Callable[[], Any], what: str) -> Any:
        """fn() until it succeeds or the worker stops (None then); transient
        errors are logged and retried with backoff."""
        attempt = 0
        while True:
            try:
                result = fn()
                if attempt:
                    self.log.works_again(what, attempt)
                return result
            except _TRANSIENT as e:
                if self._stopping.is_set():
                    return None
                delay = self._retry_delay(what, e, attempt)
                attempt += 1
                self._stopping.wait(delay)

    def _loop(self, q: Queue) -> None:
        lease_ms = self.leases[q.name]
        while not self._stopping.is_set():
            with self._cv:
                while (len(self._running) >= self.concurrency
                       and not self._stopping.is_set()):
                    self._cv.wait()
                free = self.concurrency - len(self._running)
            if self._stopping.is_set():
                return
            n = self._claim_max(free)
            msgs = self._with_retry(
                lambda: q.claim(n, wait_ms=self.wait_ms, lease_ms=lease_ms,
                                worker=self.id),
                self._claim_what(q))
            if not msgs:
                if msgs is not None and msgs.retry_after_ms:
                    # A limit of the queue (rate, max_leased) held it back.
                    self._stopping.wait(msgs.retry_after_ms / 1000.0)
                continue
            for m in msgs:
                self._dispatch(_Running(m, lease_of(m, lease_ms)))

    def _dispatch(self, r: _Running) -> None:
        """Runs r on a handler thread when a slot is free, else
        queues it for the next free one (with several queues a claim may
        bring more than the handlers free by then)."""
        with self._cv:
            self._running[r.msg.receipt] = r
            run = self._active < self.concurrency
            if run:
                self._active += 1
                r.slot = True
            else:
                self._ready.append(r)
        self._wake.set()
        if run:
            self._run(r)

    def _run(self, r: _Running) -> None:
        """Hands r to an idle handler thread, or to a new one."""
        with self._cv:
            if self._idle > 0:
                self._idle -= 1
                self._handoff.append(r)
                self._cv.notify_all()
                return
        threading.Thread(target=self._handler_thread, args=(r,),
                         name="sqlq-handler", daemon=True).start()

    def _handler_thread(self, r: Optional[_Running]) -> None:
        """Handles r, then waits for the next message until the worker
        stops. (A thread abandoned at its handler's timeout comes back
        here when the handler ends at last.)"""
        try:
            while r is not None:
                self._handle(r)
                with self._cv:
                    self._idle += 1
                    while not self._handoff and not self._stopping.is_set():
                        self._cv.wait()
                    if self._handoff:
                        r = self._handoff.popleft()
                    else:
                        self._idle -= 1
                        r = None
        finally:
            self.client._close_local()

    def _free(self, r: _Running) -> None:
        """r's handler is done (or abandoned at its timeout): its slot goes
        to the next message waiting for one."""
        nxt = None
        with self._cv:
            if r.slot:
                r.slot = False
                self._active -= 1
                if self._ready and not self._stopping.is_set():
                    nxt = self._ready.popleft()
                    nxt.slot = True
                    self._active += 1
            self._cv.notify_all()
        if nxt is not None:
            self._run(nxt)

    def _forget(self, r: _Running) -> None:
        with self._cv:
            if self._running.get(r.msg.receipt) is r:
                del self._running[r.msg.receipt]
            self._cv.notify_all()

    # Handler threads.
    def _handle(self, r: _Running) -> None:
        m = r.msg
        try:
            spec = self.router.route(m)
            if spec is None:
                self._finish(r, self.router.unknown(m))
                return
            timeout = self.router.timeout_of(spec, m)
            if timeout is not None:
                r.timeout = timeout
                r.timeout_at = time.monotonic() + timeout
                self._wake.set()
            stop = False
            result: Any = None
            try:
                with tracing.handling(m.queue.name, m.id, m.headers):
                    exc, result = self._invoke(spec.fn, m)
            except BaseException as e:
                # SystemExit or KeyboardInterrupt from the handler: the
                # message is nacked, then the worker stops.
                exc, stop = e, True
            self._finish(r, decide(exc, result))
            if stop:
                self.stop()
        finally:
            self._forget(r)
            self._free(r)

    def _finish(self, r: _Running, d: Decision) -> None:
        """Sends the decision's ack or nack, retrying while the server is
        away; the heartbeat keeps its lease meanwhile."""
        m = r.msg
        with r.lock:
            if r.released:
                self.log.finished_after_release(m)
                return
            if r.timed_out:
                assert r.timeout is not None
                self.log.finished_after_timeout(m, r.timeout)
                return
            r.timeout_at = math.inf
            self._send(r, d)

    def _send(self, r: _Running, d: Decision) -> None:
        """The ack or nack of d (under r.lock), counted and logged."""
        m = r.msg
        what = "ack" if d.action == "ack" else "nack"
        sent_before = False

        def call() -> Any:
            nonlocal sent_before
            try:
                return send_decision(m, d, self.result_ttl)
            except ConnectionFailed as e:
                sent_before = sent_before or e.sent
                raise

        try:
            # Retried while stopping too, until the shutdown deadline.
            out = self._retry_outcome(call, f"{what} of message {m.id}")
        except SqlqError as e:
            instead = result_refused(d, e)
            if instead is not None:
                return self._send(r, instead)
            return self._sent(m, d, what, sent_before, e)
        self._sent(m, d, what, sent_before, out)

    def _retry_outcome(self, fn: Callable[[], Any], what: str) -> Any:
        attempt = 0
        while True:
            try:
                return fn()
            except _TRANSIENT as e:
                delay = self._retry_delay(what, e, attempt, self._deadline)
                if delay is None:
                    return None
                attempt += 1
                time.sleep(delay)

    def _time_out(self, r: _Running) -> None:
        """r's handler ran past its timeout: it is told to stop
        (message.cancelled), its slot goes to the next message, and the
        message is nacked; the handler's own outcome is dropped."""
        try:
            with r.lock:
                if r.released or r.timeout_at == math.inf:
                    return  # released, or its outcome is under way
                r.timed_out = True
                r.msg.cancelled.set()
                assert r.timeout is not None
                self._send(r, Decision("retry", timeout_text(r.timeout),
                                       why="timeout"))
        finally:
            self._forget(r)
            self._free(r)
            self.client._close_local()
            self.client._close_local()

    def _release(self, r: _Running, unworked: bool = False) -> None:
        """Gives back a message whose handler did not finish by the
        shutdown deadline (or that never got a handler): a nack with delay
        0, so it is ready again at once. (The attempt counts; the nack
        records this error on the message.)"""
        if not r.lock.acquire(blocking=False):
            return  # the handler finished: its ack or nack is under way
        try:
            if r.released or r.timed_out:
                return
            r.released = True
            r.msg.cancelled.set()
            try:
                r.msg.nack(error=release_text(self.name,
                                              self.shutdown_timeout),
                           delay_ms=0)
                self._count(r.msg, "released")
                self.log.released(r.msg, unworked)
            except SqlqError as e:
                self.log.release_failed(r.msg, e)
        finally:
            r.lock.release()

    # Heartbeat: leases and timeouts.
    def _beat(self) -> None:
        while not self._beat_stop.is_set():
            self._wake.clear()
            now = time.monotonic()
            with self._mu:
                watched = [r for r in self._running.values() if r.watched()]
                due = [r for r in watched
                       if not r.extending and r.next_extend <= now]
                late = [r for r in watched if r.timeout_at <= now]
                nexts = [r.next_extend for r in watched if not r.extending]
                nexts += [r.timeout_at for r in watched]
                for r in due:
                    r.extending = True
                for r in late:
                    r.timing_out = True
            # Each on a thread of its own: one slow reply must not hold up
            # the extends of the others until their leases run out.
            for r in late:
                threading.Thread(target=self._time_out, args=(r,),
                                 name="sqlq-timeout", daemon=True).start()
            for r in due:
                if r.timing_out:
                    r.extending = False
                    continue
                threading.Thread(target=self._extend, args=(r,),
                                 name="sqlq-extend", daemon=True).start()
            if due or late:
                continue
            wait = min(nexts) - time.monotonic() if nexts else 1.0
            self._wake.wait(max(0.005, min(wait, 1.0)))

    def _extend(self, r: _Running) -> None:
        try:
            self._extend_once(r)
        finally:
            r.extending = False
            self._wake.set()
            self.client._close_local()

    def _extend_once(self, r: _Running) -> None:
        lease_s = r.lease_ms / 1000.0
        try:
            r.msg.extend(r.lease_ms)
            r.next_extend = time.monotonic() + lease_s / 3
            r.lease_end = time.monotonic() + lease_s
        except _TRANSIENT as e:
            # Try again soon: the lease has two thirds left at first.
            r.next_extend = time.monotonic() + min(0.5, lease_s / 10)
            self.log.extend_failed(r.msg, e)
        except (StaleReceipt, NotFound) as e:
            r.lost = True
            self.log.lease_lost(r.msg, e)
        except SqlqError as e:
            r.next_extend = time.monotonic() + min(0.5, lease_s / 10)
            self.log.extend_failed(r.msg, e)
