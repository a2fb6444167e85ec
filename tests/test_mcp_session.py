"""Whole sessions through witty-mcp: a live capture of a real busy process with progress
notifications, then summary, a layer view, the pattern match and the report; the real legacy
sample; and the installed `witty-mcp` over real stdio, where one server process serves each
session (tool schemas, the live session with its progress, the sample and the failures)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import jsonschema
import mcp
import pytest
from mcp import StdioServerParameters
from mcp_support import call, call_error, host_process_graph

from witty_profiler.app.graphs import GraphStore
from witty_profiler.diagnosis.catalog import catalog
from witty_profiler.diagnosis.models import LAYERS
from witty_profiler.mcp_server.budget import count_tokens
from witty_profiler.mcp_server.server import build_server
from witty_profiler.mcp_server.tools import WittyTools

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def busy_process():
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.live
async def test_live_session_collect_summary_view_match_report(tmp_path: Path, busy_process) -> None:
    server = build_server(WittyTools(GraphStore(tmp_path / "state"), workdir=tmp_path))
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with mcp.Client(server) as client:
        result = await client.call_tool("collect", {"duration_s": 2, "interval_s": 0.5, "pids": [busy_process.pid]},
                                        progress_callback=on_progress)
        assert not result.is_error, result.content[0].text
        collected = result.structured_content
        gid = collected["graph_id"]
        assert gid.startswith("live-") and collected["text"].startswith(f"graph_id {gid} (collect)")
        assert "# witty-profiler summary" in collected["text"] and "collectors: " in collected["text"]
        # progress arrived during the window, in order, against the window's length
        assert len(progress) >= 3, progress
        assert [p[0] for p in progress] == sorted(p[0] for p in progress)
        assert all(p[1] == 2 for p in progress) and progress[-1][0] >= 1.5

        busy = await call(client, "query_graph", graph_id=gid, type="process", where=[f"pid={busy_process.pid}"])
        assert busy["total_entities"] == 1
        # a busy loop; the host is shared with other work, so only "clearly running", not "one full core"
        assert busy["entities"][0]["metrics"]["cpu_util_pct"] > 5

        summary = await call(client, "graph_summary", graph_id=gid)
        assert summary["entity_count"] == collected["entity_count"] and "collector process: " in summary["text"]
        view = await call(client, "convert_layer", graph_id=gid, layer="compute")
        assert view["layer"] == "compute" and view["text"].strip() and count_tokens(view["text"]) <= 8000

        matched = await call(client, "match_patterns", graph_id=gid)
        assert f"{len(catalog())} patterns" in matched["text"], "every pattern ends as a finding or a coverage row"
        assert all(f.split()[0] in ("P0", "P1", "P2") for f in matched["findings"])

        report = await call(client, "generate_report", graph_id=gid, format="md", output_path="report.md")
        target = tmp_path / "state" / "reports" / "report.md"  # the report directory: reports/ in the state's
        written = target.read_text(encoding="utf-8")
        assert report["written_to"] == str(target) and report["text"] in written
        message = await call_error(client, "generate_report", graph_id=gid, output_path="report.md")
        assert "overwrite=true" in message
        again = await call(client, "generate_report", graph_id=gid, format="json", output_path="report.md",
                           overwrite=True)
        assert again["format"] == "json" and target.read_text(encoding="utf-8") != written


@pytest.mark.slow
async def test_real_legacy_sample_shows_the_device_numa_mismatch(tmp_path: Path, vllm_sample_path: Path) -> None:
    server = build_server(WittyTools(GraphStore(tmp_path / "state"), workdir=tmp_path))
    async with mcp.Client(server) as client:
        loaded = await call(client, "load_graph", path=str(vllm_sample_path))
        assert "source: legacy" in loaded["text"] and "npu 8" in loaded["text"]
        described = await call(client, "graph_summary", graph_id=loaded["graph_id"])
        assert "collector gpu: unavailable - no GPU in the legacy file" in described["text"], \
            "the legacy format cannot measure everything, and the summary says so"
        matched = await call(client, "match_patterns", graph_id=loaded["graph_id"], layer="interconnect")
        assert "P0 interconnect.device_numa_mismatch" in matched["findings"], matched["findings"]
        view = await call(client, "convert_layer", graph_id=loaded["graph_id"], layer="interconnect")
        assert "npu:local:0000:c1:00.0" in view["text"] and "process:local:1895087" in view["text"]

        same = await call(client, "compare_graphs", before_id=loaded["graph_id"], after_id=loaded["graph_id"],
                          format="json")
        persisting = {c["pattern"] for c in json.loads(same["text"])["persisting"]}
        assert "interconnect.device_numa_mismatch" in persisting and not json.loads(same["text"])["resolved"]
        assert "Persisting" in (await call(client, "compare_graphs", before_id=loaded["graph_id"],
                                           after_id=loaded["graph_id"]))["text"]
        assert "unknown graph id" in await call_error(client, "compare_graphs", before_id=loaded["graph_id"],
                                                      after_id="later")


def _witty_mcp() -> str:
    exe = shutil.which("witty-mcp")
    if exe is None:
        pytest.skip("witty-mcp is not installed: run `python3 -m pip install -e .`")
    return exe


READ_ONLY = {"list_graphs", "graph_summary", "query_graph", "convert_layer", "match_patterns", "compare_graphs",
             "list_hosts"}
ALL_TOOLS = READ_ONLY | {"collect", "load_graph", "import_trace", "generate_report"}
# the vLLM sample's tensor-parallel workers, the NPU each drives and that NPU's NUMA node
WORKER_NPUS = {1895087: ("0000:c1:00.0", 6), 1895088: ("0000:c2:00.0", 6),
               1895089: ("0000:81:00.0", 4), 1895090: ("0000:82:00.0", 4)}


@pytest.mark.slow
@pytest.mark.live
async def test_stdio_whole_session_with_schemas_progress_and_values(tmp_path: Path, busy_process) -> None:
    """One installed server over real stdio serves the whole session: every answer is checked against
    the output schema the server published, and against the numbers it should carry."""
    exe = _witty_mcp()
    host_process_graph(tmp_path / "host.json")
    pid = busy_process.pid
    # --state-dir must win over the environment: an assistant's config names the folder it wants
    params = StdioServerParameters(command=exe, args=["--state-dir", str(tmp_path / "state")], cwd=str(tmp_path),
                                   env={**os.environ, "WITTY_STATE_DIR": str(tmp_path / "env-state")})
    progress: list[tuple[float, float, float | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((time.monotonic(), done, total))

    async with mcp.Client(params) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == ALL_TOOLS
        for name, tool in tools.items():
            assert tool.input_schema["type"] == "object" and tool.input_schema["properties"], name
            assert tool.output_schema and tool.output_schema["type"] == "object" and \
                tool.output_schema["properties"], name
            assert tool.annotations is not None, name
            assert tool.annotations.read_only_hint is (name in READ_ONLY), name
            assert tool.annotations.open_world_hint is False, name
        assert tools["generate_report"].annotations.destructive_hint is True  # it can replace a file

        async def checked(tool: str, **arguments):
            answer = await call(client, tool, **arguments)
            jsonschema.validate(answer, tools[tool].output_schema)
            return answer

        started = time.monotonic()
        result = await client.call_tool("collect", {"duration_s": 2, "interval_s": 0.5, "pids": [pid]},
                                        progress_callback=on_progress)
        returned = time.monotonic()
        assert not result.is_error, result.content[0].text
        collected = result.structured_content
        jsonschema.validate(collected, tools["collect"].output_schema)
        gid = collected["graph_id"]
        assert gid.startswith("live-") and collected["text"].startswith(f"graph_id {gid} (collect)")
        assert len(collected["hosts"]) == 1 and count_tokens(collected["text"]) < 700
        described = (await checked("graph_summary", graph_id=gid))["text"]
        states = dict(re.findall(r"^collector (\S+): (\w+)", described, re.M))
        assert states["process"] in ("ok", "partial") and states["cpu"] == "ok", states
        assert all(" - " in line for line in described.splitlines()
                   if line.startswith("collector ") and ": ok" not in line)
        assert re.search(r"window: 2(\.\d+)? s from", described), described
        # notifications came while the window ran, spread over it, not in one batch with the answer
        assert len(progress) >= 3, progress
        assert [p[1] for p in progress] == sorted(p[1] for p in progress)
        assert all(p[2] == 2 for p in progress) and progress[-1][1] >= 1.5
        assert started < progress[0][0] and progress[-1][0] <= returned
        assert progress[-1][0] - progress[0][0] >= 0.75, [p[0] - started for p in progress]

        host = collected["hosts"][0]
        busy = await checked("query_graph", graph_id=gid, type="process", where=[f"pid={pid}"])
        assert busy["total_entities"] == 1 and busy["entities"][0]["id"] == f"process:{host}:{pid}"
        assert busy["entities"][0]["metrics"]["cpu_util_pct"] > 5  # a busy loop, on a shared host

        summary = await checked("graph_summary", graph_id=gid)
        assert {k: summary[k] for k in ("entity_count", "edge_count", "hosts")} == \
            {k: collected[k] for k in ("entity_count", "edge_count", "hosts")}
        assert "for 2s, every 0.5s" in collected["text"]
        assert f"{collected['entity_count']} entities" in collected["text"]

        view = await checked("convert_layer", graph_id=gid, layer="compute")
        assert view["layer"] == "compute" and count_tokens(view["text"]) <= 8000
        row = re.search(rf"^process:{re.escape(host)}:{pid}\s.*?([\d.]+)%", view["text"], re.M)
        assert row and float(row.group(1)) > 5, view["text"][:2000]  # the busy process, with its cpu%

        matched = await checked("match_patterns", graph_id=gid, pids=[pid])
        found = [f.split()[1] for f in matched["findings"]]
        counts = {p: sum(f.startswith(p + " ") for f in matched["findings"]) for p in ("P0", "P1", "P2")}
        assert matched["counts"] == counts and f"{len(catalog())} patterns" in matched["text"]
        assert all(f"] {p}: " in matched["text"] for p in found)

        report = await checked("generate_report", graph_id=gid, format="md", pids=[pid], output_path="report.md")
        written = (tmp_path / "state" / "reports" / "report.md").read_text(encoding="utf-8")  # under --state-dir
        assert report["written_to"] == str(tmp_path / "state" / "reports" / "report.md") and report["text"] in written
        assert f"- Scope: pid {pid} and descendants" in written
        assert f"**P0: {counts['P0']} · P1: {counts['P1']} · P2: {counts['P2']}**" in written
        assert f"(of {len(catalog())})" in written
        assert all(f"## Layer {n}: {title}" in written for n, _, title in LAYERS)
        as_json = await checked("generate_report", graph_id=gid, format="json", pids=[pid])
        assert [f["pattern"] for f in json.loads(as_json["text"])["findings"]] == found

        # a file relative to the server's working directory, paged through with the cursor
        loaded = await checked("load_graph", path="host.json")
        first = await checked("query_graph", graph_id=loaded["graph_id"], type="process", limit=2)
        second = await checked("query_graph", graph_id=loaded["graph_id"], type="process", limit=2,
                               cursor=first["next_cursor"])
        assert first["total_entities"] == second["total_entities"] == loaded["entity_count"]
        assert second["offset"] == 2
        assert not {e["id"] for e in first["entities"]} & {e["id"] for e in second["entities"]}
        listed = await checked("list_graphs")
        assert {g["graph_id"] for g in listed["graphs"]} == {gid, loaded["graph_id"]}
    assert all((tmp_path / "state" / "graphs" / f"{g}.json").is_file() for g in (gid, loaded["graph_id"]))
    assert not (tmp_path / "env-state").exists()


@pytest.mark.slow
async def test_stdio_real_sample_mismatch_and_failures_that_leave_the_server_working(
        tmp_path: Path, vllm_sample_path: Path) -> None:
    exe = _witty_mcp()
    params = StdioServerParameters(command=exe, cwd=str(tmp_path),
                                   env={**os.environ, "WITTY_STATE_DIR": str(tmp_path / "state")})
    async with mcp.Client(params) as client:
        loaded = await call(client, "load_graph", path=str(vllm_sample_path))
        gid = loaded["graph_id"]
        assert "source: legacy" in loaded["text"] and "npu 8" in loaded["text"]
        matched = await call(client, "match_patterns", graph_id=gid, layer="interconnect")
        assert all(f.split()[1].startswith("interconnect.") for f in matched["findings"])
        assert "P0 interconnect.device_numa_mismatch" in matched["findings"]
        # its evidence is in the layer's view: each worker's row with its NPU and that NPU's node
        view = (await call(client, "convert_layer", graph_id=gid, layer="interconnect", max_tokens=3000))["text"]
        for pid, (npu, node) in WORKER_NPUS.items():
            row = next(line for line in view.splitlines() if line.startswith(f"process:local:{pid} "))
            assert f"npu:local:{npu}" in row and re.search(rf"\b{node}\b", row), row
        typed = json.loads((await client.read_resource(f"witty://graphs/{gid}/diagnosis")).contents[0].text)
        (mismatch,) = [f for f in typed["findings"] if f["pattern"] == "interconnect.device_numa_mismatch"]
        assert mismatch["priority"] == "P0" and mismatch["severity"] == "critical"
        subjects = set(mismatch["subjects"])
        assert {s for s in subjects if s.startswith("process:")} == {f"process:local:{p}" for p in WORKER_NPUS}
        ids = {i for ev in mismatch["evidence"] for i in ev["ids"]}
        for pid, (npu, node) in WORKER_NPUS.items():
            assert f"uses_device|process:local:{pid}|npu:local:{npu}" in ids, pid
            assert f"local_to|npu:local:{npu}|numa_node:local:{node}" in ids, pid

        # each failure is one actionable sentence, and the server answers the next call
        failures = [("graph_summary", {"graph_id": "missing"}, "list_graphs"),
                    ("convert_layer", {"graph_id": gid, "layer": "gpu"}, "interconnect"),
                    ("collect", {"duration_s": 301}, "cap of 300 s"),
                    ("load_graph", {"path": "missing.json"}, "no such file")]
        for tool, arguments, expected in failures:
            assert expected in await call_error(client, tool, **arguments), tool
            assert (await call(client, "graph_summary", graph_id=gid))["entity_count"] == loaded["entity_count"]
    assert (tmp_path / "state" / "graphs" / f"{gid}.json").is_file()  # where WITTY_STATE_DIR says


@pytest.mark.slow
def test_witty_mcp_bad_option_is_one_line_and_exit_2(tmp_path: Path) -> None:
    exe = _witty_mcp()
    done = subprocess.run([exe, "--thresholds", str(tmp_path / "none.toml")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "no such file" in done.stderr


@pytest.mark.slow
async def test_streamable_http_on_loopback_logs_only_to_stderr(tmp_path: Path) -> None:
    exe = _witty_mcp()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([exe, "--transport", "streamable-http", "--port", str(port), "--log-level", "INFO"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "WITTY_STATE_DIR": str(tmp_path / "state")})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
                await anyio.sleep(0.2)
        async with mcp.Client(f"http://127.0.0.1:{port}/mcp") as client:
            assert len((await client.list_tools()).tools) == len(ALL_TOOLS)
            assert "unknown graph id" in await call_error(client, "graph_summary", graph_id="none")
            assert (await call(client, "list_graphs"))["total"] == 0
    finally:
        server.terminate()
        out, err = server.communicate(timeout=30)
    assert out == "" and "POST /mcp" in err


@pytest.mark.slow
def test_stdout_carries_only_the_protocol(tmp_path: Path) -> None:
    exe = _witty_mcp()
    host_process_graph(tmp_path / "host.json")
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "load_graph",
                                                                       "arguments": {"path": "host.json"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "load_graph",
                                                                       "arguments": {"path": "missing.json"}}},
    ]
    server = subprocess.Popen([exe, "--log-level", "DEBUG"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              env={**os.environ, "WITTY_STATE_DIR": str(tmp_path / "state")})
    watchdog = threading.Timer(120, server.kill)
    watchdog.start()
    try:
        server.stdin.write("".join(json.dumps(r) + "\n" for r in requests))
        server.stdin.flush()
        lines = [server.stdout.readline() for _ in range(3)]  # answers come as the calls finish, in any order
        rest, err = server.communicate(timeout=60)  # closes stdin: the server ends
    finally:
        watchdog.cancel()
    answers = {a["id"]: a for a in (json.loads(line) for line in lines + rest.splitlines())}  # all JSON-RPC
    assert sorted(answers) == [1, 2, 3] and all(a["jsonrpc"] == "2.0" for a in answers.values())
    assert answers[2]["result"]["isError"] is False and answers[3]["result"]["isError"] is True
    assert "witty-mcp" in err  # the logs went to stderr


@pytest.mark.slow
def test_a_request_with_a_lone_surrogate_is_answered(tmp_path: Path) -> None:
    """`"\\ud800"` in an argument: the SDK's reader refuses the line; the server reads it again with U+FFFD and
    answers it (here: no such file), and the next call too. Before, the client waited for ever."""
    exe = _witty_mcp()
    lines = [json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                 "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
             json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
             '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"load_graph",'
             '"arguments":{"path":"x\\ud800.json"}}}',
             json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "list_graphs",
                                                                                       "arguments": {}}})]
    server = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=tmp_path, env={**os.environ, "WITTY_STATE_DIR": str(tmp_path / "s")})
    watchdog = threading.Timer(60, server.kill)
    watchdog.start()
    try:
        server.stdin.write("".join(line + "\n" for line in lines))
        server.stdin.flush()
        answers = {a["id"]: a for a in (json.loads(server.stdout.readline()) for _ in range(3))}
    finally:
        watchdog.cancel()
        server.kill()
        server.communicate()
    assert answers[2]["result"]["isError"] and "x\ufffd.json: no such file" in answers[2]["result"]["content"][0]["text"]
    assert answers[3]["result"]["isError"] is False


@pytest.mark.live
async def test_cancelling_collect_ends_the_window_early(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from witty_profiler.collectors import engine
    real, ended = engine.run_window, threading.Event()

    def watched(*args, **kwargs):  # the real engine; only notes when it returns
        try:
            return real(*args, **kwargs)
        finally:
            ended.set()

    monkeypatch.setattr(engine, "run_window", watched)
    server = build_server(WittyTools(GraphStore(tmp_path / "state"), workdir=tmp_path))
    async with mcp.Client(server) as client:
        with anyio.move_on_after(1.5):
            await client.call_tool("collect", {"duration_s": 60, "interval_s": 0.5})
        # the engine stops at its next tick instead of running out its 60 s window
        assert await anyio.to_thread.run_sync(ended.wait, 30), "the window went on after the client cancelled"
        assert (await call(client, "list_graphs"))["total"] == 0  # a cancelled window is not saved


SURROGATE_GRAPH = ('{"format":"witty-graph","schema_version":1,"meta":{"hosts":["h"],"source":"snapshot"},'
                   '"entities":[{"id":"process:h:1","type":"process","attrs":{"pid":1,"name":"bad\\ud800name"},'
                   '"metrics":{"rss_bytes":5,"cpu_util_pct":90}},{"id":"process:h:2","type":"process",'
                   '"attrs":{"pid":2,"name":"ok","cmdline":"' + "x" * 300 + '"},"metrics":{"rss_bytes":6}}],'
                   '"edges":[]}')


@pytest.mark.slow
async def test_stdio_a_lone_surrogate_in_a_graph_is_answered_and_the_server_goes_on(tmp_path: Path) -> None:
    """A name with a lone surrogate ("\\ud800" in the JSON) cannot be encoded as UTF-8. Every answer that
    carries it shows U+FFFD instead, and the server answers the next request. The 300-letter word makes
    the server count tokens with tiktoken, as a server does once it has counted enough text; tiktoken
    lets the surrogate through into the answers."""
    exe = _witty_mcp()
    (tmp_path / "odd.json").write_text(SURROGATE_GRAPH, encoding="ascii")
    params = StdioServerParameters(command=exe, args=["--state-dir", str(tmp_path / "state")], cwd=str(tmp_path))
    async with mcp.Client(params) as client:
        with anyio.fail_after(30):  # a server that died leaves the client waiting
            gid = (await call(client, "load_graph", path="odd.json"))["graph_id"]
            word = await call(client, "query_graph", graph_id=gid, where=["pid=2"])
            assert word["entities"][0]["attrs"]["cmdline"] == "x" * 300
            answers = [await client.call_tool(tool, {"graph_id": gid, **arguments}) for tool, arguments in
                       [("graph_summary", {}), ("convert_layer", {"layer": "compute"}),
                        ("convert_layer", {"layer": "all"}), ("match_patterns", {}),
                        ("query_graph", {"type": "process"}), ("generate_report", {"format": "json"})]]
            for result in answers:
                assert not result.is_error, result.content[0].text
                wire = json.dumps(result.structured_content, ensure_ascii=False) + result.content[0].text
                wire.encode("utf-8")  # no lone surrogate left
            names = [e["attrs"]["name"] for e in answers[4].structured_content["entities"]]
            assert "bad\ufffdname" in names
            assert "bad\ufffdname" in answers[1].content[0].text
            assert (await call(client, "list_graphs"))["total"] == 1  # the server goes on
