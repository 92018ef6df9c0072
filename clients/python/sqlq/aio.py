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
import collections
import contextvars
import inspect
import os
import select
import signal
import socket
import threading
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Optional

from . import tracing
from .client import (_ABORT_GRACE_S, _MAX_IDLE_S, ClaimResult, Json, Message,
                     Queue as _Queue, _ClientBase, _Sleep)
from .client import Ring, Rotation, Schedule, SendResult, Topic  # noqa: F401
from .errors import (ConnectionFailed, NotFound, SqlqError, StaleReceipt)
from .worker import (_TRANSIENT, Decision, Plan, _WorkerBase, decide,
                     lease_of, release_text, result_refused, send_decision,
                     timeout_text)

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


# Set while a request that waits (a long-poll claim) runs in this task.
_LONG_POLL: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "sqlq_long_poll", default=False)


class Client(_ClientBase):
    """A client of one `sqlq serve` for asyncio: the settings and
    operations of sqlq.Client, each operation a coroutine. Requests run
    concurrently, each on a kept-alive connection of its own from a pool.
    Close it with `await client.close()` or `async with`."""

    def _init_io(self) -> None:
        self._idle: list[_Conn] = []
        self._conns: set[_Conn] = set()
        self._polls: set[_Conn] = set()  # sent long polls, not yet answered
        self._cut: set[_Conn] = set()  # long polls _abort_polls cut short
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
                if _LONG_POLL.get():
                    self._polls.add(conn)
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
        finally:
            if conn is not None:
                self._polls.discard(conn)
                if conn in self._cut:
                    self._cut.discard(conn)
                    keep = False
        if keep:
            conn.last_used = time.monotonic()
            self._idle.append(conn)
        else:
            self._drop(conn)
        return status, rh, data

    def _abort_polls(self) -> None:
        """Cuts the long polls sent and not yet answered short, as the sync
        client's abort does: only the sending side is closed, so that the
        server ends each waiting claim at once and still answers it, with
        a message it was taking for it as the cut came. Over TLS, whose
        transport cannot close one side, the socket's sending side is shut
        under it (a FIN without TLS's close_notify, which the server takes
        as the same); the connection is closed only where that fails."""
        for c in list(self._polls):
            # Its answer may say keep-alive (sent before the server saw the
            # cut): the connection is not used again all the same.
            self._cut.add(c)
            if c.writer.can_write_eof():
                c.writer.write_eof()
                continue
            sock = c.writer.get_extra_info("socket")
            try:
                # Only once the request is all out (write_eof waits for
                # that; a shutdown would cut it).
                if sock is None or c.writer.transport.get_write_buffer_size():
                    raise OSError("cannot shut one side")
                sock.shutdown(socket.SHUT_WR)
            except (OSError, TypeError, AttributeError):
                # (An event loop's socket stand-in may refuse shutdown.)
                c.close()

    async def request(self, method: str, path: str, body: Optional[Json] = None,
                      query: Optional[Any] = None, *,
                      idempotent: Optional[bool] = None, wait_s: float = 0.0,
                      retries: Optional[int] = None, raw: bool = False) -> Json:
        """sqlq.Client.request, awaited: the same encoding, retries and
        errors."""
        _LONG_POLL.set(wait_s > 0)
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

    def _drive(self, plan: Any) -> Any:
        return drive(plan)

    @staticmethod
    async def _sleep(seconds: float) -> None:
        await asyncio.sleep(seconds)


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


async def drive(plan: Plan) -> Any:
    """sqlq.worker.drive for asyncio: each call's result is awaited when
    it is awaitable (a coroutine function's, or an operation of
    sqlq.aio's client)."""
    resume: Callable[[Any], Any] = plan.send  # or plan.throw
    got: Any = None
    while True:
        try:
            call, args = resume(got)
        except StopIteration as done:
            return done.value
        resume = plan.send
        try:
            got = call(*args)
            if inspect.isawaitable(got):
                got = await got
        except Exception as e:
            got, resume = e, plan.throw


