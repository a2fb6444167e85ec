"""Three hosts behind real node_exporters and a real Prometheus scraping them every second.

Each host is a network namespace with two veth links to this machine: eth0 (10.213.N.2), which
Prometheus scrapes, and eth1 (10.214.N.2), a data link on which a sender in the namespace puts
200 frames of 1000 bytes a second. A node_exporter runs inside each namespace, so its
/proc/net/dev, /proc/net/snmp and /sys/class/net are that host's own. Host 3's data link has its
far end down: the kernel drops every frame sent on it and counts them (eth1 tx_dropped), as a
real host whose link partner went away would. CPU, memory and disks are this machine's for all
three (one /proc/stat), so only the network tells the hosts apart.

Where asked (`replays`), a host also serves a recorded exporter exposition (tests/fixtures/*.prom:
dcgm-exporter, npu-exporter) on its eth0 address, scraped by the same Prometheus as its own job: the
accelerators this machine lacks, in their exporters' own format. A host may also run a real
exporter (`commands`, e.g. `witty-profiler export --listen`) inside its namespace, scraped the same
way.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PROMETHEUS = "/usr/bin/prometheus"
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
FRAMES_PER_S = 200
SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dest, rate = (sys.argv[1], 9), int(sys.argv[2])
nxt = time.monotonic()
while True:
    for _ in range(rate // 10):
        s.sendto(b"x" * 1000, dest)
    nxt += 0.1
    time.sleep(max(0.0, nxt - time.monotonic()))
"""

REPLAY = """
import http.server, sys
body = open(sys.argv[1], "rb").read()
class Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.split("?")[0] != "/metrics":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer((sys.argv[2], int(sys.argv[3])), Metrics).serve_forever()
"""


@dataclass
class Replay:
    """A recorded exposition served by host `host` (1-based) on `port`, scraped as job `job`."""
    job: str
    host: int
    port: int
    fixture: Path


def missing() -> str | None:
    """Why the stack cannot run here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in (PROMETHEUS, NODE_EXPORTER, shutil.which("ip")):
        if not tool or not os.access(tool, os.X_OK):
            return f"{tool or 'ip'} is not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class Command:
    """A real exporter run inside host `host`'s namespace (argv, with env), serving /metrics on `port` of
    that host's eth0 address, scraped as job `job`."""
    job: str
    host: int
    port: int
    argv: list[str]
    env: dict[str, str] | None = None


class PrometheusStack:
    def __init__(self, root: Path, hosts: int = 3, odd: int = 3, replays: tuple[Replay, ...] = (),
                 prefix: str = "wpm", commands: tuple[Command, ...] = (),
                 node_args: dict[int, list[str]] | None = None) -> None:
        self.root, self.count, self.odd, self.replays, self.commands = root, hosts, odd, replays, commands
        self.node_args = node_args or {}  # host (1-based) -> more node_exporter flags (a textfile directory)
        tag = f"{prefix}{os.getpid() % 10000}"
        self.namespaces = [f"{tag}h{i}" for i in range(1, hosts + 1)]
        self.links = [f"{tag}s{i}" for i in range(1, hosts + 1)] + [f"{tag}d{i}" for i in range(1, hosts + 1)]
        self.hosts = [f"10.213.{i}.2" for i in range(1, hosts + 1)]
        self.procs: list[subprocess.Popen] = []
        self.url = ""

    # -- life cycle -----------------------------------------------------------------------
    def start(self) -> None:
        for i, ns in enumerate(self.namespaces, 1):
            self._host(i, ns)
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        config = self.root / "prometheus.yml"
        targets = ", ".join(f'"{h}:9100"' for h in self.hosts)
        jobs = f"  - job_name: node\n    static_configs:\n      - targets: [{targets}]\n"
        for r in (*self.replays, *self.commands):
            jobs += f'  - job_name: {r.job}\n    static_configs:\n      - targets: ["{self.hosts[r.host - 1]}:{r.port}"]\n'
        config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n"
                          f"scrape_configs:\n{jobs}")
        self._spawn("prometheus", [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={self.root / 'data'}",
                                   f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"])
        self.wait_up()

    def _host(self, i: int, ns: str) -> None:
        scrape, data = self.links[i - 1], self.links[self.count + i - 1]
        _ip("netns", "add", ns)
        _ip("link", "add", scrape, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "add", data, "type", "veth", "peer", "name", "eth1", "netns", ns)
        _ip("addr", "add", f"10.213.{i}.1/24", "dev", scrape)
        _ip("link", "set", scrape, "up")
        if i != self.odd:  # the odd host's data link has its far end down
            _ip("link", "set", data, "up")
        inside = ["netns", "exec", ns, "ip"]
        _ip(*inside, "link", "set", "lo", "up")
        _ip(*inside, "addr", "add", f"10.213.{i}.2/24", "dev", "eth0")
        _ip(*inside, "link", "set", "eth0", "up")
        _ip(*inside, "addr", "add", f"10.214.{i}.2/24", "dev", "eth1")
        _ip(*inside, "link", "set", "eth1", "up")
        # a peer at a known address, so that frames go out without ARP
        _ip(*inside, "neigh", "add", f"10.214.{i}.9", "lladdr", "02:00:00:00:00:09", "dev", "eth1", "nud", "permanent")
        self._spawn(f"node{i}", ["ip", "netns", "exec", ns, NODE_EXPORTER, f"--web.listen-address=10.213.{i}.2:9100",
                                 *self.node_args.get(i, [])])
        for r in self.replays:
            if r.host == i:
                self._spawn(f"{r.job}{i}", ["ip", "netns", "exec", ns, "python3", "-c", REPLAY, str(r.fixture),
                                            f"10.213.{i}.2", str(r.port)])
        for c in self.commands:
            if c.host == i:
                self._spawn(f"{c.job}{i}", ["ip", "netns", "exec", ns, *c.argv], c.env)
        self._spawn(f"sender{i}", ["ip", "netns", "exec", ns, "python3", "-c", SENDER, f"10.214.{i}.9",
                                   str(FRAMES_PER_S)])

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.root / f"{name}.log", "w")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env))

    def api(self, path: str, **params: object) -> dict:
        query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as r:
            return json.loads(r.read())["data"]

    def wait_up(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                targets = self.api("targets")["activeTargets"]
                if len(targets) == self.count + len(self.replays) + len(self.commands) and all(t["health"] == "up" for t in targets):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                logs = {p.name: p.read_text()[-800:] for p in self.root.glob("*.log")}
                raise RuntimeError(f"Prometheus targets not up in {timeout:g} s: {logs}")
            time.sleep(0.5)

    def value(self, query: str, at: float) -> dict[str, float]:
        """instance -> value of an instant query at `at` (Prometheus's own answer)."""
        return {r["metric"].get("instance", ""): float(r["value"][1])
                for r in self.api("query", query=query, time=f"{at:.3f}")["result"]}

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=30)
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)




@contextmanager
def running_stack(root: Path, history_s: float, **options: object) -> Iterator[PrometheusStack]:
    """A started stack with `history_s` seconds of samples behind it, stopped after; skipped (pytest) where
    the engines are missing."""
    import pytest
    why = missing()
    if why:
        pytest.skip(why)
    stack = PrometheusStack(root, **options)  # type: ignore[arg-type]
    try:
        stack.start()
        time.sleep(history_s)
        yield stack
    finally:
        stack.stop()
