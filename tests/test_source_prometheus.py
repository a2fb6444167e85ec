"""The Prometheus source: a past window of several hosts from Prometheus's HTTP API.

The live tests run real engines (tests/prometheus_stack.py): three node_exporters, each in its own
network namespace, and a Prometheus scraping them every second; host 3's data link has its far end
down. The graph is built from Prometheus alone and checked against Prometheus's own answers, and
the diagnosis must name host 3. The other tests need no engine.
"""

from __future__ import annotations

import http.server
import json
import os
import math
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest

from tests.prometheus_stack import FRAMES_PER_S, running_stack
from witty_profiler.sources import promapi, prometheus
from witty_profiler.sources.prometheus import NodeSource, Steps, collect_window, host_name, rate_metrics, selector
from witty_profiler.topology import dumps_graph, jsonstream
from witty_profiler.topology.errors import InputError

WINDOW_S = 10


# -- without an engine -----------------------------------------------------------------------
def test_times_rfc3339_unix_and_relative():
    now = 1_796_300_000.0
    assert promapi.parse_time("2026-12-03T09:00:00Z") == 1_796_288_400.0
    assert promapi.parse_time("2026-12-03T10:00:00+01:00") == 1_796_288_400.0
    assert promapi.parse_time("1796288400") == 1_796_288_400.0
    assert promapi.parse_time("now", now) == now
    assert promapi.parse_time("-1h", now) == now - 3600
    assert promapi.parse_time("now-30m", now) == now - 1800
    with pytest.raises(InputError, match="bad time"):
        promapi.parse_time("yesterday")


def test_step_keeps_series_under_prometheus_point_limit():
    assert promapi.auto_step(3600) == 15.0
    week = 7 * 86400
    assert week / promapi.auto_step(week) + 1 <= promapi.MAX_POINTS


def test_host_names_and_selectors():
    assert host_name("10.0.0.2:9100") == "10.0.0.2"
    assert host_name("node-7.example:9100") == "node-7.example"
    assert host_name("[fe80::1]:9100") == "fe80--1"
    assert host_name("gpu01", strip_port=False) == "gpu01"
    assert selector('{job="node"}') == 'job="node"'
    assert selector(None) == ""
    with pytest.raises(InputError, match="bad --match"):
        selector('job="node"')


def test_counter_rates_survive_a_reset():
    steps = Steps().add([(0.0, 100.0), (1.0, 110.0), (2.0, 5.0), (3.0, 15.0)])  # reset between 1 and 2
    assert steps.rate() == pytest.approx(25 / 3)
    m = rate_metrics("x_per_s", steps)
    assert m["x_per_s_max"] == 10.0 and m["x_per_s_p95"] == 10.0
    idle = rate_metrics("y_per_s", Steps().add([(0.0, 7.0), (1.0, 7.0), (2.0, 7.0)]))
    assert idle == {"y_per_s": 0.0, "y_per_s_p95": 0.0, "y_per_s_max": 0.0}


