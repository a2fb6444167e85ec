"""The legacy reader on the real vLLM sample (8 Ascend NPUs, tensor-parallel 4) and on variants of it.

Expected values are read off the sample's own raw records (or are the facts issue 2 states about
that host), never off our reader's output, so a mapping mistake cannot agree with itself.
"""

from __future__ import annotations

import copy
import json

import pytest

from witty_profiler.topology import GraphFormatError, dumps_graph, load_graph, loads_graph
from witty_profiler.topology.legacy import from_legacy, is_legacy
from witty_profiler.topology.vocabulary import EDGE_TYPES, ENTITY_TYPES, metric_info

WORKERS = [1895087, 1895088, 1895089, 1895090]


@pytest.fixture(scope="module")
def raw(vllm_sample_path):
    return json.loads(vllm_sample_path.read_text())


@pytest.fixture(scope="module")
def graph(vllm_sample_path):
    return load_graph(vllm_sample_path)


def raw_edges(raw, kind):
    return [e for e in raw["edges"] if e["edge_type"] == kind]


def numa_access(raw, pid):
    [edge] = [e for e in raw_edges(raw, "NumaAccessEdge") if e["source_node"]["pid"] == pid]
    return edge["numa_access_info"]


def test_sample_is_detected_as_legacy(raw):
    assert is_legacy(raw)
    assert is_legacy({"env": {}, "content": raw})
    assert not is_legacy({"format": "witty-graph"})


def test_eight_npus_each_on_its_numa_node(graph):
    expected = {0: 6, 1: 6, 2: 4, 3: 4, 4: 0, 5: 0, 6: 2, 7: 2}
    npus = graph.entities("npu")
    assert sorted(n.attrs["index"] for n in npus) == list(range(8))
    for npu in npus:
        node = expected[npu.attrs["index"]]
        assert npu.attrs["numa_node"] == node
        assert [o.id for _, o in graph.neighbours(npu.id, "out", "local_to")] == [f"numa_node:local:{node}"]
    assert graph.entity("npu:local:0000:c1:00.0").attrs["index"] == 0  # ids use the lower-case PCI address


def test_vllm_workers_each_use_one_of_npu0_to_npu3(graph):
    for index, pid in enumerate(WORKERS):
        devices = [o for _, o in graph.neighbours(f"process:local:{pid}", "out", "uses_device")]
        assert [d.attrs["index"] for d in devices] == [index]
        worker = graph.entity(f"process:local:{pid}")
        assert (worker.attrs["framework"], worker.attrs["role"], worker.attrs["ai"]) == ("vllm", "inference", True)


def test_worker_main_thread_allowed_on_numa_7_only(graph):
    thread = graph.entity("thread:local:1895087:1895087")
    assert thread.attrs["cpus_allowed"] == "168-191"
    assert thread.metrics["cpus_allowed_count"] == 24
    assert [o.id for _, o in graph.neighbours(thread.id, "out", "allowed_on")] == ["numa_node:local:7"]
    assert graph.entity("numa_node:local:7").attrs["cpus"] == "168-191"
    # and it ran there: the traced run time of that thread lies on node 7
    [(edge, node)] = graph.neighbours(thread.id, "out", "runs_on")
    assert node.id == "numa_node:local:7" and edge.metrics["runtime_ns_total"] == 5868636800
    # the worker's NPU0 sits on node 6: the mismatch the diagnosis must be able to see
    [(_, npu)] = graph.neighbours("process:local:1895087", "out", "uses_device")
    assert npu.attrs["numa_node"] == 6


def test_numa_distance_matrix(graph, raw):
    expected = {n["numa_id"]: {int(k): d for k, d in n["distance_to_all_numa"].items()}
                for n in raw["nodes"] if n["entity_type"] == "NumaEntity"}
    got = {n: {n: 10} for n in range(8)}
    for edge in graph.edges("numa_distance"):
        a = graph.entity(edge.source).attrs["node"]
        b = graph.entity(edge.target).attrs["node"]
        got[a][b] = edge.attrs["distance"]
    assert got == expected
    assert len(graph.edges("numa_distance")) == 8 * 7
    assert got[0][1] == 11 and got[1][3] == 32 and got[6][7] == 11 and got[6][0] == 24
    assert all(got[a][b] == got[b][a] for a in got for b in got)


