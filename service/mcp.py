"""The MCP server of the service (/mcp): witty-mcp's tools, whose graphs include the service's windows.

A window is a graph whose id is its window id (list_graphs shows them, newest first, beside graphs
collected or loaded through MCP); the tools read it from the ring. When a window is added, every MCP
session that has called a tool is told the resource list changed (notifications/resources/list_changed),
so clients that show the graphs refresh them.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

import anyio.from_thread
import anyio.lowlevel

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
    """WittyServer that remembers its sessions, to tell them when the windows change."""

    sessions: weakref.WeakSet
    loop_token: Any = None

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if self.loop_token is None:
            self.loop_token = anyio.lowlevel.current_token()
        try:
            session = (context or self.get_context()).session
            self.sessions.add(session)
        except Exception:  # noqa: BLE001 - no session (a direct call): nobody to notify
            pass
        return await super().call_tool(name, arguments, context)

    def windows_changed(self, record: WindowRecord) -> None:
        """From the monitor's thread: notify each known session on the event loop."""
        if self.loop_token is None:
            return
        for session in list(self.sessions):
            try:
                anyio.from_thread.run(session.send_resource_list_changed, token=self.loop_token)
            except Exception:  # noqa: BLE001 - a session that ended
                self.sessions.discard(session)


def build_mcp(service: Any) -> ServiceMcp:
    store = WindowStore(service.state, service.ring)
    thresholds = service.config.diagnosis.thresholds
    tools = WittyTools(store, thresholds_path=thresholds if isinstance(thresholds, str) else None,
                       workdir=service.state)
    server = build_server(tools, server_class=ServiceMcp)
    assert isinstance(server, ServiceMcp)
    server.sessions = weakref.WeakSet()
    service.monitor.listeners.append(server.windows_changed)
    return server
