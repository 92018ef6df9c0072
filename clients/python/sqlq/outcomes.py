"""What a handler may raise to choose its message's outcome, besides
returning (ack) or raising anything else (a failed attempt), and
sqlq.handler(), which gives a handler options of its own."""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

Seconds = Union[int, float, datetime.timedelta]


def _seconds(delay: Seconds) -> float:
    if isinstance(delay, datetime.timedelta):
        delay = delay.total_seconds()
    delay = float(delay)
    if delay < 0:
        raise ValueError("a delay cannot be negative")
    return delay


def _text(error: Union[str, BaseException, None]) -> Optional[str]:
    if error is None or isinstance(error, str):
        return error
    from .worker import error_text
    return error_text(error)


class Outcome(Exception):
    """The base of the outcomes a handler raises (Snooze, RetryAfter,
    Permanent, Cancel)."""


class Snooze(Outcome):
    """Not now: the message comes back after delay seconds (a float, or a
    timedelta) and the attempt is not counted (nack action "snooze"); no
    error is recorded. For "the account is locked, look again in a
    minute". The server counts a message's snoozes: past 100, each further
    snooze counts as a failed attempt."""

    def __init__(self, delay: Seconds = 0) -> None:
        self.delay = _seconds(delay)
        super().__init__(f"snoozed for {self.delay:g}s")


class RetryAfter(Outcome):
    """A failed attempt, retried after delay seconds rather than after the
    queue's backoff (a rate limit's Retry-After). error: the text left on
    the message (a str, or an exception: its text and traceback), by
    default "retry after Ns". On the last attempt the message becomes a
    dead letter as with any failure."""

    def __init__(self, delay: Seconds,
                 error: Union[str, BaseException, None] = None) -> None:
        self.delay = _seconds(delay)
        self.error = (_text(error) if error is not None
                      else f"retry after {self.delay:g}s")
        super().__init__(self.error)


class Permanent(Outcome):
    """A failure no retry will mend (a malformed payload, a card
    declined): the message becomes a dead letter now, whatever attempts
    are left (nack action "dead"), with error as its last error (a str,
    or an exception: its text and traceback)."""

    def __init__(self, error: Union[str, BaseException] = "permanent failure"
                 ) -> None:
        self.error = _text(error) or "permanent failure"
        super().__init__(self.error)


PermanentFailure = Permanent


class Cancel(Outcome):
    """The job is no longer wanted (the user was deleted): the message
    becomes a dead letter now with the error "cancelled: REASON"."""

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        self.error = f"cancelled: {reason}" if reason else "cancelled"
        super().__init__(self.error)


@dataclass(frozen=True)
class HandlerSpec:
    """A handler with options of its own (made by sqlq.handler)."""
    fn: Callable[..., Any]
    timeout: Optional[float] = None


def handler(fn: Callable[..., Any], *,
            timeout: Optional[Seconds] = None) -> HandlerSpec:
    """A handler with options: timeout, seconds it may run before the
    worker gives up on it (overriding the worker's timeout=; None: the
    worker's). For Worker(handlers={"kind": sqlq.handler(fn, timeout=10)})."""
    return HandlerSpec(fn, None if timeout is None else _seconds(timeout))
