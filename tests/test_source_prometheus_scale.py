"""The Prometheus source at scale: answers read as a stream, series folded one at a time, batches cut by
a series budget.

The answers here are served by a small HTTP server in Prometheus's own JSON layout (status, data,
resultType, result of {metric, values: [[t, "v"], ...]}, warnings); the JSON reader's chunk is made
tiny so that every series is cut across reads.
"""

from __future__ import annotations

import http.server
import json
import math
import random
import threading
import time

import pytest

from witty_profiler.sources import promapi, prometheus
from witty_profiler.sources.promaccel import add_gpus
from witty_profiler.sources.prometheus import NodeSource, Steps, merged, plan_batches, rate_metrics, ratio_metrics
from witty_profiler.topology import jsonstream
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.models import CollectorStatus, Meta

START, STEP = 1_796_300_000.0, 15.0


def _answer(series: int, points: int = 5, **extra: object) -> bytes:
    result = []
    for i in range(series):
        values = [[START + k * STEP, "NaN" if (i + k) % 7 == 3 else f"{i * 1000 + k * 1.5:.3f}"]
                  for k in range(points)]
        result.append({"metric": {"__name__": "node_cpu_seconds_total", "instance": f"node{i // 8:04d}:9100",
                                  "cpu": str(i % 8), "mode": "user", "note": "é \" }, {"},
                       "values": values})
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}, **extra}).encode()


def _whole(body: bytes) -> list[tuple[dict, list]]:
    """What the answer holds, read whole: the reference for the stream."""
    out = []
    for item in json.loads(body)["data"]["result"]:
        values = [(float(t), float(v)) for t, v in item["values"]]
        out.append((item["metric"], [(t, v) for t, v in values if not math.isnan(v)]))
    return out


class _Server(http.server.BaseHTTPRequestHandler):
    body = b""
    length: int | None = None  # a Content-Length above the body's: the answer breaks off
    stall_s = 0.0  # a pause half way through the body

    def do_GET(self):  # noqa: N802
        cls = type(self)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(cls.length or len(cls.body)))
        self.end_headers()
        half = len(cls.body) // 2
        self.wfile.write(cls.body[:half])
        self.wfile.flush()
        time.sleep(cls.stall_s)
        self.wfile.write(cls.body[half:])

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Server.body, _Server.length, _Server.stall_s = b"", None, 0.0
    yield f"http://127.0.0.1:{httpd.server_address[1]}", _Server
    httpd.shutdown()
    httpd.server_close()


def test_streamed_series_are_the_whole_answers(server, monkeypatch):
    url, handler = server
    monkeypatch.setattr(jsonstream, "CHUNK", 61)  # every series cut across reads
    handler.body = _answer(40, warnings=["PromQL info: metric might not be a counter"])
    api = promapi.PrometheusAPI(url)
    streamed = list(api.range_series("x", START, START + 4 * STEP, STEP))
    assert streamed == _whole(handler.body)
    assert api.stats.series == 40 and api.stats.bytes == len(handler.body)
    assert api.stats.points == sum(len(v) for _, v in streamed) < 40 * 5  # NaN left out
    assert api.query_range("x", START, START + 4 * STEP, STEP)[7] == {"metric": streamed[7][0],
                                                                      "values": streamed[7][1]}


def test_a_big_answer_is_handed_over_while_it_arrives(server, monkeypatch):
    url, handler = server
    monkeypatch.setattr(jsonstream, "CHUNK", 1 << 16)
    handler.body = _answer(20_000)
    api = promapi.PrometheusAPI(url)
    read_at_each = []
    for _labels, _values in api.range_series("x", START, START + 4 * STEP, STEP):
        read_at_each.append(api.stats.bytes)
    assert len(read_at_each) == 20_000
    # the first series came after one chunk of a body many chunks long, not after the whole body
    assert read_at_each[0] <= 2 * jsonstream.CHUNK < len(handler.body) / 40
    assert read_at_each[-1] == len(handler.body)


