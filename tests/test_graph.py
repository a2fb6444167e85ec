"""The graph core: ids, merge rules, queries and the v1 round trip."""

from __future__ import annotations

import json
import re

import pytest

from witty_profiler.topology import Edge, Entity, Graph, GraphFormatError, dumps_graph, loads_graph
from witty_profiler.topology.ids import pci_address, process_id, thread_id
from witty_profiler.topology.models import CollectorStatus, Meta


def small_graph() -> Graph:
    g = Graph(Meta(hosts=["n1"], started_at="2026-12-02T09:00:00Z", duration_s=10.0, source="test",
                   collectors={"process": CollectorStatus(status="ok")}))
    g.entity_of("process", process_id("n1", 1), {"name": "init", "pid": 1}, {"cpu_util_pct": 1.0})
    g.entity_of("process", process_id("n1", 10), {"name": "trainer", "pid": 10, "ppid": 1},
                {"cpu_util_pct": 95.5, "rss_bytes": 1 << 30})
    g.entity_of("thread", thread_id("n1", 10, 11), {"name": "loader"}, {"cpu_util_pct": 40.0})
    g.entity_of("numa_node", "numa_node:n1:0", {"node": 0})
    g.edge_of("parent_of", process_id("n1", 1), process_id("n1", 10))
    g.edge_of("has_thread", process_id("n1", 10), thread_id("n1", 10, 11))
    g.edge_of("runs_on", process_id("n1", 10), "numa_node:n1:0", metrics={"runtime_share_pct": 100.0})
    return g


def test_ids_are_namespaced_and_stable():
    assert process_id("n1", 42) == "process:n1:42"
    assert thread_id("n1", 42, 43) == "thread:n1:42:43"
    assert pci_address("00000000:3B:00.0") == "0000:3b:00.0"
    assert pci_address("0000:C1:00.0") == "0000:c1:00.0"
    assert pci_address("3b:00.0") == "0000:3b:00.0"


def test_round_trip_is_byte_identical():
    text = dumps_graph(small_graph())
    again = dumps_graph(loads_graph(text))
    assert text == again
    assert json.loads(text)["schema_version"] == 1


def test_same_graph_same_bytes_whatever_the_insertion_order():
    a = small_graph()
    b = Graph(a.meta)
    for e in reversed(a.entities()):
        b.add_entity(Entity(id=e.id, type=e.type, attrs=dict(reversed(list(e.attrs.items()))), metrics=e.metrics))
    for e in reversed(a.edges()):
        b.add_edge(e)
    assert dumps_graph(a) == dumps_graph(b)


def test_unknown_fields_survive_a_round_trip():
    doc = json.loads(dumps_graph(small_graph()))
    doc["annotations"] = {"by": "hand"}
    doc["entities"][0]["note"] = "kept"
    doc["meta"]["site"] = "lab"
    text = dumps_graph(loads_graph(json.dumps(doc)))
    back = json.loads(text)
    assert back["annotations"] == {"by": "hand"}
    assert back["entities"][0]["note"] == "kept"
    assert back["meta"]["site"] == "lab"
    assert dumps_graph(loads_graph(text)) == text


def test_merge_rules():
    a = Graph(Meta(hosts=["n1"], started_at="2026-12-02T09:00:00Z", duration_s=10.0))
    a.entity_of("process", "process:n1:5", {"name": "a", "tags": ["x"], "env": {"RANK": "0"}},
                {"bytes_total": 100, "cpu_util_pct": 10.0, "cpu_util_pct_max": 50.0})
    b = Graph(Meta(hosts=["n2"], started_at="2026-12-02T09:00:05Z", duration_s=10.0))
    b.entity_of("process", "process:n1:5", {"name": "b", "tags": ["y"], "env": {"WORLD_SIZE": "2"}},
                {"bytes_total": 50, "cpu_util_pct": 30.0, "cpu_util_pct_max": 40.0})
    b.entity_of("process", "process:n2:5", {"name": "other host"})
    a.merge(b)
    p = a.entity("process:n1:5")
    assert p.metrics == {"bytes_total": 150, "cpu_util_pct": 30.0, "cpu_util_pct_max": 50.0}
    assert p.attrs == {"name": "b", "tags": ["x", "y"], "env": {"RANK": "0", "WORLD_SIZE": "2"}}
    assert a.entity("process:n2:5") is not None  # same pid, other host: no clash
    assert a.meta.hosts == ["n1", "n2"]
    assert a.meta.started_at == "2026-12-02T09:00:00Z" and a.meta.duration_s == 15.0