def test_container_and_its_processes(graph, raw):
    [container] = graph.entities("container")
    assert container.id == "container:local:cac9af6a"
    assert container.attrs["runtime"] == "docker" and container.attrs["name"] == "docker-cac9af6aa1ee"
    expected = {e["target_node"]["pid"] for e in raw_edges(raw, "HostEdge")} | \
        {e["source_node"]["pid"] for e in raw_edges(raw, "RunOnEdge")}
    members = {o.attrs["pid"] for _, o in graph.neighbours(container.id, "in", "in_container")}
    assert members == expected and set(WORKERS) <= members and 1894499 in members


def test_socket_flows_with_bytes(graph, raw):
    sends = raw_edges(raw, "SendToSocketEdge")
    flows = graph.edges("sends_to")
    assert len(flows) == len(sends) == 44
    assert sum(f.metrics["bytes_total"] for f in flows) == sum(e["data_flow"]["data_size"] for e in sends)
    assert sum(f.metrics["packets_total"] for f in flows) == sum(e["data_flow"]["packets_cnt"] for e in sends)
    first = graph.edge("sends_to|thread:local:1894499:1894499|socket:local:tcp:127.0.0.1:34726")
    raw_first = next(e for e in sends if e["target_node"]["socket_port"] == 34726)["data_flow"]
    assert first.metrics["bytes_total"] == raw_first["data_size"]
    seconds = (raw_first["end_time"] - raw_first["start_time"]) / 1e9
    assert first.metrics["bytes_per_s"] == pytest.approx(raw_first["data_size"] / seconds, rel=1e-6)
    # the sockets belong to the benchmark client's thread: server -> client flows
    owner = [o.id for _, o in graph.neighbours("socket:local:tcp:127.0.0.1:34726", "in", "has_socket")]
    assert owner == ["thread:local:3821739:3821739"]
    assert graph.meta.collectors["sockets"].status == "partial"
    assert "7.012 s" in graph.meta.collectors["sockets"].reason


def test_process_tree_rebuilt_from_ppid(graph):
    def parent(pid):
        return [o.attrs["pid"] for _, o in graph.neighbours(f"process:local:{pid}", "in", "parent_of")]
    assert parent(1895087) == [1894856] and parent(1894856) == [1894499] and parent(1894499) == [1893833]
    assert parent(6808) == []  # its parent (pid 1) is not in the file: no dangling edge
    assert graph.dangling_edges() == []
    threads = [o.attrs["tid"] for _, o in graph.neighbours("process:local:1895087", "out", "has_thread")]
    assert threads == [1895087, 1896010, 1896232, 1896233]


def _overlap(cpu, pages):
    cpu_share = [c / sum(cpu) for c in cpu]
    page_share = [p / sum(pages) for p in pages]
    return 100 * sum(min(c, p) for c, p in zip(cpu_share, page_share))


@pytest.mark.parametrize("pid", [*WORKERS, 1894856, 6808])
def test_cpu_memory_colocation_is_recomputed_not_trusted(graph, raw, pid):
    affinity = numa_access(raw, pid)["numa_affinity_info"]
    process = graph.entity(f"process:local:{pid}")
    expected = _overlap(affinity["cpu_runtime_pct_in_each_numa"], affinity["mem_pages_in_each_numa"])
    assert process.metrics["cpu_mem_colocation_pct"] == pytest.approx(expected, abs=0.01)
    assert process.attrs["legacy_cpu_mem_dot_product"] == affinity["cpu_mem_access_cosine_similarity"]
    assert "cpu_mem_access_cosine_similarity" not in json.dumps(process.to_dict())


