"""`collect` as an MCP task (protocol 2025-11-25) over streamable HTTP: a real witty-mcp process, spoken
to in raw JSON-RPC as a task-aware client would (mcp 2.3's client has no task API)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.live, pytest.mark.slow]
VERSION = "2025-11-25"


class Rpc:
    def __init__(self, port: int) -> None:
        self.url, self.session, self.next_id = f"http://127.0.0.1:{port}/mcp", None, 0

    def __call__(self, method: str, params: dict | None = None, notify: bool = False) -> dict | None:
        body: dict = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        if not notify:
            self.next_id += 1
            body["id"] = self.next_id
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": VERSION}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=120) as r:
            self.session = r.headers.get("mcp-session-id") or self.session
            text = r.read().decode()
        data = [line[5:] for line in text.splitlines() if line.startswith("data:")]  # an SSE answer
        return json.loads(data[-1] if data else text) if (data or text.strip()) else None


@pytest.fixture
def rpc(tmp_path: Path):
    exe = shutil.which("witty-mcp", path=os.path.dirname(sys.executable)) or shutil.which("witty-mcp")
    assert exe, "witty-mcp is not installed next to this Python"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([exe, "--transport", "streamable-http", "--port", str(port)], stderr=subprocess.PIPE,
                              env={**os.environ, "WITTY_STATE_DIR": str(tmp_path / "state")}, text=True)
    call = Rpc(port)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                init = call("initialize", {"protocolVersion": VERSION, "capabilities": {},
                                           "clientInfo": {"name": "test", "version": "1"}})
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
                time.sleep(0.2)
        call("notifications/initialized", notify=True)
        call.capabilities = init["result"]["capabilities"]  # type: ignore[attr-defined]
        yield call
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_server_says_collect_may_run_as_a_task(rpc):
    assert rpc.capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    tools = {t["name"]: t for t in rpc("tools/list")["result"]["tools"]}
    assert tools["collect"]["execution"] == {"taskSupport": "optional"}
    assert "execution" not in tools["list_graphs"]


def test_collect_as_a_task_answers_at_once_then_its_result(rpc):
    started = time.monotonic()
    created = rpc("tools/call", {"name": "collect", "arguments": {"duration_s": 3, "interval_s": 1},
                                 "task": {"ttl": 60000}})["result"]["task"]
    assert time.monotonic() - started < 2.5  # before the 3 s window ended
    assert created["status"] == "working" and created["ttl"] == 60000 and created["pollInterval"] > 0
    task_id = created["taskId"]
    assert rpc("tasks/get", {"taskId": task_id})["result"]["status"] == "working"
    assert [t["taskId"] for t in rpc("tasks/list")["result"]["tasks"]] == [task_id]
    result = rpc("tasks/result", {"taskId": task_id})["result"]  # waits for the window
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    assert not result.get("isError") and result["structuredContent"]["graph_id"].startswith("live-")
    done = rpc("tasks/get", {"taskId": task_id})["result"]
    assert done["status"] == "completed" and done["lastUpdatedAt"] >= done["createdAt"]
    graphs = rpc("tools/call", {"name": "list_graphs", "arguments": {}})["result"]["structuredContent"]["graphs"]
    assert result["structuredContent"]["graph_id"] in [g["graph_id"] for g in graphs]


def test_a_cancelled_task_ends_its_window_early(rpc):
    task_id = rpc("tools/call", {"name": "collect", "arguments": {"duration_s": 120, "interval_s": 1},
                                 "task": {"ttl": 60000}})["result"]["task"]["taskId"]
    time.sleep(1)
    started = time.monotonic()
    cancelled = rpc("tasks/cancel", {"taskId": task_id})["result"]
    assert cancelled["status"] == "cancelled" and time.monotonic() - started < 30
    assert "already ended" in rpc("tasks/cancel", {"taskId": task_id})["error"]["message"]
    assert "no result" in rpc("tasks/result", {"taskId": task_id})["error"]["message"]


def test_unknown_tasks_and_plain_calls(rpc):
    assert "unknown task" in rpc("tasks/get", {"taskId": "nope"})["error"]["message"]
    plain = rpc("tools/call", {"name": "collect", "arguments": {"duration_s": 1, "interval_s": 0.5}})["result"]
    assert plain["structuredContent"]["graph_id"].startswith("live-")  # no task asked: the result itself


def test_a_task_whose_call_fails_says_why(rpc):
    task_id = rpc("tools/call", {"name": "collect", "arguments": {"duration_s": 999}, "task": {"ttl": 60000}}
                  )["result"]["task"]["taskId"]
    result = rpc("tasks/result", {"taskId": task_id})["result"]
    assert result["isError"] and "duration_s" in result["content"][0]["text"]
    failed = rpc("tasks/get", {"taskId": task_id})["result"]
    assert failed["status"] == "failed" and "duration_s" in failed["statusMessage"]
