"""The HTTP client of `sqlq serve`: every operation of its API."""
from __future__ import annotations

import base64
import http.client
import json
import logging
import random
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
from .errors import ConnectionFailed, SqlqError, error_for

log = logging.getLogger("sqlq")

Json = Any
Payload = Union[str, bytes, bytearray, memoryview, Json]

# 503 and 429 replies say the server did nothing: retrying them is safe for
# every request. outcome_unknown (500) and timeout (504) may have committed.
_RETRYABLE_STATUS = (429, 503)
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


class _Sleep(float):
    """A wait, in seconds, before a request's next try."""


def backoff_delay(attempt: int, base: float, cap: float) -> float:
    """Capped exponential backoff with full jitter: uniform in
    [0, min(cap, base * 2**attempt)] (at least a millisecond)."""
    return max(0.001, random.uniform(0, min(cap, base * (2 ** min(attempt, 30)))))


class _Connection:
    """One kept-alive HTTP connection, used by one thread at a time."""

    def __init__(self, client: "Client") -> None:
        self.client = client
        self.conn: Optional[http.client.HTTPConnection] = None
        self.last_used = 0.0
        self.lock = threading.Lock()  # guards conn against abort()
        self.waiting = False  # in a long-poll claim

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

    def abort(self) -> None:
        """Cuts a long poll short from another thread (the server then
        gives the waiting claim no message)."""
        with self.lock:
            if self.conn is not None and self.conn.sock is not None:
                try:
                    self.conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def exchange(self, method: str, target: str, body: Optional[bytes],
                 headers: dict[str, str], timeout: float
                 ) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            if self.conn is not None and self._stale():
                self.conn.close()
                self.conn = None
            if self.conn is None:
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
            if resp.will_close:
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
        if method == "POST" or method == "PATCH":
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

    def schedules(self) -> list[Json]:
        return self._call("GET", "/v1/schedules", then=_key("schedules"))

    def all(self) -> Json:
        """Every queue, ring and rotation the token may see."""
        return self._call("GET", "/v1/all")

    def overview(self) -> Json:
        return self._call("GET", "/v1/overview")

    def queue(self, name: str) -> "Queue":
        return Queue(self, name)

    def ring(self, name: str) -> "Ring":
        return Ring(self, name)

    def rotation(self, name: str) -> "Rotation":
        return Rotation(self, name)

    def schedule(self, name: str) -> "Schedule":
        return Schedule(self, name)


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
    """A claimed message."""
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

    @classmethod
    def from_json(cls, queue: "Queue", d: dict[str, Json]) -> "Message":
        return cls(queue=queue, id=d["id"], receipt=d["receipt"],
                   attempt=d["attempt"], priority=d.get("priority", 0),
                   payload=payload_of(d), headers=d.get("headers", {}),
                   group=d.get("group"), enqueued_at=d.get("enqueued_at", ""),
                   lease_expires_at=d.get("lease_expires_at", ""), raw=d)

    def ack(self) -> None:
        return self.queue.ack(self.receipt)

    def nack(self, error: Optional[str] = None,
             delay_ms: Optional[int] = None) -> str:
        return self.queue.nack(self.receipt, error=error, delay_ms=delay_ms)

    def extend(self, lease_ms: int) -> str:
        return self.queue.client._map(
            self.queue.extend(self.receipt, lease_ms), self._extended)

    def _extended(self, expiry: str) -> str:
        self.lease_expires_at = expiry
        return expiry


def _key(k: str) -> Callable[[Json], Json]:
    """The reply's field k (a then= of _call)."""
    return lambda r: r[k]


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
             headers: Optional[Mapping[str, str]] = None) -> int:
        """Sends one message; returns its id (the existing message's when
        dedup matched). Returns once the server committed it."""
        m = _opts(priority=priority, delay_ms=delay_ms, run_at=run_at,
                  dedup=dedup, group=group,
                  headers=dict(headers) if headers else None)
        m.update(payload_fields(payload))
        return self._send([m], lambda r: r["ids"][0])

    def send_batch(self, messages: Sequence[Mapping[str, Any]]) -> SendResult:
        """Sends many messages in one commit. Each is a dict of the send
        fields; its "payload" may be str, bytes or any JSON value. Each
        carries the current trace context (sqlq.tracing) unless its
        headers have a traceparent."""
        return self._send(messages,
                          lambda r: SendResult(r["ids"], r["duplicate"]))

    def _send(self, messages: Sequence[Mapping[str, Any]],
              then: Callable[[Json], Any]) -> Any:
        out = []
        for m in messages:
            m = dict(m)
            if "payload" in m:
                m.update(payload_fields(m.pop("payload")))
            tracing.inject(m)
            out.append(m)
            if self.client.idempotent_sends and m.get("dedup") is None:
                m["dedup"] = "idem:" + uuid.uuid4().hex
        # With a dedup key on every message a repeat stores nothing twice.
        idem = bool(out) and all(m.get("dedup") is not None for m in out)
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

    def ack(self, receipt: str) -> None:
        return self._req("POST", "/ack", {"receipt": receipt},
                         then=lambda r: None)

    def ack_many(self, receipts: Sequence[str]) -> list[Json]:
        """Acks many in one commit; one result per receipt:
        {"ok":true} or {"ok":false,"error":{"code","message"}}."""
        return self._req("POST", "/ack", {"receipts": list(receipts)},
                         then=_key("results"))

    def nack(self, receipt: str, *, error: Optional[str] = None,
             delay_ms: Optional[int] = None) -> str:
        """Fails the attempt: "retry" or "dead" (attempts used up)."""
        body = _opts(receipt=receipt, error=error, delay_ms=delay_ms)
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
        min_priority, max_priority, dedup, group, header=(name, value),
        payload_prefix, enqueued_after, enqueued_before."""
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
               catch_up: Optional[int] = None) -> Json:
        body = _opts(cron=cron, queue=queue, time_zone=time_zone,
                     priority=priority, headers=dict(headers) if headers else None,
                     group=group, catch_up=catch_up)
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