def test_colocation_tells_local_from_remote(graph):
    # the engine core runs and allocates on node 3; worker 1895087 runs on 7 (and 5) with its memory on 6
    assert graph.entity("process:local:1894856").metrics["cpu_mem_colocation_pct"] > 95
    worker = graph.entity("process:local:1895087")
    assert worker.metrics["cpu_mem_colocation_pct"] < 15
    assert worker.attrs["main_numa_node"] == 7
    assert worker.metrics["numa_remote_pages_pct"] > 90


def test_pages_per_numa_node(graph, raw):
    info = numa_access(raw, 1895087)
    edges = {o.attrs["node"]: e for e, o in graph.neighbours("process:local:1895087", "out", "allocates_on")}
    assert {n: e.metrics["pages"] for n, e in edges.items()} == {int(k): v for k, v in info["total_pages"].items()}
    assert edges[6].attrs["dirty_anon_pages"] == info["dirty_anon_pages"]["6"]
    assert sum(e.metrics["page_share_pct"] for e in edges.values()) == pytest.approx(100, abs=0.01)
    assert graph.entity("process:local:1895087").attrs["numa_pages"] == info["total_pages"]


def test_every_name_is_in_the_vocabulary(graph):
    assert {e.type for e in graph.entities()} <= set(ENTITY_TYPES)
    assert {e.type for e in graph.edges()} <= set(EDGE_TYPES)
    used = {m for item in [*graph.entities(), *graph.edges()] for m in item.metrics}
    assert {m for m in used if metric_info(m) is None} == set()


def test_meta_says_what_the_format_cannot_measure(graph):
    meta = graph.meta
    assert meta.source == "legacy" and meta.hosts == ["local"] and meta.duration_s is None
    assert meta.collectors["host"].status == "unavailable" and "utilisation" in meta.collectors["host"].reason
    assert meta.collectors["npu"].status == "partial" and "no utilisation" in meta.collectors["npu"].reason
    assert meta.collectors["numa"].status == "ok"


def test_load_is_deterministic_and_round_trips(vllm_sample_path):
    text = dumps_graph(load_graph(vllm_sample_path))
    assert dumps_graph(load_graph(vllm_sample_path)) == text
    assert dumps_graph(loads_graph(text)) == text


@pytest.mark.parametrize("as_string", [False, True])
def test_envelope_loads_like_the_bare_document(raw, graph, as_string):
    content = json.dumps(raw) if as_string else raw
    envelope = {"env": {"local_ip": "10.0.0.5", "hostname": "npu-node-7", "machine_id": "x"}, "content": content}
    wrapped = loads_graph(json.dumps(envelope), "envelope.json")
    assert wrapped.entities() == graph.entities()
    assert wrapped.edges() == graph.edges()
    assert wrapped.meta.host_info["local"]["hostname"] == "npu-node-7"
    assert "machine_id" not in wrapped.meta.host_info["local"]


def test_an_envelope_around_a_native_graph_loads_as_that_graph(graph):
    from witty_profiler.topology import dumps_graph
    envelope = '{"env":{"hostname":"n1","window_id":"w-20261203T100000Z"},"content":' + dumps_graph(graph) + "}"
    wrapped = loads_graph(envelope, "envelope.json")
    assert wrapped.entities() == graph.entities() and wrapped.edges() == graph.edges()


def test_unknown_types_become_opaque_and_related(raw):
    doc = copy.deepcopy(raw)
    gadget = {"entity_namespace": "local", "entity_type": "QuantumEntity", "details": {},
              "serial": 7, "note": "started with --api-key=abc123"}
    doc["nodes"].append(gadget)
    doc["edges"].append({"edge_type": "EntangledEdge", "weight": 2.5, "spin": "up",
                         "source_node": raw_edges(raw, "AccessEdge")[0]["source_node"], "target_node": gadget})
    graph = from_legacy(doc, "mixed.json")
    [opaque] = graph.entities("opaque")
    assert opaque.attrs["legacy_type"] == "QuantumEntity" and opaque.attrs["fields"]["serial"] == 7
    assert "abc123" not in opaque.attrs["fields"]["note"]
    [related] = graph.edges("related")
    assert related.source == "process:local:1895087" and related.target == opaque.id
    assert related.attrs["legacy_type"] == "EntangledEdge" and related.attrs["fields"] == {"spin": "up"}
    assert related.attrs["legacy_weight"] == 2.5
    assert graph.entity_count() == 130  # nothing else changed