class _Running:
    """A message in the worker's hands: waiting for a handler, running,
    or with its ack or nack pending."""

    def __init__(self, msg: Message, lease_ms: int) -> None:
        self.msg = msg
        self.lease_ms = lease_ms
        self.since = time.time()  # claimed
        self.lost = False  # the lease was lost: another worker has it
        self.released = False  # given back at the shutdown deadline
        self.settling = False  # the handler is done; its outcome is sent
        self.timed_out = False  # nacked at its timeout
        self.slot = False  # holds one of the worker's concurrency slots
        self.task: Optional[asyncio.Task] = None  # the handler's
        self.beat: Optional[asyncio.Task] = None


Handler = Callable[[Message], Any]


class Worker(_WorkerBase):
    """sqlq.Worker for asyncio: runs `await handler(message)` for each
    message of one queue or several, `concurrency` at a time, in tasks of
    the running event loop, with the same handlers by kind, outcomes,
    timeouts, leases, retries, shutdown, reports and logs. A handler may
    be a coroutine function or a plain function (which then runs on the
    loop: keep it short).

    `await worker.run()` runs until stop() (or SIGTERM/SIGINT, handled
    while run() runs in the main thread); or `await worker.start()`,
    `worker.stop()`, `await worker.join()`. At its timeout a handler's
    task is cancelled (and message.cancelled set) and the message nacked.
    On stop, running handlers get shutdown_timeout seconds; the messages
    of those still running are then released (nacked with delay 0) and
    their tasks cancelled."""

    def _init_runtime(self) -> None:
        self._stopping = asyncio.Event()
        self._stopped = asyncio.Event()
        self._running: dict[str, _Running] = {}  # every message in hand
        self._ready: collections.deque[_Running] = collections.deque()
        self._active = 0  # slots taken by handlers
        self._changed = asyncio.Event()  # a slot freed, or stopping
        self._handling: set[asyncio.Task] = set()
        self._claims: set[asyncio.Task] = set()
        self._main: Optional[asyncio.Task] = None
        self._report_stop = asyncio.Event()

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
        self._changed.set()
        # A waiting claim is cut short; its answer, with any message the
        # server was taking for it, is still read (and the message worked
        # or given back as any claimed as the worker stops). A claim not
        # answered within the grace is cancelled.
        self.client._abort_polls()
        claims = list(self._claims)
        if claims:
            asyncio.get_running_loop().call_later(
                _ABORT_GRACE_S, lambda: [t.cancel() for t in claims])

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
        reporter: Optional[asyncio.Task] = None
        self.started_at = time.time()
        try:
            for q in self.queues:
                lease = self.lease_ms
                if lease is None:
                    st = await self._with_retry(
                        q.stats, self.log.call("stats", q.name))
                    if st is None:  # stopped while the server was away
                        return
                    lease = st["options"]["lease_ms"]
                self.leases[q.name] = lease
            if self.reporting:
                reporter = asyncio.create_task(self._report_loop(),
                                               name="sqlq-report")
            loops = [asyncio.create_task(self._loop(q),
                                         name=f"sqlq-claim-{q.name}")
                     for q in self.queues]
            self.log.started(self.concurrency, list(self.leases.values()))
            started.set_result(None)
            await self._stopping.wait()
            self.log.stopping(self._active)
            self._deadline = time.monotonic() + self.shutdown_timeout
            await asyncio.wait(loops, timeout=self.shutdown_timeout)
            # Claimed as the worker stopped, no handler free: given back.
            unworked, self._ready = list(self._ready), collections.deque()
            for r in unworked:
                await self._release(r, unworked=True)
                self._forget(r)
            left = self._deadline - time.monotonic()
            if self._handling and left > 0:
                await asyncio.wait(list(self._handling), timeout=left)
            for r in list(self._running.values()):
                if r.slot:
                    await self._release(r)
            if self._handling:
                # Each handling task now sees its handler cancelled.
                await asyncio.wait(list(self._handling), timeout=5)
            for t in list(self._handling) + loops:
                t.cancel()
            await asyncio.gather(*loops, *self._handling,
                                 return_exceptions=True)
            await self._unreport(reporter)
            reporter = None
            self.log.stopped(self.acked, self.nacked, self.released,
                             self.lost)
        finally:
            if reporter is not None:  # stopped by an error
                reporter.cancel()
            if not started.done():
                started.set_result(None)
            self._stopping.set()
            self._stopped.set()
            await self.client.close()

    # The report.
    async def _report_loop(self) -> None:
        """Reports the worker at once and every report_ttl / 3 until the
        worker has stopped."""
        delay: Optional[float] = 0.0
        while delay is not None:
            try:
                await asyncio.wait_for(self._report_stop.wait(), delay)
                return
            except TimeoutError:
                pass
            try:
                body = self._report_body(list(self._running.values()))
                await self.client.report_worker(self.id, **body)
                delay = self._reported(None)
            except Exception as e:
                delay = self._reported(e)

    async def _unreport(self, reporter: Optional[asyncio.Task]) -> None:
        """At the stop: no more reports, and the last one removed."""
        self._report_stop.set()
        if reporter is None:
            return
        # A report on its way lands first (a hung one is not waited for
        # long: it runs out by itself).
        try:
            await asyncio.wait_for(reporter, min(5.0, self.client.timeout))
        except Exception:  # TimeoutError: cancelled
            pass
        if not self.reporting:
            return
        try:
            await self.client.remove_worker(self.id)
            self._unreported(None)
        except Exception as e:
            self._unreported(e)

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

    # Claim loops.
    async def _claim(self, q: Queue, n: int) -> Optional[ClaimResult]:
        """One long-poll claim, which stop() cuts short (None then)."""
        if self._stopping.is_set():
            return None
        t = asyncio.ensure_future(q.claim(
            n, wait_ms=self.wait_ms, lease_ms=self.leases[q.name],
            worker=self.id))
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

    async def _loop(self, q: Queue) -> None:
        while not self._stopping.is_set():
            while (len(self._running) >= self.concurrency
                   and not self._stopping.is_set()):
                self._changed.clear()
                await self._changed.wait()
            if self._stopping.is_set():
                return
            n = self._claim_max(self.concurrency - len(self._running))
            msgs = await self._with_retry(lambda: self._claim(q, n),
                                          self._claim_what(q))
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
                lease = lease_of(m, self.leases[q.name])
                self._dispatch(_Running(m, lease))

    def _dispatch(self, r: _Running) -> None:
        """Runs r in a task when a slot is free, else queues it for the
        next free one; its lease is extended from now on, waiting too."""
        self._running[r.msg.receipt] = r
        r.beat = asyncio.create_task(self._beat(r))
        if self._active < self.concurrency:
            self._start(r)
        else:
            self._ready.append(r)

    def _start(self, r: _Running) -> None:
        self._active += 1
        r.slot = True
        t = asyncio.create_task(self._handle(r))
        self._handling.add(t)
        t.add_done_callback(self._handling.discard)

    def _free(self, r: _Running) -> None:
        """r's handler is done (or abandoned at its timeout): its slot goes
        to the next message waiting for one."""
        if r.slot:
            r.slot = False
            self._active -= 1
            if self._ready and not self._stopping.is_set():
                self._start(self._ready.popleft())
        self._changed.set()

    def _forget(self, r: _Running) -> None:
        if self._running.get(r.msg.receipt) is r:
            del self._running[r.msg.receipt]
        self._changed.set()

    # Handlers.
    async def _call_handler(self, spec: Any, m: Message
                            ) -> tuple[Optional[BaseException], Any]:
        """Runs the handler within the middleware (use()), awaiting what
        each call returns that is awaitable; returns (what was raised,
        None when it returned; what it returned)."""
        with tracing.handling(m.queue.name, m.id, m.headers):
            return await drive(self._middleware(spec.fn, m))

    async def _handle(self, r: _Running) -> None:
        m = r.msg
        assert r.beat is not None
        try:
            spec = self.router.route(m)
            if spec is None:
                await self._finish(r, self.router.unknown(m))
                return
            timeout = self.router.timeout_of(spec, m)
            r.task = asyncio.create_task(self._call_handler(spec, m))
            done, _ = await asyncio.wait({r.task}, timeout=timeout)
            if r.released:
                # Released at the shutdown deadline: cancelled with it.
                await asyncio.gather(r.task, return_exceptions=True)
                return
            if not done:
                await self._time_out(r, timeout)
                return
            result: Any = None
            if r.task.cancelled():
                exc: Optional[BaseException] = asyncio.CancelledError()
            else:
                exc, result = r.task.result()
            await self._finish(r, decide(exc, result))
        finally:
            r.beat.cancel()
            self._forget(r)
            self._free(r)

    async def _time_out(self, r: _Running, timeout: Optional[float]) -> None:
        """r's handler ran past its timeout: its lease is no longer
        extended, its task is cancelled (and message.cancelled set), and
        the message is nacked; whatever the task does after is ignored."""
        assert r.task is not None and r.beat is not None and timeout
        r.timed_out = True
        r.beat.cancel()
        r.msg.cancelled.set()
        r.task.cancel()

        def ended(t: asyncio.Task) -> None:
            if not t.cancelled():  # it ignored the cancellation
                t.exception()
                self.log.finished_after_timeout(r.msg, timeout)
        r.task.add_done_callback(ended)
        await self._send(r, Decision("retry", timeout_text(timeout),
                                     why="timeout"))

    async def _finish(self, r: _Running, d: Decision) -> None:
        """Sends the decision's ack or nack, retrying while the server is
        away; the heartbeat keeps its lease meanwhile."""
        if r.released:
            self.log.finished_after_release(r.msg)
            return
        r.settling = True
        await self._send(r, d)

    async def _send(self, r: _Running, d: Decision) -> None:
        m = r.msg
        what = "ack" if d.action == "ack" else "nack"
        sent_before = False

        async def call() -> Any:
            nonlocal sent_before
            try:
                return await send_decision(m, d, self.result_ttl)
            except ConnectionFailed as e:
                sent_before = sent_before or e.sent
                raise

        try:
            out = await self._retry_outcome(call, f"{what} of message {m.id}")
        except SqlqError as e:
            instead = result_refused(d, e)
            if instead is not None:
                return await self._send(r, instead)
            return self._sent(m, d, what, sent_before, e)
        self._sent(m, d, what, sent_before, out)

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

    async def _release(self, r: _Running, unworked: bool = False) -> None:
        """Gives back a message whose handler did not finish by the
        shutdown deadline (or that never got a handler): a nack with delay
        0, so it is ready again at once; the handler's task is
        cancelled."""
        if r.settling or r.released or r.timed_out:
            return  # its ack or nack is under way
        r.released = True
        r.msg.cancelled.set()
        if r.beat is not None:
            r.beat.cancel()
        if r.task is not None:
            r.task.cancel()
        try:
            await r.msg.nack(error=release_text(self.name,
                                                self.shutdown_timeout),
                             delay_ms=0)
            self._count(r.msg, "released")
            self.log.released(r.msg, unworked)
        except SqlqError as e:
            self.log.release_failed(r.msg, e)

    async def _beat(self, r: _Running) -> None:
        """Extends the lease each third of it while the handler runs (and
        its outcome is sent); sooner again after a failed extension."""
        lease_s = r.lease_ms / 1000.0
        delay = lease_s / 3
        while not r.released:
            await asyncio.sleep(delay)
            try:
                await r.msg.extend(r.lease_ms)
                delay = lease_s / 3
            except (StaleReceipt, NotFound) as e:
                r.lost = True
                self.log.lease_lost(r.msg, e)
                return
            except SqlqError as e:  # the server away, or another failure
                delay = min(0.5, lease_s / 10)
                self.log.extend_failed(r.msg, e)