def test_an_answer_that_breaks_off_or_stalls_is_one_line(server):
    url, handler = server
    whole = _answer(200)
    handler.body, handler.length = whole[:len(whole) // 2], len(whole)  # the connection closes half way
    with pytest.raises(InputError, match="answer of Prometheus at http://127.0.0.1:[0-9]+ to /api/v1/query_range "
                                         "broke off") as info:
        list(promapi.PrometheusAPI(url).range_series("x", START, START + 4 * STEP, STEP))
    assert "\n" not in str(info.value)
    handler.body, handler.length, handler.stall_s = whole, None, 1.5
    with pytest.raises(InputError, match="broke off: timed out"):
        list(promapi.PrometheusAPI(url, timeout_s=0.3).range_series("x", START, START + 4 * STEP, STEP))


def test_an_error_status_in_a_success_answer_is_refused(server):
    url, handler = server
    handler.body = json.dumps({"status": "error", "errorType": "execution",
                               "error": "query processing would load too many samples into memory"}).encode()
    with pytest.raises(InputError, match="refused /api/v1/query_range: query processing would load too many"):
        list(promapi.PrometheusAPI(url).range_series("x", START, START + 4 * STEP, STEP))
    handler.body = b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "val'
    with pytest.raises(InputError, match="did not answer /api/v1/query_range with JSON"):
        list(promapi.PrometheusAPI(url).range_series("x", START, START + 4 * STEP, STEP))


# -- batches --------------------------------------------------------------------------------
def test_batches_are_cut_by_the_series_budget():
    counts = {"a:9100": 600, "b:9100": 600, "big:9100": 2100, "c:9100": 600, "d:9100": 600}
    order = ["a:9100", "b:9100", "big:9100", "c:9100", "gone:9100", "d:9100"]
    # "big" (256 CPUs) is over the budget alone: a batch of its own; "gone" had no series at either end of
    # the window and is taken to be as large as the largest
    assert plan_batches(order, counts, 2000, 100) == [["a:9100", "b:9100"], ["big:9100"], ["c:9100"],
                                                      ["gone:9100"], ["d:9100"]]
    assert plan_batches(order[:2] + order[3:4], counts, 5000, 2) == [["a:9100", "b:9100"], ["c:9100"]]
    assert plan_batches([], counts, 100, 10) == []


def test_the_budget_keeps_the_largest_query_under_prometheus_sample_limit():
    api = promapi.PrometheusAPI("http://127.0.0.1:9")
    hour = NodeSource(api, START, START + 3600, step=15.0)
    week = NodeSource(api, START, START + 7 * 86400)
    hour.series_counts = week.series_counts = lambda instances: {}
    hour.plan([])
    week.plan([])
    assert hour.budget == prometheus.SERIES_BUDGET
    assert week.budget * (7 * 86400 / week.step + 1) <= prometheus.SAMPLES_BUDGET < week.budget * 11_000 * 1.01


def test_exporter_statuses_of_batches_merge_into_one():
    nothing = add_gpus(Graph(Meta()), iter(()))
    ok, odd = CollectorStatus("ok"), CollectorStatus("partial", "no DCGM_FI_DEV_GPU_UTIL for gpu:n7:0000:18:00.0")
    assert merged([nothing, nothing], add_gpus) == nothing  # no batch had a GPU
    assert merged([nothing, ok, nothing], add_gpus).status == "ok"  # batches of hosts without GPUs say nothing
    both = merged([ok, odd, nothing, odd], add_gpus)
    assert (both.status, both.reason) == ("partial", odd.reason)


# -- folding -------------------------------------------------------------------------------
def test_steps_held_as_arrays_give_what_dicts_give():
    rng = random.Random(7)
    grid = [START + k * STEP for k in range(30)]
    series = [[(t, v) for t, v in zip(grid, _counter(rng))] for _ in range(4)]
    gappy = [p for i, p in enumerate(series[0]) if i != 11]  # another grid: a scrape missed
    for parts in (series, [*series, gappy]):
        compact, plain = Steps(), Steps()
        assert plain.dv == {}  # read as dicts from the start, as a caller reading dv/dt leaves them
        for values in parts:
            compact.add(values)
            plain.add(values)
        assert rate_metrics("x", compact) == rate_metrics("x", plain)
        assert ratio_metrics("y", Steps().add(series[1]), compact) == ratio_metrics("y", Steps().add(series[1]), plain)
        assert compact.step_rates() == plain.step_rates() and compact.rate() == plain.rate()
        assert compact.increases() == plain.dv and dict(compact.dt) == dict(plain.dt)


def _counter(rng):
    value = 1e6
    for k in range(30):
        value = 3.0 if k == 17 else value + rng.random() * 100  # a reset at step 17
        yield value
