"""Generated inputs against every reader and front door: graph files, Kineto traces, msprof-analyze
outputs, token and auth files, Prometheus answers, MCP tool arguments, REST requests. Each input must end
in a result or in the reader's one-line error (InputError and its kinds; an MCP error answer that is not
an internal error; a 4xx with a JSON body), never another exception, a 500, a hang or a traceback.

Hypothesis, not atheris: the readers are Python, so coverage-guided byte fuzzing buys little over
structured generation; Hypothesis runs inside pytest on any Python without a compiled harness, builds
inputs from the formats' own shapes (a valid graph or trace mutated at one place, a CSV row cut short),
shrinks a failure to its smallest input, and replays a fixed seed.

    python3 -m pytest -q tests/test_fuzz.py                    the quick run: a fixed seed, 40 inputs a target
    WITTY_FUZZ_EXAMPLES=2000 python3 -m pytest -q tests/test_fuzz.py    a long run with a random seed
"""

from __future__ import annotations

import copy
import http.server
import json
import os
import threading
from urllib.parse import quote
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from witty_profiler.app.access import read_token_file
from witty_profiler.app.graphs import GraphStore
from witty_profiler.app.reports import report
from witty_profiler.converters.view import render_view
from witty_profiler.converters.layers import LAYER_VIEWS
from witty_profiler.diagnosis import diagnose
from witty_profiler.mcp_server.server import build_server
from witty_profiler.mcp_server.tools import TOOLS, WittyTools
from witty_profiler.sources import promapi
from witty_profiler.sources.prometheus import collect_window
from witty_profiler.topology import Graph, Meta, dumps_graph, loads_graph
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.text import valid_text
from witty_profiler.traces.msprof import read_msprof
from witty_profiler.traces.kineto import read_kineto

EXAMPLES = int(os.environ.get("WITTY_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=EXAMPLES <= 40, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

# -- values of any JSON type, and the awkward ones --------------------------------------------------------
AWKWARD_TEXT = st.sampled_from(["", "\ud800", "a\x00b", "\x1b[31m", "x" * 5000, "../../etc/passwd", "１２", "²",
                                "NaN", "-1", "1e999", "h1:9100", "process:h1:1", "[0, 1]", "\n## [P0] fake"])
TEXT = st.one_of(st.text(max_size=30), AWKWARD_TEXT)
NUMBER = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0, -1, 10**400 // 10**399, 1e308]))
SCALAR = st.one_of(st.none(), st.booleans(), NUMBER, TEXT)
JSON = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                    st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12)


def _paths(value: Any, at: tuple = ()) -> list[tuple]:
    """Every place in a JSON document (a key path), the root included."""
    out = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*at, i))
    return out


def _mutated(doc: Any, data: st.DataObject) -> Any:
    """The document with one place replaced by any JSON value, or removed."""
    doc = copy.deepcopy(doc)
    path = data.draw(st.sampled_from(_paths(doc)))
    if not path:
        return data.draw(JSON)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if data.draw(st.booleans()) and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(JSON)
    return doc


def _text(doc: Any, data: st.DataObject) -> str:
    """The document as JSON (Infinity and NaN spelt as Python writes them), sometimes cut short."""
    text = json.dumps(doc, allow_nan=True)
    if data.draw(st.integers(0, 4)) == 0:
        text = text[:data.draw(st.integers(0, len(text)))]
    return text


# -- graph files ------------------------------------------------------------------------------------------
def _graph_doc() -> dict:
    g = Graph(Meta(hosts=["h1"], source="live", duration_s=10.0, interval_s=1.0, started_at="2026-12-05T00:00:00Z"))
    g.entity_of("host", "host:h1", {"name": "h1"}, {"cpu_util_pct": 97.0, "cpu_iowait_pct": 30.0})
    g.entity_of("process", "process:h1:10", {"pid": 10, "name": "python3", "cmdline": "python3 train.py --lr 1",
                                             "rank": 0}, {"cpu_util_pct": 99.0, "runqueue_wait_pct": 40.0})
    g.entity_of("numa_node", "numa_node:h1:0", {"node": 0}, {"mem_used_pct": 95.0})
    g.edge_of("runs_on", "process:h1:10", "numa_node:h1:0", {}, {"runtime_share_pct": 100.0})
    return json.loads(dumps_graph(g))


GRAPH_DOC = _graph_doc()


