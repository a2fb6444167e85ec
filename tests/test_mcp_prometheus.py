"""MCP `collect` of a past window from the Prometheus the server was started with (witty-mcp --prometheus):
the client names only the window; the server, its address and credentials are the operator's."""

from __future__ import annotations

import time
from pathlib import Path

import mcp
import pytest

from tests.prometheus_stack import running_stack
from witty_profiler.app.graphs import GraphStore
from witty_profiler.mcp_server import schemas as s
from witty_profiler.mcp_server.server import build_server
from witty_profiler.mcp_server.tools import WittyTools
from witty_profiler.topology.errors import InputError

WINDOW_S = 6


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with running_stack(tmp_path_factory.mktemp("prometheus"), WINDOW_S + 3) as st:  # a window of samples
        yield st


def test_a_past_window_needs_the_servers_prometheus(tmp_path: Path):
    tools = WittyTools(GraphStore(tmp_path / "state"))
    with pytest.raises(InputError, match="this server has none: start witty-mcp with --prometheus URL"):
        tools.collect(s.CollectInput(past="-1h"))
    with pytest.raises(InputError, match="drop pids"):
        WittyTools(GraphStore(tmp_path / "s2"), prometheus="http://127.0.0.1:9").collect(
            s.CollectInput(past="-1h", pids=[1]))


@pytest.mark.live
@pytest.mark.slow
def test_collect_reads_a_past_window_of_every_host(stack, tmp_path: Path):
    end = int(time.time()) - 2
    tools = WittyTools(GraphStore(tmp_path / "state"), prometheus=stack.url, prometheus_match='{job="node"}')
    result, text = tools.collect(s.CollectInput(past=f"{end - WINDOW_S}..{end}"))
    assert result.graph_id.startswith("prometheus-") and sorted(result.hosts) == sorted(stack.hosts)
    graph = tools.store.get(result.graph_id)
    assert graph.meta.source == "prometheus" and graph.meta.collectors["prometheus.node"].status == "ok"


@pytest.mark.anyio
async def test_the_window_arguments_reach_the_tool_over_mcp(tmp_path: Path):
    async with mcp.Client(build_server(WittyTools(GraphStore(tmp_path / "state")))) as client:
        result = await client.call_tool("collect", {"past": "-1h"})
    assert result.is_error and "start witty-mcp with --prometheus URL" in result.content[0].text


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
