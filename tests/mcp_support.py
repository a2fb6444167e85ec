"""Helpers for the MCP tests: a graph of this host's real processes, a server on a temporary state
directory, and a call that returns the structured answer or the error text."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import psutil

from witty_profiler.topology import Graph, Meta, dump_graph


def host_process_graph(path: Path) -> Path:
    """The processes and threads running now, with their real RSS and thread counts, saved as a
    native graph: enough rows to page through and numbers to rank."""
    host = socket.gethostname().split(".")[0] or "localhost"
    graph = Graph(Meta(hosts=[host], source="snapshot", tool_version="test"))
    for proc in psutil.process_iter(["pid", "ppid", "name", "memory_info", "num_threads"]):
        info = proc.info
        if info["memory_info"] is None:
            continue
        graph.entity_of("process", f"process:{host}:{info['pid']}",
                        attrs={"pid": info["pid"], "ppid": info["ppid"], "name": info["name"]},
                        metrics={"rss_bytes": info["memory_info"].rss, "num_threads": info["num_threads"]})
    for entity in graph.entities("process"):
        parent = f"process:{host}:{entity.attrs['ppid']}"
        if parent in graph:
            graph.edge_of("parent_of", parent, entity.id)
    dump_graph(graph, path)
    return path


async def call(client: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    """The structured answer of a successful call (and assert it is one)."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {result.content[0].text}"
    assert result.structured_content is not None
    return result.structured_content


async def call_error(client: Any, tool: str, **arguments: Any) -> str:
    """The one-line message of a failed call (and assert it failed)."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have failed: {json.dumps(result.structured_content)[:300]}"
    text = result.content[0].text
    assert "Traceback" not in text and "\n" not in text.strip(), text
    return text

