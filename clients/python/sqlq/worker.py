"""The worker runtime: N handler threads on long-poll claims, leases
extended in the background, ack on return, nack on failure, graceful stop
on SIGTERM, reconnection with backoff."""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import traceback
from typing import Any, Callable, Optional

from . import tracing
from .client import Client, Message, backoff_delay
from .errors import (ConnectionFailed, NotFound, OutcomeUnknown,
                     ServerTimeout, SqlqError, StaleReceipt, TooManyRequests,
                     Unavailable)

log = logging.getLogger("sqlq.worker")

Handler = Callable[[Message], Any]

# The server keeps at most 4096 bytes of each error text.
MAX_ERROR_BYTES = 4096
TRACEBACK_LINES = 12

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


def release_text(name: str, shutdown_timeout: float) -> str:
    """The error a message released at the shutdown deadline gets."""
    return (f"released: worker {name} stopped before the handler finished "
            f"(shutdown timeout {shutdown_timeout:g}s)")


class WorkerLog:
    """What a worker logs, on the "sqlq.worker" logger: one method per
    event, so that every worker flavour says the same thing in the same
    words (the Node.js worker's texts are the same too)."""

    # A call that keeps failing is logged on its first failure and then
    # every this many tries, not at each one.
    EVERY = 10

    def __init__(self, name: str, queue: str) -> None:
        self.name = name
        self.queue = queue

    def _p(self) -> str:
        return f"sqlq worker {self.name}: "

    def started(self, concurrency: int, lease_ms: int) -> None:
        log.info("%sstarted on queue %s (concurrency %d, lease %d ms)",
                 self._p(), self.queue, concurrency, lease_ms)

    def handler_failed(self, m: Message, exc: BaseException,
                       outcome: str) -> None:
        """The handler raised and its message was nacked; outcome is the
        nack's: "retry", "dead", or anything else when not known. The
        record carries the exception (exc_info), so that handlers print its
        traceback."""
        first = error_text(exc).splitlines()[0]
        if outcome == "dead":
            log.error("%smessage %d of %s failed on attempt %d, now a dead "
                      "letter: %s", self._p(), m.id, self.queue, m.attempt,
                      first, exc_info=exc)
        else:
            then = ("retried after the queue's backoff" if outcome == "retry"
                    else "nacked")
            log.warning("%smessage %d of %s failed on attempt %d, %s: %s",
                        self._p(), m.id, self.queue, m.attempt, then, first,
                        exc_info=exc)

    def lease_lost(self, m: Message, e: BaseException) -> None:
        log.warning("%slease of message %d lost, another worker may have "
                    "it (the handler still runs; its outcome will be "
                    "refused): %s", self._p(), m.id, e)

    def outcome_refused(self, what: str, m: Message,
                        e: BaseException) -> None:
        log.warning("%s%s of message %d refused, its lease was lost: %s",
                    self._p(), what, m.id, e)

    def outcome_repeated(self, what: str, m: Message,
                         e: BaseException) -> None:
        log.info("%s%s of message %d: %s (an earlier try went through)",
                 self._p(), what, m.id, e)

    def outcome_failed(self, what: str, m: Message, e: BaseException) -> None:
        log.error("%s%s of message %d failed: %s; it is delivered again "
                  "when its lease ends", self._p(), what, m.id, e)

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

    def released(self, m: Message) -> None:
        log.warning("%smessage %d released unfinished at the shutdown "
                    "deadline", self._p(), m.id)

    def release_failed(self, m: Message, e: BaseException) -> None:
        log.error("%srelease of message %d failed (it comes back when its "
                  "lease ends): %s", self._p(), m.id, e)

    def finished_after_release(self, m: Message) -> None:
        log.warning("%smessage %d finished after it was released at the "
                    "shutdown deadline; its outcome is dropped", self._p(),
                    m.id)

    def extend_failed(self, m: Message, e: BaseException) -> None:
        log.warning("%sextending the lease of message %d failed (%s); "
                    "retrying", self._p(), m.id, e)

    def stopped(self, acked: int, nacked: int, released: int,
                lost: int) -> None:
        log.info("%sstopped (acked=%d nacked=%d released=%d lost=%d)",
                 self._p(), acked, nacked, released, lost)


class _Running:
    """A message whose handler runs, or whose ack or nack is pending."""

    def __init__(self, msg: Message, lease_s: float) -> None:
        self.msg = msg
        self.next_extend = time.monotonic() + lease_s / 3
        self.lease_end = time.monotonic() + lease_s
        self.lost = False  # the lease was lost: another worker has it
        self.released = False  # given back at the shutdown deadline
        self.extending = False  # an extend of it is on its way
        self.lock = threading.Lock()  # one outcome: ack, nack or release


