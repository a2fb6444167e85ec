"""Hand-built graphs of trace ranks and collectives for the trace patterns' threshold and parameter tests."""

from __future__ import annotations

from witty_profiler.topology import Graph
from witty_profiler.topology.models import CollectorStatus, Meta

JOB = "trace:test"


def trace_graph() -> Graph:
    g = Graph(Meta(source="trace", collectors={"msprof": CollectorStatus("ok")}))
    g.entity_of("job", f"job:{JOB}", {"scheduler": "trace", "job_id": "test"})
    return g


def rank(g: Graph, n: int, **metrics) -> str:
    rid = g.entity_of("rank", f"rank:{JOB}:{n}", {"rank": n, "source": "msprof"}, metrics).id
    g.edge_of("member_of", rid, f"job:{JOB}", {"rank": n})
    return rid


def collective(g: Graph, name: str, op: str = "broadcast", **metrics) -> str:
    return g.entity_of("collective", f"collective:{JOB}:0,1:{name}", {"op": op, "group": "0,1"}, metrics).id


def step_gap(v: float) -> Graph:
    """Three ranks whose steps take 1000 ms each; the third communicates 10 v ms less and idles 10 v ms more:
    msprof's (max - min) / mean step of exposed communication and of free time is v %."""
    g = trace_graph()
    for n, d in enumerate((0.0, 0.0, 10 * v)):
        rank(g, n, compute_ms=500.0, comm_exposed_ms=300.0 - d, free_ms=200.0 + d)
    return g


def votes(v: float) -> Graph:
    """Two ranks without step times, int(v) collectives in each of which rank 1 arrived last."""
    g = trace_graph()
    r0, r1 = rank(g, 0), rank(g, 1)
    for i in range(max(int(v), 1)):
        cid = collective(g, f"op{i}", calls=1)
        g.edge_of("takes_part", r0, cid, {}, {"calls": 1, "wait_ms": 5.0, "last_arrivals": 0})
        g.edge_of("takes_part", r1, cid, {}, {"calls": 1, "wait_ms": 0.1, "last_arrivals": 1 if i < int(v) else 0})
    return g


def link_bandwidths(bandwidths: list[float], link: str = "RDMA") -> Graph:
    """One AllGather of ranks 0..n-1, each moving 100 MB over `link` at its bandwidth (GB/s)."""
    g = trace_graph()
    cid = collective(g, "allgather", op="allgather", calls=10)
    for n, bw in enumerate(bandwidths):
        rid = rank(g, n)
        g.edge_of("takes_part", rid, cid, {}, {"calls": 10})
        g.edge_of("takes_part", rid, cid, {"link": link},
                  {"transit_bytes": 100e6, "transit_ms": 100.0 / bw, "bandwidth_gbytes_per_s": bw}, qualifier=link)
    return g


def latency(v: float, message_bytes: float = 65536.0) -> Graph:
    """An AllReduce of two ranks' traces whose calls of message_bytes (latency-bound by default) take v us on the
    faster rank (its transfer time: the rank that arrived last waited least) and 1.5 v on the other."""
    g = trace_graph()
    cid = collective(g, "allreduce", op="allreduce", calls=100, duration_ms=1.25 * v / 1000,
                     message_bytes=message_bytes)
    for n, us in enumerate((v, 1.5 * v)):
        g.edge_of("takes_part", rank(g, n), cid, {}, {"calls": 100, "duration_ms": us / 1000})
    return g


def latency_message(v: float) -> Graph:
    """An AllReduce of two ranks taking 2000 us a call (critical) with messages of v bytes."""
    return latency(2000.0, message_bytes=v)


def bandwidth_z(v: float) -> Graph:
    """Four peers at 10 GB/s with a spread (MAD) such that a rank at 4 GB/s (2.5x slower: critical) has robust z v."""
    m = 2 * 0.6745 * 6 / v
    return link_bandwidths([10.0, 10.0, 10.0 - m, 10.0 + m, 4.0])


def link_peers(v: float) -> Graph:
    """int(v) ranks, the last at 4 GB/s and the others at 10 GB/s (2.5x slower: critical)."""
    n = int(v)
    return link_bandwidths([10.0] * (n - 1) + [4.0] if n else [])


def step_idle(v: float) -> Graph:
    """One rank whose 1000 ms step leaves the accelerator free 10 v ms: v % of the step idle."""
    g = trace_graph()
    rank(g, 0, step_time_ms=1000.0, compute_ms=1000.0 - 10 * v, comm_exposed_ms=0.0, free_ms=10 * v, steps=3)
    return g


def pipeline_stage(free: float, bubble: float, stage: float = 800.0) -> Graph:
    """One msprof rank of a pipeline stage: Stage (without the receive operators) `stage` ms, of it free `free` ms,
    and a Bubble (the receives) of `bubble` ms."""
    g = trace_graph()
    rank(g, 0, step_time_ms=stage, compute_ms=stage - free, comm_exposed_ms=bubble, free_ms=free, bubble_ms=bubble,
         steps=1)
    return g


def loading_share(v: float, free_of_loading: float = 1.0) -> Graph:
    """One Kineto rank whose 1000 ms step spends 10 v ms in the data loader (v % of the step) while its accelerator
    is free free_of_loading times as long."""
    g = trace_graph()
    rid = rank(g, 0, step_time_ms=1000.0, data_loading_ms=10 * v, free_ms=10 * v * free_of_loading,
               kernel_busy_pct=90.0, steps=3)
    g.entity(rid).attrs["source"] = "kineto"
    return g


def loading_free(v: float) -> Graph:
    """Data loading 300 ms of a 1000 ms step (30 %: critical), the accelerator free v times as long."""
    return loading_share(30.0, v)


def kernel_busy(v: float) -> Graph:
    """One Kineto rank whose kernels run v % of its step."""
    g = trace_graph()
    rid = rank(g, 0, step_time_ms=1000.0, compute_ms=10 * v, comm_ms=0.0, free_ms=1000.0 - 10 * v,
               kernel_busy_pct=v, steps=3)
    g.entity(rid).attrs["source"] = "kineto"
    return g
