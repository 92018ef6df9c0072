"""W3C trace context on messages: a send carries the current trace in the
headers `traceparent` (and `tracestate`), and a worker continues it around
the handler.

With OpenTelemetry's API installed (the package `opentelemetry-api`; it is
looked for at the first send or handled message, never required), a send
injects the current context through OpenTelemetry's propagators, and the
worker runs the handler in a consumer span `process QUEUE` whose parent is
the context extracted from the message. Without it, the trace headers of
the message being handled are kept in a context variable while its handler
runs, so that what the handler sends carries them on; a `traceparent` the
caller gives in `headers` is always sent as it is.
"""
from __future__ import annotations

import contextlib
import contextvars
import re
from typing import Any, Iterator, Mapping, MutableMapping, Optional

# The headers of W3C Trace Context.
TRACE_HEADERS = ("traceparent", "tracestate")

# version-traceid-parentid-flags, lowercase hex; all-zero ids are invalid.
_TRACEPARENT = re.compile(
    r"[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")

# The trace headers of the message whose handler runs in this context.
_carried: contextvars.ContextVar[Optional[dict[str, str]]] = \
    contextvars.ContextVar("sqlq_trace_headers", default=None)

_UNSET: Any = object()
_otel: Any = _UNSET


def _api() -> Any:
    """(propagate, trace) of OpenTelemetry's API when the
    application has it installed, else None; imported once, lazily."""
    global _otel
    if _otel is _UNSET:
        try:
            from opentelemetry import propagate, trace
            _otel = (propagate, trace)
        except ImportError:
            _otel = None
    return _otel


def valid_traceparent(value: object) -> bool:
    return isinstance(value, str) and _TRACEPARENT.fullmatch(value) is not None


def trace_headers(headers: Optional[Mapping[str, str]]) -> dict[str, str]:
    """The trace headers of a message (a valid traceparent and the
    tracestate with it), or {}."""
    if not headers or not valid_traceparent(headers.get("traceparent")):
        return {}
    return {k: headers[k] for k in TRACE_HEADERS if k in headers}


def current() -> dict[str, str]:
    """The trace headers a send made here would carry: the current
    OpenTelemetry context's, else those of the message being handled."""
    out: dict[str, str] = {}
    api = _api()
    if api is not None:
        api[0].inject(out)
    if valid_traceparent(out.get("traceparent")):
        return out
    return dict(_carried.get() or {})


def inject(message: MutableMapping[str, Any]) -> None:
    """Adds the current trace headers to a message to send (a dict of the
    send's fields) unless it has a traceparent of its own."""
    headers = message.get("headers") or {}
    if "traceparent" in headers:
        return
    extra = current()
    if extra:
        message["headers"] = {**extra, **headers}


@contextlib.contextmanager
def handling(queue: str, message_id: int,
             headers: Optional[Mapping[str, str]]) -> Iterator[None]:
    """Around a handler: the message's trace is the current one (for
    OpenTelemetry, in a consumer span `process QUEUE`, which records the
    handler's exception)."""
    token = _carried.set(trace_headers(headers) or None)
    try:
        api = _api()
        if api is None:
            yield
            return
        propagate, trace = api
        parent = propagate.extract(dict(headers or {}))
        tracer = trace.get_tracer("sqlq")
        with tracer.start_as_current_span(
                f"process {queue}", context=parent,
                kind=trace.SpanKind.CONSUMER,
                attributes={"messaging.system": "sqlq",
                            "messaging.destination.name": queue,
                            "messaging.operation.type": "process",
                            "messaging.message.id": str(message_id)}):
            yield
    finally:
        _carried.reset(token)
