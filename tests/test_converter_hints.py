"""How a view says to get what it left out: shell commands by default, MCP tool calls for witty-mcp.

The MCP style must fit the same budgets and keep the same citations as the command-line style,
and every request it names must be one the server accepts as written (slots filled in)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from converter_graphs import hand_graph
from converters import LAYER_VIEWS, CliHints, McpHints, count_tokens, render_view
from converters.render import MIN_TOKENS
from converters.views import LAYERS
from mcp_server import schemas as s
from mcp_server.store import GraphStore
from mcp_server.tools import WittyTools
from test_converters import shows, shows_edge
from topology import dump_graph, load_graph

GID = "vllm-8npu-0123abcd"
SHELL = re.compile(r"witty-profiler (query|convert|info)\b")
CALL = re.compile(r"\b(query_graph|convert_layer|graph_summary)\(([^()]*)\)")


@pytest.fixture(scope="module")
def hand():
    return hand_graph()


@pytest.fixture(scope="module")
def sample(vllm_sample_path):
    return load_graph(vllm_sample_path)


def test_the_cli_style_is_the_default_and_names_shell_commands(hand):
    assert render_view(hand, "compute", 400).text == render_view(hand, "compute", 400, hints=CliHints()).text
    assert "witty-profiler query run.json --around ID" in render_view(hand, "compute", ref="run.json").text
    text = render_view(hand, "compute", 800, ref="run.json").text
    assert "witty-profiler query run.json --type thread --top cpu_util_pct -n 200" in text
    quoted = CliHints("g.json").query(type="cgroup", where="memory_limit_bytes>0")
    assert quoted == "witty-profiler query g.json --type cgroup --where 'memory_limit_bytes>0'"


def test_an_mcp_view_of_a_truncated_table_names_query_graph_with_the_graph_id(hand):
    view = render_view(hand, "compute", 800, hints=McpHints(GID))
    folds = [line for line in view.text.splitlines() if line.startswith("… +")]
    assert view.truncated and view.omitted["threads"] and len(folds) >= 3, view.text
    for line in folds:
        assert f'query_graph(graph_id="{GID}", type=' in line, line
    threads = next(line for line in folds if " more threads" in line)
    assert threads.endswith(f': query_graph(graph_id="{GID}", type="thread", top_by_metric="cpu_util_pct", limit=200)')
    assert f'`query_graph(graph_id="{GID}", around=ID)`' in render_view(hand, "compute", hints=McpHints(GID)).text
    assert "witty-profiler " not in view.text and "--" not in view.text


def test_the_mcp_summary_and_all_point_at_convert_layer(sample):
    summary = render_view(sample, "summary", hints=McpHints(GID)).text
    assert f'next: convert_layer(graph_id="{GID}", layer=LAYER) with LAYER one of {", ".join(LAYERS)}' in summary
    assert f'graph_summary(graph_id="{GID}")' in summary  # the collectors folded away are listed there
    everything = render_view(sample, "all", 1000, hints=McpHints(GID)).text
    assert f'see each with convert_layer(graph_id="{GID}", layer=NAME)' in everything
    for text in (summary, everything):
        assert not SHELL.search(text), text


def test_folded_accelerators_are_listed_by_their_own_type(sample):
    """The real sample has NPUs and no GPU: the request must list NPUs."""
    for layer, metric in (("compute", "util_pct"), ("memory", "memory_used_pct")):
        view = render_view(sample, layer, 400, hints=McpHints(GID))
        if view.omitted.get("accelerators"):
            assert f'query_graph(graph_id="{GID}", type="npu", top_by_metric="{metric}", limit=100)' in view.text
        assert 'type="gpu"' not in view.text
        assert "--type gpu" not in render_view(sample, layer, 400).text


@pytest.mark.parametrize("name", ["hand", "sample"])
def test_mcp_views_fit_every_budget_and_keep_every_citation(request, name):
    from diagnosis import diagnose
    graph = request.getfixturevalue(name)
    hints = McpHints("a-graph-id-as-long-as-the-store-makes-them-0123abcd")
    for layer in LAYER_VIEWS:
        for budget in (MIN_TOKENS, 400, 1000, 4000):
            view = render_view(graph, layer, budget, hints=hints)
            assert view.tokens == count_tokens(view.text) <= budget, (name, layer, budget)
            assert not SHELL.search(view.text), (name, layer, budget)
    layer_of = dict(zip(range(1, 8), LAYERS))
    for budget in (1000, 4000):
        texts = {layer: render_view(graph, layer, budget, hints=hints).text for layer in LAYERS}
        for finding in diagnose(graph).findings:
            text = texts[layer_of[finding.layer]]
            assert finding.pattern in text, (name, budget, finding.pattern)
            for ev in finding.evidence:
                for eid in ev.ids:
                    assert (shows_edge(text, graph, eid) if "|" in eid else shows(text, eid)), (name, budget, eid)


def _filled(graph, slot: str) -> list[str]:
    """Values a reader would put in a slot of this graph."""
    if slot in ("LAYER", "NAME"):
        return list(LAYERS)
    kinds = {"PROCESS_ID": ("process",), "DEVICE_ID": ("gpu", "npu")}.get(slot, ("process", "numa_node"))
    found = [e.id for k in kinds for e in graph.entities(k)][:1]
    assert found, f"no entity to fill {slot} with"
    return found


def _requests(text: str, graph) -> list[tuple[str, dict]]:
    """Each tool call a view names, parsed as Python keyword arguments, with its slots filled in."""
    out = []
    for tool, args in CALL.findall(text):
        call = ast.parse(f"f({args})", mode="eval").body
        assert isinstance(call, ast.Call) and not call.args, args
        fixed = {k.arg: ast.literal_eval(k.value) for k in call.keywords if not isinstance(k.value, ast.Name)}
        slots = {k.arg: k.value.id for k in call.keywords if isinstance(k.value, ast.Name)}
        assert len(slots) <= 1, args
        for arg, slot in slots.items():
            out += [(tool, {**fixed, arg: value}) for value in _filled(graph, slot)]
        if not slots:
            out.append((tool, fixed))
    return out


@pytest.mark.parametrize("name", ["hand", "sample"])
def test_every_request_an_mcp_view_names_is_one_the_server_accepts(request, name, tmp_path: Path):
    graph = request.getfixturevalue(name)
    tools = WittyTools(GraphStore(tmp_path / "state"), workdir=tmp_path)
    dump_graph(graph, tmp_path / f"{name}.json")
    gid = tools.load_graph(s.LoadGraphInput(path=f"{name}.json"))[0].graph_id
    methods = {"query_graph": (tools.query_graph, s.QueryGraphInput),
               "convert_layer": (tools.convert_layer, s.ConvertLayerInput),
               "graph_summary": (tools.graph_summary, s.GraphSummaryInput)}
    seen: dict[tuple[str, str], None] = {}
    for layer in LAYER_VIEWS:
        for budget in (None, 400):
            max_tokens = budget or 200_000
            text = tools.convert_layer(s.ConvertLayerInput(graph_id=gid, layer=layer, max_tokens=max_tokens))[1]
            assert not SHELL.search(text), (layer, budget)
            for tool, args in _requests(text, graph):
                assert args.pop("graph_id") == gid, (layer, tool, args)
                seen[(tool, repr(sorted(args.items())))] = None
    assert any(tool == "query_graph" for tool, _ in seen) and any(tool == "convert_layer" for tool, _ in seen)
    for tool, args in seen:
        method, model = methods[tool]
        method(model(graph_id=gid, **dict(ast.literal_eval(args))))  # InputError or ValidationError fail the test


def test_cli_hints_quote_a_path_with_spaces():
    from converters.hints import CliHints
    hints = CliHints("my graphs/run 1.json")
    assert hints.query(type="thread", limit=5) == "witty-profiler query 'my graphs/run 1.json' --type thread -n 5"
    assert hints.collectors() == "witty-profiler info 'my graphs/run 1.json'"
