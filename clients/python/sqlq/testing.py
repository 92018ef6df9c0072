"""Helpers for an application's tests: run the jobs of a queue through
their handlers in the calling thread, with no worker.

    from sqlq.testing import run_inline

    signup(client, "ada@example.com")           # sends an email.send job
    done = run_inline(client, "emails", {"email.send": send_email})
    assert [(m.kind, outcome) for m, outcome in done] == \\
        [("email.send", "acked")]
    assert done[0].result == {"sent": True}      # what the handler returned

With sqlq.aio: `await arun_inline(client, ...)`.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Union

from . import tracing
from .client import NO_RESULT, Message
from .outcomes import HandlerSpec
from .errors import BadRequest
from .worker import (Decision, Plan, _Router, decide, drive, result_refused,
                     send_decision)

Handlers = Union[Callable[[Message], Any],
                 Mapping[str, Union[Callable[[Message], Any], HandlerSpec]]]


class Ran(tuple):
    """One job run_inline ran: a (message, outcome) pair, with the
    handler's result: what it returned (None when it returned nothing,
    raised, or its result could not be kept)."""

    def __new__(cls, message: Message, outcome: str,
                result: Any = None) -> "Ran":
        ran = super().__new__(cls, (message, outcome))
        ran.result = result
        return ran

    result: Any

    @property
    def message(self) -> Message:
        return self[0]

    @property
    def outcome(self) -> str:
        return self[1]


def _inline(client: Any, queue: str, handlers: Handlers, unknown_kind: str,
            unknown_kind_delay: float, limit: int) -> Plan:
    """The calls of run_inline, for drive (sqlq.aio's: arun_inline)."""
    router = _Router(None if isinstance(handlers, Mapping) else handlers,
                     handlers if isinstance(handlers, Mapping) else None,
                     None, unknown_kind, unknown_kind_delay)
    q = client.queue(queue)
    done: list[Ran] = []
    while len(done) < limit:
        claimed = yield q.claim, (1,)
        if not claimed:
            break
        m = claimed[0]
        spec = router.route(m)
        if spec is None:
            d: Decision = router.unknown(m)
        else:
            exc: Optional[BaseException] = None
            result: Any = None
            with tracing.handling(q.name, m.id, m.headers):
                try:
                    result = yield spec.fn, (m,)
                except Exception as e:
                    exc = e
            d = decide(exc, result)
        try:
            out = yield send_decision, (m, d)
        except BadRequest as e:
            instead = result_refused(d, e)
            if instead is None:
                raise
            d = instead
            out = yield send_decision, (m, d)
        done.append(Ran(m, "acked" if out is True else out,
                        None if d.action != "ack" or d.result is NO_RESULT
                        else d.result))
    return done


def run_inline(client: Any, queue: str, handlers: Handlers, *,
               unknown_kind: str = "fail", unknown_kind_delay: float = 30.0,
               limit: int = 1000) -> list[Ran]:
    """Claims every ready message of the queue, one at a time, and runs
    each through its handler in the calling thread, as a Worker would:
    the handler's return acks the message, what it raises (Snooze,
    RetryAfter, Permanent, Cancel, any other exception) nacks it the same
    way, a kind no handler takes gets unknown_kind. Returns once no
    message is ready (a failed one retried with no backoff is run again),
    or after limit messages, a list of (message, outcome), in the order
    they ran; outcome: "acked", or the nack's reply: "retry", "dead",
    "snoozed". Each pair's .result is what its handler returned, acked
    as the job's result (None when none), and message.progress() in a
    handler records progress on the server as in a worker.

    handlers: one callable for every message, or a dict of kind ->
    handler ("*" for the rest), as Worker's handlers=. Timeouts are not
    enforced (no thread watches the handler), leases are not extended,
    and no middleware runs: for tests, whose handlers are quick.
    Exceptions other than Exception (KeyboardInterrupt) propagate, as do
    the client's errors."""
    return drive(_inline(client, queue, handlers, unknown_kind,
                         unknown_kind_delay, limit))


async def arun_inline(client: Any, queue: str, handlers: Handlers, *,
                      unknown_kind: str = "fail",
                      unknown_kind_delay: float = 30.0,
                      limit: int = 1000) -> list[Ran]:
    """run_inline with a sqlq.aio client, on the running event loop;
    handlers may be coroutine functions."""
    from .aio import drive as adrive
    return await adrive(_inline(client, queue, handlers, unknown_kind,
                                unknown_kind_delay, limit))
