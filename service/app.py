"""The service: one process that monitors this host in rolling windows and serves them.

    witty-profiler [serve] [--config FILE]      http://127.0.0.1:18090/api/v1/status, /openapi.json, /mcp

It holds the state directory's lock (one service per directory), collects window after window
(`monitor.Monitor`) into the ring (`ring.Ring`), and serves the REST API (`routes`) and the MCP server
(streamable HTTP, /mcp) on one port, behind `mcp_server.httpguard` (Host/Origin, bearer token). It
writes only inside its state directory, which it opens once and checks as sshd checks ~/.ssh
(`statedir`: its user's, 0700, nothing in it another user's or writable by others; no symbolic link
followed inside it); anything else stops the start, one line naming the path, exit 2. SIGTERM or
SIGINT: the window in progress ends early, is stored, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from pathlib import Path
from typing import Any

import uvicorn

from witty_profiler.service.config import TOKEN_ENV, ServiceConfig, read_token
from witty_profiler.service.limits import (Acceptor, BodyLimit, LimitedH11, Limits, fit_to_open_files,
                                           quiet_bad_requests)
from witty_profiler.service.lock import InstanceLock
from witty_profiler.service.monitor import Monitor
from witty_profiler.service.ring import MIB, Ring
from witty_profiler.service.statedir import Folder
from witty_profiler.topology.errors import InputError

log = logging.getLogger("witty-profiler.service")


class Service:
    """The service's state: the ring of windows on disk, the monitor that fills it, and the one workspace
    (app.Workspace) through which the REST routes and /mcp read the windows: a window is diagnosed once,
    whichever asks first (the monitor, as the window ends)."""

    def __init__(self, config: ServiceConfig, state: Path, home: Folder | None = None) -> None:
        """`home`: the state directory as run() opened and checked it (else it is opened here)."""
        from witty_profiler.app.graphs import GraphStore
        from witty_profiler.app.workspace import Workspace
        self.config, self.state = config, state
        s = config.storage
        self.ring = Ring(home or state, s.ring_windows, int(s.ring_max_mb * MIB), s.kept_windows,
                         int(s.kept_max_mb * MIB))
        self.ws = Workspace(GraphStore(state, shelves=[self.ring]), config.diagnosis.thresholds, workdir=state)
        self.ws.thresholds()  # a bad thresholds file stops the start, in one sentence
        self.ring.on_evict.append(self.ws.forget)
        self.monitor = Monitor(config, self.ring, self.ws)
        from witty_profiler.service.routes import table
        self.api_routes = table()

    def status(self) -> dict[str, Any]:
        host, port = self.config.listen_address()
        latest = self.ring.latest()
        return {"service": "witty-profiler", "listen": f"{host}:{port}", "state_dir": str(self.state),
                "monitor": self.monitor.status(), "latest_window": latest.window_id if latest else None,
                "storage": self.ring.usage(), "evicted_windows": self.ring.evicted}

    # -- graph work (worker threads) ----------------------------------------------------------
    @property
    def pids(self) -> list[int] | None:
        return self.config.collection.pids or None

    # the routes name windows: an id that is none is a 404 saying what ids look like (Ring.record), not one of
    # the workspace's other graphs
    def diagnosis(self, window_id: str) -> Any:
        self.ring.record(window_id)
        return self.ws.diagnosis(window_id, self.pids)

    def view(self, window_id: str, layer: str, max_tokens: int | None) -> str:
        self.ring.record(window_id)
        return self.ws.view(window_id, layer, max_tokens, pids=self.pids).text

    def report(self, window_id: str, fmt: str) -> str:
        self.ring.record(window_id)
        return self.ws.report(window_id, fmt, pids=self.pids)

    def compare(self, before: str, after: str) -> Any:
        self.ring.record(before), self.ring.record(after)
        return self.ws.compare(before, after, pids=self.pids)


def build_app(service: Service, token: str | None) -> Any:
    """The REST routes and /mcp on one Starlette app, behind the HTTP guard."""
    from mcp.server.transport_security import TransportSecuritySettings

    from witty_profiler.app.access import allowed_hosts, allowed_origins
    from witty_profiler.mcp_server.httpguard import HttpGuard
    from witty_profiler.service.mcp import build_mcp
    from witty_profiler.service.routes import starlette_routes
    host, port = service.config.listen_address()
    server = service.config.server
    hosts = allowed_hosts(host, port, server.allowed_hosts)
    origins = allowed_origins(hosts, server.allowed_origins)
    mcp = build_mcp(service)
    # the SDK checks Host/Origin too; given the same lists, so it never disagrees with the guard
    app = mcp.app(transport_security=TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins), host=host)
    app.router.routes.extend(starlette_routes(service, service.api_routes))
    app.add_middleware(BodyLimit, max_bytes=Limits.of(server).max_body_bytes)
    add_json_errors(app)
    return HttpGuard(app, hosts, origins, token)


def add_json_errors(app: Any) -> None:
    """Starlette's own answers as JSON {"error": sentence}, like the routes': an unknown path (404), a method
    a route does not take (405), and an error nobody expected (500; its traceback still goes to the log)."""
    from starlette.exceptions import HTTPException
    from starlette.responses import JSONResponse

    async def http_error(request: Any, exc: Exception) -> Any:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            message = f"no route {request.url.path}; GET /openapi.json lists them"
        elif exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            message = f"{request.method} is not allowed on {request.url.path}" + (f"; use {allowed}" if allowed else "")
        else:
            message = str(exc.detail)
        return JSONResponse({"error": message}, status_code=exc.status_code, headers=exc.headers)

    async def unexpected(request: Any, exc: Exception) -> Any:
        return JSONResponse({"error": "internal error; the service's log has the details"}, status_code=500)

    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


class QuietServer(uvicorn.Server):
    """uvicorn.Server, except that (1) after a graceful shutdown on SIGTERM/SIGINT it does not raise the
    signal again (which would kill the process before the window in progress is stored): SIGTERM is how
    a service is stopped, and it exits 0; (2) its housekeeping wakes once a second, not ten times: on an
    idle service those wake-ups were most of its CPU time (BENCHMARKS.md); (3) it accepts connections in
    its own loop and serves them with deadlines (`limits`: the connection cap, slow clients, EMFILE)."""

    def __init__(self, config: uvicorn.Config, limits: Limits) -> None:
        super().__init__(config)
        self.limits = limits
        quiet_bad_requests()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's startup for the sockets given, with `limits.Acceptor` on each in place of asyncio's
        create_server, and `limits.LimitedH11` for each connection."""
        from uvicorn.config import STARTUP_FAILURE
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            sys.exit(STARTUP_FAILURE)
        config, state, limits = self.config, self.server_state, self.limits

        def create_protocol() -> asyncio.Protocol:
            return LimitedH11(config=config, server_state=state, app_state=self.lifespan.state, limits=limits)
        self.servers = [Acceptor(sock, create_protocol, state.connections, limits, config.backlog)
                        for sock in sockets or []]  # type: ignore[misc]
        for acceptor in self.servers:
            acceptor.start()  # type: ignore[attr-defined]
        self.started = True

    async def main_loop(self) -> None:
        counter = 0  # a multiple of 10: uvicorn refreshes its Date header on those
        while not await self.on_tick(counter):
            await asyncio.sleep(1.0)
            counter = (counter + 10) % 864000

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        self._captured_signals.clear()


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything else starts: a busy port is one sentence, exit 2."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another server.listen") \
            from None
    sock.set_inheritable(False)
    return sock


def run(config: ServiceConfig, running: bool = True) -> int:
    """Serve until SIGTERM/SIGINT; the exit code."""
    from witty_profiler.app.access import check_bind
    host, port = config.listen_address()
    token = read_token(config)
    check_bind(host, token, f"server.token_file or ${TOKEN_ENV}")
    state = config.state_path()
    home = Folder.open_root(state)  # created 0700, or refused: another user's, or writable by others
    lock = InstanceLock(home)
    lock.acquire()
    try:
        sock = bind(host, port)
        service = Service(config, state, home)
        app = build_app(service, token)
        service.monitor.launch(running)
        try:
            log.warning("witty-profiler service on http://%s:%d (state %s)", f"[{host}]" if ":" in host else host,
                        port, state)
            # uvicorn handles SIGTERM/SIGINT: it stops serving; then the window in progress ends and is stored
            QuietServer(uvicorn.Config(app, http="h11", ws="none", log_level="warning", access_log=False,
                                       lifespan="on", timeout_graceful_shutdown=5),
                        fit_to_open_files(Limits.of(config.server))).run(sockets=[sock])
        finally:
            service.monitor.close()
    finally:
        lock.release()
    return 0
