"""How long the whole catalog takes on large graphs: 10k, 100k and 300k entities.

The graph is a busy AI host: NUMA nodes with CPUs, GPUs with their users, a training job whose
ranks have loader workers linked by pipes, and a crowd of other processes with threads (most of
the entities; each thread has run-time and allowed-on edges, about 3 edges per entity), cgroups
and TCP connections, with metrics set so that most patterns are evaluated (and several fire). Two runs are timed: the AI workload in scope (ai=true processes),
and a named pid. Target: under 2 s at 100k entities, linear in size.

Each is timed in CPU time (the machine may be shared) against a baseline measured in the same rounds,
interleaved with it: `dumps_graph` of the same graph, the JSON every window writes, linear in the
graph's size. Each call starts from a graph without its indexes (built by the first reader of a
window's graph and kept on it), so the diagnosis pays for them as it does once per window. A figure
is the median of the per-round ratios with their range, beside the baseline's own CPU time (median and
range); a ratio that stays flat from 10k to 300k entities says the diagnosis is linear in size,
whatever the machine's speed.

    python3 benchmarks/diagnose_scale.py [--sizes 10000,100000,300000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from witty_profiler.diagnosis import diagnose  # noqa: E402
from witty_profiler.diagnosis.report import report  # noqa: E402
from witty_profiler.topology import Graph, dumps_graph  # noqa: E402

from benchmarks.timing import load, machine, ratios  # noqa: E402
from witty_profiler.topology.ids import cpu_id, numa_id, process_id, thread_id  # noqa: E402
from witty_profiler.topology.models import CollectorStatus, Meta  # noqa: E402

H = "bench"
NODES, CPUS_PER_NODE, GPUS, RANKS, LOADERS = 8, 24, 8, 8, 4


def build(entities: int, seed: int = 11) -> Graph:
    rnd = random.Random(seed)
    g = Graph(Meta(hosts=[H], source="synthetic", duration_s=10.0, interval_s=1.0,
                   started_at="2026-12-02T09:00:00Z",
                   collectors={n: CollectorStatus(status="ok") for n in ("process", "cpu", "gpu", "cgroup", "ipc")}))
    g.entity_of("host", f"host:{H}", {"name": H}, {
        "cpu_util_pct": 93.0, "cpu_iowait_pct": 4.0, "psi_cpu_some_pct": 40.0, "psi_memory_some_pct": 1.0,
        "psi_io_some_pct": 3.0, "tcp_retrans_pct": 0.3, "tcp_out_segs_per_s": 20000.0, "major_faults_per_s": 10.0})
    for n in range(NODES):
        first = n * CPUS_PER_NODE
        g.entity_of("numa_node", numa_id(H, n), {"node": n, "cpus": f"{first}-{first + CPUS_PER_NODE - 1}"},
                    {"numa_remote_alloc_pct": rnd.uniform(0, 40)})
        for m in range(NODES):
            g.edge_of("numa_distance", numa_id(H, n), numa_id(H, m), {"distance": 10 if m == n else 21})
        for c in range(first, first + CPUS_PER_NODE):
            g.entity_of("cpu", cpu_id(H, c), {"cpu": c}, {"cpu_util_pct": rnd.uniform(50, 100)})
    gpus = []
    for i in range(GPUS):
        gid = f"gpu:{H}:0000:{0x18 + i:02x}:00.0"
        gpus.append(gid)
        g.entity_of("gpu", gid, {"index": i, "numa_node": i}, {
            "util_pct": rnd.uniform(10, 95), "util_pct_p95": 99.0, "memory_used_pct": 90.0, "mem_bw_util_pct": 60.0,
            "pcie_util_pct": 40.0, "nvlink_util_pct": 30.0, "throttle_thermal": 0, "throttle_power": 0,
            "pcie_link_gen": 5, "pcie_link_gen_max": 5, "pcie_link_width": 16, "pcie_link_width_max": 16})
        g.edge_of("local_to", gid, numa_id(H, i))
    g.entity_of("process", process_id(H, 100), {"pid": 100, "name": "torchrun", "ai": True, "role": "launcher"})
    pid = 1000
    for rank in range(RANKS):
        rpid = pid
        pid += 1
        node = (rank + 1) % NODES  # deliberately one node off its GPU
        g.entity_of("process", process_id(H, rpid), {
            "pid": rpid, "name": "python3", "ai": True, "role": "trainer", "rank": rank,
            "cpus_allowed": f"{node * CPUS_PER_NODE}-{node * CPUS_PER_NODE + CPUS_PER_NODE - 1}"},
            {"cpu_util_pct": rnd.uniform(5, 100), "runqueue_wait_pct": rnd.uniform(0, 60), "runnable_threads": 12,
             "write_burst_s": 2.0})
        g.edge_of("parent_of", process_id(H, 100), process_id(H, rpid))
        g.edge_of("uses_device", process_id(H, rpid), gpus[rank])
        g.edge_of("allocates_on", process_id(H, rpid), numa_id(H, node), metrics={"pages": 900000})
        g.edge_of("runs_on", process_id(H, rpid), numa_id(H, node), metrics={"runtime_ns_total": 9e9})
        for w in range(LOADERS):
            g.entity_of("process", process_id(H, pid), {"pid": pid, "name": "pt_data_worker", "ai": True,
                                                         "role": "loader"}, {"cpu_util_pct": rnd.uniform(60, 100)})
            g.edge_of("parent_of", process_id(H, rpid), process_id(H, pid))
            g.edge_of("pipe", process_id(H, pid), process_id(H, rpid), {"inode": pid},
                      {"queued_bytes": 0, "queued_bytes_growth_per_s": 0.0})
            pid += 1
    # the crowd: processes with 4 threads each, in cgroups, some with TCP connections
    cgroups = [f"cgroup:{H}:v2:/svc/{i}" for i in range(50)]
    for i, cid in enumerate(cgroups):
        g.entity_of("cgroup", cid, {"path": f"/svc/{i}"}, {"throttled_periods_pct": rnd.uniform(0, 30)})
    while len(g) < entities:
        p = process_id(H, pid)
        g.entity_of("process", p, {"pid": pid, "name": f"svc{pid % 97}", "ai": False, "cpus_allowed": "0-191"},
                    {"cpu_util_pct": rnd.uniform(0, 20), "runqueue_wait_pct": rnd.uniform(0, 30),
                     "voluntary_ctxt_switches_per_s": rnd.uniform(0, 100)})
        g.edge_of("in_cgroup", p, cgroups[pid % len(cgroups)])
        for t in range(4):
            tid = thread_id(H, pid, pid * 10 + t)
            g.entity_of("thread", tid, {"tid": pid * 10 + t, "pid": pid}, {"cpu_util_pct": rnd.uniform(0, 5)})
            g.edge_of("has_thread", p, tid)
            node = numa_id(H, (pid + t) % NODES)
            g.edge_of("runs_on", tid, node, metrics={"runtime_ns_total": rnd.uniform(0, 1e9)})
            g.edge_of("allowed_on", tid, node)
        if pid % 10 == 0:
            conn = f"tcp_connection:{H}:10.0.0.1:{pid % 60000}:10.0.1.{pid % 250}:29500"
            g.entity_of("tcp_connection", conn, {"local": f"10.0.0.1:{pid % 60000}",
                                                 "remote": f"10.0.1.{pid % 250}:29500", "pid": pid},
                        {"rtt_us": rnd.uniform(10, 200), "bytes_sent_total": rnd.uniform(0, 1e8)})
            g.edge_of("owns_connection", p, conn)
        pid += 1
    return g


def unindexed(g: Graph) -> None:
    """Drop what the last call left on the graph (its type and edge indexes, the query index, the diagnosis),
    so that each timed call pays for its indexes as the first diagnosis of a window does."""
    g._by_type = g._edges_by_type = g._ends = None
    g._derived.clear()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000,300000")
    ap.add_argument("--repeat", type=int, default=5, help="interleaved rounds")
    args = ap.parse_args()
    print(f"{machine()}; {args.repeat} interleaved rounds, CPU time")
    print("| entities | edges | dumps_graph (baseline) | diagnose, AI scope / baseline | diagnose --pid / baseline | "
          "Markdown report / baseline | findings |")
    print("|---|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        g = build(size)
        d = diagnose(g)
        r = ratios({"ai": lambda: diagnose(g), "pid": lambda: diagnose(g, pids=[1000]), "md": lambda: report(d, g)},
                   lambda: dumps_graph(g), args.repeat, clock=time.process_time, setup=lambda: unindexed(g))
        counts = d.counts()
        print(f"| {g.entity_count():,} | {g.edge_count():,} | {r['ai'].base_text(digits=0)} | {r['ai'].text()} | "
              f"{r['pid'].text()} | {r['md'].text()} | "
              f"{len(d.findings)} (P0 {counts['P0']}, P1 {counts['P1']}, P2 {counts['P2']}); "
              f"{d.summary['not_evaluated']} not evaluated |", flush=True)
    print(f"load average at the end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
