"""How a view says to get what it left out: shell commands by default, MCP tool calls for witty-mcp.

The MCP style must fit the same budgets and keep the same citations as the command-line style,
every request it names must be one the server accepts as written (slots filled in), and every
fold line's request, in either style, must list at least as many rows as the line says it left out."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest
from converter_graphs import hand_graph
from test_converters import missing_evidence

from benchmarks.synthetic import synthetic_graph
from witty_profiler.app.graphs import GraphStore
from witty_profiler.app.views import convert
from witty_profiler.cli import main as cli
from witty_profiler.converters import LAYER_VIEWS, CliHints, McpHints, count_tokens
from witty_profiler.converters.render import MIN_TOKENS
from witty_profiler.converters.views import LAYERS
from witty_profiler.mcp_server import schemas as s
from witty_profiler.mcp_server.tools import WittyTools
from witty_profiler.topology import dump_graph, load_graph

GID = "vllm-8npu-0123abcd"
SHELL = re.compile(r"witty-profiler (query|convert|info)\b")
CALL = re.compile(r"\b(query_graph|convert_layer|graph_summary)\(([^()]*)\)")


@pytest.fixture(scope="module")
def hand():
    return hand_graph()


@pytest.fixture(scope="module")
def sample(vllm_sample_path):
    return load_graph(vllm_sample_path)


@pytest.fixture(scope="module")
def synthetic():
    """The generated graph at 3,000 entities: the same shapes as at 100k (8 GPUs in an NVLink mesh,
    trainers fed by loaders through pipes), small enough to query every fold of."""
    return synthetic_graph(3000)


def test_the_cli_style_is_the_default_and_names_shell_commands(hand):
    assert convert(hand, "compute", 400).text == convert(hand, "compute", 400, hints=CliHints()).text
    assert "witty-profiler query run.json --around ID" in convert(hand, "compute", ref="run.json").text
    text = convert(hand, "compute", 800, ref="run.json").text
    assert "witty-profiler query run.json --type thread --top cpu_util_pct -n 24" in text  # all its threads
    quoted = CliHints("g.json").query(type="cgroup", where="memory_limit_bytes>0")
    assert quoted == "witty-profiler query g.json --type cgroup --where 'memory_limit_bytes>0'"


def test_an_mcp_view_of_a_truncated_table_names_query_graph_with_the_graph_id(hand):
    view = convert(hand, "compute", 800, hints=McpHints(GID))
    folds = [line for line in view.text.splitlines() if line.startswith("… +")]
    assert view.truncated and view.omitted["threads"] and len(folds) >= 2, view.text
    for line in folds:
        assert f'query_graph(graph_id="{GID}", type=' in line, line
    threads = next(line for line in folds if " more threads" in line)
    assert threads.endswith(f': query_graph(graph_id="{GID}", type="thread", top_by_metric="cpu_util_pct", limit=200)')
    assert f'`query_graph(graph_id="{GID}", around=ID)`' in convert(hand, "compute", hints=McpHints(GID)).text
    assert "witty-profiler " not in view.text and "--" not in view.text


def test_the_mcp_summary_and_all_point_at_convert_layer(sample):
    summary = convert(sample, "summary", hints=McpHints(GID)).text
    assert f'next: convert_layer(graph_id="{GID}", layer=LAYER) with LAYER one of {", ".join(LAYERS)}' in summary
    assert f'graph_summary(graph_id="{GID}")' in summary  # the collectors folded away are listed there
    everything = convert(sample, "all", 1000, hints=McpHints(GID)).text
    assert f'see each with convert_layer(graph_id="{GID}", layer=NAME)' in everything
    for text in (summary, everything):
        assert not SHELL.search(text), text


def test_folded_accelerators_are_listed_by_their_own_type(sample):
    """The real sample has NPUs and no GPU: the request must list NPUs; and as the legacy NPUs have
    no utilisation, it lists them all instead of ranking by a metric none of them has."""
    view = convert(sample, "compute", 400, hints=McpHints(GID))
    assert view.omitted.get("accelerators"), view.text
    left = view.omitted["accelerators"]
    assert f'… +{left} more accelerators: query_graph(graph_id="{GID}", type="npu", limit=200)' in view.text
    for layer in ("compute", "memory"):
        assert 'type="gpu"' not in convert(sample, layer, 400, hints=McpHints(GID)).text
        assert "--type gpu" not in convert(sample, layer, 400).text


def test_a_fold_ranks_by_a_metric_only_where_every_row_has_it(hand, sample):
    """The query tools leave out the entities without the metric they rank by."""
    assert "--type thread --top cpu_util_pct -n 24" in convert(hand, "compute", 800).text
    text = convert(sample, "compute", 1000).text
    assert "--type thread -n 41" in text and "--top cpu_util_pct" not in text


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hand", "sample"])
def test_mcp_views_fit_every_budget_and_keep_every_citation(request, name):
    from witty_profiler.diagnosis import diagnose
    graph = request.getfixturevalue(name)
    hints = McpHints("a-graph-id-as-long-as-the-store-makes-them-0123abcd")
    for layer in LAYER_VIEWS:
        for budget in (MIN_TOKENS, 400, 1000, 4000):
            view = convert(graph, layer, budget, hints=hints)
            assert view.tokens == count_tokens(view.text) <= budget, (name, layer, budget)
            assert not SHELL.search(view.text), (name, layer, budget)
    layer_of = dict(zip(range(1, 8), LAYERS))
    for budget in (1000, 4000):
        texts = {layer: convert(graph, layer, budget, hints=hints).text for layer in LAYERS}
        for finding in diagnose(graph).findings:
            layer = layer_of[finding.layer]
            assert not missing_evidence(graph, layer, texts[layer], finding), (name, budget, finding.pattern)


# -- fold lines list what they left out ------------------------------------------------------------
FOLD = re.compile(r"^(?:… \+(?P<more>\d+) more (?P<noun>.+?)|(?P<title>.*?): (?P<left>\d+) (?P<noun2>.+?) left out)"
                  r"(?: \(cited: (?P<cited>.*)\))?: (?P<requests>(?:witty-profiler |query_graph\(|graph_summary\().*)$")
SLOT = re.compile(r"^[A-Z][A-Z_]*$")


def folds(text: str) -> list[tuple[int, list[str], list[str]]]:
    """(rows left out, the cited ids it names, its requests) for every fold line of a view."""
    out = []
    for line in text.splitlines():
        m = FOLD.match(line)
        if m:
            cited = [c.split()[0] for c in (m["cited"] or "").split(", ") if c]
            out.append((int(m["more"] or m["left"]), cited, m["requests"].split(" ; ")))
    return out


def all_folds(render) -> dict[tuple[str, ...], tuple[int, list[str]]]:
    """The requests of each fold line of any view, at a few budgets, with the most rows a line
    with those requests says it left out and the cited ids such lines name."""
    found: dict[tuple[str, ...], tuple[int, list[str]]] = {}
    for layer in LAYER_VIEWS:
        for budget in (MIN_TOKENS, 400, 1000, 4000):
            for left, cited, requests in folds(render(layer, budget)):
                most, ids = found.get(tuple(requests), (0, []))
                found[tuple(requests)] = (max(most, left), ids + cited)
    assert found, "no view of this graph folds anything: the test proves nothing"
    return found


def _slot_values(graph, slot: str, edge_type: str | None, cited: list[str]) -> list[str]:
    """What a reader puts in a slot: the cited ids a line names (for ID), else every entity at an
    end of an edge of the type asked for."""
    if slot == "ID":
        return sorted(set(cited))
    return sorted({end for e in graph.edges(edge_type) for end in (e.source, e.target)})


def _cli_rows(argv: list[str]) -> list[str]:
    """The ids of the rows a `witty-profiler` command line lists (run in-process, as JSON)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        json_flag = ["--json"] if argv[0] == "info" else ["--format", "json"]
        assert cli([*argv, *json_flag]) == 0, argv
    answer = json.loads(out.getvalue())
    if argv[0] == "info":
        return [name for name, c in answer["collectors"].items() if c["status"] != "ok"]
    if answer["kind"] in ("subgraph", "edges"):  # the edges around an entity or of a type: an edge table's rows
        return [e["id"] for e in answer["edges"]]
    if answer["kind"] == "neighbours":
        return [n["edge"]["id"] for n in answer["neighbours"]]
    return [e["id"] for e in answer["entities"]]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hand", "sample", "synthetic"])
