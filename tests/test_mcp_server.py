"""witty-mcp in memory: the tools' schemas, loading and paging through graphs, failures that leave the
server working, answers within their token budget, persistence across a restart, resources and
the prompt."""

from __future__ import annotations

import json
import os
import re
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import mcp
import pytest
from mcp.shared.exceptions import MCPError
from mcp_support import call, call_error, host_process_graph
from pydantic import BaseModel

from benchmarks.mcp_definitions import definition_tokens, tools_list
from benchmarks.synthetic import synthetic_graph
from witty_profiler.app.graphs import GraphStore
from witty_profiler.diagnosis.thresholds import validate
from witty_profiler.mcp_server import cli, schemas
from witty_profiler.mcp_server.budget import count_tokens
from witty_profiler.mcp_server.server import build_server
from witty_profiler.mcp_server.tools import WittyTools
from witty_profiler.topology import dump_graph, load_graph
from witty_profiler.topology.errors import InputError

pytestmark = pytest.mark.anyio

READ_ONLY = {"list_graphs", "graph_summary", "query_graph", "convert_layer", "match_patterns", "compare_graphs",
             "list_hosts"}
ALL_TOOLS = READ_ONLY | {"collect", "load_graph", "import_trace", "generate_report"}
SHARED_ARGUMENTS = {"graph_id", "before_id", "after_id", "max_tokens"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def server_for(state: Path, workdir: Path):
    return build_server(WittyTools(GraphStore(state), workdir=workdir))


@pytest.fixture
def graph_file(workdir: Path) -> Path:
    return host_process_graph(workdir / "host.json")


async def test_tools_have_schemas_and_annotations(state: Path, workdir: Path) -> None:
    async with mcp.Client(server_for(state, workdir)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        instructions = client.instructions or ""
    assert set(tools) == ALL_TOOLS
    # the graph ids and max_tokens, in nearly every tool, are explained once, in the instructions
    assert "graph_id comes from collect, load_graph or list_graphs" in instructions
    assert "max_tokens caps an answer" in instructions and "every cut says what was left out" in instructions
    for name, tool in tools.items():
        assert tool.description and len(tool.description) > 40, name
        assert tool.input_schema["type"] == "object" and tool.input_schema["properties"], name
        for prop, schema in tool.input_schema["properties"].items():
            assert schema.get("description") or prop in SHARED_ARGUMENTS, f"{name}.{prop} has no description"
        assert tool.output_schema and tool.output_schema["type"] == "object", name
        assert tool.annotations is not None and tool.annotations.open_world_hint is False, name
        assert tool.annotations.read_only_hint is (name in READ_ONLY), name
    assert tools["collect"].input_schema["properties"]["duration_s"]["maximum"] == 300
    assert "graph_id" in tools["query_graph"].input_schema["required"]
    assert set(tools["convert_layer"].input_schema["properties"]["layer"]["enum"]) >= {"summary", "interconnect"}
    assert "next_cursor" in tools["query_graph"].output_schema["properties"]


def schema_nodes(schema: Any) -> Iterator[dict[str, Any]]:
    """Every schema inside `schema`, itself included (property names are not schemas: a field may be
    called title)."""
    if not isinstance(schema, dict):
        return
    yield schema
    for key, value in schema.items():
        if key in ("properties", "$defs"):
            for sub in value.values():
                yield from schema_nodes(sub)
        elif key in ("items", "additionalProperties", "not"):
            yield from schema_nodes(value)
        elif key in ("anyOf", "allOf", "oneOf", "prefixItems"):
            for sub in value:
                yield from schema_nodes(sub)


def field_tree(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The names of the fields of `schema`, nested ones under theirs, through $ref, anyOf and items."""
    defs = schema.get("$defs", {}) if defs is None else defs
    if "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    for sub in schema.get("anyOf", []):
        if sub != {"type": "null"}:
            schema = sub if "$ref" not in sub else defs[sub["$ref"].rsplit("/", 1)[-1]]
    if "items" in schema:
        return field_tree(schema["items"], defs)
    return {name: field_tree(sub, defs) for name, sub in schema.get("properties", {}).items()}


def pydantic_field(model: type[BaseModel], name: str) -> dict[str, Any]:
    """A field's schema as pydantic writes it, an optional one reduced to its own type."""
    raw = model.model_json_schema()["properties"][name]
    real = [sub for sub in raw.get("anyOf", []) if sub != {"type": "null"}]
    return {**raw, **real[0]} if real else raw


async def test_published_schemas_keep_the_contract_without_the_noise(state: Path, workdir: Path) -> None:
    server = server_for(state, workdir)
    async with mcp.Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for name, tool in tools.items():
        inputs, outputs = server.inputs[name], tool.output_schema
        for node in [*schema_nodes(tool.input_schema), *schema_nodes(outputs)]:
            assert not {"title", "anyOf", "$defs", "$ref"} & set(node), (name, node)
            assert {"type": "null"} not in node.get("anyOf", []), (name, node)
        # inputs: exactly the model's fields, required ones, types, enums, bounds and defaults
        assert tool.input_schema["additionalProperties"] is False, name
        assert tool.input_schema.get("required", []) == [f for f, info in inputs.model_fields.items()
                                                         if info.is_required()], name
        assert list(tool.input_schema["properties"]) == list(inputs.model_fields), name
        for field, published in tool.input_schema["properties"].items():
            own = pydantic_field(inputs, field)
            for key in ("type", "enum", "items", "minimum", "maximum", "exclusiveMinimum", "minLength", "maxLength"):
                assert published.get(key) == own.get(key), (name, field, key)
            if own.get("default") is None:  # not given: the tool picks (null is not a value to send)
                assert "default" not in published, (name, field)
            else:
                assert published["default"] == own["default"], (name, field)
            assert published["type"] != "null" and "null" not in published["type"], (name, field)
        # outputs: every field, nested ones too, under the name the model gives it
        models = {"collect": schemas.CollectResult, "load_graph": schemas.GraphAnswer,
                  "import_trace": schemas.GraphAnswer, "list_hosts": schemas.HostList,
                  "list_graphs": schemas.GraphList, "graph_summary": schemas.GraphAnswer,
                  "query_graph": schemas.QueryPage, "convert_layer": schemas.LayerView,
                  "match_patterns": schemas.PatternMatches, "generate_report": schemas.Report,
                  "compare_graphs": schemas.Comparison}
        assert field_tree(outputs) == field_tree(models[name].model_json_schema()), name
        jsonschema.Draft202012Validator.check_schema(outputs)
    # answers leave out what they have no value for: no field is typed null
    summary = tools["graph_summary"].output_schema["properties"]
    assert summary["text"] == {"type": "string"} and summary["entity_count"]["type"] == "integer"
    listed = tools["list_graphs"].output_schema["properties"]
    assert listed["note"] == {"type": "string"} and listed["next_cursor"] == {"type": "string"}
    assert tools["match_patterns"].output_schema["properties"]["findings"] == {"type": "array",
                                                                               "items": {"type": "string"}}


@pytest.mark.slow
async def test_real_answers_validate_against_the_listed_output_schemas(state: Path, workdir: Path) -> None:
    """Each tool's answers on a training host with findings, nulls and a second page, checked against
    the outputSchema tools/list published (the client checks them too, before the test sees them)."""
    dump_graph(synthetic_graph(3000), workdir / "before.json")
    dump_graph(synthetic_graph(3000, seed=8), workdir / "after.json")
    async with mcp.Client(server_for(state, workdir)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        # one host: the same answer as load_graph's (each field may be null: a cluster's answer has none of them)
        loaded, collected = (tools[t].output_schema["properties"] for t in ("load_graph", "collect"))
        assert set(loaded) < set(collected)

        async def checked(tool: str, **arguments: Any) -> dict[str, Any]:
            answer = await call(client, tool, **arguments)
            jsonschema.validate(answer, tools[tool].output_schema, cls=jsonschema.Draft202012Validator)
            return answer

        before = (await checked("load_graph", path="before.json"))["graph_id"]
        after = (await checked("load_graph", path="after.json"))["graph_id"]
        listed = await checked("list_graphs", limit=1)
        last = await checked("list_graphs", limit=1, cursor=listed["next_cursor"])
        assert listed["next_cursor"] and "next_cursor" not in last and "note" not in last
        assert "collector process: ok" in (await checked("graph_summary", graph_id=before, max_tokens=1000))["text"]
        assert (await checked("convert_layer", graph_id=before, layer="compute", max_tokens=300))["truncated"]
        page = await checked("query_graph", graph_id=before, type="process", where=["cpu_util_pct>0"], limit=3)
        await checked("query_graph", graph_id=before, type="process", where=["cpu_util_pct>0"], limit=3,
                      cursor=page["next_cursor"])
        await checked("query_graph", graph_id=before, around=page["entities"][0]["id"], depth=2)
        await checked("query_graph", graph_id=before, top_by_metric="util_pct", ascending=True)
        await checked("query_graph", graph_id=before, edge_type="uses_device", limit=5)
        for layer in ("summary", "compute", "all"):
            await checked("convert_layer", graph_id=before, layer=layer, max_tokens=600)
        matched = await checked("match_patterns", graph_id=before)
        assert matched["findings"] and sum(matched["counts"].values()) == len(matched["findings"])
        assert "not evaluated, grouped by why:" in matched["text"]
        await checked("match_patterns", graph_id=before, layer="interconnect", max_tokens=1500)
        for fmt in ("md", "json"):
            report = await checked("generate_report", graph_id=before, format=fmt, output_path=f"report.{fmt}")
            assert report["written_to"] == str(state / "reports" / f"report.{fmt}")
        assert "written_to" not in await checked("generate_report", graph_id=before, max_tokens=300)
        typed = await checked("compare_graphs", before_id=before, after_id=after, format="json", max_tokens=100000)
        assert set(json.loads(typed["text"])) >= {"resolved", "new"}
        assert (await checked("compare_graphs", before_id=before, after_id=after, max_tokens=200))["truncated"]


async def test_tool_definitions_cost_at_most_3000_tokens() -> None:
    """The tools/list result costs every conversation its tokens (cl100k_base, counted offline, so the
    bound is exact): benchmarks/mcp_definitions.py prints the figures, BENCHMARKS.md records them. Eleven
    tools with their output schemas, every capability kept, within 3,000."""
    counted = definition_tokens(await tools_list())
    assert set(counted["tools"]) == ALL_TOOLS
    assert counted["total"] <= 3000, counted


async def test_load_summarise_and_page_through_a_graph(state: Path, workdir: Path, graph_file: Path) -> None:
    graph = load_graph(graph_file)
    processes = {e.id for e in graph.entities("process")}
    assert len(processes) > 12, "this host should run more than a dozen processes"
    async with mcp.Client(server_for(state, workdir)) as client:
        loaded = await call(client, "load_graph", path="host.json")  # relative to the working directory
        gid = loaded["graph_id"]
        assert gid.startswith("host-")
        assert loaded["entity_count"] == graph.entity_count() and loaded["edge_count"] == graph.edge_count()
        assert loaded["text"].startswith(f"graph_id {gid} (load from ") and "# witty-profiler summary" in loaded["text"]
        described = await call(client, "graph_summary", graph_id=gid)
        assert f"entities: {len(processes)} (process {len(processes)})" in described["text"]
        assert (await call(client, "load_graph", path=str(graph_file)))["graph_id"] == gid  # same file, same id

        seen: list[str] = []
        cursor, pages = None, 0
        while True:
            page = await call(client, "query_graph", graph_id=gid, type="process", limit=5, cursor=cursor)
            seen += [e["id"] for e in page["entities"]]
            pages += 1
            assert page["total_entities"] == len(processes)
            cursor = page.get("next_cursor")
            if cursor is None:
                break
            assert "cursor=next_cursor" in page["note"]
        assert pages == -(-len(processes) // 5)
        assert len(seen) == len(set(seen)) and set(seen) == processes

        top = await call(client, "query_graph", graph_id=gid, top_by_metric="rss_bytes", limit=3)
        expected = sorted(graph.entities("process"), key=lambda e: (-e.metrics["rss_bytes"], e.id))[:6]
        assert [e["id"] for e in top["entities"]] == [e.id for e in expected[:3]]
        top2 = await call(client, "query_graph", graph_id=gid, top_by_metric="rss_bytes", limit=3,
                          cursor=top["next_cursor"])
        assert [e["id"] for e in top2["entities"]] == [e.id for e in expected[3:6]]

        child = next(e for e in graph.edges("parent_of"))
        around = await call(client, "query_graph", graph_id=gid, around=child.target, depth=1)
        assert around["entities"][0]["id"] == child.target
        assert child.source in {e["id"] for e in around["entities"]}
        assert child.id in {e["id"] for e in around["edges"]}

        parents = sorted(e.id for e in graph.edges("parent_of"))
        listed_edges: list[str] = []
        cursor = None
        while True:  # a page holds 200 edges, or fewer where 200 would not fit its tokens and it says so
            edges = await call(client, "query_graph", graph_id=gid, edge_type="parent_of", limit=200, cursor=cursor)
            assert edges["kind"] == "edges" and edges["total_edges"] == len(parents) and edges["entities"] == []
            listed_edges += [e["id"] for e in edges["edges"]]
            cursor = edges.get("next_cursor")
            if cursor is None:
                break
            assert len(edges["edges"]) == 200 or "(page cut to fit max_tokens)" in edges["note"], edges["note"]
        assert listed_edges == parents

        big = await call(client, "query_graph", graph_id=gid, where=["rss_bytes>0", "name~"], limit=200)
        assert big["total_entities"] == sum(1 for e in graph.entities() if e.metrics["rss_bytes"] > 0)

        listed = await call(client, "list_graphs")
        assert [g["graph_id"] for g in listed["graphs"]] == [gid]


async def test_answers_fit_their_token_budget(state: Path, workdir: Path, graph_file: Path) -> None:
    async with mcp.Client(server_for(state, workdir)) as client:
        gid = (await call(client, "load_graph", path=str(graph_file)))["graph_id"]
        result = await client.call_tool("query_graph", {"graph_id": gid, "type": "process", "limit": 200,
                                                        "max_tokens": 600})
        page = result.structured_content
        assert count_tokens(result.content[0].text) <= 600
        assert page["next_cursor"] and "max_tokens" in page["note"]
        assert len(page["entities"]) < min(200, page["total_entities"])
        full = await client.call_tool("query_graph", {"graph_id": gid, "type": "process", "limit": 200})
        assert count_tokens(full.content[0].text) <= 8000


async def test_failures_are_one_sentence_and_the_server_goes_on(state: Path, workdir: Path,
                                                               graph_file: Path) -> None:
    (workdir / "broken.json").write_text('{"nodes": [', encoding="utf-8")
    (workdir / "other.json").write_text('{"hello": 1}', encoding="utf-8")
    async with mcp.Client(server_for(state, workdir)) as client:
        gid = (await call(client, "load_graph", path=str(graph_file)))["graph_id"]
        other_query = await call(client, "query_graph", graph_id=gid, type="process", limit=1)
        failures = {
            ("graph_summary", "unknown graph id"): {"graph_id": "no-such-graph"},
            ("load_graph", "no such file"): {"path": "missing.json"},
            ("load_graph", "not valid JSON"): {"path": "broken.json"},
            ("load_graph", "not a witty graph"): {"path": "other.json"},
            ("load_graph", "is a directory"): {"path": str(workdir)},
            ("convert_layer", "layer"): {"graph_id": gid, "layer": "gpu"},
            ("collect", "cap of 300 s"): {"duration_s": 900},
            ("query_graph", "FIELD OP VALUE"): {"graph_id": gid, "where": ["cpu is high"]},
            ("query_graph", "unknown entity type"): {"graph_id": gid, "type": "proces"},
            ("query_graph", "unknown metric"): {"graph_id": gid, "top_by_metric": "rss_byte"},
            ("query_graph", "different query"): {"graph_id": gid, "type": "thread",
                                                 "cursor": other_query["next_cursor"]},
            ("query_graph", "not one this server handed out"): {"graph_id": gid, "type": "process",
                                                                "cursor": "garbage"},
            ("query_graph", "no entity with id"): {"graph_id": gid, "around": "process:nowhere:1"},
            ("query_graph", "say what to query"): {"graph_id": gid},
            ("convert_layer", "no argument 'layr' (did you mean layer?)"): {"graph_id": gid, "layr": "memory"},
            ("query_graph", "limit"): {"graph_id": gid, "type": "process", "limit": 0},
            ("generate_report", "outside the report directory"): {"graph_id": gid, "output_path": "/tmp/r.md"},
            ("match_patterns", "unknown graph id"): {"graph_id": "nope"},
            ("match_patterns", "unknown pattern id"): {"graph_id": gid, "thresholds": "[nope.x]\nlimit = 1"},
            ("match_patterns", "not valid TOML"): {"graph_id": gid, "thresholds": "[compute.cpu_saturation\nx = 1"},
            ("match_patterns", "no such thresholds file"): {"graph_id": gid, "thresholds": "missing.toml"},
        }
        for (tool, expected), arguments in failures.items():
            message = await call_error(client, tool, **arguments)
            assert expected in message, (tool, message)
            # the next call still works
            assert (await call(client, "list_graphs"))["total"] == 1


async def test_a_restarted_server_knows_the_graphs(state: Path, workdir: Path, graph_file: Path) -> None:
    async with mcp.Client(server_for(state, workdir)) as client:
        first = await call(client, "load_graph", path=str(graph_file))
    graph_file.unlink()  # the saved copy is what the next server reads
    async with mcp.Client(server_for(state, workdir)) as client:
        listed = await call(client, "list_graphs")
        assert [g["graph_id"] for g in listed["graphs"]] == [first["graph_id"]]
        again = await call(client, "graph_summary", graph_id=first["graph_id"])
        assert again["entity_count"] == first["entity_count"]
        page = await call(client, "query_graph", graph_id=first["graph_id"], type="process", limit=1)
        assert page["total_entities"] == first["entity_count"]


async def test_state_dir_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from witty_profiler.app.graphs import state_dir
    monkeypatch.setenv("WITTY_STATE_DIR", str(tmp_path / "s"))
    assert state_dir() == tmp_path / "s"
    monkeypatch.delenv("WITTY_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "x"))
    assert state_dir() == tmp_path / "x" / "witty-profiler"


async def test_resources_and_prompt(state: Path, workdir: Path, graph_file: Path) -> None:
    async with mcp.Client(server_for(state, workdir)) as client:
        gid = (await call(client, "load_graph", path=str(graph_file)))["graph_id"]
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert templates == {"witty://graphs/{graph_id}/summary", "witty://graphs/{graph_id}/views/{layer}",
                             "witty://graphs/{graph_id}/diagnosis"}
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert listed == {"witty://patterns", "witty://thresholds", f"witty://graphs/{gid}/summary"}
        summary = (await client.read_resource(f"witty://graphs/{gid}/summary")).contents[0].text
        assert gid in summary and "process" in summary
        typed = json.loads((await client.read_resource(f"witty://graphs/{gid}/diagnosis")).contents[0].text)
        assert set(typed) == {"findings", "coverage", "summary"}  # the full typed diagnosis, on request
        with pytest.raises(MCPError, match="unknown graph id"):
            await client.read_resource("witty://graphs/nope/summary")
        with pytest.raises(MCPError, match="unknown layer"):
            await client.read_resource(f"witty://graphs/{gid}/views/gpu")

        in_force = tomllib.loads((await client.read_resource("witty://thresholds")).contents[0].text)
        assert validate(in_force) and "interconnect.device_numa_mismatch" in (
            await client.read_resource("witty://patterns")).contents[0].text

        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        assert {a.name: a.required for a in prompts["diagnose_bottlenecks"].arguments} == {"symptom": True,
                                                                                          "pids": False}
        got = await client.get_prompt("diagnose_bottlenecks", {"symptom": "tokens/s halved", "pids": "12, 34"})
        text = got.messages[0].content.text
        assert "tokens/s halved" in text and "pids=[12, 34]" in text
        steps = ["collect", "convert_layer", "match_patterns", "generate_report"]
        assert [text.index(f"`{s}`") for s in steps] == sorted(text.index(f"`{s}`") for s in steps)


def test_answers_for_reading_give_their_text_once_in_either_form(state: Path, workdir: Path,
                                                                 graph_file: Path) -> None:
    """A client hands the model the text block or the structured answer: the structured one is the same
    text with a few typed fields beside it, never the text again as JSON; data answers are compact JSON."""
    tools = WittyTools(GraphStore(state), workdir=workdir)
    out, text = tools.load_graph(schemas.LoadGraphInput(path=str(graph_file)))
    assert out.text == text and text.startswith(f"graph_id {out.graph_id} ")
    assert set(out.model_dump(exclude_none=True)) == {"graph_id", "hosts", "entity_count", "edge_count", "truncated",
                                                      "text"}
    page, data = tools.list_graphs(schemas.ListGraphsInput())
    assert json.loads(data) == page.model_dump(mode="json", exclude_none=True)


@pytest.mark.slow
async def test_views_say_how_to_get_what_they_left_out_with_the_tools(state: Path, workdir: Path,
                                                                       graph_file: Path) -> None:
    async with mcp.Client(server_for(state, workdir)) as client:
        gid = (await call(client, "load_graph", path=str(graph_file)))["graph_id"]
        result = await client.call_tool("convert_layer", {"graph_id": gid, "layer": "memory", "max_tokens": 500})
        view, text = result.structured_content, result.content[0].text
        assert view["truncated"] and view["text"] == text
        fold = next(line for line in text.splitlines() if line.startswith("… +"))
        assert fold.endswith(f'processes: query_graph(graph_id="{gid}", type="process", '
                             f'top_by_metric="rss_bytes", limit=200)'), fold
        # no shell command: a process of this host may well be called witty-profiler, so look for the commands
        assert f'`query_graph(graph_id="{gid}", around=ID)`' in text
        assert not re.search(r"witty-profiler (query|convert|info|diagnose) ", text)
        resource = (await client.read_resource(f"witty://graphs/{gid}/views/memory")).contents[0].text
        assert f'query_graph(graph_id="{gid}"' in resource and "witty-profiler query" not in resource
        overview = (await call(client, "convert_layer", graph_id=gid, layer="summary"))["text"]
        assert f'next: convert_layer(graph_id="{gid}", layer=LAYER)' in overview
        assert "witty-profiler convert" not in overview


async def test_a_row_larger_than_the_budget_is_clipped_and_says_so(state: Path, workdir: Path) -> None:
    graph = load_graph(host_process_graph(workdir / "host.json"))
    big = graph.entities("process")[0]
    big.attrs["maps"] = [f"/usr/lib/x86_64-linux-gnu/lib{i}.so" for i in range(2000)]  # a long attribute
    dump_graph(graph, workdir / "host.json")
    async with mcp.Client(server_for(state, workdir)) as client:
        gid = (await call(client, "load_graph", path="host.json"))["graph_id"]
        result = await client.call_tool("query_graph", {"graph_id": gid, "where": [f"id={big.id}"],
                                                        "max_tokens": 1000})
        page = result.structured_content
        assert count_tokens(result.content[0].text) <= 1000
        assert page["entities"][0]["attrs"]["maps"].startswith("<") and "attrs.maps" in page["note"]
        whole = await call(client, "query_graph", graph_id=gid, where=[f"id={big.id}"], max_tokens=60000)
        assert len(whole["entities"][0]["attrs"]["maps"]) == 2000


async def test_a_crash_inside_the_library_is_one_line_and_the_server_goes_on(state: Path, workdir: Path,
                                                                             caplog: pytest.LogCaptureFixture) -> None:
    tools = WittyTools(GraphStore(state), workdir=workdir)
    real, calls = tools.list_graphs, []

    def crash_once(inp):
        calls.append(inp)
        if len(calls) == 1:
            return {}["no such key"]  # a bug in the library: KeyError
        return real(inp)

    tools.list_graphs = crash_once
    async with mcp.Client(build_server(tools)) as client:
        message = await call_error(client, "list_graphs")
        assert "KeyError" in message and "log on stderr" in message and "no such key" not in message
        assert (await call(client, "list_graphs"))["total"] == 0
    assert any(r.exc_info and r.exc_info[0] is KeyError for r in caplog.records), "the traceback is logged"


class Hang:
    """Stands in for a tool method whose library call blocks until released, and counts how many of
    its calls run at once."""

    def __init__(self) -> None:
        self.release, self.lock = threading.Event(), threading.Lock()
        self.running = self.most = self.started = 0

    def __call__(self, *args: Any) -> Any:
        with self.lock:
            self.running += 1
            self.started += 1
            self.most = max(self.most, self.running)
        try:
            self.release.wait(60)
        finally:
            with self.lock:
                self.running -= 1
        raise InputError("released")


async def test_hung_calls_leave_tools_list_and_cheap_tools_answering(state: Path, workdir: Path) -> None:
    tools, hang = WittyTools(GraphStore(state), workdir=workdir), Hang()
    tools.graph_summary = hang
    try:
        async with mcp.Client(build_server(tools)) as client:
            async with anyio.create_task_group() as tg:
                for _ in range(40):
                    tg.start_soon(client.call_tool, "graph_summary", {"graph_id": "g"})
                with anyio.fail_after(10):
                    while hang.started < 8:
                        await anyio.sleep(0.01)
                await anyio.sleep(0.2)  # the other calls reach the server and wait
                with anyio.fail_after(2):
                    assert len((await client.list_tools()).tools) == len(ALL_TOOLS)
                    assert (await call(client, "list_graphs"))["total"] == 0
                    assert "graph-summary" in {t.name for t in (await client.list_resource_templates())
                                               .resource_templates}
                assert hang.most <= 8, "graph work runs on a bounded number of threads"
                hang.release.set()
    finally:
        hang.release.set()


@pytest.mark.slow
async def test_a_call_past_its_deadline_is_an_error_and_the_server_goes_on(state: Path, workdir: Path,
                                                                          graph_file: Path) -> None:
    tools, hang = WittyTools(GraphStore(state), workdir=workdir), Hang()
    tools.graph_summary = hang
    stopped = threading.Event()

    def window(inp: Any, progress: Any, stop: threading.Event) -> Any:
        if stop.wait(30):
            stopped.set()
        raise InputError("collect was cancelled")

    tools.collect = window
    try:
        async with mcp.Client(build_server(tools, tool_timeout=0.3)) as client:
            with anyio.fail_after(5):
                message = await call_error(client, "graph_summary", graph_id="g")
            assert "did not finish within 0.3 s" in message and "--tool-timeout" in message, message
            assert (await call(client, "list_graphs"))["total"] == 0
            gid = (await call(client, "load_graph", path="host.json"))["graph_id"]
            with pytest.raises(MCPError, match="did not finish within 0.3 s"):  # the graph resources too
                await client.read_resource(f"witty://graphs/{gid}/summary")
            # collect's deadline is its window and the tool timeout; past it the window is told to end
            started = anyio.current_time()
            message = await call_error(client, "collect", duration_s=0.5, interval_s=0.1)
            assert "did not finish within 0.8 s" in message, message
            assert 0.7 < anyio.current_time() - started < 5
            assert await anyio.to_thread.run_sync(stopped.wait, 5)
    finally:
        hang.release.set()


def test_cli_passes_its_limits_and_warns_about_a_non_loopback_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    served: list[tuple[Any, ...]] = []
    monkeypatch.setattr(cli, "serve_http", lambda server, host, port, level, token, extra: served.append(
        (server, host, token, extra)))
    monkeypatch.delenv(cli.TOKEN_ENV, raising=False)
    base = ["--transport", "streamable-http", "--state-dir", str(tmp_path / "state")]
    beyond = [*base, "--host", "0.0.0.0", "--tool-timeout", "7", "--report-dir", str(tmp_path / "r")]
    assert cli.main(beyond) == 2 and served == []  # no token, no server
    assert "needs a bearer token" in capsys.readouterr().err
    monkeypatch.setenv(cli.TOKEN_ENV, "short")
    assert cli.main(beyond) == 2 and "at least 16" in capsys.readouterr().err
    monkeypatch.setenv(cli.TOKEN_ENV, "a-long-enough-token-0123")
    assert cli.main([*beyond, "--allowed-host", "mcp.example"]) == 0
    server, host, token, extra = served[-1]
    assert host == "0.0.0.0" and token == "a-long-enough-token-0123" and extra == ["mcp.example"]
    assert "listening on 0.0.0.0" in caplog.text
    assert server.workers.timeout == 7 and server.witty.report_dir == tmp_path / "r"
    caplog.clear()
    monkeypatch.delenv(cli.TOKEN_ENV)
    assert cli.main(base) == 0
    server, host, token, _ = served[-1]
    assert host == "127.0.0.1" and token is None and "listening on" not in caplog.text
    assert server.workers.timeout == 120 and server.witty.report_dir == tmp_path / "state" / "reports"
    with pytest.raises(SystemExit):
        cli.main([*base, "--tool-timeout", "0"])


def test_a_lone_surrogate_in_a_graph_file_is_saved_and_listed_as_u_fffd(state: Path, workdir: Path) -> None:
    (workdir / "odd.json").write_text('{"format":"witty-graph","schema_version":1,"meta":{"hosts":["h\\udc80"],'
                                      '"source":"snapshot"},"entities":[],"edges":[]}', encoding="ascii")
    record, _ = GraphStore(state).load_file(workdir / "odd.json")
    assert record.hosts == ["h\ufffd"]
    assert [r.hosts for r in GraphStore(state).records()] == [["h\ufffd"]]  # its record was saved


def report_input(gid: str, path: str, overwrite: bool = False) -> schemas.GenerateReportInput:
    return schemas.GenerateReportInput(graph_id=gid, output_path=path, overwrite=overwrite, max_tokens=500)


async def test_reports_are_written_only_under_the_report_directory(state: Path, tmp_path: Path, graph_file: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(graph_file.parent)  # the working directory is not where reports go
    reports = state / "reports"
    async with mcp.Client(build_server(WittyTools(GraphStore(state)))) as client:
        gid = (await call(client, "load_graph", path="host.json"))["graph_id"]
        report = await call(client, "generate_report", graph_id=gid, output_path="r.md")
        assert report["written_to"] == str(reports / "r.md") and not (graph_file.parent / "r.md").exists()
        assert report["text"] in (reports / "r.md").read_text(encoding="utf-8")
        (reports / "sub").mkdir()
        inside = await call(client, "generate_report", graph_id=gid, output_path=str(reports / "sub" / "r.md"))
        assert inside["written_to"] == str(reports / "sub" / "r.md") and (reports / "sub" / "r.md").is_file()
        for path, expected in [("../r.md", "outside the report directory"),
                               (str(tmp_path / "r.md"), "outside the report directory"),
                               ("~/witty-r.md", "outside the report directory"),
                               ("missing/r.md", "does not exist"), ("sub", "is a directory"),
                               ("r\0.md", "NUL character"),
                               ("r.md", "overwrite=true")]:
            message = await call_error(client, "generate_report", graph_id=gid, output_path=path)
            assert expected in message and str(reports) in message, (path, message)
    assert not (tmp_path / "r.md").exists() and not (state / "r.md").exists()


def test_links_in_the_report_directory_cannot_redirect_a_report(state: Path, workdir: Path, tmp_path: Path,
                                                                graph_file: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.md"
    victim.write_text("keep", encoding="utf-8")
    reports = tmp_path / "reports"
    reports.mkdir()
    tools = WittyTools(GraphStore(state), workdir=workdir, report_dir=reports)
    gid = tools.load_graph(schemas.LoadGraphInput(path=str(graph_file)))[0].graph_id

    (reports / "link.md").symlink_to(victim)
    (reports / "dir").symlink_to(outside)
    for path, overwrite in [("link.md", False), ("link.md", True), ("dir/new.md", False), ("dir/victim.md", True)]:
        with pytest.raises(InputError, match="symbolic link|exists"):
            tools.generate_report(report_input(gid, path, overwrite))
    # a hard link to a file outside: overwriting replaces the name, never the linked file
    os.link(victim, reports / "hard.md")
    out, _ = tools.generate_report(report_input(gid, "hard.md", overwrite=True))
    assert out.written_to == str(reports / "hard.md") and (reports / "hard.md").read_text(encoding="utf-8") != "keep"

    # links planted while the diagnosis runs, after the path was checked
    from witty_profiler.app import reports as app_reports
    real = app_reports.report
    plant: list[Any] = []

    def planting(*args: Any, **kwargs: Any) -> Any:
        plant.pop()()
        return real(*args, **kwargs)

    monkeypatch.setattr(app_reports, "report", planting)
    (reports / "sub").mkdir()

    def swap_sub() -> None:
        (reports / "sub").rmdir()
        (reports / "sub").symlink_to(outside)

    for name, overwrite, act in [("late.md", False, lambda: (reports / "late.md").symlink_to(victim)),
                                 ("late2.md", True, lambda: (reports / "late2.md").symlink_to(victim)),
                                 ("sub/victim.md", True, swap_sub)]:
        plant.append(act)
        with pytest.raises(InputError, match="symbolic link|exists"):
            tools.generate_report(report_input(gid, name, overwrite))
    plant.append(lambda: os.link(victim, reports / "late3.md"))
    out, _ = tools.generate_report(report_input(gid, "late3.md", overwrite=True))
    assert out.written_to == str(reports / "late3.md")
    assert victim.read_text(encoding="utf-8") == "keep" and sorted(p.name for p in outside.iterdir()) == ["victim.md"]



async def test_a_message_that_cannot_be_encoded_is_sent_with_u_fffd() -> None:
    """The last guard on stdio: whatever message reaches the transport is written, lone surrogates as
    U+FFFD, and one that was valid goes through as it was."""
    from mcp.shared.message import SessionMessage
    from mcp.types import JSONRPCResponse

    from witty_profiler.mcp_server.wire import SafeWriteStream
    send, receive = anyio.create_memory_object_stream[Any](2)
    good = SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=1, result={"text": "fine \U0001F600"}))
    bad = SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=2, result={"bad\ud800key": ["x\udfff"]}))
    async with SafeWriteStream(send) as stream:
        await stream.send(good)
        await stream.send(bad)
    assert await receive.receive() is good
    written = json.loads((await receive.receive()).message.model_dump_json(by_alias=True, exclude_unset=True))
    assert written == {"jsonrpc": "2.0", "id": 2, "result": {"bad\ufffdkey": ["x\ufffd"]}}


def test_the_sdk_seams_are_where_we_use_them() -> None:
    """mcp_server/sdk.py reaches below the SDK's public API in three places; if the SDK moves one, this fails
    here, naming it, rather than the server failing at its first stdio session or task."""
    import inspect

    from mcp.server.mcpserver import MCPServer
    from mcp_types import _v2025_11_25, methods

    from witty_profiler.mcp_server.sdk import lowlevel
    inner = lowlevel(MCPServer("probe"))
    for name in ("run", "create_initialization_options", "add_request_handler", "get_capabilities"):
        assert callable(getattr(inner, name, None)), f"the low-level server has no {name}"
    handle = getattr(MCPServer, "_handle_call_tool", None)
    assert inspect.iscoroutinefunction(handle) and list(inspect.signature(handle).parameters)[1:] == ["ctx", "params"]
    assert callable(methods.serialize_server_result) and hasattr(_v2025_11_25, "CreateTaskResult")
    with pytest.raises(RuntimeError, match="_lowlevel_server"):
        lowlevel(object())
