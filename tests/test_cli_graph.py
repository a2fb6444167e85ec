"""`witty-profiler info` and `query` as a user runs them (subprocess), bad input, and the shipped schema."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from witty_profiler.topology import dump_graph, load_graph
from witty_profiler.topology.schema import SCHEMA_PATH, generate

MODULE = [sys.executable, "-m", "witty_profiler"]


def cli(*args: str, entry: list[str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*(entry or MODULE), *args], capture_output=True, text=True, timeout=120)


def installed() -> list[str]:
    exe = shutil.which("witty-profiler")
    if exe is None:
        pytest.skip("the witty-profiler console script is not installed (pip install -e .)")
    return [exe]


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["module", "script"])
def test_info_text(vllm_sample_path, entry):
    done = cli("info", str(vllm_sample_path), entry=installed() if entry == "script" else None)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "hosts: local" in out and "source: legacy" in out and "no capture window" in out
    assert "entities: 129" in out
    assert any(line.split() == ["npu", "8"] for line in out.splitlines())
    assert any(line.split()[:2] == ["npu", "partial"] for line in out.splitlines())


@pytest.mark.slow
def test_info_json(vllm_sample_path):
    done = cli("info", str(vllm_sample_path), "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["source"] == "legacy" and info["hosts"] == ["local"]
    assert info["entities"]["npu"] == 8 and info["entities"]["process"] == 12 and info["entities"]["thread"] == 41
    assert info["edges"]["uses_device"] == 4 and info["edges"]["sends_to"] == 44 and info["edges"]["numa_distance"] == 56
    assert info["collectors"]["host"]["status"] == "unavailable"


@pytest.mark.slow
def test_query_find_with_predicate(vllm_sample_path):
    done = cli("query", str(vllm_sample_path), "--type", "npu", "--where", "numa_node=6", "--format", "json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["kind"] == "find" and answer["total"] == 2
    assert sorted(e["attrs"]["index"] for e in answer["entities"]) == [0, 1]
    table = cli("query", str(vllm_sample_path), "--type", "npu", "--where", "numa_node=6")
    assert table.returncode == 0 and "npu:local:0000:c1:00.0" in table.stdout and "npu:local:0000:c2:00.0" in table.stdout


@pytest.mark.slow
def test_query_neighbours_shows_the_worker_device(vllm_sample_path):
    done = cli("query", str(vllm_sample_path), "--neighbours", "process:local:1895087", "--edge-type", "uses_device")
    assert done.returncode == 0, done.stderr
    assert "uses_device" in done.stdout and "npu:local:0000:c1:00.0" in done.stdout


@pytest.mark.slow
def test_query_top_subgraph_and_paths(vllm_sample_path):
    top = json.loads(cli("query", str(vllm_sample_path), "--top", "cpu_mem_colocation_pct", "--type", "process",
                         "--ascending", "-n", "4", "--format", "json").stdout)
    # 9.9 %, 10.6 %, 22.4 %: three of the four workers hold their memory away from where they run
    assert [e["id"] for e in top["entities"]] == ["process:local:1895090", "process:local:1895087",
                                                  "process:local:1895088", "process:local:6928"]
    sub = json.loads(cli("query", str(vllm_sample_path), "--around", "npu:local:0000:c1:00.0", "--depth", "2", "-n", "500",
                         "--format", "json").stdout)
    ids = {e["id"] for e in sub["entities"]}
    assert {"process:local:1895087", "numa_node:local:6"} <= ids
    paths = cli("query", str(vllm_sample_path), "--path", "thread:local:1895087:1895087", "npu:local:0000:c1:00.0")
    assert paths.returncode == 0
    assert "thread:local:1895087:1895087 -> process:local:1895087 -> npu:local:0000:c1:00.0" in paths.stdout


@pytest.mark.slow
def test_query_edges_of_a_type_and_top_among_a_condition(vllm_sample_path):
    edges = json.loads(cli("query", str(vllm_sample_path), "--edge-type", "uses_device", "-n", "100",
                           "--format", "json").stdout)
    assert edges["kind"] == "edges" and edges["total"] == len(edges["edges"]) >= 4
    assert {"uses_device|process:local:1895087|npu:local:0000:c1:00.0",
            "uses_device|process:local:1895090|npu:local:0000:82:00.0"} <= {e["id"] for e in edges["edges"]}
    assert all(e["type"] == "uses_device" for e in edges["edges"])
    # --top ranks only the entities --where keeps
    top = json.loads(cli("query", str(vllm_sample_path), "--type", "process", "--top", "cpu_mem_colocation_pct",
                         "--where", "pid>1895088", "--ascending", "--format", "json").stdout)
    assert [e["id"] for e in top["entities"]] == ["process:local:1895090", "process:local:1895089",
                                                  "process:local:3821739"]
    both = cli("query", str(vllm_sample_path), "--type", "process", "--edge-type", "uses_device")
    assert both.returncode == 2 and "--edge-type alone lists the edges" in both.stderr


def _legacy_with_negative_pid(vllm_sample_path: Path, tmp_path: Path) -> Path:
    doc = json.loads(vllm_sample_path.read_text())
    next(n for n in doc["nodes"] if n["entity_type"] == "ProcessEntity")["pid"] = -1001
    bad = tmp_path / "impossible.json"
    bad.write_text(json.dumps(doc))
    return bad


def _file(directory: Path, name: str, text: str) -> str:
    (directory / name).write_text(text)
    return str(directory / name)


BAD_INPUTS = {
    "not JSON": lambda d, s: ["info", _file(d, "x.json", "hello, world")],
    "truncated JSON": lambda d, s: ["info", _file(d, "t.json", s.read_text()[:5000])],
    "empty file": lambda d, s: ["info", _file(d, "e.json", "")],
    "a directory": lambda d, s: ["info", str(d)],
    "missing file": lambda d, s: ["query", str(d / "nope.json"), "--type", "npu"],
    "unknown schema version": lambda d, s: ["info", _file(
        d, "v.json", '{"format": "witty-graph", "schema_version": 99, "meta": {}, "entities": [], "edges": []}')],
    "impossible legacy values": lambda d, s: ["info", str(_legacy_with_negative_pid(s, d))],
    "bad --where syntax": lambda d, s: ["query", str(s), "--type", "npu", "--where", "numa_node"],
    "unknown id for --neighbours": lambda d, s: ["query", str(s), "--neighbours", "process:local:42"],
    "unknown option": lambda d, s: ["query", str(s), "--bogus"],
    # bare `witty-profiler` runs the service (the original's form); its bad inputs are these
    "a config file that is not there": lambda d, s: ["--config", str(d / "missing.json")],
    "the original's one-window form with a bad duration": lambda d, s: ["--offline", "--duration", "-1"],
    "an id given twice": lambda d, s: ["info", _file(d, "twice.json", _native(
        '{"id":"process:h:1","type":"process"},{"id":"process:h:1","type":"thread"}', ""))],
    "an edge to an entity the file lacks": lambda d, s: ["info", _file(d, "loose.json", _native(
        '{"id":"process:h:1","type":"process"}',
        '{"id":"pipe|process:h:1|process:h:2","type":"pipe","source":"process:h:1","target":"process:h:2"}'))],
    "a NaN metric": lambda d, s: ["info", _file(d, "nan.json", _native(
        '{"id":"process:h:1","type":"process","metrics":{"cpu_util_pct":NaN}}', ""))],
    "JSON nested too deeply": lambda d, s: ["info", _file(d, "deep.json", "[" * 200_000)],
}


def _native(entities: str, edges: str) -> str:
    return (f'{{"format":"witty-graph","schema_version":1,"meta":{{"hosts":["h"]}},'
            f'"entities":[{entities}],"edges":[{edges}]}}')


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_exit_2_with_one_line(vllm_sample_path, tmp_path, case):
    args = BAD_INPUTS[case](tmp_path, vllm_sample_path)
    done = cli(*args)
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and lines[0].startswith("witty-profiler")
    assert done.stdout == ""


@pytest.mark.slow
def test_bad_where_message_says_how_to_write_it(vllm_sample_path):
    done = cli("query", str(vllm_sample_path), "--where", "numa_node")
    assert done.returncode == 2 and "FIELD OP VALUE" in done.stderr


def test_shipped_schema_is_not_stale():
    assert SCHEMA_PATH.read_text(encoding="utf-8") == generate(), \
        "topology/schema/graph-v1.schema.json is stale: python -m witty_profiler.topology.schema > topology/schema/graph-v1.schema.json"


def test_written_graph_validates_against_the_schema(vllm_sample_path, tmp_path):
    out = tmp_path / "g.json"
    dump_graph(load_graph(vllm_sample_path), out)
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.validate(json.loads(out.read_text()), schema)
    broken = json.loads(out.read_text())
    broken["entities"][0]["metrics"] = {"cpu_util_pct": "high"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
