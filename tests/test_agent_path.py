"""The assistant's path (SKILL.md over the MCP tools) carries every P0/P1 fact once, in either form a client
hands the model; and the check that says so finds a fact that did not arrive."""

from __future__ import annotations

import json
from pathlib import Path

import mcp
import pytest

from benchmarks.synthetic import synthetic_graph
from witty_profiler.app.graphs import GraphStore
from witty_profiler.app.reports import report
from witty_profiler.diagnosis import diagnose
from witty_profiler.mcp_server.path import Route, check, step, walk_graph
from witty_profiler.mcp_server.server import build_server
from witty_profiler.mcp_server.tools import WittyTools
from witty_profiler.topology import dump_graph

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_the_path_brings_every_fact_and_the_check_sees_one_missing(tmp_path: Path) -> None:
    graph = synthetic_graph(300)
    dump_graph(graph, tmp_path / "g.json")
    expected = json.loads(report(diagnose(graph), graph, "json"))
    assert [f for f in expected["findings"] if f["priority"] in ("P0", "P1")]
    async with mcp.Client(build_server(WittyTools(GraphStore(tmp_path / "state"), workdir=tmp_path))) as client:
        route = await walk_graph(client, "g", {"tool": "load_graph", "path": "g.json"}, expected)
        assert route.missing == {"text": [], "structured": [], "both": []} and route.facts > 50
        # structured-first clients pay for the JSON fields and escapes only, not for a second copy
        assert route.total("text") < route.total("structured") < 1.1 * route.total("text")
        # without the layer views the evidence never arrives, and the check says which
        brief_only = Route("brief only")
        await step(client, brief_only, "load_graph", path="g.json")
        await step(client, brief_only, "match_patterns", graph_id=route_graph_id(route))
        check(brief_only, [expected])
    lost = brief_only.missing["structured"]
    assert any(": value " in fact for fact in lost) and any(": id " in fact for fact in lost), lost


def route_graph_id(route: Route) -> str:
    return route.read["text"][0].split()[1]  # "graph_id <id> (load from ...)"
