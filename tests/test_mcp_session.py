"""Whole sessions through witty-mcp: a live capture of a real busy process with progress
notifications, then summary, a layer view, the pattern match and the report; the real legacy
sample; and the installed `witty-mcp` over real stdio."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import mcp
import pytest
from mcp import StdioServerParameters

from mcp_server.budget import count_tokens
from mcp_server.server import build_server
from mcp_server.store import GraphStore
from mcp_server.tools import WittyTools
from mcp_support import call, call_error, host_process_graph

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
        assert gid.startswith("live-") and collected["origin"] == "collect" and collected["source"] == "live"
        assert collected["collectors"] and all(c["status"] in ("ok", "partial", "unavailable", "error")
                                               for c in collected["collectors"])
        # progress arrived during the window, in order, against the window's length
        assert len(progress) >= 3, progress
        assert [p[0] for p in progress] == sorted(p[0] for p in progress)
        assert all(p[1] == 2 for p in progress) and progress[-1][0] >= 1.5

        busy = await call(client, "query_graph", graph_id=gid, type="process", where=[f"pid={busy_process.pid}"])
        assert busy["total_entities"] == 1
        # a busy loop; the host is shared with other work, so only "clearly running", not "one full core"
        assert busy["entities"][0]["metrics"]["cpu_util_pct"] > 5

        summary = await call(client, "graph_summary", graph_id=gid)
        assert summary["entity_count"] == collected["entity_count"] and summary["overview"]
        view = await call(client, "convert_layer", graph_id=gid, layer="compute")
        assert view["layer"] == "compute" and view["text"].strip() and view["tokens"] <= 8000
        assert view["tokens"] == count_tokens(view["text"])

        matched = await call(client, "match_patterns", graph_id=gid)
        assert matched["coverage"], "every pattern ends as a finding or a coverage row"
        statuses = {row["status"] for row in matched["coverage"]}
        assert statuses <= {"finding", "clear", "not_evaluated"}
        assert all(f["priority"] in ("P0", "P1", "P2") for f in matched["findings"])

        report = await call(client, "generate_report", graph_id=gid, format="md", output_path="report.md")
        written = (tmp_path / "report.md").read_text(encoding="utf-8")
        assert report["written_to"] == str(tmp_path / "report.md") and report["text"] in written
        message = await call_error(client, "generate_report", graph_id=gid, output_path="report.md")
        assert "overwrite=true" in message
        again = await call(client, "generate_report", graph_id=gid, format="json", output_path="report.md",
                           overwrite=True)
        assert again["format"] == "json" and (tmp_path / "report.md").read_text(encoding="utf-8") != written


async def test_real_legacy_sample_shows_the_device_numa_mismatch(tmp_path: Path, vllm_sample_path: Path) -> None:
    server = build_server(WittyTools(GraphStore(tmp_path / "state"), workdir=tmp_path))
    async with mcp.Client(server) as client:
        loaded = await call(client, "load_graph", path=str(vllm_sample_path))
        assert loaded["source"] == "legacy" and loaded["entities_by_type"]["npu"] == 8
        unavailable = {c["name"] for c in loaded["collectors"] if c["status"] == "unavailable"}
        assert unavailable, "the legacy format cannot measure everything, and the summary says so"
        small = await client.call_tool("graph_summary", {"graph_id": loaded["graph_id"], "max_tokens": 1000})
        assert count_tokens(small.content[0].text) <= 1000 and "left out" in small.structured_content["note"]
        matched = await call(client, "match_patterns", graph_id=loaded["graph_id"], layer="interconnect")
        mismatch = [f for f in matched["findings"] if f["pattern"] == "interconnect.device_numa_mismatch"]
        assert mismatch, [f["pattern"] for f in matched["findings"]]
        ids = {i for f in mismatch for ev in f["evidence"] for i in ev["ids"]}
        assert any("npu:local:" in i for i in ids) and any("process:local:" in i for i in ids)

        same = await call(client, "compare_graphs", before_id=loaded["graph_id"], after_id=loaded["graph_id"])
        persisting = {c["pattern"] for c in same["comparison"]["persisting"]}
        assert "interconnect.device_numa_mismatch" in persisting and not same["comparison"]["resolved"]
        assert "Persisting" in same["text"]
        assert "unknown graph id" in await call_error(client, "compare_graphs", before_id=loaded["graph_id"],
                                                      after_id="later")


async def test_stdio_server_lists_loads_fails_and_goes_on(tmp_path: Path) -> None:
    exe = shutil.which("witty-mcp")
    if exe is None:
        pytest.skip("witty-mcp is not installed: run `python3 -m pip install -e .`")
    host_process_graph(tmp_path / "host.json")
    params = StdioServerParameters(command=exe, args=["--log-level", "INFO"], cwd=str(tmp_path),
                                   env={**os.environ, "WITTY_STATE_DIR": str(tmp_path / "state")})
    async with mcp.Client(params) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert len(tools) == 9 and tools["query_graph"].annotations.read_only_hint is True
        loaded = await call(client, "load_graph", path="host.json")
        message = await call_error(client, "graph_summary", graph_id="missing")
        assert "list_graphs" in message
        page = await call(client, "query_graph", graph_id=loaded["graph_id"], type="process", limit=2)
        assert len(page["entities"]) == 2 and page["next_cursor"]
    # saved where WITTY_STATE_DIR says (test_mcp_server checks that a restarted server reads it back)
    assert (tmp_path / "state" / "graphs" / f"{loaded['graph_id']}.json").is_file()


def test_witty_mcp_bad_option_is_one_line_and_exit_2(tmp_path: Path) -> None:
    exe = shutil.which("witty-mcp")
    if exe is None:
        pytest.skip("witty-mcp is not installed: run `python3 -m pip install -e .`")
    done = subprocess.run([exe, "--thresholds", str(tmp_path / "none.toml")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "no such file" in done.stderr


async def test_streamable_http_on_loopback_logs_only_to_stderr(tmp_path: Path) -> None:
    exe = shutil.which("witty-mcp")
    if exe is None:
        pytest.skip("witty-mcp is not installed: run `python3 -m pip install -e .`")
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
            assert len((await client.list_tools()).tools) == 9
            assert "unknown graph id" in await call_error(client, "graph_summary", graph_id="none")
            assert (await call(client, "list_graphs"))["total"] == 0
    finally:
        server.terminate()
        out, err = server.communicate(timeout=30)
    assert out == "" and "POST /mcp" in err


def test_stdout_carries_only_the_protocol(tmp_path: Path) -> None:
    exe = shutil.which("witty-mcp")
    if exe is None:
        pytest.skip("witty-mcp is not installed: run `python3 -m pip install -e .`")
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


async def test_cancelling_collect_ends_the_window_early(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import witty_profiler
    real, ended = witty_profiler.collect, threading.Event()

    def watched(**kwargs):  # the real engine; only notes when it returns
        try:
            return real(**kwargs)
        finally:
            ended.set()

    monkeypatch.setattr(witty_profiler, "collect", watched)
    server = build_server(WittyTools(GraphStore(tmp_path / "state"), workdir=tmp_path))
    async with mcp.Client(server) as client:
        with anyio.move_on_after(1.5):
            await client.call_tool("collect", {"duration_s": 60, "interval_s": 0.5})
        # the engine stops at its next tick instead of running out its 60 s window
        assert await anyio.to_thread.run_sync(ended.wait, 30), "the window went on after the client cancelled"
        assert (await call(client, "list_graphs"))["total"] == 0  # a cancelled window is not saved
