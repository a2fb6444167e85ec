"""Who may talk to our HTTP endpoints: the guard's rules, and `witty-mcp --transport streamable-http`
beyond loopback (a token is required, Host/Origin validation stays on)."""

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

import anyio
import pytest

from witty_profiler.app.access import (
    allowed_hosts,
    allowed_origins,
    check_bind,
    is_loopback,
    parse_listen,
    read_token_file,
)
from witty_profiler.mcp_server.httpguard import HttpGuard
from witty_profiler.topology.errors import InputError

TOKEN = "guard-test-token-0123456789"


def test_loopback_is_recognised():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5", "example.org", "localhost.example.com",
                                            "127.example.org", "::1.example.org"))


def test_one_listen_parser_for_every_server():
    """The service's [server] listen, witty-mcp --listen and export --listen read an address the same way."""
    from witty_profiler.exporter import parse_listen as exporter_listen
    assert parse_listen("[::1]:18090", "x", 1) == ("::1", 18090)
    assert parse_listen(":9818", "x", 1) == ("127.0.0.1", 9818)
    for bad in ("9818", "host:", "host:0", "host:65536", "host:port"):
        with pytest.raises(InputError, match="expected HOST:PORT such as 127.0.0.1:1"):
            parse_listen(bad, "x", 1)
    with pytest.raises(InputError, match="not a loopback address"):  # a name is not loopback by its prefix
        exporter_listen("localhost.example.com:9818")
    assert exporter_listen("127.0.0.9:9818") == ("127.0.0.9", 9818)


def test_a_token_file_is_a_small_regular_file(tmp_path):
    """/dev/zero, a FIFO or a directory given as the token file is one sentence at once, never a hang or a
    read without end."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big"
    big.write_bytes(b"x" * (65 * 1024))
    for path, said in (("/dev/zero", "character device"), (str(fifo), "FIFO"), (str(tmp_path), "directory"),
                       (str(big), "more than a token file may hold"), (str(tmp_path / "none"), "no such file")):
        with pytest.raises(InputError, match=said) as caught:
            read_token_file(path, "--token-file")
        assert str(caught.value).startswith("--token-file ")
    (tmp_path / "ok").write_text(" token-0123456789abcdef \n")
    assert read_token_file(str(tmp_path / "ok"), "--token-file") == "token-0123456789abcdef"


def test_beyond_loopback_needs_a_long_enough_token():
    check_bind("127.0.0.1", None, "x")
    with pytest.raises(InputError, match="needs a bearer token"):
        check_bind("0.0.0.0", None, "x")
    with pytest.raises(InputError, match="at least 16"):
        check_bind("0.0.0.0", "short", "x")
    check_bind("0.0.0.0", TOKEN, "x")


def test_the_hosts_answered_to():
    loop = allowed_hosts("127.0.0.1", 18090)
    assert loop == ["127.0.0.1:18090", "localhost:18090", "[::1]:18090"]
    wide = allowed_hosts("0.0.0.0", 18090, ["monitor.example", "proxy.example:443"])
    assert f"{socket.gethostname()}:18090" in wide and "0.0.0.0:18090" not in wide
    assert {"monitor.example:18090", "monitor.example", "proxy.example:443"} <= set(wide)
    assert "http://localhost:18090" in allowed_origins(loop)


async def _call(app, headers: dict[str, str]) -> tuple[int, dict]:
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/", "headers": [
        (k.lower().encode(), v.encode()) for k, v in headers.items()]}
    await app(scope, receive, send)
    return sent[0]["status"], dict(sent[0]["headers"])


def test_the_guard_checks_host_then_origin_then_token():
    async def ok(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})

    hosts = allowed_hosts("127.0.0.1", 8000)
    guard = HttpGuard(ok, hosts, allowed_origins(hosts), TOKEN)
    good = {"Host": "127.0.0.1:8000", "Authorization": f"Bearer {TOKEN}"}

    def status(headers):
        return anyio.run(_call, guard, headers)[0]

    assert status(good) == 200
    assert status({**good, "Origin": "http://localhost:8000"}) == 200
    assert status({**good, "Host": "127.0.0.1.nip.io:8000"}) == 421
    assert status({**good, "Host": "127.0.0.1:8001"}) == 421
    assert status({**good, "Origin": "http://evil.example"}) == 403
    assert status({"Host": "127.0.0.1:8000"}) == 401
    assert status({**good, "Authorization": f"Bearer {TOKEN}x"}) == 401
    assert status({**good, "Authorization": f"Basic {TOKEN}"}) == 401
    refused = anyio.run(_call, guard, {"Host": "127.0.0.1:8000"})[1]
    assert refused[b"www-authenticate"].startswith(b"Bearer") and refused[b"connection"] == b"close"
    assert anyio.run(_call, guard, {**good, "Origin": "http://evil.example"})[1][b"connection"] == b"close"
    assert b"connection" not in anyio.run(_call, guard, good)[1]  # an accepted request keeps its connection
    open_guard = HttpGuard(ok, hosts, allowed_origins(hosts), None)
    assert anyio.run(_call, open_guard, {"Host": "localhost:8000"})[0] == 200


def _post(port: int, headers: dict[str, str]) -> int:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.slow
def test_witty_mcp_beyond_loopback_needs_a_token_and_keeps_host_validation(tmp_path: Path):
    exe = shutil.which("witty-mcp", path=os.path.dirname(sys.executable)) or shutil.which("witty-mcp")
    assert exe, "witty-mcp is not installed next to this Python"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "WITTY_MCP_TOKEN"}
    env["WITTY_STATE_DIR"] = str(tmp_path / "state")
    base = [exe, "--transport", "streamable-http", "--listen", f"0.0.0.0:{port}"]
    refused = subprocess.run(base, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "needs a bearer token" in refused.stderr
    older = subprocess.run([exe, "--transport", "streamable-http", "--host", "0.0.0.0", "--port", str(port)], env=env,
                           capture_output=True, text=True, timeout=60)  # the older spelling, read the same way
    assert older.returncode == 2 and "needs a bearer token" in older.stderr
    token = tmp_path / "token"
    token.write_text(TOKEN)
    server = subprocess.Popen([*base, "--token-file", str(token)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while _post_or_none(port) is None:
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
            time.sleep(0.2)
        assert _post(port, {}) == 401
        assert _post(port, {"Authorization": "Bearer wrong-token-0123456789"}) == 401
        assert _post(port, {"Authorization": f"Bearer {TOKEN}", "Host": f"rebound.example:{port}"}) == 421
        assert _post(port, {"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"}) == 403
        assert _post(port, {"Authorization": f"Bearer {TOKEN}"}) == 200
    finally:
        server.terminate()
        server.wait(timeout=30)


def _post_or_none(port: int) -> int | None:
    try:
        return _post(port, {})
    except OSError:
        return None