def test_merging_hosts_keeps_each_hosts_collector_status_and_edge_fields():
    a = Graph(Meta(hosts=["n1"], collectors={"process": CollectorStatus(status="ok")}))
    a.add_edge(Edge(id="tcp|x|y", type="tcp", source="x", target="y", metrics={"bytes_total": 10}, seen="n1"))
    b = Graph(Meta(hosts=["n2"], collectors={"process": CollectorStatus(status="error", reason="boom")}))
    b.add_edge(Edge(id="tcp|x|y", type="tcp", source="x", target="y", metrics={"bytes_total": 5}, lost="n2"))
    a.merge(b)
    assert {n: c.status for n, c in a.meta.collectors.items()} == {"process@n1": "ok", "process@n2": "error"}
    c = Graph(Meta(hosts=["n3"], collectors={"process": CollectorStatus(status="partial")}))
    a.merge(c)  # a third host: the names already qualified stay as they are
    assert sorted(a.meta.collectors) == ["process@n1", "process@n2", "process@n3"]
    edge = a.edge("tcp|x|y")
    assert edge.metrics == {"bytes_total": 15} and edge.extra == {"seen": "n1", "lost": "n2"}
    # the fragments of one host's round: the later status of a collector replaces the earlier
    d = Graph(Meta(hosts=["n1"], collectors={"gpu": CollectorStatus(status="ok")}))
    d.merge(Graph(Meta(hosts=["n1"], collectors={"gpu": CollectorStatus(status="error")})))
    assert {n: c.status for n, c in d.meta.collectors.items()} == {"gpu": "error"}


def test_a_non_finite_metric_is_written_as_null():
    g = Graph(Meta(hosts=["h"]))
    g.entity_of("process", "process:h:1", metrics={"cpu_util_pct": float("nan"), "rss_bytes": 1,
                                                    "x_max": float("inf")})
    text = dumps_graph(g)
    assert "NaN" not in text and "Infinity" not in text
    assert loads_graph(text).entity("process:h:1").metrics == {"cpu_util_pct": None, "rss_bytes": 1, "x_max": None}


def test_queries():
    g = small_graph()
    assert [e.id for e in g.find("process", "metrics.cpu_util_pct>50")] == ["process:n1:10"]
    assert [e.id for e in g.find(None, "name~LOAD")] == ["thread:n1:10:11"]
    assert [e.id for e in g.top("cpu_util_pct", 2)] == ["process:n1:10", "thread:n1:10:11"]
    out = g.neighbours("process:n1:10", "out")
    assert sorted(o.id for _, o in out) == ["numa_node:n1:0", "thread:n1:10:11"]
    assert [o.id for _, o in g.neighbours("process:n1:10", "in", "parent_of")] == ["process:n1:1"]
    sub = g.subgraph("process:n1:1", depth=1)
    assert sorted(e.id for e in sub.entities()) == ["process:n1:1", "process:n1:10"]
    assert len(g.subgraph("process:n1:1", depth=2)) == 4
    assert g.paths("process:n1:1", "thread:n1:10:11") == [["process:n1:1", "process:n1:10", "thread:n1:10:11"]]


