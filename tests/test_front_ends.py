"""Every front-end gives the same answer: the CLI, the MCP tools, the REST routes and the service's /mcp
all reach a graph through the application layer, so the same graph with the same arguments gives the same
diagnosis JSON and the same view text, byte for byte; and the generated reference pages are current."""

from __future__ import annotations

import json
from pathlib import Path

import mcp
import pytest
from mcp_support import call
from starlette.testclient import TestClient

from benchmarks.synthetic import synthetic_graph
from witty_profiler.app.graphs import GraphStore
from witty_profiler.cli import main as cli
from witty_profiler.converters.tokens import count_tokens
from witty_profiler.mcp_server.server import build_server
from witty_profiler.mcp_server.tools import WittyTools
from witty_profiler.reference import PAGES, page_path
from witty_profiler.service.app import Service, build_app
from witty_profiler.service.config import ServiceConfig
from witty_profiler.service.mcp import build_mcp
from witty_profiler.topology import dump_graph

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    path = tmp_path / "work" / "g.json"
    path.parent.mkdir()
    dump_graph(synthetic_graph(300), path)  # P0, P1 and P2 findings in four layers
    return path


def cli_output(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert cli(list(argv)) == 0
    return capsys.readouterr().out


@pytest.fixture
def service(tmp_path: Path, graph_file: Path) -> tuple[Service, str]:
    from witty_profiler.topology import load_graph
    config = ServiceConfig()
    config.storage.state_dir = str(tmp_path / "state")
    service = Service(config, tmp_path / "state")
    return service, service.ring.add(load_graph(graph_file), []).window_id


@pytest.mark.anyio
async def test_the_diagnosis_is_the_same_bytes_from_the_cli_mcp_and_rest(tmp_path, graph_file, service, capsys):
    expected = cli_output(capsys, "diagnose", str(graph_file), "--format", "json")
    assert json.loads(expected)["findings"]
    async with mcp.Client(build_server(WittyTools(GraphStore(tmp_path / "mcp"), workdir=graph_file.parent))) as c:
        gid = (await call(c, "load_graph", path="g.json"))["graph_id"]
        tool = (await call(c, "generate_report", graph_id=gid, format="json", max_tokens=200000))["text"]
        resource = (await c.read_resource(f"witty://graphs/{gid}/diagnosis")).contents[0].text
    svc, window = service
    rest = TestClient(build_app(svc, None), base_url="http://127.0.0.1:18090")
    served = rest.get(f"/api/v1/graphs/{window}/diagnosis")
    assert served.status_code == 200
    async with mcp.Client(build_mcp(svc)) as c:  # the service's /mcp, on the same workspace as its routes
        on_service = (await call(c, "generate_report", graph_id=window, format="json", max_tokens=200000))["text"]
    assert tool == resource == served.text == on_service == expected


@pytest.mark.anyio
async def test_a_view_is_the_same_text_wherever_it_is_asked_for(tmp_path, graph_file, service, capsys):
    import witty_profiler as wp
    for layer, budget in (("interconnect", "3000"), ("summary", "230"), ("all", "8000")):
        shown = cli_output(capsys, "convert", str(graph_file), "--layer", layer, "--max-tokens", budget)
        assert shown == wp.convert(wp.load(graph_file), layer, int(budget), ref=str(graph_file)).text
    svc, window = service
    rest = TestClient(build_app(svc, None), base_url="http://127.0.0.1:18090")
    async with mcp.Client(build_mcp(svc)) as c:
        for layer, budget in (("interconnect", 3000), ("compute", 230), ("summary", 200)):
            served = rest.get(f"/api/v1/graphs/{window}/views/{layer}", params={"max_tokens": budget})
            tool = await call(c, "convert_layer", graph_id=window, layer=layer, max_tokens=budget)
            assert served.status_code == 200 and served.text == tool["text"], layer
            # 200-259 tokens is a budget like any other, on every front-end, whichever form a client reads
            assert count_tokens(tool["text"]) <= budget
    # one diagnosis for both: the routes made it, the tools found it in the workspace's cache
    assert svc.ws.diagnoses.usage()["entries"] == 1


@pytest.mark.parametrize("name", list(PAGES))
def test_the_reference_pages_are_generated_from_the_registries(name):
    path = page_path(name, REPO)
    assert path.read_text(encoding="utf-8") == PAGES[name][1](), f"{path} is stale: witty-profiler reference {name}"
