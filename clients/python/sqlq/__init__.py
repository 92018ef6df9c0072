"""sqlq: the Python client of `sqlq serve`, with a worker runtime."""
from .client import (Client, ClaimResult, Message, Queue, Ring, Rotation,
                     Schedule, SendResult, Topic, payload_fields,
                     payload_of)
from .errors import (AlreadyExists, BadRequest, Conflict, ConnectionFailed,
                     Forbidden, JobFailed, NotFound, OutcomeUnknown,
                     ResultTimeout, ServerError, ServerTimeout, SqlqError,
                     StaleReceipt, TooManyRequests, Unauthorized,
                     Unavailable)
from .outcomes import (Cancel, Outcome, Permanent, PermanentFailure,
                       RetryAfter, Snooze, handler)
from .worker import Worker, error_text
from . import flow
from .flow import Job, Workflow, chain, chord, group

__all__ = [
    "Client", "ClaimResult", "Message", "Queue", "Ring", "Rotation",
    "Schedule", "Topic", "SendResult", "payload_fields", "payload_of", "Worker",
    "error_text", "SqlqError", "BadRequest", "Unauthorized", "Forbidden",
    "NotFound", "AlreadyExists", "StaleReceipt", "Conflict",
    "TooManyRequests", "Unavailable", "ServerTimeout", "OutcomeUnknown",
    "ServerError", "ConnectionFailed", "JobFailed", "ResultTimeout",
    "Outcome", "Snooze", "RetryAfter",
    "Permanent", "PermanentFailure", "Cancel", "handler",
    "flow", "Job", "Workflow", "chain", "group", "chord",
]
__version__ = "0.1.0"
