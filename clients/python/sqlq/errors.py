"""Exceptions of the sqlq client: one class per kind of error reply of the
server, each carrying the server's code, message and HTTP status."""
from __future__ import annotations

from typing import Optional


class SqlqError(Exception):
    """An error reply of the server (or no reply at all: ConnectionFailed).

    code: the server's stable error code ("not_found", ...); branch on it.
    message: the server's text, for people.
    status: the HTTP status (0 when no reply came).
    retry_after: seconds the server asked to wait (Retry-After, or a
    claim's retry_after_ms), else None.
    """

    def __init__(self, code: str, message: str, status: int = 0,
                 retry_after: Optional[float] = None) -> None:
        super().__init__(f"{code}: {message}" if status == 0
                         else f"{status} {code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.retry_after = retry_after


class BadRequest(SqlqError):
    """400, 413, 415, 431, 501: the request is wrong; retrying will not help."""


class Unauthorized(SqlqError):
    """401: no token, or an unknown one."""


class Forbidden(SqlqError):
    """403: the token lacks the permission (or host/origin not allowed)."""


class NotFound(SqlqError):
    """404: no such queue, ring, rotation, message; a receipt of a message
    that is gone (acked, dead-lettered, purged)."""


class AlreadyExists(SqlqError):
    """409 already_exists: the name is taken."""


class StaleReceipt(SqlqError):
    """409 failed_precondition: the receipt's lease ran out and another
    consumer claimed the message (or a name of another kind)."""


class Conflict(SqlqError):
    """Another 409."""


class TooManyRequests(SqlqError):
    """429: too many waiting polls or failed authentications; retry_after."""


class Unavailable(SqlqError):
    """503: the server is busy, stopping, or its database is unreachable."""


class ServerTimeout(SqlqError):
    """504: a deadline ran out inside the store."""


class OutcomeUnknown(SqlqError):
    """500 outcome_unknown: the database connection was lost while
    committing; the write may or may not have happened."""


class ServerError(SqlqError):
    """Another 5xx: corruption, internal."""


class ConnectionFailed(SqlqError):
    """No reply came: the server is unreachable, or the connection broke.
    sent says whether the request may have reached the server."""

    def __init__(self, message: str, sent: bool) -> None:
        super().__init__("connection_failed", message, 0)
        self.sent = sent


class JobFailed(SqlqError):
    """What awaiting a job's result (client.result) raises when the job
    became a dead letter: its attempts were used up, or its handler
    raised Permanent or Cancel, or it expired. id: the job's; error: its
    last error; attempts: how many it had (None when not known); info:
    the server's whole reply."""

    def __init__(self, id: int, error: Optional[str],
                 attempts: Optional[int] = None,
                 info: Optional[dict] = None) -> None:
        first = (error or "").split("\n")[0]
        super().__init__("job_failed", f"job {id} failed"
                         + (f" after {attempts} attempt(s)"
                            if attempts is not None else "")
                         + (f": {first}" if first else ""))
        self.id = id
        self.error = error
        self.attempts = attempts
        self.info = info or {}


class ResultTimeout(SqlqError, TimeoutError):
    """What awaiting a job's result (client.result) raises when the job
    was neither completed nor dead within the timeout. id: the job's;
    info: the server's last reply about it (its state, progress), None
    when none came (the server was unreachable all along)."""

    def __init__(self, id: int, timeout: float,
                 info: Optional[dict] = None) -> None:
        state = f" (still {info['state']})" if info and "state" in info \
            else ""
        super().__init__("result_timeout",
                         f"no result for job {id} within {timeout:g}s"
                         + state)
        self.id = id
        self.info = info


_BY_CODE = {
    "not_found": NotFound,
    "no_route": NotFound,
    "already_exists": AlreadyExists,
    "failed_precondition": StaleReceipt,
    "outcome_unknown": OutcomeUnknown,
}

_BY_STATUS = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    429: TooManyRequests,
    503: Unavailable,
    504: ServerTimeout,
}


def error_for(status: int, code: str, message: str,
              retry_after: Optional[float] = None) -> SqlqError:
    """The exception for an error reply."""
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status)
    if cls is None:
        # 501 unsupported_transfer_encoding is the request's fault.
        cls = ServerError if status >= 500 and status != 501 else BadRequest
    return cls(code, message, status, retry_after)