def test_every_fold_command_lists_at_least_the_rows_it_left_out(request, name, tmp_path: Path):
    """Run each command a fold line prints, as printed (slots filled in): it lists at least as many
    rows as the line says it left out, on a legacy graph without cpu_util_pct as on a live one."""
    graph = request.getfixturevalue(name)
    path = tmp_path / f"{name}.json"
    dump_graph(graph, path)
    found = all_folds(lambda layer, budget: convert(graph, layer, budget, ref=str(path)).text)
    for requests, (left, cited) in found.items():
        rows: set[str] = set()
        for req in requests:
            words = shlex.split(req)
            assert words[:1] == ["witty-profiler"] and str(path) in words, req
            slots = [k for k, w in enumerate(words) if SLOT.match(w) and words[k - 1].startswith("--")]
            if not slots:
                rows |= set(_cli_rows(words[1:]))
                continue
            (k,) = slots
            edge_type = words[words.index("--edge-type") + 1] if "--edge-type" in words else None
            rows |= {r for v in _slot_values(graph, words[k], edge_type, cited)
                     for r in _cli_rows([*words[1:k], v, *words[k + 1:]])}
        assert len(rows) >= left, (name, requests, len(rows), left)


def _call(request_text: str) -> tuple[str, dict, tuple[str, str] | None]:
    """(tool, arguments, (argument, slot) or None) of one tool call a view names."""
    m = CALL.fullmatch(request_text.split(" with ")[0])
    assert m, request_text
    call = ast.parse(f"f({m[2]})", mode="eval").body
    assert isinstance(call, ast.Call) and not call.args, request_text
    fixed = {k.arg: ast.literal_eval(k.value) for k in call.keywords if not isinstance(k.value, ast.Name)}
    slots = [(k.arg, k.value.id) for k in call.keywords if isinstance(k.value, ast.Name)]
    assert len(slots) <= 1, request_text
    return m[1], fixed, slots[0] if slots else None