@pytest.mark.parametrize("text, fragment", [
    ("", "empty"),
    ("{not json", "not valid JSON"),
    ('{"format": "witty-graph", "schema_version": 9, "meta": {}}', "schema_version 9"),
    ('{"format": "witty-graph", "schema_version": 1, "entities": [{"type": "x"}]}', "entities[0].id: missing"),
    ("[1, 2]", "not a witty graph"),
    ('{"format":"witty-graph","schema_version":1,"meta":{},"entities":[{"id":"a:h:1","type":"a"},'
     '{"id":"a:h:1","type":"a"}],"edges":[]}', "entities[1]: id 'a:h:1' is given twice"),
    ('{"format":"witty-graph","schema_version":1,"meta":{},"entities":[{"id":"a:h:1","type":"a"}],'
     '"edges":[{"id":"r|a:h:1|a:h:2","type":"r","source":"a:h:1","target":"a:h:2"}]}', "'a:h:2' is not an entity"),
    ('{"format":"witty-graph","schema_version":1,"meta":{},"entities":[{"id":"a:h:1","type":"a",'
     '"metrics":{"m":Infinity}}],"edges":[]}', "entities[0].metrics.m: inf is not a number JSON can carry"),
    ("[" * 100_000, "nested too deeply"),
])
def test_bad_documents_raise_one_clear_error(text, fragment):
    with pytest.raises(GraphFormatError, match=re.escape(fragment)):
        loads_graph(text)


def test_item_lines_are_sorted_compact_json():
    """Each item is one line of sorted, compact JSON; values JSON has no type for are written as JSON
    types (tuples and sets as lists, times in ISO 8601)."""
    import datetime

    from witty_profiler.topology.io import item_json
    items = [
        Entity(id="x:h:1", type="x", attrs={"t": (1, 2), "u": "é✓", "d": {"z": [1, {"b": 2, "a": 1}]},
                                           "when": datetime.datetime(2026, 1, 1), "s": frozenset({3})},
               metrics={"a": 1.5, "b": None, "c": 10**20}, note="extra", zz={"k": 1}),
        Edge(id="e", type="tcp", source="a", target="b", attrs={}, metrics={"bytes_total": 5}, more=[1, 2]),
        *small_graph().entities(), *small_graph().edges(),
    ]
    assert json.loads(item_json(items[0])) == {
        "id": "x:h:1", "type": "x", "attrs": {"t": [1, 2], "u": "é✓", "d": {"z": [1, {"a": 1, "b": 2}]},
                                              "when": "2026-01-01T00:00:00", "s": [3]},
        "metrics": {"a": 1.5, "b": None, "c": 10**20}, "note": "extra", "zz": {"k": 1}}
    assert json.loads(item_json(items[1]))["more"] == [1, 2]
    for item in items:
        expected = json.dumps(item.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              default=lambda v: list(v) if isinstance(v, (tuple, frozenset)) else v.isoformat())
        assert item_json(item) == expected


def test_merge_never_shares_containers_with_its_source():
    a = Graph()
    b = Graph()
    b.entity_of("process", "process:n1:5", {"env": {"RANK": "0"}, "tags": ["x"], "nested": {"l": [1]}}, {"rss_bytes": 1})
    a.merge(b)
    merged = a.entity("process:n1:5")
    merged.attrs["env"]["RANK"] = "9"
    merged.attrs["tags"].append("y")
    merged.attrs["nested"]["l"].append(2)
    merged.metrics["rss_bytes"] = 2
    assert b.entity("process:n1:5").attrs == {"env": {"RANK": "0"}, "tags": ["x"], "nested": {"l": [1]}}
    assert b.entity("process:n1:5").metrics == {"rss_bytes": 1}


def test_entities_and_edges_of_a_type_are_in_id_order_whatever_the_ids():
    """The type indexes, where ids begin with their type (each type's ids together) and where they do not."""
    import random
    rnd = random.Random(2)
    for _ in range(200):
        g = Graph()
        for n in range(rnd.randint(0, 30)):
            kind = rnd.choice(["a", "b", "c"])
            eid = rnd.choice([f"{kind}:{n}", f"{rnd.choice('abcz')}{n}"])
            g.add_entity(Entity(eid, kind))
            g.add_edge(Edge(f"{rnd.choice('xyz')}|{n}", rnd.choice(["x", "y"]), eid, eid))
        for items, of_type, counts in ((g.entities(), g.entities, g.counts_by_type()[0]),
                                       (g.edges(), g.edges, g.counts_by_type()[1])):
            kinds = sorted({i.type for i in items})
            assert all(of_type(k) == [i for i in items if i.type == k] for k in kinds)
            assert counts == {k: len(of_type(k)) for k in kinds} and list(counts) == kinds


