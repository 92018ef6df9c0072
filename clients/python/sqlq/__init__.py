"""sqlq: the Python client of `sqlq serve`, with a worker runtime."""
from .client import (Client, ClaimResult, Message, Queue, Ring, Rotation,
                     Schedule, SendResult, payload_fields, payload_of)
from .errors import (AlreadyExists, BadRequest, Conflict, ConnectionFailed,
                     Forbidden, NotFound, OutcomeUnknown, ServerError,
                     ServerTimeout, SqlqError, StaleReceipt, TooManyRequests,
                     Unauthorized, Unavailable)
from .worker import Worker, error_text

__all__ = [
    "Client", "ClaimResult", "Message", "Queue", "Ring", "Rotation",
    "Schedule", "SendResult", "payload_fields", "payload_of", "Worker",
    "error_text", "SqlqError", "BadRequest", "Unauthorized", "Forbidden",
    "NotFound", "AlreadyExists", "StaleReceipt", "Conflict",
    "TooManyRequests", "Unavailable", "ServerTimeout", "OutcomeUnknown",
    "ServerError", "ConnectionFailed",
]
__version__ = "0.1.0"