def _filled(graph, slot: str) -> list[str]:
    """Values a reader would put in a slot of this graph."""
    if slot in ("LAYER", "NAME"):
        return list(LAYERS)
    kinds = {"PROCESS_ID": ("process",), "DEVICE_ID": ("gpu", "npu"), "THREAD_ID": ("thread",)}.get(
        slot, ("process", "numa_node"))
    found = [e.id for k in kinds for e in graph.entities(k)][:1]
    assert found, f"no entity to fill {slot} with"
    return found


def _requests(text: str, graph) -> list[tuple[str, dict]]:
    """Each tool call a view names, parsed as Python keyword arguments, with its slots filled in."""
    out = []
    for tool, args in CALL.findall(text):
        tool, fixed, slot = _call(f"{tool}({args})")
        if slot is None:
            out.append((tool, fixed))
        else:
            out += [(tool, {**fixed, slot[0]: value}) for value in _filled(graph, slot[1])]
    return out


def _tools(graph, name: str, tmp_path: Path) -> tuple[WittyTools, str]:
    tools = WittyTools(GraphStore(tmp_path / "state"), workdir=tmp_path)
    dump_graph(graph, tmp_path / f"{name}.json")
    return tools, tools.load_graph(s.LoadGraphInput(path=f"{name}.json"))[0].graph_id


@pytest.mark.parametrize("name", ["hand", "sample"])
def test_every_request_an_mcp_view_names_is_one_the_server_accepts(request, name, tmp_path: Path):
    graph = request.getfixturevalue(name)
    tools, gid = _tools(graph, name, tmp_path)
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


def _mcp_rows(tools: WittyTools, gid: str, tool: str, args: dict) -> int:
    """How many rows a tool call lists, over all its pages (query_graph says the total on the first)."""
    if tool == "graph_summary":
        lines = tools.graph_summary(s.GraphSummaryInput(graph_id=gid)).text.splitlines()
        return sum(1 for line in lines if line.startswith("collector ") and not line.split(": ", 1)[1].startswith("ok"))
    page = tools.query_graph(s.QueryGraphInput(graph_id=gid, **args))[0]
    return page.total_edges if page.kind in ("around", "edges") and args.get("edge_type") else page.total_entities


@pytest.mark.parametrize("name", ["hand", "sample", pytest.param("synthetic", marks=pytest.mark.slow)])
def test_every_mcp_fold_request_lists_at_least_the_rows_it_left_out(request, name, tmp_path: Path):
    """The calls witty-mcp's views print on their fold lines, made as printed: their pages add up
    to at least the rows each line says it left out."""
    graph = request.getfixturevalue(name)
    tools, gid = _tools(graph, name, tmp_path)
    found = all_folds(lambda layer, budget: tools.convert_layer(s.ConvertLayerInput(
        graph_id=gid, layer=layer, max_tokens=budget)).text)
    for requests, (left, cited) in found.items():
        rows = 0
        for req in requests:
            tool, args, slot = _call(req)
            assert args.pop("graph_id") == gid, req
            if slot is None:
                rows += _mcp_rows(tools, gid, tool, args)
            else:  # a template: the edges of each entity at an end of that edge type (they may repeat)
                values = _slot_values(graph, slot[1], args.get("edge_type"), cited)
                rows += sum(_mcp_rows(tools, gid, tool, {**args, slot[0]: v}) for v in values)
        assert rows >= left, (name, requests, rows, left)


def test_cli_hints_quote_a_path_with_spaces():
    from witty_profiler.converters.hints import CliHints
    hints = CliHints("my graphs/run 1.json")
    assert hints.query(type="thread", limit=5) == "witty-profiler query 'my graphs/run 1.json' --type thread -n 5"
    assert hints.collectors() == "witty-profiler info 'my graphs/run 1.json'"
