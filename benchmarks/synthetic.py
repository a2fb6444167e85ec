"""A large, deterministic, plausible graph: a GPU training host with thousands of processes.

Used to check that every view fits its budget and stays fast on big graphs, and to measure
token figures in benchmarks/compact_tokens.py. Only names from witty_profiler.topology.vocabulary are used.
The shape: 8 NUMA nodes x 32 CPUs, 8 GPUs with NVLink, 4 NICs, 8 disks, one torchrun job of 8
ranks with DataLoader workers, and a crowd of other processes with many threads each; about
`entities` entities in all (threads make up most of them).

    python3 -m benchmarks.synthetic 100000 -o big.json
"""

from __future__ import annotations

import argparse
import random

from witty_profiler.topology import Graph
from witty_profiler.topology.ids import cpu_id, edge_id, numa_id, process_id
from witty_profiler.topology.models import CollectorStatus, Edge, Entity, Meta

NODES, CPUS_PER_NODE, GPUS = 8, 32, 8


def synthetic_graph(entities: int = 100_000, seed: int = 7, host: str = "synth") -> Graph:
    rnd = random.Random(seed)
    cpus = NODES * CPUS_PER_NODE
    g = Graph(Meta(hosts=[host], tool_version="0.1.0", started_at="2026-12-02T09:00:00Z", duration_s=10.0,
                   interval_s=1.0, host_info={host: {"cpus": cpus, "numa_nodes": NODES, "kernel": "6.1.0"}},
                   collectors={"process": CollectorStatus(status="ok"), "cpu": CollectorStatus(status="ok"),
                               "gpu": CollectorStatus(status="ok"),
                               "pmu": CollectorStatus(status="unavailable", reason="no PMU on this host")},
                   source="synthetic"))
    hid = f"host:{host}"
    g.entity_of("host", hid, metrics={"cpu_util_pct": 71.5, "cpu_iowait_pct": 2.5, "load1": 301.0,
                                      "psi_cpu_some_pct": 35.0, "mem_total_bytes": 2 * 1024 ** 4,
                                      "mem_available_bytes": 900 * 1024 ** 3, "tcp_retrans_pct": 0.4,
                                      "context_switches_per_s": 480_000.0})
    for n in range(NODES):
        first = n * CPUS_PER_NODE
        g.entity_of("numa_node", numa_id(host, n), attrs={
            "node": n, "cpus": f"{first}-{first + CPUS_PER_NODE - 1}",
            "distances": {str(m): 10 if m == n else (12 if m // 4 == n // 4 else 32) for m in range(NODES)}},
            metrics={"mem_total_bytes": 256 * 1024 ** 3, "mem_free_bytes": rnd.randint(20, 200) * 1024 ** 3})
        for c in range(first, first + CPUS_PER_NODE):
            g.entity_of("cpu", cpu_id(host, c), metrics={"cpu_util_pct": round(rnd.uniform(20, 100), 1),
                                                        "cpu_iowait_pct": round(rnd.uniform(0, 5), 1)})
            g.edge_of("has_cpu", numa_id(host, n), cpu_id(host, c))
    gpus = []
    for i in range(GPUS):
        gid = f"gpu:{host}:0000:{0x18 + 0x10 * i:02x}:00.0"
        gpus.append(gid)
        g.entity_of("gpu", gid, attrs={"index": i, "name": "NVIDIA H100 80GB HBM3", "numa_node": i},
                    metrics={"util_pct": round(rnd.uniform(15, 95), 1), "memory_used_bytes": 70 * 1024 ** 3,
                             "memory_total_bytes": 80 * 1024 ** 3, "memory_used_pct": 87.5,
                             "temperature_c": rnd.randint(40, 80), "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980})
        g.edge_of("local_to", gid, numa_id(host, i))
    for a in gpus:
        for b in gpus:
            if a < b:
                g.edge_of("device_link", a, b, attrs={"link_type": "NV18"})
    for i in range(4):
        nid = f"nic:{host}:ens{i}"
        g.entity_of("nic", nid, attrs={"speed_mbps": 100_000, "numa_node": i * 2},
                    metrics={"rx_bytes_per_s": rnd.uniform(1e8, 9e9), "tx_bytes_per_s": rnd.uniform(1e8, 9e9),
                             "link_util_pct": round(rnd.uniform(5, 80), 1)})
    for i in range(8):
        g.entity_of("block_device", f"block_device:{host}:nvme{i}n1",
                    metrics={"disk_util_pct": round(rnd.uniform(1, 60), 1), "await_ms": round(rnd.uniform(0.1, 4), 2),
                             "read_bytes_per_s": rnd.uniform(0, 2e9), "write_bytes_per_s": rnd.uniform(0, 1e9)})
    # the job: torchrun -> 8 ranks -> 4 loader workers each
    pid = 1000
    launcher = process_id(host, pid)
    g.entity_of("process", launcher, attrs={"pid": pid, "ppid": 1, "name": "torchrun", "ai": True,
                                            "framework": "torchrun", "role": "launcher"},
                metrics={"cpu_util_pct": 1.0, "num_threads": 4})
    procs: list[tuple[str, int, int]] = []  # (id, pid, threads to make)
    for rank in range(GPUS):
        pid += 1
        rid = process_id(host, pid)
        node = rank if rnd.random() < 0.75 else (rank + 1) % NODES  # a quarter sit on the wrong node
        g.entity_of("process", rid, attrs={
            "pid": pid, "ppid": 1000, "name": "python3", "ai": True, "framework": "pytorch", "role": "trainer",
            "rank": rank, "cpus_allowed": f"{node * CPUS_PER_NODE}-{node * CPUS_PER_NODE + CPUS_PER_NODE - 1}",
            "numa_pages": {str(node): 2_000_000, str((node + 3) % NODES): 150_000}},
            metrics={"cpu_util_pct": round(rnd.uniform(80, 400), 1), "rss_bytes": 60 * 1024 ** 3,
                     "num_threads": 64, "runqueue_wait_pct": round(rnd.uniform(1, 30), 1),
                     "cpus_allowed_count": CPUS_PER_NODE})
        g.edge_of("parent_of", launcher, rid)
        g.edge_of("uses_device", rid, gpus[rank], metrics={"memory_used_bytes": 70 * 1024 ** 3})
        procs.append((rid, pid, 64))
        for w in range(4):
            pid += 1
            wid = process_id(host, pid)
            g.entity_of("process", wid, attrs={"pid": pid, "ppid": pid - w - 1, "name": "pt_data_worker",
                                               "ai": True, "framework": "pytorch", "role": "loader"},
                        metrics={"cpu_util_pct": round(rnd.uniform(50, 100), 1), "num_threads": 2,
                                 "read_bytes_per_s": rnd.uniform(1e7, 3e8)})
            g.edge_of("parent_of", rid, wid)
            g.edge_of("pipe", wid, rid, metrics={"bytes_per_s": rnd.uniform(1e6, 5e8), "channels": 1,
                                                 "queued_bytes": rnd.randint(0, 65536)})
            procs.append((wid, pid, 2))
    # the crowd: fill the rest with processes of ~48 threads
    budget = entities - len(g) - 600
    while budget > 0:
        pid += 1
        n_threads = min(rnd.randint(8, 88), max(budget - 1, 1))
        g.entity_of("process", process_id(host, pid), attrs={"pid": pid, "ppid": 1, "name": f"svc{pid % 97}"},
                    metrics={"cpu_util_pct": round(rnd.expovariate(1 / 5), 2), "rss_bytes": rnd.randint(1, 4000) * 2 ** 20,
                             "num_threads": n_threads, "runqueue_wait_pct": round(rnd.uniform(0, 10), 2),
                             "voluntary_ctxt_switches_per_s": round(rnd.uniform(0, 500), 1)})
        procs.append((process_id(host, pid), pid, n_threads))
        budget -= n_threads + 1
    for ppid_id, ppid, n_threads in procs:
        for t in range(n_threads):  # the bulk of the graph
            tid = ppid if t == 0 else ppid * 100 + t
            te = f"thread:{host}:{ppid}:{tid}"  # = thread_id(host, ppid, tid), without the call per thread
            g.add_entity(Entity(id=te, type="thread", attrs={"tid": tid, "pid": ppid, "name": f"t{t}"},
                                                metrics={"cpu_util_pct": round(rnd.expovariate(1 / 3), 2),
                                                         "runqueue_wait_pct": round(rnd.uniform(0, 40), 2),
                                                         "nonvoluntary_ctxt_switches_per_s": round(rnd.uniform(0, 50), 1)}))
            g.add_edge(Edge(id=edge_id("has_thread", ppid_id, te), type="has_thread", source=ppid_id,
                                            target=te, attrs={}, metrics={}))
    for i in range(min(500, max(entities - len(g), 0))):
        owner = procs[rnd.randrange(len(procs))][0]
        cid = f"tcp_connection:{host}:10.0.0.1:{20000 + i}:10.0.{i % 8}.2:29500"
        g.entity_of("tcp_connection", cid, attrs={"state": "ESTABLISHED", "pid": int(owner.rsplit(":", 1)[1])},
                    metrics={"rtt_us": round(rnd.uniform(20, 400), 1), "retrans_total": rnd.randint(0, 5),
                             "bytes_sent_total": rnd.randint(0, 10 ** 9)})
        g.edge_of("owns_connection", owner, cid)
    return g


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("entities", type=int, nargs="?", default=100_000)
    parser.add_argument("-o", "--output", default="synthetic-graph.json")
    args = parser.parse_args()
    from witty_profiler.topology import dump_graph
    graph = synthetic_graph(args.entities)
    dump_graph(graph, args.output)
    print(f"{args.output}: {graph.entity_count()} entities, {graph.edge_count()} edges")


if __name__ == "__main__":
    main()
