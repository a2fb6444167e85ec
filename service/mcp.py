"""The MCP server of the service (/mcp): witty-mcp's tools on the service's own workspace, whose graphs
include the windows.

A window is a graph whose id is its window id (list_graphs shows them, newest first, beside graphs
collected or loaded through MCP); the tools read it through the same workspace as the REST routes, so a
window is diagnosed once for both. When a window is added, clients listening for resource list changes
are told (`subscriptions/listen` with resources_list_changed), so those that show the graphs refresh
them. Clients on protocol versions before 2026-07-28 have no such stream here: they poll list_graphs.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any

import anyio.from_thread
import anyio.lowlevel
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.subscriptions import ResourcesListChanged

from witty_profiler.mcp_server.server import WittyServer, build_server
from witty_profiler.mcp_server.tools import WittyTools
from witty_profiler.service.ring import WindowRecord

log = logging.getLogger("witty-profiler.service")


class ServiceMcp(WittyServer):
    """WittyServer that tells its clients when a window is added, through the subscription bus it was built
    with: a client listening for resources_list_changed (`subscriptions/listen`, the 2026-07-28 protocol)
    hears of every new window."""

    loop_token: Any = None  # the event loop's, set when the app starts: windows arrive on another thread
    bus: Any = None

    def windows_changed(self, record: WindowRecord) -> None:
        """From the monitor's thread; nothing to do before the app has started or after it ended."""
        if self.loop_token is None:
            return
        try:
            anyio.from_thread.run(self.bus.publish, ResourcesListChanged(), token=self.loop_token)
        except anyio.RunFinishedError:
            self.loop_token = None

    def app(self, **kwargs: Any) -> Any:
        """The streamable HTTP app, noting its event loop as it starts."""
        app = self.streamable_http_app(**kwargs)
        inner = app.router.lifespan_context

        @asynccontextmanager
        async def lifespan(a: Any) -> Any:
            self.loop_token = anyio.lowlevel.current_token()
            async with inner(a) as state:
                yield state
        app.router.lifespan_context = lifespan
        return app


def build_mcp(service: Any) -> ServiceMcp:
    bus = InMemorySubscriptionBus()
    thresholds = service.config.diagnosis.thresholds
    tools = WittyTools(workspace=service.ws, thresholds_path=thresholds if isinstance(thresholds, str) else None)
    server = build_server(tools, server_class=ServiceMcp, subscriptions=bus)
    assert isinstance(server, ServiceMcp)
    server.bus = bus
    service.monitor.listeners.append(server.windows_changed)
    return server