def _process(pid, ppid=1, name="trainer", cmdline="python train.py"):
    return {"entity_namespace": "n1", "entity_type": "ProcessEntity", "details": {}, "pid": pid, "ppid": ppid,
            "name": name, "cmdline": cmdline}


def _numa(n):
    return {"entity_namespace": "n1", "entity_type": "NumaEntity", "details": {}, "numa_id": n,
            "cpu_set": f"{n * 4}-{n * 4 + 3}", "distance_to_all_numa": {"0": 10 if n == 0 else 20, "1": 20 if n == 0 else 10}}


def test_types_absent_from_the_sample_map_too():
    """Shapes as the original project's entity and edge classes define them (GPU, shm, RDMA, IPC, bandwidth)."""
    proc, peer = _process(100, cmdline="torchrun --password=hunter2 train.py"), _process(200, ppid=100)
    gpu = {"entity_namespace": "n1", "entity_type": "GPUEntity", "details": {}, "device_id": "device-id-unknown",
           "device_type": "gpu", "pci_bus_id": "00000000:3B:00.0", "id": 0, "cpu_affinity": "4-7",
           "numa_affinity": "1"}
    shm = {"entity_namespace": "n1", "entity_type": "SharedMemoryEntity", "details": {}, "shm_name": "/psm_1",
           "shm_size": 4096}
    pd = {"entity_namespace": "n1", "entity_type": "RdmaProtectionDomain", "details": {}, "pdn": 3, "pid": 100,
          "dev": "mlx5_0"}
    qp_a = {"entity_namespace": "n1", "entity_type": "RdmaLocalQueuePair", "details": {}, "qpn": 17, "pid": 100,
            "pdn": 3, "dev": "mlx5_0", "port": 1, "rqpn": 18}
    qp_b = dict(qp_a, qpn=18, rqpn=17)
    dev = {"entity_namespace": "n1", "entity_type": "RdmaDevice", "details": {}, "dev": "mlx5_0", "stats": {}}
    stat = {"entity_namespace": "n1", "entity_type": "RdmaStatisticPerSecond", "details": {}, "dev": "mlx5_0",
            "port": 1, "send_pkts": 1000.0, "recv_pkts": 900.0, "dupl_pkts": 0.0, "rdma_sends": 5.0, "rdma_recvs": 4.0}
    pod = {"entity_namespace": "n1", "entity_type": "PodEntity", "details": {}, "pod_id": "pod-abc"}
    n0, n1 = _numa(0), _numa(1)

    def e(kind, a, b, **extra):
        return {"edge_type": kind, "weight": None, "source_node": a, "target_node": b, **extra}

    doc = {"nodes": [proc, peer, gpu, n0, n1], "edges": [
        e("AccessEdge", proc, gpu), e("AccessEdge", proc, shm), e("OwnEdge", proc, pd), e("OwnEdge", pd, qp_a),
        e("AccessEdge", pd, dev), e("ConnectToEdge", qp_a, qp_b), e("HasAttributeEdge", dev, stat),
        e("IPCEdge", proc, peer), e("RunOnEdge", peer, pod),
        e("DDRBandwidthEdge", n0, n0, bandwidth_info={"read_bw": 12.5, "write_bw": 3.0, "total_bw": 15.5,
                                                        "timestamp": 1.0}),
        e("HCCSBandwidthEdge", n0, n0, bandwidth_info={"cross_socket_ops": 0.4, "cross_die_ops": 0.1,
                                                        "inner_die_ops": 2.0, "total_ops": 2.5, "timestamp": 1.0}),
        {"edge_type": "UndirectedEdge", "weight": None, "nodes": [proc, peer]},
    ]}
    g = from_legacy(doc, "synthetic.json")
    assert [o.id for _, o in g.neighbours("process:n1:100", "out", "uses_device")] == ["gpu:n1:0000:3b:00.0"]
    assert g.entity("gpu:n1:0000:3b:00.0").attrs["numa_node"] == 1
    assert [o.id for _, o in g.neighbours("process:n1:100", "out", "uses_shm")] == ["shared_memory:n1:/psm_1"]
    assert g.entity("shared_memory:n1:/psm_1").attrs["size_bytes"] == 4096
    assert {o.attrs["kind"] for _, o in g.neighbours("process:n1:100", "out", "owns")} == {"pd"}
    assert len(g.edges("connects_to")) == 1 and len(g.edges("ipc")) == 1
    [(_, port)] = g.neighbours("rdma_device:n1:mlx5_0", "out", "has_port")
    assert port.id == "rdma_port:n1:mlx5_0:1" and port.metrics["tx_packets_per_s"] == 1000.0
    assert [o.id for _, o in g.neighbours("process:n1:200", "out", "in_container")] == ["container:n1:pod-abc"]
    numa0 = g.entity("numa_node:n1:0")
    assert numa0.metrics["mem_read_bytes_per_s"] == 12.5e9
    assert numa0.attrs["uncore_bandwidth"]["hccs"]["cross_socket_ops"] == 0.4
    assert [o.id for _, o in g.neighbours("process:n1:100", "out", "parent_of")] == ["process:n1:200"]
    assert "hunter2" not in dumps_graph(g)
    assert g.entity("process:n1:100").attrs["framework"] == "torchrun"
    assert g.meta.collectors["gpu"].status == "partial" and g.meta.collectors["rdma"].status == "partial"
    assert [e.attrs["legacy_type"] for e in g.edges("related")] == ["UndirectedEdge"]
    assert {e.type for e in g.entities()} <= set(ENTITY_TYPES) and {e.type for e in g.edges()} <= set(EDGE_TYPES)