def test_credentials_come_from_a_file_or_the_environment(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    assert promapi.read_auth(str(token), {}) == "Bearer s3cret"
    token.write_text("alice:pw")
    assert promapi.read_auth(str(token), {}) == "Basic YWxpY2U6cHc="
    assert promapi.read_auth(None, {promapi.TOKEN_ENV: "abc"}) == "Bearer abc"
    assert promapi.read_auth(None, {}) is None
    with pytest.raises(InputError, match="cannot read"):
        promapi.read_auth(str(tmp_path / "absent"), {})
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for endless in (str(fifo), "/dev/zero"):  # neither blocks nor grows: one line
        with pytest.raises(InputError, match="cannot read the Prometheus auth file: .*not a file"):
            promapi.read_auth(endless, {})
    api = promapi.PrometheusAPI("http://127.0.0.1:9", auth="Bearer s3cret")
    assert "s3cret" not in repr(api)


class _Canned(http.server.BaseHTTPRequestHandler):
    answers: dict[str, tuple[int, bytes]] = {}
    seen: list[dict[str, str]] = []

    def do_GET(self):  # noqa: N802
        type(self).seen.append(dict(self.headers))
        code, body = self.answers.get(self.path.split("?")[0], (404, b"not found"))
        self.send_response(code)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def canned():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Canned.answers, _Canned.seen = {}, []
    yield f"http://127.0.0.1:{server.server_address[1]}", _Canned
    server.shutdown()
    server.server_close()


def test_http_errors_are_one_line_input_errors(canned):
    url, handler = canned
    empty = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()
    handler.answers = {"/api/v1/query_range": (200, empty)}
    with pytest.raises(InputError, match="no node_exporter series") as info:
        collect_window(url, 1000.0, 1600.0, auth="Bearer s3cret")
    assert "\n" not in str(info.value) and "s3cret" not in str(info.value)
    assert handler.seen[0]["Authorization"] == "Bearer s3cret"
    handler.answers = {"/api/v1/query_range": (400, b'{"status":"error","error":"parse error at char 3"}')}
    with pytest.raises(InputError, match="HTTP 400 .*parse error at char 3"):
        collect_window(url, 1000.0, 1600.0)
    handler.answers = {"/api/v1/query_range": (200, b"<html>")}
    with pytest.raises(InputError, match="did not answer .* with JSON"):
        collect_window(url, 1000.0, 1600.0)
    with pytest.raises(InputError, match="ends .* before it starts"):
        NodeSource(promapi.PrometheusAPI(url), 1600.0, 1000.0)
    with pytest.raises(InputError, match="at most 11000 points"):
        promapi.PrometheusAPI(url).query_range("up", 0.0, 86400.0, 1.0)


# -- with real engines -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with running_stack(tmp_path_factory.mktemp("prometheus"), WINDOW_S + 4) as s:  # a full window behind us
        yield s


@pytest.fixture(scope="module")
def window(stack):
    end = float(int(time.time()) - 2)  # scraped and stored
    start = end - WINDOW_S
    return start, end, collect_window(stack.url, start, end, step=1.0, match='{job="node"}')


def _delta_rate(stack, query: str, start: float, end: float) -> dict[str, float]:
    """Prometheus's own answer: (value at end - value at start) / window, per instance."""
    a, b = stack.value(query, start), stack.value(query, end)
    return {k.split(":")[0]: (b[k] - a[k]) / (end - start) for k in b if k in a}


@pytest.mark.live
@pytest.mark.slow
def test_graph_of_three_hosts_from_prometheus(stack, window):
    start, end, w = window
    g = w.graph
    assert g.meta.source == "prometheus" and g.meta.hosts == stack.hosts
    assert g.meta.collectors["prometheus.node"].status == "ok"
    assert g.meta.collectors["prometheus.dcgm"].reason == "no DCGM_FI_* series"
    assert g.meta.collectors["prometheus.npu"].status == "unavailable"
    assert set(g.meta.extra["windows"]) == set(stack.hosts)
    assert all(win["duration_s"] == WINDOW_S for win in g.meta.extra["windows"].values())
    for host in stack.hosts:
        h = g.entity(f"host:{host}")
        for metric in ("cpu_util_pct", "cpu_util_pct_p95", "cpu_iowait_pct", "load1", "mem_used_pct",
                       "tcp_retrans_pct", "tcp_out_segs_per_s"):
            assert metric in h.metrics, (host, metric)
        assert g.entity(f"cpu:{host}:0") is not None
        assert g.entity(f"nic:{host}:eth0") is not None and g.entity(f"nic:{host}:eth1") is not None
        assert g.entities("block_device")
    assert w.requests <= 16 and w.points <= w.series * (WINDOW_S + 1)


@pytest.mark.live
@pytest.mark.slow
def test_values_match_prometheus_own_answers(stack, window):
    start, end, w = window
    g = w.graph
    drops = _delta_rate(stack, 'node_network_transmit_drop_total{device="eth1"}', start, end)
    sent = _delta_rate(stack, 'node_network_transmit_packets_total{device="eth1"}', start, end)
    rx = _delta_rate(stack, 'node_network_receive_bytes_total{device="eth0"}', start, end)
    busy = _delta_rate(stack, 'sum by (instance) (node_cpu_seconds_total{mode=~"user|nice|system|irq|softirq"})',
                       start, end)
    total = _delta_rate(stack, "sum by (instance) (node_cpu_seconds_total)", start, end)
    avail = {k.split(":")[0]: v for k, v in stack.value("node_memory_MemAvailable_bytes", end).items()}
    mem = {k.split(":")[0]: v for k, v in stack.value("node_memory_MemTotal_bytes", end).items()}
    for host in stack.hosts:
        eth0, eth1 = g.entity(f"nic:{host}:eth0").metrics, g.entity(f"nic:{host}:eth1").metrics
        assert eth1["tx_drops_per_s"] == pytest.approx(drops[host], abs=1e-3)
        assert eth1["tx_packets_per_s"] == pytest.approx(sent[host], abs=1e-3)
        assert eth0["rx_bytes_per_s"] == pytest.approx(rx[host], abs=1e-3)
        h = g.entity(f"host:{host}").metrics
        assert h["cpu_util_pct"] == pytest.approx(busy[host] / total[host] * 100, abs=0.01)
        assert h["mem_used_pct"] == pytest.approx((1 - avail[host] / mem[host]) * 100, abs=0.01)
    odd, peers = stack.hosts[2], stack.hosts[:2]
    assert drops[odd] == pytest.approx(FRAMES_PER_S, rel=0.2)
    assert all(drops[p] == 0 and sent[p] == pytest.approx(FRAMES_PER_S, rel=0.2) for p in peers)


@pytest.mark.live
@pytest.mark.slow
def test_diagnosis_names_the_odd_host(stack, window):
    from witty_profiler import diagnose
    d = diagnose(window[2].graph)
    finding = d.finding("network.nic_saturation")
    assert finding is not None and finding.subjects == [f"nic:{stack.hosts[2]}:eth1"]
    assert d.status("network.odd_host") is not None


@pytest.mark.live
@pytest.mark.slow
def test_cli_collect_then_diagnose(stack, window, tmp_path, monkeypatch):
    start, end, _ = window
    out = tmp_path / "past.json"
    env = {"WITTY_PROMETHEUS_TOKEN": "s3cret-token", "PATH": "/usr/bin:/bin"}
    cli = [sys.executable, "-m", "witty_profiler"]
    done = subprocess.run([*cli, "collect", "--prometheus", stack.url, "--start", f"{start:.0f}",
                           "--end", promapi.iso(end), "--step", "1", "--match", '{job="node"}', "-o", str(out)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert "s3cret" not in done.stderr + done.stdout
    graph = json.loads(out.read_text())
    assert graph["meta"]["source"] == "prometheus" and len(graph["meta"]["hosts"]) == 3
    diag = subprocess.run([*cli, "diagnose", str(out)], capture_output=True, text=True, timeout=60)
    assert stack.hosts[2] in diag.stdout and "nic_saturation" in diag.stdout
    none = subprocess.run([*cli, "collect", "--prometheus", stack.url, "--start", f"{start:.0f}", "--end",
                           f"{end:.0f}", "--match", '{job="absent"}', "-o", str(tmp_path / "x.json")],
                          capture_output=True, text=True, timeout=60)
    assert none.returncode == 2 and "no node_exporter series" in none.stderr
    assert len(none.stderr.strip().splitlines()) == 1


class _WholeBody(promapi.PrometheusAPI):
    """Each answer read whole (urllib, then json.loads of the body): the reference for the stream."""

    def range_series(self, query, start, end, step):
        params = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                         "step": f"{step:g}"})
        with urllib.request.urlopen(f"{self.base}/api/v1/query_range?{params}", timeout=30) as response:
            doc = json.loads(response.read())
        for item in doc["data"]["result"]:
            values = [(float(t), float(v)) for t, v in item["values"]]
            yield item["metric"], [(t, v) for t, v in values if not math.isnan(v)]


def _graph_of(api, start, end):
    source = NodeSource(api, start, end, step=1.0, match='{job="node"}')
    doc = json.loads(dumps_graph(source.build()))
    cost = doc["meta"]["collectors"]["prometheus.node"].pop("queries")  # the cost of the reading: recorded
    if isinstance(api, _WholeBody):  # counts nothing
        return source, doc
    # discovery, the targets (scrape interval), the series counts; per batch 9 node families, 2 accelerator
    # exporters, this tool's exporter and the InfiniBand ports
    assert cost["batches"] == len(source.batches) and cost["requests"] == 3 + 13 * len(source.batches)
    assert cost["series"] > 100 and cost["bytes"] > 100 * cost["series"]
    return source, doc


@pytest.mark.live
@pytest.mark.slow
def test_streamed_and_batched_reads_give_the_whole_body_graph(stack, window, monkeypatch):
    start, end, _ = window
    _, whole = _graph_of(_WholeBody(stack.url), start, end)
    monkeypatch.setattr(jsonstream, "CHUNK", 257)  # series cut across reads
    source, streamed = _graph_of(promapi.PrometheusAPI(stack.url), start, end)
    assert streamed == whole and source.batches == [3]
    counts = source.series_counts(sorted(source.host_of_instance))
    assert len(counts) == 3 and min(counts.values()) > 50  # 2 CPUs x 8 modes, NICs, disks, ...
    monkeypatch.setattr(prometheus, "SERIES_BUDGET", max(counts.values()))  # one host a batch
    source, batched = _graph_of(promapi.PrometheusAPI(stack.url), start, end)
    assert batched == whole and source.batches == [1, 1, 1]
