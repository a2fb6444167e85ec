"""`cluster collect --services`: a window pulled from each host's running service into the directory
`cluster diagnose` reads. Three real `witty-profiler serve` processes on loopback (1 s windows, each its own
state directory, host name and the same token), one of them stopped; and small HTTP servers here for what
a real service never does (bad JSON, a broken graph, too large, dripping, redirecting elsewhere)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cluster_graphs import cluster

from witty_profiler.cli import main
from witty_profiler.cluster.services import GAP_S, Pick, Window, parse_services
from witty_profiler.topology import dumps_graph
from witty_profiler.topology.errors import InputError

REPO = Path(__file__).resolve().parents[1]
TOKEN = "a-test-token-0123456789abcdef"
SOME_HOSTS_FAILED, NO_HOST_GAVE_A_GRAPH = 3, 4


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def windows(url: str, token: str = TOKEN) -> list[dict]:
    request = urllib.request.Request(url + "/api/v1/graphs", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())["windows"]


@pytest.fixture(scope="module")
def services(tmp_path_factory) -> dict:
    """n1, n2 and n3 serving 1 s windows (two collectors, to keep the machine quiet); n3 then stopped."""
    root = tmp_path_factory.mktemp("services")
    token = root / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    procs, urls = {}, {}
    for host in ("n1", "n2", "n3"):
        port = free_port()
        urls[host] = f"http://127.0.0.1:{port}"
        procs[host] = subprocess.Popen(
            [sys.executable, "-m", "witty_profiler", "serve", "--listen", f"127.0.0.1:{port}", "--state-dir",
             str(root / host), "--window", "1", "--interval", "0.5", "--collectors", "process,cpu", "--host", host,
             "--trigger-priority", "off", "--token-file", str(token)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        for host, url in urls.items():
            while True:
                assert procs[host].poll() is None, procs[host].communicate()[1]
                try:
                    if len(windows(url)) >= 4:
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, f"{host} has not made 4 windows within 90 s"
                time.sleep(0.3)
        procs["n3"].send_signal(signal.SIGTERM)
        procs["n3"].wait(timeout=60)
        yield {"urls": urls, "token": token, "root": root}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "WITTY_SERVICE_TOKEN"}
    return subprocess.run([sys.executable, "-m", "witty_profiler", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**clean, **(env or {})})


def manifest(directory: Path) -> dict:
    return json.loads((directory / "cluster.json").read_text())["hosts"]


@pytest.mark.live
@pytest.mark.slow
def test_two_graphs_and_a_row_for_the_stopped_service_then_diagnose(services, tmp_path):
    urls, out = services["urls"], tmp_path / "run"
    done = cli("cluster", "collect", "--services", urls["n1"], urls["n2"], urls["n3"], "--token-file",
               str(services["token"]), "-o", str(out))
    assert done.returncode == SOME_HOSTS_FAILED, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["cluster.json", "n1.json", "n2.json"]
    hosts = manifest(out)
    stopped = urls["n3"].removeprefix("http://")
    assert set(hosts) == {"n1", "n2", stopped}
    assert hosts[stopped]["status"] == "failed" and "cannot reach the service" in hosts[stopped]["reason"]
    assert "refused" in hosts[stopped]["reason"].lower() and hosts[stopped]["source"] == urls["n3"]
    for name in ("n1", "n2"):
        assert hosts[name]["status"] == "ok" and hosts[name]["source"] == urls[name]
        # the latest when it was pulled: one of the newest now (a window a second)
        assert hosts[name]["window"] in [w["window_id"] for w in windows(urls[name])[:4]]
        assert json.loads((out / f"{name}.json").read_text())["meta"]["hosts"] == [name]
    assert "2 of 3 host graphs" in done.stderr
    report = cli("cluster", "diagnose", str(out), "--format", "json")
    assert report.returncode == 0, report.stderr
    result = json.loads(report.stdout)
    assert sorted(h["host"] for h in result["hosts"]) == ["n1", "n2"]
    assert [f["host"] for f in result["failed"]] == [stopped] and "cannot reach" in result["failed"][0]["reason"]


@pytest.mark.live
@pytest.mark.slow
def test_a_wrong_token_or_none_is_the_401_reason(services, tmp_path):
    urls = services["urls"]
    done = cli("cluster", "collect", "--services", urls["n1"], urls["n2"], "-o", str(tmp_path / "wrong"), "-q",
               env={"WITTY_SERVICE_TOKEN": "not-the-token-0123456789"})
    assert done.returncode == NO_HOST_GAVE_A_GRAPH, done.stderr
    rows = manifest(tmp_path / "wrong")
    assert len(rows) == 2 and all(r["status"] == "failed" for r in rows.values())
    assert all(r["reason"].startswith("refused: HTTP 401, the token sent was refused") for r in rows.values()), rows
    assert "not-the-token" not in (tmp_path / "wrong" / "cluster.json").read_text() + done.stderr
    done = cli("cluster", "collect", "--services", urls["n1"], "-o", str(tmp_path / "none"), "-q")
    assert done.returncode == NO_HOST_GAVE_A_GRAPH
    assert "HTTP 401, no token was sent" in next(iter(manifest(tmp_path / "none").values()))["reason"]


@pytest.mark.live
@pytest.mark.slow
def test_at_picks_the_window_covering_the_time_and_past_one_of_the_span(services, tmp_path):
    from witty_profiler.sources.promapi import parse_time
    urls = services["urls"]
    listed = windows(urls["n1"])
    chosen = listed[2]  # neither the latest nor the oldest
    at = parse_time(chosen["started_at"]) + chosen["duration_s"] / 2
    files = tmp_path / "services.txt"
    files.write_text(f"# the nodes\n{urls['n1']}   # n1\n\n{urls['n2']}/\n")
    done = cli("cluster", "collect", "--services-file", str(files), f"--at={at:.3f}", "-o", str(tmp_path / "at"),
               "-q", env={"WITTY_SERVICE_TOKEN": TOKEN})
    assert done.returncode == 0, done.stderr
    rows = manifest(tmp_path / "at")
    assert rows["n1"]["window"] == chosen["window_id"] and rows["n1"].get("reason") is None
    meta = json.loads((tmp_path / "at" / "n1.json").read_text())["meta"]
    assert meta["started_at"] == chosen["started_at"]
    covering = [w["window_id"] for w in windows(urls["n2"])
                if parse_time(w["started_at"]) <= at <= parse_time(w["started_at"]) + w["duration_s"]]
    assert rows["n2"]["window"] in covering or "the nearest" in rows["n2"]["reason"]
    # a span: the window most of which lies in it (here the one whose whole second it holds)
    start = parse_time(chosen["started_at"]) - 0.2
    span = f"--past={start:.3f}..{start + chosen['duration_s'] + 0.4:.3f}"
    done = cli("cluster", "collect", "--services", urls["n1"], span, "-o", str(tmp_path / "span"), "-q",
               env={"WITTY_SERVICE_TOKEN": TOKEN})
    assert done.returncode == 0, done.stderr
    assert manifest(tmp_path / "span")["n1"]["window"] == chosen["window_id"]
    # a time no window is near: the host has no graph, and the row says what the service holds
    done = cli("cluster", "collect", "--services", urls["n1"], "--at", "2020-01-01T00:00:00Z", "-o",
               str(tmp_path / "old"), "-q", env={"WITTY_SERVICE_TOKEN": TOKEN})
    assert done.returncode == NO_HOST_GAVE_A_GRAPH
    reason = manifest(tmp_path / "old")[urls["n1"].removeprefix("http://")]["reason"]
    assert reason.startswith("no window covers 2020-01-01T00:00:00Z; its ") and " windows run from " in reason


@pytest.mark.live
@pytest.mark.slow
def test_mcp_collect_pulls_only_from_the_operators_list(services, tmp_path):
    from witty_profiler.app.graphs import GraphStore
    from witty_profiler.mcp_server import schemas as s
    from witty_profiler.mcp_server.tools import WittyTools
    listed = tmp_path / "services.txt"
    listed.write_text("\n".join(services["urls"][h] for h in ("n1", "n2", "n3")) + "\n")
    store = GraphStore(tmp_path / "state")
    bare = WittyTools(store, workdir=tmp_path)
    with pytest.raises(InputError, match="--services-file"):
        bare.collect(s.CollectInput(services="latest", output_dir="c0"))
    tools = WittyTools(store, workdir=tmp_path, services_file=str(listed),
                       services_token_file=str(services["token"]))
    with pytest.raises(InputError, match="one way"):
        tools.collect(s.CollectInput(services="latest", hosts=["gpu01"], output_dir="c1"))
    answer = tools.collect(s.CollectInput(services="latest", output_dir="c1"))
    assert answer.data.ok == 2 and answer.data.failed == 1 and "2 of 3 hosts gave a graph" in answer.text
    assert "cannot reach the service" in answer.text
    folder = tools.report_dir / "c1"
    assert sorted(p.name for p in folder.iterdir()) == ["cluster.json", "n1.json", "n2.json"]


# -- what a real service never sends -------------------------------------------------------------
WINDOW_ID = "w-20261205T100000Z"
LISTING = {"windows": [{"window_id": WINDOW_ID, "started_at": "2026-12-05T10:00:00Z", "duration_s": 1.0,
                        "hosts": ["fake1"]}]}


class Fake:
    """An HTTP server on loopback answering each path with a function of the request handler; it records
    the Authorization header of each request."""

    def __init__(self, routes: dict[str, Callable[[BaseHTTPRequestHandler], None]]) -> None:
        fake = self
        self.routes, self.auth = routes, []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                fake.auth.append((self.path, self.headers.get("Authorization")))
                route = fake.routes.get(self.path)
                if route is None:
                    self.send_error(404)
                    return
                try:
                    route(self)
                except OSError:  # the client gave up
                    pass

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def send(body: bytes, status: int = 200, headers: dict | None = None) -> Callable[[BaseHTTPRequestHandler], None]:
    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        for k, v in (headers or {"Content-Length": str(len(body))}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)
    return answer


def listed(graph: bytes, **more) -> dict:
    return {"/api/v1/graphs": send(json.dumps(LISTING).encode()), f"/api/v1/graphs/{WINDOW_ID}": send(graph), **more}


GRAPH = dumps_graph(cluster(["fake1"])).encode()


@pytest.fixture
def fakes():
    made: list[Fake] = []
    yield lambda routes: made.append(Fake(routes)) or made[-1]
    for f in made:
        f.close()


def pulled(tmp_path: Path, capsys, *args: str, token: str | None = TOKEN) -> tuple[int, dict]:
    out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
    env = {"WITTY_SERVICE_TOKEN": token} if token else {}
    old = {k: os.environ.get(k) for k in ("WITTY_SERVICE_TOKEN",)}
    os.environ.pop("WITTY_SERVICE_TOKEN", None)
    os.environ.update(env)
    try:
        code = main(["cluster", "collect", "-q", "-o", str(out), *args])
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    capsys.readouterr()
    return code, (manifest(out) if (out / "cluster.json").exists() else {})


def test_broken_answers_are_one_line_each_and_the_good_service_is_kept(tmp_path, capsys, fakes):
    good = fakes(listed(GRAPH))
    not_json = fakes({"/api/v1/graphs": send(b"<html>proxy error</html>")})
    not_a_list = fakes({"/api/v1/graphs": send(b'{"windows": [{"window_id": "../../etc"}]}')})
    broken = fakes(listed(b'{"format": "witty-graph", "schema_version": 1, "meta": 3}'))
    empty = fakes({"/api/v1/graphs": send(b'{"windows": []}')})
    forbidden = fakes({"/api/v1/graphs": send(b'{"error": "Origin not allowed"}', 403)})
    code, rows = pulled(tmp_path, capsys, "--services", good.url, not_json.url, not_a_list.url, broken.url,
                        empty.url, forbidden.url)
    assert code == SOME_HOSTS_FAILED
    assert rows["fake1"]["status"] == "ok" and rows["fake1"]["window"] == WINDOW_ID
    why = {r["source"]: r["reason"] for r in rows.values() if r["status"] != "ok"}
    assert "is not JSON" in why[not_json.url]
    assert "is not a window list" in why[not_a_list.url]
    assert why[broken.url].startswith("its window is not a valid graph")
    assert why[empty.url].startswith("the service has no window yet")
    assert why[forbidden.url] == "refused: HTTP 403: Origin not allowed"
    assert all("\n" not in r for r in why.values())


def test_too_large_is_refused_declared_or_streamed(tmp_path, capsys, fakes):
    declared = fakes(listed(GRAPH, **{f"/api/v1/graphs/{WINDOW_ID}": send(b"{}", headers={
        "Content-Length": str(5 << 20)})}))

    def endless(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.end_headers()  # no length: read until the cap
        for _ in range(64):
            h.wfile.write(b" " * (64 << 10))
    streamed = fakes(listed(GRAPH, **{f"/api/v1/graphs/{WINDOW_ID}": endless}))
    code, rows = pulled(tmp_path, capsys, "--services", declared.url, streamed.url, "--max-mb", "1")
    assert code == NO_HOST_GAVE_A_GRAPH
    why = {r["source"]: r["reason"] for r in rows.values()}
    assert why[declared.url] == f"/api/v1/graphs/{WINDOW_ID} is 5.0 MiB, more than the 1.0 MiB allowed (--max-mb)"
    assert why[streamed.url] == f"/api/v1/graphs/{WINDOW_ID} is more than the 1.0 MiB allowed (--max-mb)"


def test_a_dripping_service_meets_the_deadline(tmp_path, capsys, fakes):
    def drip(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "1000")
        h.end_headers()
        for _ in range(1000):
            h.wfile.write(b" ")
            h.wfile.flush()
            time.sleep(0.2)
    slow = fakes({"/api/v1/graphs": drip})
    started = time.monotonic()
    code, rows = pulled(tmp_path, capsys, "--services", slow.url, "--timeout", "1.5")
    assert code == NO_HOST_GAVE_A_GRAPH and time.monotonic() - started < 5
    (row,) = rows.values()
    assert row["status"] == "timeout" and "no answer within 1.5 s" in row["reason"]


def test_the_token_follows_a_redirect_within_its_origin_only(tmp_path, capsys, fakes):
    elsewhere = fakes({"/api/v1/graphs": send(b'{"error": "a valid bearer token is required"}', 401)})
    here = fakes(listed(GRAPH))
    here.routes["/api/v1/graphs"] = send(b"", 302, {"Location": elsewhere.url + "/api/v1/graphs",
                                                    "Content-Length": "0"})
    code, rows = pulled(tmp_path, capsys, "--services", here.url)
    assert code == NO_HOST_GAVE_A_GRAPH
    (row,) = rows.values()
    assert row["reason"].startswith("refused: HTTP 401") and f"after a redirect to {elsewhere.url}" in row["reason"]
    assert here.auth == [("/api/v1/graphs", f"Bearer {TOKEN}")] and elsewhere.auth == [("/api/v1/graphs", None)]
    # within the origin (a service behind a prefix that moved) the token goes along
    moved = fakes({f"/old{path}": send(b"", 301, {"Location": path, "Content-Length": "0"})
                   for path in ("/api/v1/graphs", f"/api/v1/graphs/{WINDOW_ID}")} | listed(GRAPH))
    code, rows = pulled(tmp_path, capsys, "--services", moved.url + "/old")
    assert code == 0 and rows["fake1"]["status"] == "ok"
    assert {a for _, a in moved.auth} == {f"Bearer {TOKEN}"}


def test_two_services_naming_one_host_keep_the_first_graph(tmp_path, capsys, fakes):
    first, second = fakes(listed(GRAPH)), fakes(listed(GRAPH))
    code, rows = pulled(tmp_path, capsys, "--services", first.url, second.url, "--parallel", "1")
    assert code == SOME_HOSTS_FAILED
    assert rows["fake1"]["source"] == first.url
    other = rows[second.url.removeprefix("http://")]
    assert other["reason"].startswith("its window names host fake1, as 127.0.0.1:") and "serve --host" in \
        other["reason"]


def test_bad_usage_is_exit_2_before_anything_is_made(tmp_path, capsys):
    out = tmp_path / "never"
    for args in (["--services", "ftp://gpu01"], ["--services", "http://u:secret@gpu01:18090"],
                 ["--services", "http://gpu01:18090", "--duration", "5"], ["--hosts", "gpu01", "--at", "now"],
                 ["--services", "http://gpu01:18090", "--at", "now", "--past=-1m"],
                 ["--services", "http://gpu01:18090", "--past=now..-1h"],
                 ["--services", "http://gpu01:18090", "--hosts", "gpu02"],
                 ["--services-file", str(tmp_path / "missing")]):
        assert main(["cluster", "collect", "-o", str(out), *args]) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "secret" not in err, err
    assert not out.exists()


def test_the_services_file_takes_comments_and_one_url_per_line(tmp_path):
    f = tmp_path / "s.txt"
    f.write_text("# racks\nhttp://gpu01:18090/  # first\n\nhttps://gpu02:18090\nhttp://gpu01:18090\n")
    assert parse_services(["http://gpu03:18090"], str(f)) == ["http://gpu03:18090", "http://gpu01:18090",
                                                              "https://gpu02:18090"]
    f.write_text("http://gpu01:18090 http://gpu02:18090\n")
    with pytest.raises(InputError, match="one URL per line"):
        parse_services([], str(f))


def test_which_window_each_pick_takes():
    # newest first, as the service lists them; 60 s windows with a 2 s gap, and an hour's pause
    ws = [Window("w-c", 3724.0, 3784.0), Window("w-b", 62.0, 122.0), Window("w-a", 0.0, 60.0)]
    assert Pick().choose(ws) == (ws[0], "")
    assert Pick(at=70.0).choose(ws) == (ws[1], "")
    window, note = Pick(at=61.0).choose(ws)  # between two windows
    assert window.window_id in ("w-a", "w-b") and note.startswith("no window covers") and "1.0 s" in note
    with pytest.raises(InputError, match=r"no window covers .*its 3 windows run from"):
        Pick(at=122.0 + GAP_S + 1).choose(ws)
    assert Pick(start=0.0, end=3800.0).choose(ws) == (ws[0], "1 of 3 windows in the span")  # the newest whole one
    assert Pick(start=50.0, end=125.0).choose(ws)[0] == ws[1]  # the one most of which lies in the span
    with pytest.raises(InputError, match="no window in"):
        Pick(start=200.0, end=300.0).choose(ws)
    with pytest.raises(InputError, match="no window yet"):
        Pick().choose([])
    assert Pick.of("latest") == Pick() and Pick.of("100..200") == Pick(start=100.0, end=200.0)
    assert Pick.of("2026-12-05T10:00:00Z") == Pick(at=1796464800.0)


def test_witty_mcp_does_not_start_with_a_services_list_it_cannot_read(tmp_path, capsys):
    from witty_profiler.mcp_server.cli import main as witty_mcp
    assert witty_mcp(["--services-file", str(tmp_path / "missing")]) == 2
    assert "services file" in capsys.readouterr().err
    (tmp_path / "s.txt").write_text("ftp://gpu01\n")
    assert witty_mcp(["--services-file", str(tmp_path / "s.txt")]) == 2
    assert "bad service URL" in capsys.readouterr().err
    assert witty_mcp(["--services-token-file", str(tmp_path / "s.txt")]) == 2
    assert "give both" in capsys.readouterr().err