def _first(doc, kind, key):
    return next(x for x in doc[key] if x.get("entity_type", x.get("edge_type")) == kind)


def _set(path_fn, value):
    def mutate(doc):
        target, key = path_fn(doc)
        target[key] = value
    return mutate


IMPOSSIBLE = [
    ("negative pid", _set(lambda d: (_first(d, "ProcessEntity", "nodes"), "pid"), -1001), "nodes[", ".pid"),
    ("pid not a number", _set(lambda d: (_first(d, "ProcessEntity", "nodes"), "pid"), "abc"), ".pid", "integer"),
    ("negative tid", _set(lambda d: (_first(d, "ThreadEntity", "nodes"), "tid"), -3), ".tid", ">= 0"),
    ("distance below 10", _set(lambda d: (_first(d, "NumaEntity", "nodes")["distance_to_all_numa"], "3"), 5),
     "distance_to_all_numa", ">= 10"),
    ("negative page count", _set(lambda d: (_first(d, "NumaAccessEdge", "edges")["numa_access_info"]["total_pages"],
                                            "3"), -12), "total_pages", ">= 0"),
    ("CPU share above 1", _set(lambda d: (_first(d, "NumaAccessEdge", "edges")["numa_access_info"][
        "numa_affinity_info"]["cpu_runtime_pct_in_each_numa"], 1), 3.5), "cpu_runtime_pct_in_each_numa", "above 1"),
    ("bad CPU list", _set(lambda d: (_first(d, "AccessWithProcStatusEdge", "edges")["proc_status"],
                                     "cpus_allowed_list"), "0-x"), "cpus_allowed_list", "cannot read"),
    ("flow ends before it starts", _set(lambda d: (_first(d, "SendToSocketEdge", "edges")["data_flow"], "end_time"), 5),
     "data_flow.end_time", "before"),
    ("negative byte count", _set(lambda d: (_first(d, "SendToSocketEdge", "edges")["data_flow"], "data_size"), -1),
     "data_size", ">= 0"),
    ("free above total", _set(lambda d: (_first(d, "NumaEntity", "nodes")["mem_info"], "MemFree"), "999999999999 kB"),
     "MemFree", "MemTotal"),
    ("thread without process", _set(lambda d: (_first(d, "ThreadEntity", "nodes"), "process"), None),
     ".process", "needs its process"),
    ("port out of range", _set(lambda d: (_first(d, "SocketEntity", "nodes"), "socket_port"), 70000),
     "socket_port", "<= 65535"),
]


