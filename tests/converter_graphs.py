"""A small hand-built graph for the converter tests: one host with a training job whose GPU is
idle, a throttled cgroup, a growing pipe, an overloaded disk and retransmitting TCP, so that
the diagnosis has findings in most layers and every view has rows to rank."""

from __future__ import annotations

from witty_profiler.topology import Graph
from witty_profiler.topology.models import CollectorStatus, Meta


def hand_graph() -> Graph:
    h = "n1"
    g = Graph(Meta(hosts=[h], started_at="2026-12-02T09:00:00Z", duration_s=10.0, interval_s=1.0,
                   host_info={h: {"cpus": 8, "numa_nodes": 2}}, source="synthetic",
                   collectors={"cpu": CollectorStatus(status="ok"), "process": CollectorStatus(status="ok"),
                               "rdma": CollectorStatus(status="unavailable", reason="no RDMA device on this host")}))
    g.entity_of("host", f"host:{h}", metrics={
        "cpu_util_pct": 62.0, "cpu_iowait_pct": 31.0, "load1": 9.5, "psi_io_some_pct": 40.0,
        "psi_cpu_some_pct": 12.0, "mem_total_bytes": 64 * 2 ** 30, "mem_available_bytes": 20 * 2 ** 30,
        "tcp_retrans_pct": 2.5, "tcp_out_segs_per_s": 4000.0, "tcp_retrans_segs_per_s": 100.0,
        "context_switches_per_s": 25000.0})
    for node in (0, 1):
        g.entity_of("numa_node", f"numa_node:{h}:{node}", attrs={
            "node": node, "cpus": f"{node * 4}-{node * 4 + 3}", "distances": {"0": 10 + 11 * node, "1": 21 - 11 * node}},
            metrics={"mem_total_bytes": 32 * 2 ** 30, "mem_free_bytes": 10 * 2 ** 30})
    for c in range(8):
        g.entity_of("cpu", f"cpu:{h}:{c}", metrics={"cpu_util_pct": 12.5 * c, "cpu_iowait_pct": 30.0 if c < 2 else 1.0})
    gpu = f"gpu:{h}:0000:3b:00.0"
    g.entity_of("gpu", gpu, attrs={"index": 0, "name": "NVIDIA A100", "numa_node": 1},
                metrics={"util_pct": 8.0, "memory_used_bytes": 30 * 2 ** 30, "memory_total_bytes": 40 * 2 ** 30,
                         "memory_used_pct": 75.0, "temperature_c": 41})
    g.edge_of("local_to", gpu, f"numa_node:{h}:1")
    trainer = f"process:{h}:100"
    g.entity_of("process", trainer, attrs={
        "pid": 100, "ppid": 1, "name": "python3", "ai": True, "framework": "pytorch", "role": "trainer", "rank": 0,
        "cpus_allowed": "0-3", "numa_pages": {"0": 90000, "1": 10000}},
        metrics={"cpu_util_pct": 35.0, "num_threads": 24, "rss_bytes": 12 * 2 ** 30, "runqueue_wait_pct": 35.0,
                 "cpus_allowed_count": 4, "runnable_threads": 16, "read_bytes_per_s": 2e6, "write_bytes_per_s": 9e7,
                 "write_burst_s": 12.0})
    g.edge_of("uses_device", trainer, gpu)
    for t in range(24):
        tid = 100 if t == 0 else 1000 + t
        te = f"thread:{h}:100:{tid}"
        g.entity_of("thread", te, attrs={"tid": tid, "pid": 100, "name": "python3" if t == 0 else f"worker{t}",
                                         "cpus_allowed": "0-3"},
                    metrics={"cpu_util_pct": 95.0 if t == 0 else 2.0 + t, "runqueue_wait_pct": 10.0 + t})
        g.edge_of("has_thread", trainer, te)
    cgroup = f"cgroup:{h}:2:/job"
    g.entity_of("cgroup", cgroup, metrics={"cpu_quota_cores": 2.0, "throttled_periods_pct": 60.0,
                                           "throttled_ms_per_s": 300.0})
    g.edge_of("in_cgroup", trainer, cgroup)
    for w in range(4):
        pid = 200 + w
        wid = f"process:{h}:{pid}"
        g.entity_of("process", wid, attrs={"pid": pid, "ppid": 100, "name": "pt_data_worker", "ai": True,
                                           "framework": "pytorch", "role": "loader", "cpus_allowed": "0-3"},
                    metrics={"cpu_util_pct": 97.0, "num_threads": 2, "read_bytes_per_s": 5e7})
        g.edge_of("parent_of", trainer, wid)
        g.edge_of("pipe", wid, trainer, metrics={"bytes_per_s": 2e7, "channels": 1, "queued_bytes": 60000 + w,
                                                 "queued_bytes_growth_per_s": 5000.0})
    for pid in range(300, 340):
        g.entity_of("process", f"process:{h}:{pid}", attrs={"pid": pid, "ppid": 1, "name": f"daemon{pid}"},
                    metrics={"cpu_util_pct": float(pid % 7), "rss_bytes": pid * 2 ** 20, "num_threads": 3})
    g.entity_of("block_device", f"block_device:{h}:nvme0n1", metrics={
        "disk_util_pct": 93.0, "await_ms": 18.0, "write_bytes_per_s": 9e8, "read_bytes_per_s": 1e7,
        "write_iops": 7000.0, "read_iops": 100.0})
    g.entity_of("nic", f"nic:{h}:eth0", attrs={"speed_mbps": 25000, "numa_node": 0},
                metrics={"rx_bytes_per_s": 1e8, "tx_bytes_per_s": 2e8, "link_util_pct": 6.4})
    conn = f"tcp_connection:{h}:10.0.0.1:40000:10.0.0.2:29500"
    g.entity_of("tcp_connection", conn, attrs={"state": "ESTABLISHED", "pid": 100},
                metrics={"rtt_us": 150.0, "rtt_var_us": 20.0, "retrans_total": 40, "bytes_sent_total": 10 ** 8})
    g.edge_of("owns_connection", trainer, conn)
    return g