class _WorkerBase:
    """What the workers of sqlq and sqlq.aio share: the settings, the
    counters, the log, and the decisions about retries and outcomes; each
    flavour adds its threads or tasks."""

    def __init__(self, client: Any, queue: str, handler: Handler, *,
                 concurrency: int = 1, wait_ms: int = 20000,
                 lease_ms: Optional[int] = None,
                 shutdown_timeout: float = 30.0,
                 name: Optional[str] = None,
                 max_backoff: float = 5.0) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        # Own connections, so that stop() can cut its long polls short.
        self.client = client.clone()
        # The worker retries by itself, with its own backoff.
        self.client.retries = 0
        self.queue = self.client.queue(queue)
        self.handler = handler
        self.concurrency = concurrency
        self.wait_ms = wait_ms
        self.lease_ms = lease_ms
        self.shutdown_timeout = shutdown_timeout
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.max_backoff = max_backoff
        self.log = WorkerLog(self.name, queue)
        self._deadline = float("inf")  # of the shutdown, once stopping
        # Counters, for logs and tests.
        self.acked = 0
        self.nacked = 0
        self.released = 0
        self.lost = 0
        self._init_runtime()

    def _init_runtime(self) -> None:
        """The flavour's threads or tasks, events and locks."""

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
            self.lost += 1
        else:
            self.log.outcome_failed(what, m, e)
        return False

    def _settled(self, m: Message, exc: Optional[BaseException],
                 out: Any) -> None:
        """Counts (and for a failed handler, logs) an ack or nack that went
        through; out is the nack's outcome."""
        if exc is None:
            self.acked += 1
        else:
            self.nacked += 1
            self.log.handler_failed(m, exc, out)