@pytest.mark.parametrize("label, mutate, where, problem", IMPOSSIBLE, ids=[c[0] for c in IMPOSSIBLE])
def test_impossible_values_are_rejected_naming_the_field(raw, label, mutate, where, problem):
    doc = copy.deepcopy(raw)
    mutate(doc)
    with pytest.raises(GraphFormatError) as caught:
        loads_graph(json.dumps(doc), "bad.json")
    message = str(caught.value)
    assert message.startswith("bad.json: legacy graph: ") and where in message and problem in message
    assert "\n" not in message


def test_secrets_in_command_lines_are_redacted(raw):
    doc = copy.deepcopy(raw)
    for node in doc["nodes"]:
        if node["entity_type"] == "ProcessEntity" and node["pid"] == 1894499:
            node["cmdline"] += " --api-key=sk-live-42 --hf-token hf_secret"
    text = dumps_graph(loads_graph(json.dumps(doc)))
    assert "sk-live-42" not in text and "hf_secret" not in text
    assert "vllm serve" in text


def test_everything_read_from_a_legacy_graph_is_redacted(raw):
    """details, unknown types' fields, unknown edges' fields, names and error messages pass through the
    same redaction as a live process's command line and environment."""
    doc = copy.deepcopy(raw)
    [process] = [n for n in doc["nodes"] if n["entity_type"] == "ProcessEntity" and n["pid"] == 1894499]
    process["details"] = {"password": "legS3cret1", "auth": {"type": "basic", "value": "legS3cret2", "port": 9},
                          "env": {"HF_TOKEN": "legS3cret3", "RANK": "0"}, "argv": ["serve", "--token", "legS3cret4"],
                          "note": "mirror https://bob:legS3cret5@example.org/x", "environ": ["API_KEY=legS3cret6"]}
    process["name"] = "eyJhbGciOiJIUzI1NiJ9.eyJsZWdTM2NyZXQ3Ijo3fQ.sig"
    unknown = {"entity_type": "VaultEntity", "entity_namespace": "local", "api_key": "legS3cret8",
               "url": "redis://:legS3cret9@cache:6379/0", "details": {"secret": 42}}
    doc["nodes"].append(unknown)
    doc["edges"].append({"edge_type": "VaultEdge", "source_node": process, "target_node": unknown,
                         "weight": "token=legS3cret10", "session": {"cookie": "legS3cret11"}})
    graph = loads_graph(json.dumps(doc))
    text = dumps_graph(graph)
    assert "legS3cret" not in text and "eyJsZWdTM2NyZXQ3Ijo3fQ" not in text
    details = graph.entity("process:local:1894499").attrs["details"]
    assert details["env"] == {"RANK": "0"} and details["environ"] == []
    assert details["argv"] == ["serve", "--token", "<redacted>"] and details["auth"]["port"] == "<redacted>"
    assert details["note"] == "mirror https://bob:<redacted>@example.org/x"
    [vault] = graph.entities("opaque")
    assert vault.attrs["fields"]["url"] == "redis://:<redacted>@cache:6379/0" and vault.attrs["details"] == {
        "secret": "<redacted>"}


def test_an_error_message_does_not_quote_a_secret(raw):
    doc = copy.deepcopy(raw)
    [process] = [n for n in doc["nodes"] if n["entity_type"] == "ProcessEntity" and n["pid"] == 1894499]
    process["pid"] = "--password=legS3cret12"
    with pytest.raises(GraphFormatError) as caught:
        loads_graph(json.dumps(doc), "bad.json")
    assert "legS3cret12" not in str(caught.value) and "--password=<redacted>" in str(caught.value)


def test_malformed_envelope_content_is_one_clear_error(raw):
    with pytest.raises(GraphFormatError, match="content: not valid JSON"):
        loads_graph(json.dumps({"env": {}, "content": '{"nodes": ['}), "env.json")
