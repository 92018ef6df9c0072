"""sqlq for asyncio: the client of `sqlq serve` and its worker runtime,
with the operations, errors, retries and logs of the sqlq module, each
operation a coroutine. Standard library only (asyncio streams).

    from sqlq.aio import Client, Worker

    async with Client("http://127.0.0.1:8080", token="...") as client:
        emails = client.queue("emails")
        await emails.send({"to": "ada@example.com"})

        async def handle(m):
            await send_mail(m.payload)      # return: acked; raise: nacked
        await Worker(client, "emails", handle, concurrency=8).run()
"""
from __future__ import annotations

import asyncio
import inspect
import os
import select
import signal
import socket
import threading
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Optional

from . import tracing
from .client import (_MAX_IDLE_S, ClaimResult, Json, Message, Queue as _Queue,
                     _ClientBase, _Sleep)
from .client import Ring, Rotation, Schedule, SendResult  # noqa: F401
from .errors import (ConnectionFailed, NotFound, SqlqError, StaleReceipt)
from .worker import _TRANSIENT, _WorkerBase, error_text, release_text

__all__ = ["Client", "Queue", "Worker"]


class _Conn:
    """One kept-alive HTTP/1.1 connection, used by one request at a time."""

    def __init__(self, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.last_used = time.monotonic()

    def stale(self) -> bool:
        """Closed by the server while idle, or idle too long (the server
        closes idle connections). Asks the socket itself, as the sync
        client does: the event loop may not have read the EOF yet."""
        if (self.reader.at_eof() or self.writer.is_closing()
                or time.monotonic() - self.last_used > _MAX_IDLE_S):
            return True
        sock = self.writer.get_extra_info("socket")
        if sock is None:
            return False
        try:
            readable, _, _ = select.select([sock.fileno()], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)  # an idle connection has nothing to read

    def close(self) -> None:
        self.writer.close()


async def _read_reply(reader: asyncio.StreamReader
                      ) -> tuple[int, dict[str, str], bytes, bool]:
    """One HTTP/1.1 reply: status, headers (lower-case names), body, and
    whether the connection may be used again."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    lines = head.split("\r\n")
    version, status_text = lines[0].split(" ", 2)[:2]
    status = int(status_text)
    rh: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            rh[k.strip().lower()] = v.strip()
    keep = (version == "HTTP/1.1"
            and rh.get("connection", "").lower() != "close")
    if "chunked" in rh.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers from sqlq
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(parts)
    elif "content-length" in rh:
        body = await reader.readexactly(int(rh["content-length"]))
    elif status in (204, 304) or status < 200:
        body = b""
    else:  # to the end of the connection
        body = await reader.read()
        keep = False
    return status, rh, body, keep


class Client(_ClientBase):
    """A client of one `sqlq serve` for asyncio: the settings and
    operations of sqlq.Client, each operation a coroutine. Requests run
    concurrently, each on a kept-alive connection of its own from a pool.
    Close it with `await client.close()` or `async with`."""

    def _init_io(self) -> None:
        self._idle: list[_Conn] = []
        self._conns: set[_Conn] = set()
        h = self._host
        host = f"[{h}]" if ":" in h else h
        default = 443 if self._scheme == "https" else 80
        self._host_header = host if self._port == default else \
            f"{host}:{self._port}"

    async def close(self) -> None:
        """Closes every connection of this client."""
        conns, self._conns, self._idle = self._conns, set(), []
        for c in conns:
            c.close()
        for c in conns:
            try:
                await c.writer.wait_closed()
            except (OSError, asyncio.CancelledError):
                pass

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def queue(self, name: str) -> "Queue":
        return Queue(self, name)

    async def _open(self) -> _Conn:
        if self._scheme == "https":
            import ssl
            ctx = self._ssl_context or ssl.create_default_context()
            r, w = await asyncio.open_connection(
                self._host, self._port, ssl=ctx, server_hostname=self._host)
        else:
            r, w = await asyncio.open_connection(self._host, self._port)
        sock = w.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = _Conn(r, w)
        self._conns.add(c)
        return c

    def _drop(self, c: _Conn) -> None:
        c.close()
        self._conns.discard(c)

    async def _exchange(self, method: str, target: str,
                        body: Optional[bytes], headers: dict[str, str],
                        timeout: float) -> tuple[int, dict[str, str], bytes]:
        conn: Optional[_Conn] = None
        sent = False
        try:
            async with asyncio.timeout(timeout):
                while self._idle and conn is None:
                    c = self._idle.pop()
                    if c.stale():
                        self._drop(c)
                    else:
                        conn = c
                if conn is None:
                    conn = await self._open()
                sent = True  # from here the server may have seen it
                lines = [f"{method} {target} HTTP/1.1",
                         f"Host: {self._host_header}"]
                lines += [f"{k}: {v}" for k, v in headers.items()]
                conn.writer.write(("\r\n".join(lines) + "\r\n\r\n")
                                  .encode("latin-1") + (body or b""))
                await conn.writer.drain()
                status, rh, data, keep = await _read_reply(conn.reader)
        except (OSError, EOFError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, ValueError) as e:
            # TimeoutError is an OSError; a refused or failed connect never
            # reached the server.
            if conn is not None:
                self._drop(conn)
            raise ConnectionFailed(
                f"{method} {target}: {type(e).__name__}: {e}", sent) from e
        except BaseException:
            # Cancelled mid-request: the connection's state is unknown.
            if conn is not None:
                self._drop(conn)
            raise
        if keep:
            conn.last_used = time.monotonic()
            self._idle.append(conn)
        else:
            self._drop(conn)
        return status, rh, data

    async def request(self, method: str, path: str, body: Optional[Json] = None,
                      query: Optional[Any] = None, *,
                      idempotent: Optional[bool] = None, wait_s: float = 0.0,
                      retries: Optional[int] = None, raw: bool = False) -> Json:
        """sqlq.Client.request, awaited: the same encoding, retries and
        errors."""
        plan = self._plan(method, path, body, query, idempotent, wait_s,
                          retries, raw)
        step = next(plan)
        while True:
            got: Any = None
            if isinstance(step, _Sleep):
                await asyncio.sleep(step)
            else:
                try:
                    got = await self._exchange(*step)
                except ConnectionFailed as e:
                    got = e
            try:
                step = plan.send(got)
            except StopIteration as done:
                return done.value

    async def _call(self, method: str, path: str, body: Optional[Json] = None,
                    query: Optional[Any] = None, *,
                    then: Optional[Callable[[Json], Any]] = None,
                    **kw: Any) -> Any:
        r = await self.request(method, path, body, query, **kw)
        return r if then is None else then(r)

    @staticmethod
    async def _map(result: Awaitable[Any], fn: Callable[[Any], Any]) -> Any:
        return fn(await result)


class Queue(_Queue):
    """sqlq.Queue for asyncio: each operation a coroutine; a claim's
    messages have coroutine ack(), nack() and extend()."""

    async def iter_messages(self, **filt: Any) -> AsyncIterator[Json]:
        """Every message the filter selects, page after page."""
        cursor = None
        while True:
            page = await self.messages(cursor=cursor, **filt)
            for m in page["messages"]:
                yield m
            cursor = page.get("next_cursor")
            if not cursor:
                return


class _Running:
    """A message whose handler runs, or whose ack or nack is pending."""

    def __init__(self, msg: Message) -> None:
        self.msg = msg
        self.lost = False  # the lease was lost: another worker has it
        self.released = False  # given back at the shutdown deadline
        self.settling = False  # the handler is done; its outcome is sent
        self.task: Optional[asyncio.Task] = None
        self.beat: Optional[asyncio.Task] = None


Handler = Callable[[Message], Any]


class Worker(_WorkerBase):
    """sqlq.Worker for asyncio: runs `await handler(message)` for each
    message of a queue, `concurrency` at a time, in tasks of the running
    event loop, with the same leases, outcomes, retries, shutdown and
    logs. The handler may be a coroutine function or a plain function
    (which then runs on the loop: keep it short).

    `await worker.run()` runs until stop() (or SIGTERM/SIGINT, handled
    while run() runs in the main thread); or `await worker.start()`,
    `worker.stop()`, `await worker.join()`. On stop, running handlers get
    shutdown_timeout seconds; the messages of those still running are then
    released (nacked with delay 0) and their tasks cancelled."""

    def _init_runtime(self) -> None:
        self._stopping = asyncio.Event()
        self._stopped = asyncio.Event()
        self._running: dict[str, _Running] = {}
        self._claims: set[asyncio.Task] = set()
        self._main: Optional[asyncio.Task] = None

    # Lifecycle.
    async def start(self) -> None:
        """Starts the worker's tasks; returns once it claims."""
        if self._main is not None:
            raise RuntimeError("worker already started")
        started = asyncio.get_running_loop().create_future()
        self._main = asyncio.create_task(self._run(started),
                                         name=f"sqlq-worker {self.name}")
        await asyncio.wait([started, self._main],
                           return_when=asyncio.FIRST_COMPLETED)
        if self._main.done():
            self._main.result()  # raises what stopped it

    def stop(self) -> None:
        """Stops claiming; running handlers get shutdown_timeout seconds
        before their messages are released. Returns at once (see join)."""
        self._stopping.set()
        for t in list(self._claims):
            t.cancel()  # a waiting claim is cut short

    async def join(self) -> None:
        """Waits until the worker has stopped."""
        await self._stopped.wait()
        if self._main is not None:
            await self._main

    async def run(self) -> None:
        """start(), then wait until stop(), SIGTERM or SIGINT (handled
        when run() runs in the main thread) and the shutdown is done."""
        loop = asyncio.get_running_loop()
        old: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                old[sig] = signal.getsignal(sig)
                loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            await self.start()
            await self.join()
        finally:
            for sig, h in old.items():
                loop.remove_signal_handler(sig)
                signal.signal(sig, h)

    def _on_signal(self, sig: int) -> None:
        self.log.signal(signal.Signals(sig).name)
        self.stop()

    async def _run(self, started: asyncio.Future) -> None:
        try:
            if self.lease_ms is None:
                st = await self._with_retry(self.queue.stats, "stats")
                if st is None:  # stopped while the server was away
                    return
                self.lease_ms = st["options"]["lease_ms"]
            loops = [asyncio.create_task(self._loop(),
                                         name=f"sqlq-worker-{i}")
                     for i in range(self.concurrency)]
            self.log.started(self.concurrency, self.lease_ms)
            started.set_result(None)
            await self._stopping.wait()
            self.log.stopping(len(self._running))
            self._deadline = time.monotonic() + self.shutdown_timeout
            _, pending = await asyncio.wait(loops,
                                            timeout=self.shutdown_timeout)
            for r in list(self._running.values()):
                await self._release(r)
            if pending:
                # Each loop now sees its handler cancelled and ends.
                await asyncio.wait(pending, timeout=5)
            for t in pending:
                t.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            self.log.stopped(self.acked, self.nacked, self.released,
                             self.lost)
        finally:
            if not started.done():
                started.set_result(None)
            self._stopping.set()
            self._stopped.set()
            await self.client.close()

    async def _with_retry(self, fn: Callable[[], Awaitable[Any]],
                          what: str) -> Any:
        """await fn() until it succeeds or the worker stops (None then);
        transient errors are logged and retried with backoff."""
        attempt = 0
        while True:
            try:
                result = await fn()
                if attempt:
                    self.log.works_again(what, attempt)
                return result
            except _TRANSIENT as e:
                if self._stopping.is_set():
                    return None
                delay = self._retry_delay(what, e, attempt)
                attempt += 1
                try:
                    await asyncio.wait_for(self._stopping.wait(), delay)
                except TimeoutError:
                    pass

    async def _claim(self) -> Optional[ClaimResult]:
        """One long-poll claim, which stop() cuts short (None then)."""
        if self._stopping.is_set():
            return None
        t = asyncio.ensure_future(self.queue.claim(
            1, wait_ms=self.wait_ms, lease_ms=self.lease_ms,
            worker=self.name))
        self._claims.add(t)
        try:
            return await t
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise  # this loop itself is cancelled
            return None  # stop() cut the poll short
        finally:
            self._claims.discard(t)

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            msgs = await self._with_retry(self._claim, "claim")
            if not msgs:
                if msgs is not None and msgs.retry_after_ms:
                    # A limit of the queue (rate, max_leased) held it back.
                    try:
                        await asyncio.wait_for(self._stopping.wait(),
                                               msgs.retry_after_ms / 1000.0)
                    except TimeoutError:
                        pass
                continue
            for m in msgs:
                await self._handle(m)

    async def _call_handler(self, m: Message) -> Optional[BaseException]:
        """Runs the handler; returns what it raised, None when it returned."""
        try:
            with tracing.handling(self.queue.name, m.id, m.headers):
                result = self.handler(m)
                if inspect.isawaitable(result):
                    await result
        except Exception as e:
            return e
        return None

    async def _handle(self, m: Message) -> None:
        r = _Running(m)
        self._running[m.receipt] = r
        r.beat = asyncio.create_task(self._beat(r))
        r.task = asyncio.create_task(self._call_handler(m))
        try:
            try:
                exc = await asyncio.shield(r.task)
            except asyncio.CancelledError:
                if not r.released:
                    raise
                # Released at the shutdown deadline: cancelled with it.
                await asyncio.gather(r.task, return_exceptions=True)
                return
            await self._finish(r, exc)
        finally:
            r.beat.cancel()
            self._running.pop(m.receipt, None)

    async def _finish(self, r: _Running, exc: Optional[BaseException]) -> None:
        """Acks (exc None) or nacks the message with the exception's text,
        retrying while the server is away; the heartbeat keeps its lease
        meanwhile."""
        if r.released:
            self.log.finished_after_release(r.msg)
            return
        r.settling = True
        m = r.msg
        error = None if exc is None else error_text(exc)
        what = "ack" if error is None else "nack"
        sent_before = False

        async def call() -> Any:
            nonlocal sent_before
            try:
                if error is None:
                    return await m.ack() or True
                return await m.nack(error=error)
            except ConnectionFailed as e:
                sent_before = sent_before or e.sent
                raise

        try:
            out = await self._retry_outcome(call, f"{what} of message {m.id}")
        except SqlqError as e:
            if not self._refused(what, m, e, sent_before):
                return
            out = True
        if out is not None:
            self._settled(m, exc, out)

    async def _retry_outcome(self, fn: Callable[[], Awaitable[Any]],
                             what: str) -> Any:
        attempt = 0
        while True:
            try:
                return await fn()
            except _TRANSIENT as e:
                delay = self._retry_delay(what, e, attempt, self._deadline)
                if delay is None:
                    return None
                attempt += 1
                await asyncio.sleep(delay)

    async def _release(self, r: _Running) -> None:
        """Gives back a message whose handler did not finish by the
        shutdown deadline: a nack with delay 0, so it is ready again at
        once; the handler's task is cancelled."""
        if r.settling or r.released:
            return  # its ack or nack is under way
        r.released = True
        if r.task is not None:
            r.task.cancel()
        try:
            await r.msg.nack(error=release_text(self.name,
                                                self.shutdown_timeout),
                             delay_ms=0)
            self.released += 1
            self.log.released(r.msg)
        except SqlqError as e:
            self.log.release_failed(r.msg, e)

    async def _beat(self, r: _Running) -> None:
        """Extends the lease each third of it while the handler runs (and
        its outcome is sent); sooner again after a failed extension."""
        assert self.lease_ms is not None
        lease_s = self.lease_ms / 1000.0
        delay = lease_s / 3
        while not r.released:
            await asyncio.sleep(delay)
            try:
                await r.msg.extend(self.lease_ms)
                delay = lease_s / 3
            except (StaleReceipt, NotFound) as e:
                r.lost = True
                self.log.lease_lost(r.msg, e)
                return
            except SqlqError as e:  # the server away, or another failure
                delay = min(0.5, lease_s / 10)
                self.log.extend_failed(r.msg, e)
