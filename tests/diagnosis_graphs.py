"""Small hand-built graphs for the pattern tests: one host, a few entities, exact metric values.

Each builder returns the id it created, so a test reads like the situation it sets up.
"""

from __future__ import annotations

from typing import Any

from witty_profiler.topology import Graph
from witty_profiler.topology.ids import cpu_id, host_id, numa_id, process_id, thread_id
from witty_profiler.topology.models import CollectorStatus, Meta

H = "h1"


def new_graph(source: str = "live", duration_s: float | None = 10.0, collectors: dict[str, str] | None = None) -> Graph:
    statuses = {name: CollectorStatus(status=status) for name, status in (collectors or {"process": "ok"}).items()}
    return Graph(Meta(hosts=[H], source=source, duration_s=duration_s, interval_s=1.0,
                      started_at="2026-12-02T09:00:00Z" if duration_s else None, collectors=statuses))


def host(g: Graph, **metrics: Any) -> str:
    return g.entity_of("host", host_id(H), {"name": H}, metrics).id


def cpu(g: Graph, n: int, **metrics: Any) -> str:
    return g.entity_of("cpu", cpu_id(H, n), {"cpu": n}, metrics).id


def numa(g: Graph, node: int, cpus: str, distances: dict[int, int] | None = None, **metrics: Any) -> str:
    attrs: dict[str, Any] = {"node": node, "cpus": cpus}
    if distances:
        attrs["distances"] = {str(k): v for k, v in distances.items()}
    nid = g.entity_of("numa_node", numa_id(H, node), attrs, metrics).id
    for other, d in (distances or {}).items():
        g.edge_of("numa_distance", nid, numa_id(H, other), {"distance": d})
    return nid


def process(g: Graph, pid: int, name: str = "python3", ppid: int | None = None, ai: bool | None = True,
            role: str | None = "trainer", attrs: dict[str, Any] | None = None, **metrics: Any) -> str:
    a: dict[str, Any] = {"pid": pid, "name": name, "role": role}
    if ai is not None:
        a["ai"] = ai
    if ppid is not None:
        a["ppid"] = ppid
        g.edge_of("parent_of", process_id(H, ppid), process_id(H, pid))
    a.update(attrs or {})
    return g.entity_of("process", process_id(H, pid), a, metrics).id


def thread(g: Graph, pid: int, tid: int, name: str = "python3", attrs: dict[str, Any] | None = None,
           **metrics: Any) -> str:
    tid_id = g.entity_of("thread", thread_id(H, pid, tid), {"tid": tid, "pid": pid, "name": name, **(attrs or {})},
                         metrics).id
    g.edge_of("has_thread", process_id(H, pid), tid_id)
    return tid_id


def device(g: Graph, kind: str, address: str, index: int, numa_node: int | None = None, **metrics: Any) -> str:
    did = g.entity_of(kind, f"{kind}:{H}:{address}", {"index": index, "pci_address": address,
                                                      **({"numa_node": numa_node} if numa_node is not None else {})},
                      metrics).id
    if numa_node is not None:
        g.edge_of("local_to", did, numa_id(H, numa_node))
    return did


def uses(g: Graph, pid: int, device_id: str) -> str:
    return g.edge_of("uses_device", process_id(H, pid), device_id).id


def runs_on(g: Graph, pid: int, tid: int, node: int, runtime_ns: float) -> str:
    return g.edge_of("runs_on", thread_id(H, pid, tid), numa_id(H, node), metrics={"runtime_ns_total": runtime_ns}).id


def allocates_on(g: Graph, pid: int, node: int, pages: float) -> str:
    return g.edge_of("allocates_on", process_id(H, pid), numa_id(H, node), metrics={"pages": pages}).id


def ipc(g: Graph, kind: str, src_pid: int, dst_pid: int, **metrics: Any) -> str:
    return g.edge_of(kind, process_id(H, src_pid), process_id(H, dst_pid), {"inode": 1}, metrics).id


def cgroup(g: Graph, path: str, version: str = "v1", members: tuple[int, ...] = (), **metrics: Any) -> str:
    cid = g.entity_of("cgroup", f"cgroup:{H}:{version}:{path}", {"path": path}, metrics).id
    for pid in members:
        g.edge_of("in_cgroup", process_id(H, pid), cid)
    return cid


def two_numa_host(g: Graph) -> None:
    numa(g, 0, "0-3", {0: 10, 1: 21})
    numa(g, 1, "4-7", {0: 21, 1: 10})


# -- threshold cases: at, just below and just above each level ---------------------------------------
def threshold_cases(layer: int) -> list:
    import pytest

    from witty_profiler.diagnosis.catalog import catalog
    cases = []
    for p in catalog().values():
        if p.layer != layer:
            continue
        for t in p.thresholds:
            for level, limit in t.levels().items():
                cases.append(pytest.param(p.id, t.name, level, limit, t.direction, id=f"{p.id}.{t.name}.{level}"))
    return cases


def _eps(limit: float) -> float:
    return max(abs(limit) * 1e-3, 1e-3)


def assert_threshold(build, pattern: str, level: str, limit: float, direction: str, **kwargs: Any) -> None:
    """`build(value)` makes a graph where `value` is the measure the threshold is compared with.
    Just past the level the pattern fires at that level and cites the level in its evidence; at the
    level and just before it, it does not reach that level."""
    from witty_profiler.diagnosis import diagnose
    from witty_profiler.diagnosis.catalog import LEVELS, number
    step = _eps(limit)
    past, before = (limit + step, limit - step) if direction == "above" else (limit - step, limit + step)
    d = diagnose(build(past), **kwargs)
    f = d.finding(pattern)
    assert f is not None, f"{pattern} did not fire at {past} (level {level} {limit}): {d.status(pattern)} " \
                          f"{[c.reason for c in d.coverage if c.pattern == pattern]}"
    assert f.severity == level, (pattern, past, f.severity)
    sign = ">" if direction == "above" else "<"
    assert any(e.threshold == f"{sign} {number(limit)}" for e in f.evidence), [e.threshold for e in f.evidence]
    lower = [lv for lv in LEVELS[LEVELS.index(level) + 1:]]
    for value in (limit, before):
        d = diagnose(build(value), **kwargs)
        f = d.finding(pattern)
        if f is not None:
            assert f.severity in lower, (pattern, value, f.severity)
        else:
            assert d.status(pattern) == "clear", (pattern, value, d.coverage)


def linked_devices(g: Graph, kind: str, name: str, links_up: list[float], links: float | None = None,
                   **metrics: Any) -> list[str]:
    """GPUs or NPUs of one model on the host, the i-th with links_up[i] NVLink/HCCS links up of `links`
    (the most up, by default)."""
    top = links if links is not None else max(links_up)
    ids = []
    for i, up in enumerate(links_up):
        did = device(g, kind, f"0000:{0x1b + i:02x}:00.0", i, nvlink_links=top, nvlink_links_up=up,
                     nvlink_links_down=top - up, **metrics)
        g.entity(did).attrs["name"] = name
        ids.append(did)
    return ids
