"""witty-mcp driven by a client this project did not write: the MCP Inspector CLI (npx), through
benchmarks/mcp_inspector.sh, for a whole session (collect -> summary -> query -> layer view ->
match -> report, an unknown graph) and on the real legacy sample. The script runs once for the
module: every inspector call starts node and a fresh server, seconds each on a loaded host."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import VLLM_SAMPLE

from witty_profiler.diagnosis.catalog import catalog
from witty_profiler.diagnosis.models import LAYERS
from witty_profiler.mcp_server.budget import count_tokens

pytestmark = [pytest.mark.live, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "mcp_inspector.sh"
READ_ONLY = {"list_graphs", "graph_summary", "query_graph", "convert_layer", "match_patterns", "compare_graphs",
             "list_hosts"}
ALL_TOOLS = READ_ONLY | {"collect", "load_graph", "import_trace", "generate_report"}


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("npx") is None:
        pytest.skip("npx (Node.js) is not installed: the MCP Inspector CLI cannot run")
    if shutil.which("witty-mcp") is None:
        pytest.skip("witty-mcp is not installed: run `python3 -m pip install -e .`")
    out = tmp_path_factory.mktemp("inspector")
    env = {**os.environ, "OUT": str(out), "WITTY_STATE_DIR": str(out / "state")}
    # the sample's steps run only where ../shared is present; the live session runs everywhere
    sample = [str(VLLM_SAMPLE)] if VLLM_SAMPLE.exists() else []
    done = subprocess.run(["bash", str(SCRIPT), *sample], capture_output=True, text=True, env=env, timeout=420)
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [line.split()[0] for line in done.stdout.splitlines() if re.match(r"\w+ +rc=\d", line)]
    expected = ["tools_list", "collect", "graph_summary", "query_graph", "convert_layer", "match_patterns",
                "generate_report", "unknown_graph",
                *(["load_graph", "match_interconnect", "view_interconnect"] if sample else []),
                "list_graphs"]
    assert steps == expected, done.stdout
    return out


def answer(out: Path, step: str) -> dict[str, Any]:
    return json.loads((out / f"{step}.json").read_text())


def content(out: Path, step: str) -> dict[str, Any]:
    """A successful tool call's structured answer (and assert it is one)."""
    got = answer(out, step)
    assert not got.get("isError"), got
    assert got["content"][0]["type"] == "text" and got["content"][0]["text"]
    return got["structuredContent"]


def test_inspector_lists_every_tool_with_schemas_and_annotations(answers: Path) -> None:
    tools = {t["name"]: t for t in answer(answers, "tools_list")["tools"]}
    assert set(tools) == ALL_TOOLS
    for name, tool in tools.items():
        assert tool["inputSchema"]["type"] == "object" and tool["inputSchema"]["properties"], name
        assert tool["outputSchema"]["type"] == "object" and tool["outputSchema"]["properties"], name
        assert tool["annotations"]["readOnlyHint"] is (name in READ_ONLY), name
        assert tool["annotations"]["openWorldHint"] is False, name


def test_inspector_drives_a_whole_live_session(answers: Path) -> None:
    collected = content(answers, "collect")
    gid = collected["graph_id"]
    assert gid.startswith("live-") and collected["text"].startswith(f"graph_id {gid} (collect)")
    # the text block is the same text: a client that reads either form reads the summary once
    assert answer(answers, "collect")["content"][0]["text"] == collected["text"]
    assert "for 2s, every 0.5s" in collected["text"]

    summary = content(answers, "graph_summary")
    assert {k: summary[k] for k in ("graph_id", "entity_count", "edge_count", "hosts")} == \
        {k: collected[k] for k in ("graph_id", "entity_count", "edge_count", "hosts")}
    # at least the server, the inspector's node and the script's shell ran during the window
    processes = int(re.search(r"\bprocess (\d+)", summary["text"]).group(1))
    assert processes >= 3 and re.search(r"window: 2(\.\d+)? s from", summary["text"])

    top = content(answers, "query_graph")  # type=process top_by_metric=cpu_util_pct limit=5
    cpu = [e["metrics"]["cpu_util_pct"] for e in top["entities"]]
    assert top["kind"] == "top" and cpu == sorted(cpu, reverse=True)
    # five rows, unless five of this host's processes outgrow the default 8,000-token page: then the
    # page says it was cut and the rest is one cursor away
    cut = "(page cut to fit max_tokens)" in top.get("note", "")
    assert len(cpu) == min(5, top["total_entities"]) or (cut and 1 <= len(cpu) < 5), top.get("note")
    assert {e["type"] for e in top["entities"]} == {"process"}
    assert 0 < top["total_entities"] <= processes  # those with a cpu_util_pct
    assert bool(top["next_cursor"]) is (top["total_entities"] > 5)  # the rest is one cursor away

    view = content(answers, "convert_layer")
    assert view["layer"] == "compute" and view["text"].startswith("## compute (layer 1)")
    assert count_tokens(view["text"]) <= 8000

    matched = content(answers, "match_patterns")
    assert f"{len(catalog())} patterns" in matched["text"]
    assert all(f"] {f.split()[1]}: " in matched["text"] for f in matched["findings"])
    counts = {p: sum(f.startswith(p + " ") for f in matched["findings"]) for p in ("P0", "P1", "P2")}
    assert matched["counts"] == counts

    report = content(answers, "generate_report")  # format=md output_path=report.md
    target = answers / "state" / "reports" / "report.md"  # reports/ in WITTY_STATE_DIR, not the server's cwd
    written = target.read_text(encoding="utf-8")
    assert report["written_to"] == str(target) and report["text"] in written
    assert f"**P0: {counts['P0']} · P1: {counts['P1']} · P2: {counts['P2']}**" in written
    assert all(f"## Layer {n}: {title}" in written for n, _, title in LAYERS)

    unknown = answer(answers, "unknown_graph")
    text = unknown["content"][0]["text"]
    assert unknown["isError"] is True and "unknown graph id 'no-such-graph'" in text
    assert gid in text and "list_graphs" in text  # it says which ids exist and how to list them

    listed = content(answers, "list_graphs")
    assert gid in {g["graph_id"] for g in listed["graphs"]}
    assert listed["total"] == (2 if (answers / "load_graph.json").exists() else 1)


def test_inspector_loads_the_real_sample_and_sees_the_device_numa_mismatch(answers: Path,
                                                                           vllm_sample_path: Path) -> None:
    loaded = content(answers, "load_graph")
    assert "source: legacy" in loaded["text"] and "npu 8" in loaded["text"]
    matched = content(answers, "match_interconnect")
    assert all(f.split()[1].startswith("interconnect.") for f in matched["findings"])
    assert "P0 interconnect.device_numa_mismatch" in matched["findings"]
    # the four workers, each a row of the interconnect view's evidence
    view = content(answers, "view_interconnect")
    assert all(f"process:local:{pid}" in view["text"] for pid in range(1895087, 1895091))
    assert loaded["graph_id"] in {g["graph_id"] for g in content(answers, "list_graphs")["graphs"]}
