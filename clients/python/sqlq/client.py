"""The HTTP client of `sqlq serve`: every operation of its API."""
from __future__ import annotations

import base64
import datetime
import http.client
import json
import logging
import math
import random
import re
import select
import socket
import ssl
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from typing import (Any, Callable, Generator, Iterator, Mapping, Optional,
                    Sequence, Union)

from . import tracing
from .errors import (BadRequest, ConnectionFailed, JobFailed, NotFound,
                     ResultTimeout, SqlqError, error_for)

log = logging.getLogger("sqlq")

Json = Any
Payload = Union[str, bytes, bytearray, memoryview, Json]

# 503 and 429 replies say the server did nothing: retrying them is safe for
# every request. outcome_unknown (500) and timeout (504) may have committed.
_RETRYABLE_STATUS = (429, 503)
# The longest wait_ms of one request for a result (the server's default
# limit); a server with a lower one says so, and the client follows it.
RESULT_WAIT_MS = 20000
# A job's state once it is done: it has its result, or is a dead letter.
_FINAL = ("completed", "dead")


class _NoResult:
    """The default of ack's result: nothing kept (None would be JSON null)."""

    def __repr__(self) -> str:
        return "NO_RESULT"


NO_RESULT: Any = _NoResult()

# A kept-alive connection idle this long is replaced rather than reused: the
# server closes idle ones (--idle-timeout, 120 s by default).
_MAX_IDLE_S = 50.0


def _q(segment: Union[str, int]) -> str:
    return urllib.parse.quote(str(segment), safe="")


def payload_fields(payload: Payload) -> dict[str, Json]:
    """The request fields of a payload: bytes go as payload_base64, a str as
    its text, any other JSON value as JSON (the server marks it
    content-type: application/json and hands it back as the same value)."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return {"payload_base64": base64.b64encode(bytes(payload)).decode()}
    return {"payload": payload}


def payload_of(obj: Mapping[str, Json]) -> Payload:
    """The payload of a message, entry or item of a reply: bytes when the
    server sent payload_base64, else the text or JSON value."""
    if "payload_base64" in obj:
        return base64.b64decode(obj["payload_base64"])
    return obj.get("payload")


def duration_ms(seconds: Union[int, float, datetime.timedelta]) -> int:
    """A duration in seconds (or a timedelta) as the whole milliseconds of
    the API: a positive one at least 1 (the server refuses 0 and less)."""
    if isinstance(seconds, datetime.timedelta):
        seconds = seconds.total_seconds()
    ms = round(float(seconds) * 1000)
    return max(ms, 1) if seconds > 0 else ms


# The job limits and retry backoff a send takes in seconds (a schedule:
# the limits), and the API's fields for them, in milliseconds.
_LIMITS = (("timeout", "timeout_ms"), ("expire_after", "expire_after_ms"),
           ("backoff", "backoff_ms"), ("backoff_max", "backoff_max_ms"))


def _limits_ms(fields: dict[str, Any]) -> dict[str, Any]:
    """fields with timeout, expire_after, backoff and backoff_max
    (seconds) as the API's timeout_ms, expire_after_ms, backoff_ms and
    backoff_max_ms."""
    for secs, ms in _LIMITS:
        if fields.get(secs) is not None:
            fields[ms] = duration_ms(fields.pop(secs))
        else:
            fields.pop(secs, None)
    return fields


class _Sleep(float):
    """A wait, in seconds, before a request's next try."""


def backoff_delay(attempt: int, base: float, cap: float) -> float:
    """Capped exponential backoff with full jitter: uniform in
    [0, min(cap, base * 2**attempt)] (at least a millisecond)."""
    return max(0.001, random.uniform(0, min(cap, base * (2 ** min(attempt, 30)))))


# How long a server has to answer a long poll whose sending side an abort
# closed (_Connection.abort) before the connection is cut.
_ABORT_GRACE_S = 2.0