def test_queries_on_a_generated_graph_agree_with_a_plain_scan():
    """Every query kind on a few thousand entities, against the answer a plain scan of the lists gives."""
    from collections import deque

    from benchmarks.synthetic import synthetic_graph
    g = synthetic_graph(3000)
    entities, edges = g.entities(), g.edges()
    assert len(entities) > 2500 and len(edges) > 2500
    # by type and predicate
    busy = [e.id for e in entities if e.type == "thread" and (e.metrics.get("cpu_util_pct") or 0) > 10]
    assert [e.id for e in g.find("thread", "metrics.cpu_util_pct>10")] == busy and busy
    trainers = [e.id for e in entities if e.type == "process" and e.attrs.get("role") == "trainer"]
    assert [e.id for e in g.find("process", "role=trainer")] == trainers and trainers
    # top-N: the highest values first, ties by id; ascending the lowest
    scored = sorted((e for e in entities if e.type == "thread" and isinstance(e.metrics.get("cpu_util_pct"), float)),
                    key=lambda e: (-e.metrics["cpu_util_pct"], e.id))
    top = g.top("cpu_util_pct", 15, kind="thread")
    assert [e.id for e in top] == [e.id for e in scored[:15]]
    low = g.top("cpu_util_pct", 5, kind="thread", ascending=True)
    assert [e.id for e in low] == [e.id for e in sorted(scored, key=lambda e: (e.metrics["cpu_util_pct"], e.id))[:5]]
    # neighbours by direction and edge type
    rank = trainers[0]
    out = sorted(e.id for e in edges if e.source == rank)
    into = sorted(e.id for e in edges if e.target == rank)
    assert sorted(e.id for e, _ in g.neighbours(rank, "out")) == out
    assert sorted(e.id for e, _ in g.neighbours(rank, "in")) == into
    assert sorted(e.id for e, _ in g.neighbours(rank, "both")) == sorted(set(out) | set(into))
    devices = [e.id for e in edges if e.source == rank and e.type == "uses_device"]
    assert [e.id for e, _ in g.neighbours(rank, "out", "uses_device")] == devices and devices

    # k-hop subgraph, both directions, optionally along one edge type: breadth-first over the edge list
    def hops(start: str, depth: int, kind: str | None = None) -> set[str]:
        seen, todo = {start}, deque([(start, 0)])
        while todo:
            node, d = todo.popleft()
            if d == depth:
                continue
            for e in edges:
                if kind is not None and e.type != kind:
                    continue
                for a, b in ((e.source, e.target), (e.target, e.source)):
                    if a == node and b not in seen and b in g:
                        seen.add(b)
                        todo.append((b, d + 1))
        return seen

    assert {e.id for e in g.subgraph(rank, depth=2).entities()} == hops(rank, 2)
    assert {e.id for e in g.subgraph(rank, depth=3, edge_type="has_thread").entities()} == hops(rank, 3, "has_thread")
    # paths: each one a chain of real edges, within the hop limit, shortest first, at most `limit`
    gpu = g.neighbours(rank, "out", "uses_device")[0][1].id
    numa = next(e.target for e in edges if e.source == gpu and e.type == "local_to")
    pairs = {frozenset((e.source, e.target)) for e in edges}
    found = g.paths(rank, numa, max_hops=3, limit=4)
    assert found and len(found) <= 4 and [len(p) for p in found] == sorted(len(p) for p in found)
    for path in found:
        assert path[0] == rank and path[-1] == numa and len(path) - 1 <= 3 and len(set(path)) == len(path)
        assert all(frozenset(step) in pairs for step in zip(path, path[1:]))
    assert [rank, gpu, numa] in found
    assert g.paths(rank, numa, max_hops=1) == []
