"""What the service's HTTP server grants one client, and what happens to a client that takes more.

    server.max_connections (100)   connections open at once; one more is answered 503 and closed at once
    server.header_timeout_s (10)   the request line and headers must arrive within this, counted from the
                                   connection's start (or from the end of the previous answer on it)
    server.body_timeout_s (30)     the body must arrive within this once the headers have
    server.max_body_mb (1)         a larger body is answered 413 and the connection closed: a declared
                                   Content-Length is refused before a byte of the body is read, a chunked
                                   body as soon as it passes the cap

A client too slow is answered 408 and its connection closed (one that sent nothing since its last answer
is closed without a word). Every
refusal is JSON `{"error": sentence}`, as the routes' errors are; the log gets one line a minute per
kind of refusal, with the count, never a line per client.

The HTTP server is uvicorn's h11 protocol (`LimitedH11`: the deadlines, JSON for a request h11 cannot
parse) behind our own accept loop (`Acceptor`): asyncio's, out of file descriptors (EMFILE), logged a
traceback for every pending connection in a tight loop. Ours refuses a connection over the cap before any
protocol is made for it, and on EMFILE, ENFILE, ENOBUFS or ENOMEM logs one line and waits a moment
(`BACKOFF_S`) before accepting again, so the service answers again once descriptors are free.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import resource
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("witty-profiler.service")
MIB = 1024 * 1024
BACKOFF_S = 0.5  # after the accept loop ran out of descriptors or memory
NOTE_EVERY_S = 60.0  # one log line per kind of refusal this often, at most
SHORT_OF = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


@dataclass(frozen=True)
class Limits:
    max_connections: int = 100
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_body_bytes: int = MIB

    @classmethod
    def of(cls, server: Any) -> Limits:
        """From the config's [server] table (config.Server)."""
        return cls(server.max_connections, float(server.header_timeout_s), float(server.body_timeout_s),
                   int(server.max_body_mb * MIB))