def _shut(sock: socket.socket) -> None:
    """Closes both sides of `sock` (nothing when it is closed already).
    Over TLS the TCP socket's own shutdown, under the TLS layer, as in
    _Connection.abort: ssl.SSLSocket's would drop its TLS state under a
    reply still being read."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _Connection:
    """One kept-alive HTTP connection, used by one thread at a time."""

    def __init__(self, client: "Client") -> None:
        self.client = client
        self.conn: Optional[http.client.HTTPConnection] = None
        self.last_used = 0.0
        self.lock = threading.Lock()  # guards conn against abort()
        self.waiting = False  # in a long-poll claim
        # Cut short by abort(): its answer may say keep-alive (sent before
        # the server saw the cut), but it is not used again.
        self.cut = False

    def _open(self, timeout: float) -> http.client.HTTPConnection:
        c = self.client
        if c._scheme == "https":
            return http.client.HTTPSConnection(
                c._host, c._port, timeout=timeout, context=c._ssl_context)
        return http.client.HTTPConnection(c._host, c._port, timeout=timeout)

    def _stale(self) -> bool:
        """Whether the kept-alive connection was closed by the server (it
        is readable while idle: EOF) or idle too long."""
        assert self.conn is not None
        if time.monotonic() - self.last_used > _MAX_IDLE_S:
            return True
        sock = self.conn.sock
        if sock is None:
            return True
        try:
            r, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(r)

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()
                self.conn = None
            self.cut = False

    def abort(self) -> None:
        """Cuts a long poll short from another thread. Only the sending
        side is closed: the server ends the waiting claim at once and still
        answers it, with a message it was taking for it as the cut came
        (read as any reply, so that the message is not left leased to no
        one); a server that does not answer within _ABORT_GRACE_S is cut
        off."""
        with self.lock:
            if self.conn is not None and self.conn.sock is not None:
                sock = self.conn.sock
                try:
                    # The TCP socket's own: ssl.SSLSocket's shutdown
                    # would drop the TLS state the answer still needs.
                    socket.socket.shutdown(sock, socket.SHUT_WR)
                except OSError:
                    return
                self.cut = True
                cut = threading.Timer(_ABORT_GRACE_S, _shut, args=(sock,))
                cut.daemon = True
                cut.start()

    def exchange(self, method: str, target: str, body: Optional[bytes],
                 headers: dict[str, str], timeout: float
                 ) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            if self.conn is not None and (self.cut or self._stale()):
                self.conn.close()
                self.conn = None
            if self.conn is None:
                self.cut = False
                self.conn = self._open(timeout)
            conn = self.conn
        sent = False
        try:
            if conn.sock is None:
                conn.connect()
            conn.sock.settimeout(timeout)
            conn.putrequest(method, target, skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v)
            sent = True  # from here the server may have seen the request
            conn.endheaders(body)
            resp = conn.getresponse()
            data = resp.read()
            status = resp.status
            rh = {k.lower(): v for k, v in resp.getheaders()}
            if resp.will_close or self.cut:
                self.close()
            self.last_used = time.monotonic()
            return status, rh, data
        except (OSError, http.client.HTTPException) as e:
            self.close()
            # A refused or failed connect never reached the server.
            if isinstance(e, (ConnectionRefusedError, socket.gaierror)):
                sent = False
            raise ConnectionFailed(
                f"{method} {target}: {type(e).__name__}: {e}", sent) from e


class _ClientBase:
    """What the clients of sqlq and sqlq.aio share: the settings, the
    request policy (_plan), the error mapping and every operation; a
    flavour adds the I/O (request, _call, _map) and its connections.

    url: the server, http://host:port or https://host:port.
    token: the bearer token, when the server has a token file.
    timeout: seconds to wait for a reply (a claim adds its wait_ms).
    retries: at most how often a request is retried when that is safe (the
    server could not be reached, or answered 503 or 429), with capped
    exponential backoff and jitter (backoff, max_backoff seconds),
    honouring Retry-After;
    retry_for: seconds after which no retry starts, whatever is left of
    retries: the default outlasts a database failover (10 to 15 s) or a
    server restart;
    idempotent_sends: every message sent without a dedup key gets one of
    its own (a random "idem:..." key), so that a send whose reply was lost
    (connection broken, outcome_unknown) is retried and stored once.
    """

    def __init__(self, url: str = "http://127.0.0.1:8080", *,
                 token: Optional[str] = None, timeout: float = 30.0,
                 retries: int = 20, retry_for: float = 30.0,
                 backoff: float = 0.1, max_backoff: float = 5.0,
                 idempotent_sends: bool = True,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url.rstrip("/")
        self._scheme = u.scheme
        self._host = u.hostname
        self._port = u.port or (443 if u.scheme == "https" else 80)
        self._prefix = u.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.retry_for = retry_for
        self.idempotent_sends = idempotent_sends
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._ssl_context = ssl_context
        self._init_io()

    def _init_io(self) -> None:
        """The flavour's connections."""

    def clone(self) -> Any:
        """A client of the same server with its own connections."""
        return type(self)(self.url, token=self.token, timeout=self.timeout,
                          retries=self.retries, retry_for=self.retry_for,
                          backoff=self.backoff, max_backoff=self.max_backoff,
                          idempotent_sends=self.idempotent_sends,
                          ssl_context=self._ssl_context)

    # The one request path: _plan says what to send and what a reply
    # means, request() (and sqlq.aio's) does the I/O.
    def _plan(self, method: str, path: str, body: Optional[Json],
              query: Optional[Mapping[str, Any]], idempotent: Optional[bool],
              wait_s: float, retries: Optional[int], raw: bool
              ) -> Generator[Any, Any, Json]:
        """One request and its retries, without I/O: yields each try as
        (method, target, body bytes, headers, timeout) and gets back
        (status, headers, body) or the ConnectionFailed of the try; yields
        a _Sleep to be waited before the next try; returns the reply's
        JSON (its text with raw) or raises the SqlqError of the reply."""
        if idempotent is None:
            idempotent = method == "GET"
        target = self._prefix + path
        if query:
            q = {k: v for k, v in query.items() if v is not None}
            if q:
                target += "?" + urllib.parse.urlencode(
                    {k: (str(v).lower() if isinstance(v, bool) else v)
                     for k, v in q.items()})
        data: Optional[bytes] = None
        headers = {"Accept": "application/json"}
        if method in ("POST", "PATCH", "PUT"):
            data = json.dumps({} if body is None else body,
                              separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
            headers["Content-Length"] = str(len(data))
        if self.token is not None:
            headers["Authorization"] = "Bearer " + self.token
        tries = self.retries if retries is None else retries
        deadline = time.monotonic() + self.retry_for
        attempt = 0

        def may_retry(delay: float) -> bool:
            return attempt < tries and time.monotonic() + delay <= deadline

        while True:
            got = yield (method, target, data, headers, self.timeout + wait_s)
            if isinstance(got, ConnectionFailed):
                delay = backoff_delay(attempt, self.backoff, self.max_backoff)
                if not may_retry(delay) or (got.sent and not idempotent):
                    raise got
                log.warning("sqlq: %s; retrying in %.2fs", got.message, delay)
                attempt += 1
                yield _Sleep(delay)
                continue
            status, rh, reply = got
            if status < 300:
                if raw:
                    return reply.decode("utf-8", "replace")
                return json.loads(reply) if reply else None
            err = self._error(status, rh, reply)
            safe = (status in _RETRYABLE_STATUS
                    and err.code != "too_many_auth_failures") or (
                        idempotent and err.code == "outcome_unknown")
            delay = backoff_delay(attempt, self.backoff, self.max_backoff)
            if err.retry_after is not None:
                delay = max(delay, err.retry_after)
            if safe and may_retry(delay):
                log.warning("sqlq: %s %s: %s; retrying in %.2fs", method,
                            path, err, delay)
                attempt += 1
                yield _Sleep(delay)
                continue
            raise err

    @staticmethod
    def _error(status: int, rh: Mapping[str, str], reply: bytes) -> SqlqError:
        code, message = "http_" + str(status), reply[:200].decode("utf-8", "replace")
        try:
            e = json.loads(reply)["error"]
            code, message = e["code"], e["message"]
        except (ValueError, KeyError, TypeError):
            pass
        retry_after: Optional[float] = None
        if "retry-after" in rh:
            try:
                retry_after = float(rh["retry-after"])
            except ValueError:
                pass
        return error_for(status, code, message, retry_after)

    # Server-wide.
    def health(self) -> Json:
        """GET /healthz: {"status":"ok"} while the server answers."""
        return self._call("GET", "/healthz")

    def ready(self) -> Json:
        """GET /readyz: {"status":"ready"} when the database takes writes;
        raises Unavailable (503) when not."""
        return self._call("GET", "/readyz", retries=0)

    def metrics(self) -> str:
        """GET /metrics: the Prometheus text."""
        return self._call("GET", "/metrics", raw=True)

    def queues(self) -> list[Json]:
        return self._call("GET", "/v1/queues", then=_key("queues"))

    def rings(self) -> list[Json]:
        return self._call("GET", "/v1/rings", then=_key("rings"))

    def rotations(self) -> list[Json]:
        return self._call("GET", "/v1/rotations", then=_key("rotations"))

    def topics(self) -> list[Json]:
        """[{"name", "kind": "topic", "created_at", "subscriptions"}]."""
        return self._call("GET", "/v1/topics", then=_key("topics"))

    def schedules(self) -> list[Json]:
        return self._call("GET", "/v1/schedules", then=_key("schedules"))

    def all(self) -> Json:
        """Every queue, ring, rotation and topic the token may see."""
        return self._call("GET", "/v1/all")

    def overview(self) -> Json:
        return self._call("GET", "/v1/overview")

    # Live workers (the workers report themselves; these are for others).
    def report_worker(self, id: str, **fields: Any) -> Json:
        """PUT /v1/workers/{id}: the report of a live worker, which
        replaces its last one and lasts ttl_ms from when the server got
        it. fields: name, host, pid, queues, kinds, concurrency, jobs
        ([{"queue", "id", "since"}]), started_at (RFC 3339), ttl_ms
        (None: left out). Returns {"id", "ttl_ms"}."""
        return self._call("PUT", "/v1/workers/" + _q(id), _opts(**fields),
                          idempotent=True)

    def remove_worker(self, id: str) -> int:
        """DELETE /v1/workers/{id}: a stopped worker's report goes at once
        (1); raises NotFound when there is none."""
        return self._call("DELETE", "/v1/workers/" + _q(id),
                          then=_key("removed"))

    def workers(self, queue: Optional[str] = None) -> list[Json]:
        """GET /v1/workers: the live workers (those serving queue), by id;
        each {"id", "name", "host", "pid", "queues", "kinds",
        "concurrency", "jobs", "started_at", "last_seen", "expires_at",
        "ttl_ms"}."""
        return self._call("GET", "/v1/workers", query=_opts(queue=queue),
                          then=_key("workers"))

    def queue(self, name: str) -> "Queue":
        return Queue(self, name)

    def ring(self, name: str) -> "Ring":
        return Ring(self, name)

    def rotation(self, name: str) -> "Rotation":
        return Rotation(self, name)

    def topic(self, name: str) -> "Topic":
        return Topic(self, name)

    def schedule(self, name: str) -> "Schedule":
        return Schedule(self, name)

    # Sends to several queues, and workflows.
    def send_all(self, messages: Sequence[Mapping[str, Any]]) -> "SendResult":
        """POST /v1/messages: sends messages to several queues in one
        transaction, all or none (a missing queue stores nothing). Each is
        a dict of send_batch()'s fields plus "queue"; "depends_on_batch"
        indexes count over the whole list, so a message may wait for
        earlier ones in other queues. Returns the ids in request order."""
        for m in messages:
            if not m.get("queue"):
                raise ValueError(f"a message of send_all names no queue: {m!r}")
        out, idem = _prepare(messages, self.idempotent_sends)
        return self._call("POST", "/v1/messages", {"messages": out},
                          idempotent=idem, then=_send_result)

    # Batches (docs/semantics.md, "Batches").
    def create_batch(self, members: Sequence[Mapping[str, Any]],
                     callback: Mapping[str, Any], *, id: Optional[str] = None,
                     retention: Optional[Union[float, datetime.timedelta]]
                     = None) -> Json:
        """POST /v1/batches: sends the members (dicts of send_all()'s
        fields, each with its "queue"; no "dedup") and the callback (a dict
        of the same fields: its queue and message) in one transaction. The
        callback waits for every member and is ready, once, when the last
        has completed or died; claimed, its Message.batch holds the counts
        ({"id", "callback": True, "total", "completed", "dead",
        "cancelled"}). id: the batch's id (made when None); retention: how
        long, in seconds, its status stays readable once it is done (the
        server's default: 7 days). Returns {"id", "members": [ids],
        "callback_id"}. Raises AlreadyExists for an id still known."""
        for m in list(members) + [callback]:
            if not m.get("queue"):
                raise ValueError(f"a member or callback names no queue: {m!r}")
        out, _ = _prepare(members, False)
        cb, _ = _prepare([callback], False)
        body: dict[str, Any] = {"members": out, "callback": cb[0]}
        if id is not None:
            body["id"] = id
        if retention is not None:
            body["retention_ms"] = duration_ms(retention)
        return self._call("POST", "/v1/batches", body)

    def batch(self, id: str) -> Json:
        """GET /v1/batches/{id}: the batch as it stands: {"id", "total",
        "completed", "dead", "cancelled", "pending", "done",
        "callback_queue", "callback_id", "queues", "created_at"} and
        "done_at", "expires_at", "cancelled_at" once they apply. Raises
        NotFound for a batch not (or no longer) known."""
        return self._call("GET", "/v1/batches/" + _q(id))

    def cancel_batch(self, id: str) -> Json:
        """POST /v1/batches/{id}/cancel: cancels the members that have not
        ended (dead-lettered, "cancelled: batch ID was cancelled"), which
        releases the callback with the counts; returns the batch after
        (as batch())."""
        return self._call("POST", "/v1/batches/" + _q(id) + "/cancel",
                          idempotent=True)

    def send_flow(self, flow: Any) -> Any:
        """Sends a workflow (sqlq.flow: chain, group, chord, Workflow) in
        one transaction; returns its sqlq.flow.Sent (the ids, in the
        order the jobs were added)."""
        return flow.send(self)

    # Results.
    def result(self, queue: str, id: int,
               timeout: Optional[Union[float, datetime.timedelta]] = 60.0
               ) -> Json:
        """Waits for the result of job id of queue: long polls the server
        until the job is completed, then returns what the server has of it
        ({"id", "state": "completed", "result", "completed_at",
        "progress", "note", "progress_at", "attempts"}; "result" is absent
        when it was acked without one). Raises JobFailed (id, error,
        attempts) when it became a dead letter, ResultTimeout when it is
        neither after timeout seconds (None: no limit), NotFound when the
        queue knows nothing of it (never sent, or acked without a result,
        or its result ran out). A server that is restarting, unreachable
        or answering 5xx meanwhile is asked again, with a short backoff,
        until the timeout. (With sqlq.aio: a coroutine.)"""
        if isinstance(timeout, datetime.timedelta):
            timeout = timeout.total_seconds()
        return self._drive(self.queue(queue)._await_result(int(id), timeout))

    def _drive(self, plan: Any) -> Any:
        """Runs a plan of calls (sqlq.worker.drive; sqlq.aio's awaits)."""
        from .worker import drive
        return drive(plan)

    @staticmethod
    def _sleep(seconds: float) -> Any:
        time.sleep(seconds)


class Client(_ClientBase):
    """A client of one `sqlq serve`. Thread-safe: each thread gets its own
    kept-alive connection. (sqlq.aio.Client is the same for asyncio.)"""

    def _init_io(self) -> None:
        self._local = threading.local()
        self._conns_lock = threading.Lock()
        self._conns: list[_Connection] = []

    def close(self) -> None:
        """Closes every connection of this client."""
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connection(self) -> _Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = _Connection(self)
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _close_local(self) -> None:
        """Closes and forgets the calling thread's connection (a thread
        that ends: its connection would otherwise stay open and listed)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            return
        self._local.conn = None
        with self._conns_lock:
            try:
                self._conns.remove(conn)
            except ValueError:
                pass
        conn.close()

    def _abort_polls(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for c in conns:
            if c.waiting:
                c.abort()

    def request(self, method: str, path: str, body: Optional[Json] = None,
                query: Optional[Mapping[str, Any]] = None, *,
                idempotent: Optional[bool] = None,
                wait_s: float = 0.0, retries: Optional[int] = None,
                raw: bool = False) -> Json:
        """Sends one request and returns the reply's JSON (its text with
        raw=True). Raises a SqlqError subclass for an error reply.

        idempotent: whether the request may be repeated when the
        connection broke after it was sent, or the server answered
        outcome_unknown (default: GET only)."""
        plan = self._plan(method, path, body, query, idempotent, wait_s,
                          retries, raw)
        conn = self._connection()
        step = next(plan)
        while True:
            got: Any = None
            if isinstance(step, _Sleep):
                time.sleep(step)
            else:
                try:
                    conn.waiting = wait_s > 0
                    try:
                        got = conn.exchange(*step)
                    finally:
                        conn.waiting = False
                except ConnectionFailed as e:
                    got = e
            try:
                step = plan.send(got)
            except StopIteration as done:
                return done.value

    def _call(self, method: str, path: str, body: Optional[Json] = None,
              query: Optional[Mapping[str, Any]] = None, *,
              then: Optional[Callable[[Json], Any]] = None, **kw: Any) -> Any:
        """request(), and then(reply) when given: what every operation
        does (sqlq.aio's Client returns a coroutine of the same)."""
        r = self.request(method, path, body, query, **kw)
        return r if then is None else then(r)

    @staticmethod
    def _map(result: Any, fn: Callable[[Any], Any]) -> Any:
        """fn of an operation's result (sqlq.aio's: of its coroutine's)."""
        return fn(result)


@dataclass
class SendResult:
    ids: list[int]
    duplicate: list[bool]


class ClaimResult(list):  # list[Message]
    """The claimed messages; limited_by and retry_after_ms when a limit of
    the queue gave fewer, limited when the reply size cut it short, paused
    when the queue is paused (nothing is handed out until it is resumed),
    groups_busy when nothing came while messages were ready because their
    groups held them back (an earlier message of the group in flight or
    waiting for its retry, or the group at its group_limit)."""
    limited_by: Optional[str] = None
    retry_after_ms: Optional[int] = None
    limited: bool = False
    paused: bool = False
    groups_busy: bool = False


@dataclass
class Message:
    """A claimed message.

    kind: the job kind it was sent with ("email.send"), None without one.
    timeout: the job's own timeout in seconds (sent with it), None without
    one: the longest one attempt may run (the workers stop its handler
    there). expires_at: when a job sent with expire_after had to start by
    (RFC 3339), None without one. on_expiry: what its expiry does, "dead"
    (dead-letter it) or "drop" (delete it). max_attempts: the job's own
    max_attempts (sent with it), None without one: the queue's applies,
    or this when smaller. batch: a member's {"id"} of its batch; the
    callback's {"id", "callback": True, "total", "completed", "dead",
    "cancelled"} (client.create_batch); None for other messages.
    cancelled: set by a worker when it no longer wants the handler's
    outcome (the handler's timeout passed, or the message was released at
    the shutdown deadline): a long handler checks `cancelled.is_set()` or
    waits on it, and stops."""
    queue: "Queue" = field(repr=False)
    id: int
    receipt: str
    attempt: int
    priority: int
    payload: Payload
    headers: dict[str, str]
    group: Optional[str]
    enqueued_at: str
    lease_expires_at: str
    raw: dict[str, Json] = field(repr=False)
    kind: Optional[str] = None
    timeout: Optional[float] = None
    expires_at: Optional[str] = None
    on_expiry: str = "dead"
    max_attempts: Optional[int] = None
    batch: Optional[dict[str, Json]] = None
    parents: list[tuple[str, int]] = field(default_factory=list)
    cancelled: threading.Event = field(default_factory=threading.Event,
                                       repr=False, compare=False)

    @classmethod
    def from_json(cls, queue: "Queue", d: dict[str, Json]) -> "Message":
        return cls(queue=queue, id=d["id"], receipt=d["receipt"],
                   attempt=d["attempt"], priority=d.get("priority", 0),
                   payload=payload_of(d), headers=d.get("headers", {}),
                   group=d.get("group"), enqueued_at=d.get("enqueued_at", ""),
                   lease_expires_at=d.get("lease_expires_at", ""), raw=d,
                   kind=d.get("kind") or None,
                   timeout=(d["timeout_ms"] / 1000.0
                            if d.get("timeout_ms") is not None else None),
                   expires_at=d.get("expires_at"),
                   on_expiry=str(d.get("on_expiry") or "dead"),
                   max_attempts=d.get("max_attempts"),
                   batch=d.get("batch"),
                   parents=parents_of(d))

    def ack(self, result: Any = NO_RESULT, *,
            result_ttl: Optional[Union[float, datetime.timedelta]] = None
            ) -> None:
        """Acks the message; with result (any JSON value), the job's
        result is kept with it for result_ttl seconds (the server's
        default: a day), for client.result()."""
        return self.queue.ack(self.receipt, result, result_ttl=result_ttl)

    def progress(self, value: float, note: Any = None) -> Any:
        """Records how far the job has come: value, a finite number (a
        percentage, a count of items), and note, any JSON value (at most
        4 KiB), e.g. {"step": "rendering"}. Each replaces the one before;
        client.result() and the message's result show the latest. It does
        not extend the lease. (With sqlq.aio: a coroutine.)"""
        return self.queue.progress(self.receipt, value, note)

    def nack(self, error: Optional[str] = None,
             delay_ms: Optional[int] = None,
             action: Optional[str] = None) -> str:
        return self.queue.nack(self.receipt, error=error, delay_ms=delay_ms,
                               action=action)

    def parent_results(self) -> Any:
        """The results of this message's parents (Message.parents), read
        with one request each: {id: result}, in the parents' order. A
        parent has a result only when it was acked with one (a handler
        that returned a value) and the result has not run out; the others
        are left out. (With sqlq.aio: a coroutine.)"""
        client = self.queue.client
        return client._drive(_parent_results(client, self.parents))

    def extend(self, lease_ms: int) -> str:
        return self.queue.client._map(
            self.queue.extend(self.receipt, lease_ms), self._extended)

    def _extended(self, expiry: str) -> str:
        self.lease_expires_at = expiry
        return expiry


# The header in which a workflow (sqlq.flow) names a job's parents sent
# before it by queue and id, "fetch:12,resize:14": the queue of one that
# had completed before the send, which the server does not know.
PARENTS_HEADER = "sqlq-parents"


def parents_header(parents: Sequence[tuple[str, int]]) -> str:
    return ",".join(f"{q}:{int(i)}" for q, i in parents)


def parse_parents(text: str) -> list[tuple[str, int]]:
    out = []
    for item in text.split(","):
        q, _, i = item.strip().rpartition(":")
        if q and i.isdigit():
            out.append((q, int(i)))
    return out


def parents_of(d: dict[str, Json]) -> list[tuple[str, int]]:
    """A claimed message's parents, (queue, id): the server's "parents",
    with the queue a workflow's header names where the server has none
    (a message sent before servers kept them: the header's alone)."""
    headers = d.get("headers") or {}
    named = parse_parents(str(headers.get(PARENTS_HEADER, "")))
    given = d.get("parents")
    if not given:
        return named
    queue_of = {i: q for q, i in named}
    return [(str(p.get("queue") or queue_of.get(int(p["id"]), "")),
             int(p["id"])) for p in given]


def _parent_results(client: "_ClientBase", parents: Sequence[tuple[str, int]]
                    ) -> Generator[tuple[Callable[..., Any], tuple], Any,
                                   dict[int, Json]]:
    """The calls of Message.parent_results(), for a driver."""
    out: dict[int, Json] = {}
    for q, i in parents:
        if not q:
            continue  # its queue is not known: nor is its result
        try:
            info = yield client.queue(q)._result_once, (i, 0)
        except NotFound:
            continue
        if info.get("state") == "completed" and "result" in info:
            out[i] = info["result"]
    return out


def _key(k: str) -> Callable[[Json], Json]:
    """The reply's field k (a then= of _call)."""
    return lambda r: r[k]


def _passing(e: SqlqError) -> bool:
    """Whether e is for want of the server (unreachable, restarting,
    busy, failing): asked again while awaiting a result."""
    return isinstance(e, ConnectionFailed) or e.status >= 500 or \
        e.status == 429


def _wait_limit(e: BadRequest, chunk: int) -> Optional[int]:
    """After e, the wait_ms to ask for instead of chunk: the server's limit
    from its wait_too_long error ("... exceeds the server's limit of
    20000"), or half of chunk when it does not say; None when e is another
    error, or nothing shorter is left to try."""
    if e.code != "wait_too_long":
        return None
    m = re.search(r"limit of (\d+)", e.message)
    smaller = int(m.group(1)) if m else chunk // 2
    return smaller if 0 <= smaller < chunk else None


def _send_result(r: Json) -> "SendResult":
    return SendResult(r["ids"], r["duplicate"])


def _prepare(messages: Sequence[Mapping[str, Any]], idempotent_sends: bool
             ) -> tuple[list[dict[str, Any]], bool]:
    """The request's messages of a send (seconds as the API's
    milliseconds, the payload's fields, the trace context, a dedup key of
    its own to each with idempotent_sends), and whether repeating the
    request is safe: with a dedup key on every message a repeat stores
    nothing twice."""
    out = []
    for m in messages:
        m = _limits_ms(dict(m))
        if "payload" in m:
            m.update(payload_fields(m.pop("payload")))
        for k in ("depends_on", "depends_on_batch"):
            if k in m:
                m[k] = list(m[k])
        tracing.inject(m)
        out.append(m)
        if idempotent_sends and m.get("dedup") is None:
            m["dedup"] = "idem:" + uuid.uuid4().hex
    return out, bool(out) and all(m.get("dedup") is not None for m in out)


def _opts(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


def _filter_query(filt: Mapping[str, Any]) -> dict[str, Any]:
    q = dict(filt)
    h = q.get("header")
    if isinstance(h, (tuple, list)):
        q["header"] = f"{h[0]}={h[1]}"
    return q


class Queue:
    """A work queue of the server (a handle: making one sends nothing)."""

    def __init__(self, client: _ClientBase, name: str) -> None:
        self.client = client
        self.name = name
        self.path = "/v1/queues/" + _q(name)

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    def _req(self, method: str, sub: str = "", body: Optional[Json] = None,
             query: Optional[Mapping[str, Any]] = None, **kw: Any) -> Json:
        return self.client._call(method, self.path + sub, body, query, **kw)

    # The queue itself.
    def create(self, **options: Any) -> Json:
        """Creates the queue with the options of the API (max_attempts,
        lease_ms, backoff_base_ms, ..., labels). Returns the queue."""
        return self._req("POST", "", options)

    def stats(self) -> Json:
        """{"name","kind","stats":{...},"options":{...}}."""
        return self._req("GET")

    def change(self, **options: Any) -> Json:
        """PATCH: the options given change (None lifts a limit)."""
        return self._req("PATCH", "", options)

    def pause(self) -> Json:
        return self._req("POST", "/pause", idempotent=True)

    def resume(self) -> Json:
        return self._req("POST", "/resume", idempotent=True)

    def drop(self) -> Json:
        return self._req("DELETE")

    def purge(self) -> int:
        return self._req("POST", "/purge", then=_key("purged"))

    def history(self) -> Json:
        return self._req("GET", "/history")

    # Messages.
    def send(self, payload: Payload, *, priority: Optional[int] = None,
             delay_ms: Optional[int] = None, run_at: Optional[str] = None,
             dedup: Optional[str] = None, group: Optional[str] = None,
             headers: Optional[Mapping[str, str]] = None,
             kind: Optional[str] = None,
             timeout: Optional[Union[float, datetime.timedelta]] = None,
             expire_after: Optional[Union[float, datetime.timedelta]] = None,
             on_expiry: Optional[str] = None,
             max_attempts: Optional[int] = None,
             backoff: Optional[Union[float, datetime.timedelta]] = None,
             backoff_max: Optional[Union[float, datetime.timedelta]] = None,
             depends_on: Optional[Sequence[int]] = None,
             if_dependency_dies: Optional[str] = None) -> int:
        """Sends one message; returns its id (the existing message's when
        dedup matched). Returns once the server committed it. kind: the
        job kind ("email.send"), by which a worker picks its handler.
        timeout: seconds one attempt of the job may run (a worker stops
        its handler there, and its lease ends there at the latest);
        expire_after: seconds after the send within which it must start,
        else it is dead-lettered ("expired: not started within N ms"), or
        deleted with on_expiry="drop" (on_expiry="dead" is the default;
        the queue's stats count it as "expired" either way).
        The job's own retry policy: max_attempts (1 to 1,000,000; the
        smaller of it and the queue's max_attempts applies), backoff and
        backoff_max (seconds, backoff_max at least backoff: the retry
        delay's base and cap after a failed attempt, instead of the
        queue's). depends_on: ids of messages (in any queue) it waits for:
        it is "waiting" until every one has completed;
        if_dependency_dies: what it does when one of them dies instead,
        "cancel" (the default: it is cancelled too), "run" or "wait"
        (docs/semantics.md, "Dependencies")."""
        m = _opts(priority=priority, delay_ms=delay_ms, run_at=run_at,
                  dedup=dedup, group=group, kind=kind,
                  headers=dict(headers) if headers else None,
                  timeout=timeout, expire_after=expire_after,
                  on_expiry=on_expiry,
                  max_attempts=max_attempts, backoff=backoff,
                  backoff_max=backoff_max,
                  depends_on=list(depends_on) if depends_on else None,
                  if_dependency_dies=if_dependency_dies)
        m.update(payload_fields(payload))
        return self._send([m], lambda r: r["ids"][0])

    def send_batch(self, messages: Sequence[Mapping[str, Any]]) -> SendResult:
        """Sends many messages in one commit. Each is a dict of the send
        fields ("payload", "kind", "priority", ...); its "payload" may be
        str, bytes or any JSON value; "timeout", "expire_after",
        "backoff" and "backoff_max" are seconds, "max_attempts" a count,
        "on_expiry" "dead" or "drop", as in send(); "depends_on" (ids),
        "depends_on_batch" (indexes of earlier messages of this batch) and
        "if_dependency_dies" make it wait for others. Each carries the current trace context (sqlq.tracing) unless its
        headers have a traceparent."""
        return self._send(messages, _send_result)

    def _send(self, messages: Sequence[Mapping[str, Any]],
              then: Callable[[Json], Any]) -> Any:
        out, idem = _prepare(messages, self.client.idempotent_sends)
        return self._req("POST", "/messages", {"messages": out},
                         idempotent=idem, then=then)

    def claim(self, max: int = 1, *, wait_ms: int = 0,
              lease_ms: Optional[int] = None, worker: Optional[str] = None,
              ack: Optional[str] = None) -> ClaimResult:
        """Claims up to max messages, waiting up to wait_ms for one."""
        body = _opts(max=max, wait_ms=wait_ms or None, lease_ms=lease_ms,
                     worker=worker, ack=ack)
        return self._req("POST", "/claim", body, wait_s=wait_ms / 1000.0,
                         then=self._claimed)

    def _claimed(self, r: Json) -> ClaimResult:
        res = ClaimResult(Message.from_json(self, d) for d in r["messages"])
        res.limited_by = r.get("limited_by")
        res.retry_after_ms = r.get("retry_after_ms")
        res.limited = bool(r.get("limited", False))
        res.paused = bool(r.get("paused", False))
        res.groups_busy = bool(r.get("groups_busy", False))
        return res

    def ack(self, receipt: str, result: Any = NO_RESULT, *,
            result_ttl: Optional[Union[float, datetime.timedelta]] = None
            ) -> None:
        """Acks a message; with result (any JSON value, as large as the
        queue's max_payload_bytes as JSON: else BadRequest, 413, and
        nothing is acked) the job's result is
        kept, in the ack's transaction, for result_ttl seconds (1 s to 30
        days; None: the server's default, a day)."""
        body: dict[str, Any] = {"receipt": receipt}
        if result is not NO_RESULT:
            body["result"] = result
            if result_ttl is not None:
                body["result_ttl_ms"] = duration_ms(result_ttl)
        return self._req("POST", "/ack", body, then=lambda r: None)

    def progress(self, receipt: str, progress: float,
                 note: Any = None) -> Any:
        """Records the progress of the leased message of receipt: a finite
        number, and an optional note (any JSON value, at most 4 KiB). The
        latest replaces the one before; the lease is not extended."""
        if isinstance(progress, bool) or not isinstance(progress,
                                                        (int, float)):
            raise TypeError(f"progress must be a number, not {progress!r}")
        if not math.isfinite(progress):
            raise ValueError(f"progress must be finite, not {progress!r}")
        body = _opts(receipt=receipt, progress=progress, note=note)
        return self._req("POST", "/progress", body, idempotent=True,
                         then=lambda r: None)

    def result_info(self, id: int, *, wait_ms: int = 0) -> Json:
        """What the server has of job id now (one request; with wait_ms,
        held until it is completed or dead, or wait_ms ran out): {"id",
        "state", "result", "completed_at", "progress", "note",
        "progress_at", "error", "attempts"}, each when known. Raises
        NotFound when the queue knows nothing of it."""
        return self._result_once(id, wait_ms)

    def _result_once(self, id: int, wait_ms: int,
                     retries: Optional[int] = None) -> Json:
        return self._req("GET", f"/messages/{int(id)}/result",
                         query={"wait_ms": wait_ms} if wait_ms else None,
                         wait_s=wait_ms / 1000.0, retries=retries)

    def result(self, id: int,
               timeout: Optional[Union[float, datetime.timedelta]] = 60.0
               ) -> Json:
        """client.result(queue, id, timeout) of this queue."""
        return self.client.result(self.name, id, timeout)

    def _await_result(self, id: int, timeout: Optional[float]
                      ) -> Generator[tuple[Callable[..., Any], tuple], Any,
                                     Json]:
        """The calls of client.result(), for a driver (sqlq.worker.drive,
        sqlq.aio's): long polls of at most RESULT_WAIT_MS (or the
        server's limit, once it said it) until the job is completed or
        dead or the timeout ran out; every failure for want of the server
        is retried with a short backoff until then."""
        start = time.monotonic()
        deadline = math.inf if timeout is None else start + max(0.0, timeout)
        chunk = RESULT_WAIT_MS
        fails = 0  # failed tries in a row
        early = 0  # replies in a row that came back before their wait
        info: Optional[Json] = None
        last: Optional[BaseException] = None
        while True:
            left = deadline - time.monotonic()
            wait_ms = int(max(0.0, min(left * 1000.0, chunk)))
            asked = time.monotonic()
            try:
                info = yield self._result_once, (id, wait_ms, 0)
                fails, last = 0, None
            except BadRequest as e:
                smaller = _wait_limit(e, chunk)
                if smaller is None:
                    raise
                chunk = smaller
                continue
            except NotFound:
                raise
            except SqlqError as e:
                if not _passing(e):
                    raise
                last = e
                fails += 1
                pause = backoff_delay(fails - 1, 0.05, 1.0)
                if time.monotonic() + pause >= deadline:
                    raise ResultTimeout(id, timeout or 0.0, info) from e
                log.warning("sqlq: waiting for the result of job %d: %s; "
                            "asking again in %.2fs", id, e, pause)
                yield self.client._sleep, (pause,)
                continue
            state = info.get("state")
            if state == "completed":
                return info
            if state == "dead":
                raise JobFailed(id, info.get("error"), info.get("attempts"),
                                info)
            if time.monotonic() >= deadline:
                raise ResultTimeout(id, timeout or 0.0, info) from last
            # A reply long before its wait ended (a server stopping): not
            # asked again at once.
            if wait_ms and time.monotonic() - asked < wait_ms / 2000.0:
                early += 1
                pause = min(backoff_delay(early - 1, 0.05, 1.0),
                            max(0.0, deadline - time.monotonic()))
                yield self.client._sleep, (pause,)
            else:
                early = 0

    def ack_many(self, receipts: Sequence[str]) -> list[Json]:
        """Acks many in one commit; one result per receipt:
        {"ok":true} or {"ok":false,"error":{"code","message"}}."""
        return self._req("POST", "/ack", {"receipts": list(receipts)},
                         then=_key("results"))

    def nack(self, receipt: str, *, error: Optional[str] = None,
             delay_ms: Optional[int] = None,
             action: Optional[str] = None) -> str:
        """Gives the message back. action "retry" (the default) fails the
        attempt: "retry", or "dead" when its attempts are used up; "dead"
        dead-letters it now: "dead"; "snooze" gives it back after delay_ms
        without counting the attempt: "snoozed"."""
        body = _opts(receipt=receipt, error=error, delay_ms=delay_ms,
                     action=action)
        return self._req("POST", "/nack", body, then=_key("outcome"))

    def extend(self, receipt: str, lease_ms: int) -> str:
        """Renews the lease to lease_ms from now; returns the new expiry."""
        return self._req("POST", "/extend",
                         {"receipt": receipt, "lease_ms": lease_ms},
                         idempotent=True, then=_key("lease_expires_at"))

    # Finding and changing messages.
    def message(self, id: int) -> Json:
        return self._req("GET", f"/messages/{int(id)}")

    def messages(self, *, limit: Optional[int] = None,
                 cursor: Optional[str] = None, **filt: Any) -> Json:
        """One page: {"messages":[...],"next_cursor":...}. Filter: state,
        kind, min_priority, max_priority, dedup, group, header=(name,
        value), payload_prefix, enqueued_after, enqueued_before."""
        q = _filter_query(filt)
        q.update(_opts(limit=limit, cursor=cursor))
        return self._req("GET", "/messages", query=q)

    def iter_messages(self, **filt: Any) -> Iterator[Json]:
        """Every message the filter selects, page after page."""
        cursor = None
        while True:
            page = self.messages(cursor=cursor, **filt)
            yield from page["messages"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def count(self, **filt: Any) -> int:
        return self._req("GET", "/messages/count",
                         query=_filter_query(filt), then=_key("count"))

    def delete_message(self, id: int) -> int:
        return self._req("DELETE", f"/messages/{int(id)}",
                         then=_key("deleted"))

    def retry_message(self, id: int) -> int:
        return self._req("POST", f"/messages/{int(id)}/retry",
                         then=_key("changed"))

    def cancel_message(self, id: int) -> int:
        return self._req("POST", f"/messages/{int(id)}/cancel",
                         then=_key("changed"))

    def reschedule_message(self, id: int, run_at: str) -> int:
        return self._req("POST", f"/messages/{int(id)}/reschedule",
                         {"run_at": run_at}, then=_key("changed"))

    def set_priority(self, id: int, priority: int) -> int:
        return self._req("POST", f"/messages/{int(id)}/priority",
                         {"priority": priority}, then=_key("changed"))

    def bulk(self, action: str, *, ids: Optional[Sequence[int]] = None,
             filter: Optional[Mapping[str, Any]] = None,
             state: Optional[str] = None, run_at: Optional[str] = None,
             priority: Optional[int] = None) -> int:
        """delete, cancel, retry, reschedule or priority of many messages,
        by ids or by filter; returns how many changed."""
        if action not in ("delete", "cancel", "retry", "reschedule",
                          "priority"):
            raise ValueError(f"unknown bulk action {action!r}")
        body = _opts(ids=list(ids) if ids is not None else None,
                     filter=dict(filter) if filter is not None else None,
                     state=state, run_at=run_at, priority=priority)
        return self._req("POST", "/messages/" + action, body,
                         then=_key("changed"))

    # Dead letters and archive.
    def dead(self, limit: int = 100, after_id: int = 0) -> list[Json]:
        return self._req("GET", "/dead",
                         query={"limit": limit, "after_id": after_id},
                         then=_key("dead"))

    def redrive(self, ids: Optional[Sequence[int]] = None, *,
                all: bool = False) -> int:
        body: dict[str, Any] = {"all": True} if all else {"ids": list(ids or [])}
        return self._req("POST", "/dead/redrive", body, then=_key("redriven"))

    def purge_dead(self) -> int:
        return self._req("DELETE", "/dead", then=_key("purged"))

    def archive(self, limit: int = 100, after_id: int = 0) -> list[Json]:
        return self._req("GET", "/archive",
                         query={"limit": limit, "after_id": after_id},
                         then=_key("archive"))


class Ring:
    """A ring: capped per-group lists of entries."""

    def __init__(self, client: _ClientBase, name: str) -> None:
        self.client = client
        self.name = name
        self.path = "/v1/rings/" + _q(name)

    def _req(self, method: str, sub: str = "", body: Optional[Json] = None,
             query: Optional[Mapping[str, Any]] = None, **kw: Any) -> Json:
        return self.client._call(method, self.path + sub, body, query, **kw)

    def create(self, *, capacity: Optional[int] = None,
               max_payload_bytes: Optional[int] = None) -> Json:
        return self._req("POST", "", _opts(capacity=capacity,
                                           max_payload_bytes=max_payload_bytes))

    def stats(self) -> Json:
        return self._req("GET")

    def drop(self) -> Json:
        return self._req("DELETE")

    def push(self, group: str, payload: Payload) -> Json:
        """Returns the entry {"seq","group",payload,"pushed_at"}."""
        return self._req("POST", "/groups/" + _q(group), payload_fields(payload))

    def read(self, group: str, *, limit: Optional[int] = None,
             order: Optional[str] = None,
             after_seq: Optional[int] = None) -> list[Json]:
        return self._req("GET", "/groups/" + _q(group), query=_opts(
            limit=limit, order=order, after_seq=after_seq),
            then=_key("entries"))

    def groups(self) -> list[Json]:
        return self._req("GET", "/groups", then=_key("groups"))

    def delete_group(self, group: str) -> int:
        return self._req("DELETE", "/groups/" + _q(group),
                         then=_key("deleted"))

    def delete_entry(self, group: str, seq: int) -> int:
        return self._req("DELETE", f"/groups/{_q(group)}/{int(seq)}",
                         then=_key("deleted"))


class Topic:
    """A topic: one publish stored in every subscribed queue whose header
    filter it matches, in one transaction (docs/semantics.md, "Topics")."""

    def __init__(self, client: _ClientBase, name: str) -> None:
        self.client = client
        self.name = name
        self.path = "/v1/topics/" + _q(name)

    def _req(self, method: str, sub: str = "", body: Optional[Json] = None,
             **kw: Any) -> Json:
        return self.client._call(method, self.path + sub, body, **kw)

    def create(self) -> Json:
        """Raises AlreadyExists when a queue, ring, rotation or topic has
        the name."""
        return self._req("POST")

    def drop(self) -> Json:
        """Drops the topic and its subscriptions; the queues stay."""
        return self._req("DELETE")

    def subscribe(self, queue: str, *,
                  filter: Optional[Mapping[str, str]] = None) -> Json:
        """Subscribes queue, or replaces its filter: the headers a message
        must carry, each with exactly that value, to be delivered to it
        (None: every message). Returns {"topic", "queue", "filter",
        "created"} (created False: the filter was replaced)."""
        body = {"filter": dict(filter)} if filter else None
        return self._req("PUT", "/subscriptions/" + _q(queue), body,
                         idempotent=True)

    def unsubscribe(self, queue: str) -> Json:
        """Raises NotFound when queue is not subscribed."""
        return self._req("DELETE", "/subscriptions/" + _q(queue))

    def subscriptions(self) -> list[Json]:
        """[{"topic", "queue", "filter", "subscribed_at"}] by queue."""
        return self._req("GET", "/subscriptions", then=_key("subscriptions"))

    def publish(self, payload: Payload, **fields: Any) -> list[Json]:
        """Publishes one message (the fields of Queue.send: priority,
        headers, dedup, group, kind, timeout, ...). Returns the deliveries,
        [{"queue", "message", "id", "duplicate"}], one per queue that
        stored it; [] when no subscription takes it (nothing stored)."""
        return self.publish_batch([dict(fields, payload=payload)])

    def publish_batch(self, messages: Sequence[Mapping[str, Any]]
                      ) -> list[Json]:
        """Publishes many messages in one commit, each a dict of the send
        fields (as Queue.send_batch takes them); each delivery's "message"
        is its index in messages."""
        out, idem = _prepare(messages, self.client.idempotent_sends)
        return self._req("POST", "/messages", {"messages": out},
                         idempotent=idem, then=_key("deliveries"))


class Rotation:
    """A rotation: a pool of items served in turn."""

    def __init__(self, client: _ClientBase, name: str) -> None:
        self.client = client
        self.name = name
        self.path = "/v1/rotations/" + _q(name)

    def _req(self, method: str, sub: str = "",
             body: Optional[Json] = None, **kw: Any) -> Json:
        return self.client._call(method, self.path + sub, body, **kw)

    def create(self, *, max_failures: Optional[int] = None,
               max_payload_bytes: Optional[int] = None) -> Json:
        return self._req("POST", "", _opts(
            max_failures=max_failures, max_payload_bytes=max_payload_bytes))

    def stats(self) -> Json:
        return self._req("GET")

    def drop(self) -> Json:
        return self._req("DELETE")

    def add(self, key: str, payload: Payload = "") -> Json:
        body = {"key": key}
        body.update(payload_fields(payload))
        return self._req("POST", "/items", body)

    def items(self) -> list[Json]:
        return self._req("GET", "/items", then=_key("items"))

    def remove(self, key: str) -> Json:
        return self._req("DELETE", "/items/" + _q(key))

    def next(self, n: int = 1) -> list[Json]:
        return self._req("POST", "/next", {"n": n}, then=_key("items"))

    def fail(self, key: str) -> Json:
        return self._req("POST", f"/items/{_q(key)}/fail")

    def ok(self, key: str) -> Json:
        return self._req("POST", f"/items/{_q(key)}/ok")

    def reset(self, key: str) -> Json:
        return self._req("POST", f"/items/{_q(key)}/reset")


class Schedule:
    """A schedule: a message sent to a queue at each tick of a cron."""

    def __init__(self, client: _ClientBase, name: str) -> None:
        self.client = client
        self.name = name
        self.path = "/v1/schedules/" + _q(name)

    def create(self, *, cron: str, queue: str, payload: Payload = "",
               time_zone: Optional[str] = None, priority: Optional[int] = None,
               headers: Optional[Mapping[str, str]] = None,
               group: Optional[str] = None,
               catch_up: Optional[int] = None,
               kind: Optional[str] = None,
               timeout: Optional[Union[float, datetime.timedelta]] = None,
               expire_after: Optional[Union[float,
                                            datetime.timedelta]] = None,
               on_expiry: Optional[str] = None
               ) -> Json:
        """Sends a message to queue at each tick of cron; kind: the job
        kind of each message it sends; timeout, expire_after and
        on_expiry: the limits of each (seconds), as in Queue.send()."""
        body = _opts(cron=cron, queue=queue, time_zone=time_zone,
                     priority=priority, headers=dict(headers) if headers else None,
                     group=group, catch_up=catch_up, kind=kind,
                     timeout=timeout, expire_after=expire_after,
                     on_expiry=on_expiry)
        _limits_ms(body)
        body.update(payload_fields(payload))
        return self.client._call("POST", self.path, body)

    def get(self) -> Json:
        return self.client._call("GET", self.path)

    def pause(self) -> Json:
        return self.client._call("POST", self.path + "/pause")

    def resume(self) -> Json:
        return self.client._call("POST", self.path + "/resume")

    def drop(self) -> Json:
        return self.client._call("DELETE", self.path)