@FUZZ
@given(st.data())
def test_graph_files(data):
    text = _text(_mutated(GRAPH_DOC, data), data)
    try:
        graph = loads_graph(text, "fuzz.json")
    except InputError:
        return
    d = diagnose(graph)
    for view in LAYER_VIEWS:
        render_view(graph, view, data.draw(st.sampled_from([None, 200, 1000])), diagnosis=d)
    for form in ("md", "json", "html"):
        report(d, graph, form)


# -- Kineto traces ----------------------------------------------------------------------------------------
EVENT = st.fixed_dictionaries({
    "ph": st.sampled_from(["X", "X", "X", "B", "i", 5]),
    "cat": st.one_of(st.sampled_from(["kernel", "cpu_op", "user_annotation", "gpu_memcpy", "Kernel"]), SCALAR),
    "name": st.one_of(st.sampled_from(["ProfilerStep#1", "ProfilerStep#2", "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                                       "nccl:all_reduce", "enumerate(DataLoader)#x", "gemm"]), SCALAR),
    "ts": NUMBER, "dur": NUMBER, "pid": SCALAR,
}, optional={"args": st.dictionaries(st.sampled_from(["In msg nelems", "Out msg nelems", "dtype", "Group size",
                                                      "Process Group Name", "Process Group Ranks",
                                                      "Collective name"]), JSON, max_size=5)})


@FUZZ
@given(st.data())
def test_kineto_traces(tmp_path_factory, data):
    doc = {"distributedInfo": data.draw(st.one_of(st.fixed_dictionaries(
        {"rank": SCALAR, "world_size": SCALAR}, optional={"pg_config": JSON, "backend": SCALAR}), JSON)),
        "traceEvents": data.draw(st.lists(EVENT, max_size=12)), "baseTimeNanoseconds": data.draw(SCALAR)}
    if data.draw(st.booleans()):
        doc = _mutated(doc, data)
    path = tmp_path_factory.mktemp("kineto") / "rank0.json"
    path.write_text(_text(doc, data), encoding="utf-8", errors="surrogatepass")
    try:
        graph = read_kineto(path, "trace:fuzz")
    except InputError:
        return
    diagnose(graph)


# -- msprof-analyze outputs -------------------------------------------------------------------------------
CELL = st.one_of(st.sampled_from(["", "1.5", "-2", "nan", "inf", "1e999", "x", "0"]), NUMBER.map(str), TEXT)


@FUZZ
@given(st.data())
def test_msprof_step_files(tmp_path_factory, data):
    header = ["Step", "Type", "Index", "Computing", "Communication(Not Overlapped)", "Free", "Stage", "Bubble"]
    if data.draw(st.booleans()):
        header = data.draw(st.lists(st.sampled_from(header + ["x"]), max_size=9))
    rows = data.draw(st.lists(st.lists(st.one_of(CELL, st.sampled_from(["rank", "stage"])), max_size=9),
                              max_size=6))
    text = "\n".join(",".join(r) for r in [header, *rows]) + data.draw(st.sampled_from(["\n", "", "\r\n"]))
    path = tmp_path_factory.mktemp("msprof") / "cluster_step_trace_time.csv"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        diagnose(read_msprof(path, None, "trace:fuzz"))
    except InputError:
        pass


COMM = {"(0, 1)": {"step1": {"hcom_allReduce__1_0@1": {
    "0": {"Communication Time Info": {"Elapse Time(ms)": 5, "Transit Time(ms)": 1, "Wait Time(ms)": 4},
          "Communication Bandwidth Info": {"RDMA": {"Transit Size(MB)": 10, "Transit Time(ms)": 1}}},
    "1": {"Communication Time Info": {"Elapse Time(ms)": 1.2, "Transit Time(ms)": 1, "Wait Time(ms)": 0.2}}}}}}


@FUZZ
@given(st.data())
def test_msprof_communication_files(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("msprof") / "cluster_communication.json"
    path.write_text(_text(_mutated(COMM, data), data), encoding="utf-8", errors="surrogatepass")
    try:
        diagnose(read_msprof(None, path, "trace:fuzz"))
    except InputError:
        pass


# -- token and auth files ---------------------------------------------------------------------------------
@FUZZ
@given(st.binary(max_size=300))
def test_token_and_auth_files(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("token") / "token"
    path.write_bytes(content)
    for read in (lambda: read_token_file(str(path), "--token-file"), lambda: promapi.read_auth(str(path), {})):
        try:
            value = read()
        except InputError as exc:
            assert "\n" not in str(exc)
            continue
        assert value and "\n" not in value.strip()


# -- Prometheus answers -----------------------------------------------------------------------------------
class _Answers(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.end_headers()
        self.wfile.write(type(self).body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def prometheus():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


SERIES = {"metric": {"__name__": "node_load1", "instance": "h1:9100", "cpu": "0", "mode": "idle"},
          "values": [[1000, "1"], [1060, "2"]]}
ANSWER = {"status": "success", "data": {"resultType": "matrix", "result": [SERIES, SERIES]}}


@FUZZ
@given(st.data())
def test_prometheus_answers(prometheus, data):
    _Answers.body = _text(_mutated(ANSWER, data), data).encode("utf-8", "surrogatepass")
    try:
        collect_window(prometheus, 1000.0, 1600.0, step=60, timeout_s=5)
    except InputError as exc:
        assert "\n" not in str(exc)


# -- MCP tools --------------------------------------------------------------------------------------------
FUZZED_TOOLS = sorted(name for name in TOOLS if name != "collect")  # collect would run a real window


@pytest.fixture(scope="module")
def mcp_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("mcp")
    (home / "g.json").write_text(dumps_graph(loads_graph(json.dumps(GRAPH_DOC))))
    return home


@FUZZ
@given(st.data())
def test_mcp_tool_arguments(mcp_home, data):
    tool = data.draw(st.sampled_from(FUZZED_TOOLS))
    names = sorted(TOOLS[tool].input.model_fields)
    arguments = data.draw(st.dictionaries(st.one_of(st.sampled_from(names), TEXT), JSON, max_size=4))
    if data.draw(st.booleans()):
        arguments["graph_id"] = "g-fuzz"
    # as the wire hands them over: a lone surrogate in a request arrives as U+FFFD (mcp_server.wire; the
    # stdio tests send one), the in-memory transport used here would pass it through as no client can
    arguments = valid_text(arguments)

    async def one_call() -> Any:
        server = build_server(WittyTools(GraphStore(mcp_home / "state"), workdir=mcp_home))
        async with mcp.Client(server) as client:
            await client.call_tool("load_graph", {"path": "g.json", "graph_id": "g-fuzz"})
            with anyio.fail_after(60):
                return await client.call_tool(tool, arguments)

    result = anyio.run(one_call)
    if result.is_error:
        text = result.content[0].text if result.content else ""
        assert "inside witty-profiler" not in text, (tool, arguments, text)


def test_the_fuzzed_tools_are_every_tool_but_collect():
    assert set(FUZZED_TOOLS) | {"collect"} == set(TOOLS)


# -- REST routes ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rest(tmp_path_factory):
    from starlette.testclient import TestClient

    from witty_profiler.service.app import Service, build_app
    from witty_profiler.service.config import ServiceConfig
    home = tmp_path_factory.mktemp("service")
    config = ServiceConfig()
    config.storage.state_dir = str(home / "state")
    service = Service(config, home / "state")
    window = service.ring.add(loads_graph(json.dumps(GRAPH_DOC)), []).window_id
    return TestClient(build_app(service, None), base_url="http://127.0.0.1:18090"), window


def _route_paths() -> list[tuple[str, str]]:
    from witty_profiler.service.routes import table
    return [(api.method, api.path) for api in table()]


@FUZZ
@given(st.data())
def test_rest_routes(rest, data):
    client, window = rest
    method, path = data.draw(st.sampled_from(_route_paths()))
    for name in ("window_id", "layer"):
        if "{" + name + "}" in path:
            value = data.draw(st.one_of(st.just(window), st.just("latest"), st.sampled_from(["all", "memory"]), TEXT))
            path = path.replace("{" + name + "}", quote(valid_text(value), safe=""))  # as a client sends any text
    params = data.draw(st.dictionaries(st.sampled_from(["max_tokens", "format", "envelope", "before", "after", "x"]),
                                       TEXT, max_size=3))
    body = _text(data.draw(st.one_of(JSON, st.fixed_dictionaries({"reason": TEXT}))), data)
    if method == "POST" and path.endswith(("/start", "/stop")):
        return  # they start and stop collection: not input handling
    answer = client.request(method, path, params=valid_text(params), content=body.encode(
        "utf-8", "surrogatepass"), headers={"Content-Type": "application/json"})
    assert answer.status_code < 500, (method, path, params, body[:200], answer.text[:300])
    if answer.status_code >= 400:
        assert answer.headers["content-type"].startswith("application/json"), answer.text[:200]