def fit_to_open_files(limits: Limits) -> Limits:
    """`limits` with max_connections lowered, with one line in the log, where the process may not open that
    many files and still have a quarter of its limit (at least 32) for its own: the state directory, what
    the collectors read. Over the open files limit, connections wait in the kernel's queue, behind
    whatever slow clients are in it, instead of being refused at once."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limits
    room = max(1, soft - max(32, soft // 4))
    if limits.max_connections <= room:
        return limits
    log.warning("server.max_connections %d: the open files limit is %d (ulimit -n); serving at most %d "
                "connections at once", limits.max_connections, soft, room)
    return replace(limits, max_connections=room)


class Notes:
    """Log lines for refusals that an abusive client can cause by the thousand: the first of a kind, then at
    most one a minute, saying how many there were since."""

    def __init__(self, every_s: float = NOTE_EVERY_S) -> None:
        self.every_s = every_s
        self._last: dict[str, float] = {}
        self._since: dict[str, int] = {}

    def note(self, kind: str, message: str) -> None:
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self.every_s:
            self._since[kind] = self._since.get(kind, 0) + 1
            return
        more = self._since.pop(kind, 0)
        self._last[kind] = now
        log.warning("%s%s", message, f" ({more} more like it in the last {now - last:.0f} s)" if more else "")


NOTES = Notes()


def error_bytes(status: int, reason: str, message: str, extra: str = "") -> bytes:
    """A whole HTTP/1.1 answer with a JSON error body, that closes the connection; written to a socket or
    transport directly, where no request was parsed (or none may be answered through h11)."""
    body = json.dumps({"error": message}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n{extra}\r\n").encode() + body


def json_error(status: int, message: str) -> tuple[list[tuple[bytes, bytes]], bytes]:
    body = json.dumps({"error": message}).encode()
    return [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close")], body


class LimitedH11(H11Protocol):
    """uvicorn's h11 protocol with two deadlines: the request head within `header_timeout_s` of the moment
    the connection waits for one, the body within `body_timeout_s` of the head. uvicorn's own keep-alive
    timeout (5 s) only covers a connection that sends nothing at all; one byte every few seconds held it
    forever."""

    def __init__(self, *args: Any, limits: Limits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._phase: str | None = None
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _watch(self) -> None:
        """The deadline for what the connection waits for now: a head (h11's client state IDLE), a body
        (SEND_BODY), or nothing (the request is whole and being answered, or the connection is ending)."""
        if self.transport is None or self.transport.is_closing():
            phase = None
        else:
            state = self.conn.their_state
            phase = "head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        if phase == self._phase:
            return
        self._cancel()
        self._phase = phase
        if phase is not None:
            delay = self.limits.header_timeout_s if phase == "head" else self.limits.body_timeout_s
            self._deadline = self.loop.call_later(delay, self._too_slow, phase, delay)

    def _too_slow(self, phase: str, delay: float) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        what = "request line and headers" if phase == "head" else "request body"
        key = "header_timeout_s" if phase == "head" else "body_timeout_s"
        NOTES.note(f"slow-{phase}", f"closed a connection whose {what} did not arrive within {delay:g} s "
                                    f"(server.{key})")
        if phase == "head":
            # a 408 only to a client that began a request: an idle connection is closed without a word, as a 408
            # there could be read as the answer to a request the client is sending just then
            answer = bool(self.conn.trailing_data[0])
        else:  # the body was being read: nothing was answered yet, unless the app refused the request early
            answer = self.cycle is not None and not self.cycle.response_started
        if answer:
            self.transport.write(error_bytes(408, "Request Timeout", f"the {what} did not arrive within {delay:g} "
                                                                     f"s; the connection is closed"))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot parse (a bad request line, a header over 16 KiB, a bad Content-Length):
        400 with a JSON body, like every other error."""
        self.transport.write(error_bytes(400, "Bad Request", "not a valid HTTP/1.1 request"))
        self.transport.close()


class _BadRequests(logging.Filter):
    """uvicorn logs a line for every request h11 cannot parse: a client could fill the log with them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() == "Invalid HTTP request received.":
            NOTES.note("bad-http", "answered 400 to a request that is not valid HTTP/1.1")
            return False
        return True


def quiet_bad_requests() -> None:
    """uvicorn's line for each invalid request becomes a `Notes` one (at most one a minute, with a count)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _BadRequests) for f in logger.filters):
        logger.addFilter(_BadRequests())


BUSY = error_bytes(503, "Service Unavailable", "too many connections to the service at once (server.max_connections)"
                   "; try again shortly", "retry-after: 1\r\n")


class Acceptor:
    """The accept loop on the service's listening socket, in place of asyncio's `create_server` (uvicorn
    calls `close()` and `wait_closed()` on shutdown, as on an asyncio server)."""

    def __init__(self, sock: socket.socket, protocol_factory: Callable[[], asyncio.Protocol],
                 connections: set[Any], limits: Limits, backlog: int) -> None:
        self.sock, self.factory, self.connections, self.limits = sock, protocol_factory, connections, limits
        sock.setblocking(False)
        sock.listen(backlog)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="witty-accept")

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def wait_closed(self) -> None:
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self.sock)
            except OSError as exc:
                if exc.errno in SHORT_OF:
                    NOTES.note("accept", f"cannot accept a connection ({exc.strerror}): retrying every "
                                         f"{BACKOFF_S:g} s; server.max_connections ({self.limits.max_connections}) "
                                         f"should stay well below the open files limit (ulimit -n)")
                    await asyncio.sleep(BACKOFF_S)
                elif self.sock.fileno() == -1:
                    return  # closed under us: the service is stopping
                # else the client left before it was accepted (ECONNABORTED and the like)
                continue
            if len(self.connections) >= self.limits.max_connections:
                NOTES.note("busy", f"refused a connection: {self.limits.max_connections} are open "
                                   f"(server.max_connections)")
                refuse(conn)
                continue
            try:
                await loop.connect_accepted_socket(self.factory, conn)
            except OSError:
                conn.close()


def refuse(conn: socket.socket) -> None:
    """503 and close, with no protocol made for the connection. What the client already sent is read first:
    closing a socket with unread data resets the connection, and the client could lose the answer."""
    try:
        conn.setblocking(False)
        with contextlib.suppress(OSError):
            conn.recv(65536)
        conn.send(BUSY)
    except OSError:
        pass
    finally:
        conn.close()


class BodyLimit:
    """ASGI middleware: the request body whole before the app sees it, and never more than `max_bytes` of it.

    A Content-Length over the cap is answered 413 before a byte of the body is read (a client that sent
    `Expect: 100-continue` sends none); a body without one (chunked) is read up to the cap and answered
    413 there. The answer closes the connection, so the rest is never read. A client that leaves before
    its body is whole gets no answer and the app never runs."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Any], send: Callable[[Any], Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name.lower() == b"content-length" and value.strip().isdigit() and int(value) > self.max_bytes:
                await self._too_large(send)
                return
        chunks, total = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # http.disconnect: gone before its body was whole
                return
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.max_bytes:
                await self._too_large(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        whole: dict[str, Any] | None = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay() -> Any:
            nonlocal whole
            if whole is not None:
                message, whole = whole, None
                return message
            return await receive()
        await self.app(scope, replay, send)

    async def _too_large(self, send: Callable[[Any], Any]) -> None:
        cap = self.max_bytes / MIB
        NOTES.note("too-large", f"refused a request body over {cap:g} MiB (server.max_body_mb)")
        headers, body = json_error(413, f"the request body is over the {cap:g} MiB the service takes "
                                        f"(server.max_body_mb); the connection is closed")
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})
