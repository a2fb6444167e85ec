"""The service as it runs: a real `witty-profiler serve` process on a free loopback port, collecting
real windows of this host (1.5 s each), its REST API, /mcp, the HTTP guard, the lock, the ring caps
and a clean SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import anyio
import mcp
import pytest

REPO = Path(__file__).resolve().parents[1]
TOKEN = "a-test-token-0123456789abcdef"
pytestmark = [pytest.mark.live, pytest.mark.slow]


class Answer:
    def __init__(self, status: int, headers, body: bytes) -> None:
        self.status_code, self.headers, self.content = status, headers, body
        self.text = body.decode("utf-8")

    def json(self):
        return json.loads(self.content)


class Http:
    """A small HTTP client over urllib: every answer comes back, whatever its status."""

    def __init__(self, port: int, headers: dict | None = None) -> None:
        self.port, self.base, self.headers = port, f"http://127.0.0.1:{port}", headers or {}

    def request(self, method: str, path: str, params: dict | None = None, headers: dict | None = None,
                json_body=None, content: bytes | None = None) -> Answer:
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = json.dumps(json_body).encode() if json_body is not None else content
        if data is None and method == "POST":
            data = b""
        req = urllib.request.Request(url, data=data, method=method, headers={**self.headers, **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return Answer(r.status, r.headers, r.read())
        except urllib.error.HTTPError as e:
            return Answer(e.code, e.headers, e.read())

    def get(self, path: str, **kw) -> Answer:
        return self.request("GET", path, **kw)

    def post(self, path: str, json=None, **kw) -> Answer:
        return self.request("POST", path, json_body=json, **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_command(state: Path, port: int, *extra: str, host: str = "127.0.0.1") -> list[str]:
    return [sys.executable, "-m", "witty_profiler", "serve", "--listen", f"{host}:{port}", "--state-dir", str(state),
            "--window", "1.5", "--interval", "0.5", "--trigger-priority", "off", *extra]


@contextmanager
def service(state: Path, *extra: str, host: str = "127.0.0.1", env: dict | None = None, headers: dict | None = None):
    port = free_port()
    proc = subprocess.Popen(serve_command(state, port, *extra, host=host), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    client = Http(port, headers)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                client.get("/api/v1/status")
                break
            except OSError:
                assert time.monotonic() < deadline, "the service did not answer within a minute"
                time.sleep(0.2)
        client.proc = proc  # type: ignore[attr-defined]
        yield client
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_for(client: Http, done: int, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = client.get("/api/v1/status").json()
        if status["monitor"]["windows_done"] >= done:
            return status
        assert status["monitor"]["windows_failed"] == 0, status["monitor"]["last_error"]
        assert time.monotonic() < deadline, status
        time.sleep(0.3)


def test_windows_roll_into_the_ring_and_every_route_answers(tmp_path):
    with service(tmp_path / "state") as c:
        status = wait_for(c, 2)
        assert status["monitor"]["running"] and status["monitor"]["window_s"] == 1.5
        windows = c.get("/api/v1/graphs").json()["windows"]
        assert len(windows) >= 2 and all(not w["kept"] and w["entity_count"] > 0 for w in windows)
        first, latest = windows[-1]["window_id"], windows[0]["window_id"]
        assert (tmp_path / "state" / "ring" / f"{first}.json").is_file()

        graph = c.get(f"/api/v1/graphs/{latest}").json()
        assert graph["format"] == "witty-graph" and abs(graph["meta"]["duration_s"] - 1.5) < 0.5
        wrapped = c.get(f"/api/v1/graphs/{latest}", params={"envelope": "true"}).json()
        assert set(wrapped) == {"env", "content"} and wrapped["content"] == graph
        assert wrapped["env"]["hostname"] == socket.gethostname()
        from witty_profiler.topology import loads_graph
        assert loads_graph(c.get(f"/api/v1/graphs/{latest}", params={"envelope": "true"}).content,
                           "envelope.json").entity_count() == len(graph["entities"])  # our reader takes it back

        view = c.get(f"/api/v1/graphs/{latest}/views/summary")
        assert view.status_code == 200 and view.text.startswith("# witty-profiler summary")
        assert f'graph_id="{latest}"' in view.text  # its hints name the MCP calls on this window
        assert c.get("/api/v1/graphs/latest/views/compute", params={"max_tokens": 300}).status_code == 200
        diagnosis = c.get(f"/api/v1/graphs/{latest}/diagnosis").json()
        assert {"findings", "coverage", "summary"} <= set(diagnosis)
        assert c.get(f"/api/v1/graphs/{latest}/report").text.startswith("#")
        assert "findings" in c.get(f"/api/v1/graphs/{latest}/report", params={"format": "json"}).json()
        page = c.get(f"/api/v1/graphs/{latest}/report", params={"format": "html"})
        assert page.headers["content-type"].startswith("text/html") and page.text.startswith("<!DOCTYPE html>")

        compared = c.get("/api/v1/compare", params={"before": first, "after": latest, "format": "json"}).json()
        assert {"resolved", "new", "persisting", "before_counts", "after_counts"} <= set(compared)
        assert c.get("/api/v1/compare", params={"before": first, "after": "latest"}).status_code == 200

        # bad requests: one sentence, the right status
        assert c.get("/api/v1/graphs/w-20000101T000000Z").status_code == 404
        assert "not a window id" in c.get("/api/v1/graphs/nonsense/diagnosis").json()["error"]
        assert c.get(f"/api/v1/graphs/{latest}/views/gpu").status_code == 400
        assert c.get(f"/api/v1/graphs/{latest}/report", params={"format": "pdf"}).status_code == 400
        assert c.get("/api/v1/compare", params={"before": first}).status_code == 400
        assert c.post("/api/v1/trigger", content=b"{not json").status_code == 400


def test_trigger_keeps_the_latest_window_out_of_the_rings_reach(tmp_path):
    with service(tmp_path / "state", "--ring-windows", "2") as c:
        wait_for(c, 1)
        kept = c.post("/api/v1/trigger", json={"reason": "latency spike"}).json()
        assert kept["kept"] and kept["kept_reason"] == "latency spike"
        status = wait_for(c, 5)
        assert status["storage"]["ring"]["windows"] <= 2 and status["evicted_windows"] >= 1
        listed = {w["window_id"]: w for w in c.get("/api/v1/graphs").json()["windows"]}
        assert listed[kept["window_id"]]["kept"]  # outlived the ring
        assert (tmp_path / "state" / "kept" / f"{kept['window_id']}.json").is_file()
        assert c.get(f"/api/v1/graphs/{kept['window_id']}/diagnosis").status_code == 200


def test_stop_and_start(tmp_path):
    with service(tmp_path / "state", "--stopped") as c:
        assert not c.get("/api/v1/status").json()["monitor"]["running"]
        assert c.post("/api/v1/trigger").status_code == 409  # nothing to keep yet
        assert c.post("/api/v1/start").json()["changed"]
        wait_for(c, 1)
        stopped = c.post("/api/v1/stop").json()
        assert stopped["changed"] and not stopped["monitor"]["running"]
        done = c.get("/api/v1/status").json()["monitor"]["windows_done"]
        time.sleep(2)
        assert c.get("/api/v1/status").json()["monitor"]["windows_done"] <= done + 1  # at most the one it ended


def test_the_ring_caps_hold_on_disk(tmp_path):
    state = tmp_path / "state"
    with service(state, "--ring-windows", "3", "--ring-max-mb", "50") as c:
        for done in range(1, 7):
            status = wait_for(c, done)
            on_disk = list((state / "ring").glob("*.json"))
            assert len([p for p in on_disk if not p.name.endswith(".window.json")]) <= 3
            assert sum(p.stat().st_size for p in on_disk) <= 50 * 1024 * 1024
        assert status["evicted_windows"] >= 2


def test_sigterm_stores_the_window_in_progress_exits_0_and_frees_the_lock(tmp_path):
    state = tmp_path / "state"
    with service(state, "--window", "30", "--interval", "1") as c:
        time.sleep(2)
        c.proc.send_signal(signal.SIGTERM)
        assert c.proc.wait(timeout=60) == 0
    windows = list((state / "ring").glob("*.window.json"))
    assert len(windows) == 1  # ended early, stored
    assert json.loads(windows[0].read_text())["duration_s"] < 30
    with service(state) as again:  # the lock went with the process
        assert again.get("/api/v1/status").status_code == 200


def test_a_second_instance_on_the_same_state_is_refused(tmp_path):
    with service(tmp_path / "state") as c:
        done = subprocess.run(serve_command(tmp_path / "state", free_port()), cwd=REPO, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and f"pid {c.proc.pid}" in done.stderr and "already uses" in done.stderr


def test_a_busy_port_is_one_line_exit_2(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(serve_command(tmp_path / "state", port), cwd=REPO, capture_output=True, text=True,
                              timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "cannot listen" in done.stderr


def test_beyond_loopback_without_a_token_is_refused_at_startup(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "WITTY_SERVICE_TOKEN"}
    done = subprocess.run(serve_command(tmp_path / "state", free_port(), host="0.0.0.0"), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "needs a bearer token" in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "state").exists()  # refused before anything was written


def test_with_a_token_every_endpoint_wants_it(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with service(tmp_path / "state", "--token-file", str(token_file), host="0.0.0.0",
                 headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        assert c.get("/api/v1/status").status_code == 200
        for path in ("/api/v1/status", "/api/v1/graphs", "/openapi.json", "/mcp"):
            for auth in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": TOKEN}):
                answer = Http(c.port).get(path, headers=auth)
                assert answer.status_code == 401, (path, auth)
                assert answer.headers["www-authenticate"].startswith("Bearer")
        assert Http(c.port).post("/api/v1/stop").status_code == 401
        assert c.get("/api/v1/status").json()["monitor"]["running"]  # the refused stop did nothing
        # a refused request's body is never read: the server answers and closes, it does not wait for it
        with socket.create_connection(("127.0.0.1", c.port), timeout=10) as raw:
            raw.sendall(f"POST /api/v1/stop HTTP/1.1\r\nHost: 127.0.0.1:{c.port}\r\nContent-Length: 1000000\r\n"
                        "\r\nfirst bytes of a body that never comes".encode())
            answer = b""
            while chunk := raw.recv(65536):  # b"": the server closed the connection
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 401") and b"connection: close" in answer.lower()


def test_host_and_origin_are_validated_on_every_endpoint(tmp_path):
    with service(tmp_path / "state") as c:
        for path in ("/api/v1/status", "/openapi.json", "/mcp"):
            assert c.get(path, headers={"Host": f"attacker.example:{c.port}"}).status_code == 421
            assert c.get(path, headers={"Origin": "http://attacker.example"}).status_code == 403
        assert c.get("/api/v1/status", headers={"Origin": f"http://localhost:{c.port}"}).status_code == 200
        assert c.get("/api/v1/status", headers={"Host": f"localhost:{c.port}"}).status_code == 200


def test_the_served_openapi_document_is_valid_and_names_every_route(tmp_path):
    from openapi_spec_validator import validate
    with service(tmp_path / "state") as c:
        doc = c.get("/openapi.json").json()
        validate(doc)
        for path, ops in doc["paths"].items():
            for method in ops:
                probe = path.replace("{window_id}", "latest").replace("{layer}", "summary")
                answer = c.request(method.upper(), probe, headers={"Accept": "application/json, text/event-stream"})
                assert answer.status_code not in (404, 405) or "error" in answer.json(), (method, path)


@pytest.mark.anyio
async def test_mcp_on_the_same_port_lists_the_windows_and_announces_new_ones(tmp_path, anyio_backend):
    with service(tmp_path / "state") as c:
        await anyio.to_thread.run_sync(wait_for, c, 1)
        async with mcp.Client(f"http://127.0.0.1:{c.port}/mcp") as client:
            listed = (await client.call_tool("list_graphs", {})).structured_content
            window_id = c.get("/api/v1/status").json()["latest_window"]
            assert window_id in [g["graph_id"] for g in listed["graphs"]]
            view = await client.call_tool("convert_layer", {"graph_id": window_id, "layer": "summary"})
            assert not view.is_error and "witty-profiler summary" in view.content[0].text
            resources = await client.list_resources()
            assert any(window_id in str(r.uri) for r in resources.resources)
            async with client.listen(resources_list_changed=True) as changes:
                with anyio.fail_after(30):
                    async for event in changes:
                        assert type(event).__name__ == "ResourcesListChanged"
                        break
            newer = (await client.call_tool("list_graphs", {})).structured_content["graphs"][0]["graph_id"]
            assert newer > window_id


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_seed_form_with_the_example_config_serves(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "witty_profiler", "--config", "configs/production.json",
                             "--state-dir", str(tmp_path / "state"), "--listen", f"127.0.0.1:{port}"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                status = Http(port).get("/api/v1/status").json()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert status["monitor"]["window_s"] == 60 and status["monitor"]["running"]  # from the file
        assert status["state_dir"] == str(tmp_path / "state")  # the command line wins
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
