"""The MCP server of the service (/mcp): witty-mcp's tools, whose graphs include the service's windows.

A window is a graph whose id is its window id (list_graphs shows them, newest first, beside graphs
collected or loaded through MCP); the tools read it from the ring, and the graph resources include
them. When a window is added, clients listening for resource list changes are told
(`subscriptions/listen` with resources_list_changed), so those that show the graphs refresh them.
Clients on protocol versions before 2026-07-28 have no such stream here: they poll list_graphs.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any

import anyio.from_thread
import anyio.lowlevel
from mcp.shared.subscriptions import ResourcesListChanged

from witty_profiler.mcp_server.server import WittyServer, build_server
from witty_profiler.mcp_server.store import GraphRecord, GraphStore
from witty_profiler.mcp_server.tools import WittyTools
from witty_profiler.service.ring import Ring, WindowRecord

log = logging.getLogger("witty-profiler.service")


def graph_record(w: WindowRecord) -> GraphRecord:
    return GraphRecord(graph_id=w.window_id, origin="collect", created_at=w.kept_at or w.started_at or "",
                       source="live", hosts=w.hosts, started_at=w.started_at, duration_s=w.duration_s,
                       entity_count=w.entity_count, edge_count=w.edge_count)


class WindowStore(GraphStore):
    """The MCP graph store, with the ring's windows listed and read as graphs."""

    def __init__(self, root: Any, ring: Ring) -> None:
        self.ring = ring
        super().__init__(root)

    def _window(self, graph_id: str) -> WindowRecord | None:
        try:
            return self.ring.record(graph_id)
        except Exception:  # noqa: BLE001 - not a window: one of the store's own graphs
            return None

    def record(self, graph_id: str) -> GraphRecord:
        window = self._window(graph_id)
        return graph_record(window) if window else super().record(graph_id)

    def get(self, graph_id: str) -> Any:
        return self.ring.graph(graph_id) if self._window(graph_id) else super().get(graph_id)

    def in_memory(self, graph_id: str) -> bool:
        return False if self._window(graph_id) else super().in_memory(graph_id)

    def records(self) -> list[GraphRecord]:
        every = [graph_record(w) for w in self.ring.records()] + super().records()
        return sorted(every, key=lambda r: (r.started_at or r.created_at, r.graph_id), reverse=True)


class ServiceMcp(WittyServer):
    """WittyServer that tells its clients when a window is added, through the SDK's subscription bus:
    a client listening for resources_list_changed (`subscriptions/listen`, the 2026-07-28 protocol)
    hears of every new window."""

    loop_token: Any = None  # the event loop's, set when the app starts: windows arrive on another thread

    def windows_changed(self, record: WindowRecord) -> None:
        """From the monitor's thread; nothing to do before the app has started or after it ended."""
        if self.loop_token is None:
            return
        try:
            anyio.from_thread.run(self._subscriptions.publish, ResourcesListChanged(), token=self.loop_token)
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
    store = WindowStore(service.state, service.ring)
    thresholds = service.config.diagnosis.thresholds
    tools = WittyTools(store, thresholds_path=thresholds if isinstance(thresholds, str) else None,
                       workdir=service.state)
    server = build_server(tools, server_class=ServiceMcp)
    assert isinstance(server, ServiceMcp)
    service.monitor.listeners.append(server.windows_changed)
    return server