class Worker(_WorkerBase):
    """Runs handler(message) for each message of a queue, concurrency at a
    time.

    - Each handler thread claims one message at a time with a long poll of
      wait_ms milliseconds.
    - While a handler runs, a heartbeat thread extends the message's lease
      (to lease_ms) each time a third of it has passed.
    - When the handler returns, the message is acked; when it raises, the
      message is nacked with the exception's text and traceback tail (then
      retried after the queue's backoff, or dead-lettered on its last
      attempt).
    - stop() (or SIGTERM/SIGINT, when run() runs in the main thread) stops
      claiming; handlers get shutdown_timeout seconds to finish, then the
      messages still unfinished are released (nacked with delay 0, so they
      are delivered again at once rather than when their lease ends).
    - When the server cannot be reached (restarting, busy) the worker
      retries with capped exponential backoff and jitter, logging it, and
      keeps extending the leases of running messages once it is back.

    lease_ms: the lease of each claim; None takes the queue's.
    """

    def _init_runtime(self) -> None:
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._mu = threading.Lock()
        self._running: dict[str, _Running] = {}
        self._threads: list[threading.Thread] = []
        self._heartbeat: Optional[threading.Thread] = None
        self._supervisor: Optional[threading.Thread] = None
        self._wake = threading.Event()
        self._beat_stop = threading.Event()

    # Lifecycle.
    def start(self) -> None:
        """Starts the handler and heartbeat threads; returns at once."""
        if self._threads:
            raise RuntimeError("worker already started")
        if self.lease_ms is None:
            self.lease_ms = self._with_retry(
                lambda: self.queue.stats()["options"]["lease_ms"], "stats")
            if self.lease_ms is None:  # stopped while the server was away
                self._stopped.set()
                return
        for i in range(self.concurrency):
            t = threading.Thread(target=self._loop, name=f"sqlq-worker-{i}",
                                 daemon=True)
            self._threads.append(t)
            t.start()
        self._heartbeat = threading.Thread(target=self._beat,
                                           name="sqlq-heartbeat", daemon=True)
        self._heartbeat.start()
        self._supervisor = threading.Thread(target=self._supervise,
                                            name="sqlq-supervisor",
                                            daemon=True)
        self._supervisor.start()
        self.log.started(self.concurrency, self.lease_ms)

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
        with self._mu:
            running = len(self._running)
        self.log.stopping(running)
        self.client._abort_polls()  # cut waiting claims short
        deadline = time.monotonic() + self.shutdown_timeout
        self._deadline = deadline
        for t in self._threads:
            # A claim that was answered as the poll was cut is handled too.
            while t.is_alive() and time.monotonic() < deadline:
                self.client._abort_polls()
                t.join(min(0.1, max(0.0, deadline - time.monotonic())))
        with self._mu:
            left = list(self._running.values())
        for r in left:
            self._release(r)
        self._beat_stop.set()
        self._wake.set()
        if self._heartbeat:
            self._heartbeat.join(5)
        self.log.stopped(self.acked, self.nacked, self.released, self.lost)
        self._stopped.set()

    # Handler threads.
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

    def _loop(self) -> None:
        assert self.lease_ms is not None
        while not self._stopping.is_set():
            msgs = self._with_retry(
                lambda: self.queue.claim(1, wait_ms=self.wait_ms,
                                         lease_ms=self.lease_ms,
                                         worker=self.name),
                "claim")
            if not msgs:
                if msgs is not None and msgs.retry_after_ms:
                    # A limit of the queue (rate, max_leased) held it back.
                    self._stopping.wait(msgs.retry_after_ms / 1000.0)
                continue
            for m in msgs:
                self._handle(m)

    def _handle(self, m: Message) -> None:
        assert self.lease_ms is not None
        r = _Running(m, self.lease_ms / 1000.0)
        with self._mu:
            self._running[m.receipt] = r
        self._wake.set()
        try:
            try:
                with tracing.handling(self.queue.name, m.id, m.headers):
                    self.handler(m)
            except Exception as e:  # the handler failed: nack
                self._finish(r, e)
                return
            except BaseException as e:
                # SystemExit or KeyboardInterrupt from the handler: the
                # message is nacked, then the worker stops.
                self._finish(r, e)
                self.stop()
                return
            self._finish(r, None)
        finally:
            with self._mu:
                self._running.pop(m.receipt, None)

    def _finish(self, r: _Running, exc: Optional[BaseException]) -> None:
        """Acks (exc None) or nacks the message with the exception's text,
        retrying while the server is away; the heartbeat keeps its lease
        meanwhile."""
        m = r.msg
        error = None if exc is None else error_text(exc)
        with r.lock:
            if r.released:
                self.log.finished_after_release(m)
                return
            what = "ack" if error is None else "nack"
            sent_before = False

            def call() -> Any:
                nonlocal sent_before
                try:
                    if error is None:
                        return m.ack() or True
                    return m.nack(error=error)
                except ConnectionFailed as e:
                    sent_before = sent_before or e.sent
                    raise

            try:
                # Retried while stopping too, until the shutdown deadline.
                out = self._retry_outcome(call, f"{what} of message {m.id}")
            except SqlqError as e:
                if not self._refused(what, m, e, sent_before):
                    return
                out = True
            if out is not None:
                self._settled(m, exc, out)

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

    def _release(self, r: _Running) -> None:
        """Gives back a message whose handler did not finish by the
        shutdown deadline: a nack with delay 0, so it is ready again at
        once. (The HTTP API has no release that leaves the attempt
        uncounted; the nack records this error on the message.)"""
        if not r.lock.acquire(blocking=False):
            return  # the handler finished: its ack or nack is under way
        try:
            if r.released:
                return
            r.released = True
            try:
                r.msg.nack(error=release_text(self.name,
                                              self.shutdown_timeout),
                           delay_ms=0)
                self.released += 1
                self.log.released(r.msg)
            except SqlqError as e:
                self.log.release_failed(r.msg, e)
        finally:
            r.lock.release()

    # Heartbeat.
    def _beat(self) -> None:
        assert self.lease_ms is not None
        lease_s = self.lease_ms / 1000.0
        while not self._beat_stop.is_set():
            self._wake.clear()
            now = time.monotonic()
            with self._mu:
                due = [r for r in self._running.values()
                       if not r.lost and not r.released and not r.extending
                       and r.next_extend <= now]
                nexts = [r.next_extend for r in self._running.values()
                         if not r.lost and not r.released
                         and not r.extending]
                for r in due:
                    r.extending = True
            # Each on a thread of its own: one slow reply must not hold up
            # the extends of the others until their leases run out.
            for r in due:
                threading.Thread(target=self._extend, args=(r, lease_s),
                                 name="sqlq-extend", daemon=True).start()
            if due:
                continue
            wait = min(nexts) - time.monotonic() if nexts else 1.0
            self._wake.wait(max(0.005, min(wait, 1.0)))

    def _extend(self, r: _Running, lease_s: float) -> None:
        try:
            self._extend_once(r, lease_s)
        finally:
            r.extending = False
            self._wake.set()

    def _extend_once(self, r: _Running, lease_s: float) -> None:
        assert self.lease_ms is not None
        try:
            r.msg.extend(self.lease_ms)
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
