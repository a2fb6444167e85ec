"""Graphs of several hosts for the cross-host patterns: ranks of one job spread over hosts, and host
facts (NIC speeds, devices) that peers should share. Built as `witty-profiler merge` leaves them."""

from __future__ import annotations

from typing import Any

from witty_profiler.topology import Graph
from witty_profiler.topology.ids import host_id, process_id
from witty_profiler.topology.models import CollectorStatus, Meta

JOB = "job:slurm:42"


def cluster(hosts: list[str], collectors: dict[str, str] | None = None) -> Graph:
    statuses = {f"{name}@{h}": CollectorStatus(status=status) for h in hosts
                for name, status in (collectors or {"process": "ok"}).items()}
    g = Graph(Meta(hosts=list(hosts), source="live", duration_s=10.0, interval_s=1.0,
                   started_at="2026-12-02T09:00:00Z", collectors=statuses))
    for h in hosts:
        g.entity_of("host", host_id(h), {"name": h}, {})
    return g


def rank(g: Graph, host: str, pid: int, rank_no: int, job: str = JOB, world: int = 8, **metrics: Any) -> str:
    pid_id = g.entity_of("process", process_id(host, pid), {
        "pid": pid, "name": "python3", "role": "trainer", "ai": True, "rank": rank_no, "world_size": world,
        "job": job}, metrics).id
    if g.entity(job) is None:
        g.entity_of("job", job, {"scheduler": job.split(":")[1], "job_id": job.split(":")[2], "world_size": world})
    g.edge_of("member_of", pid_id, job, {"rank": rank_no})
    return pid_id


def ranks_on_hosts(values: list[float], metric: str = "cpu_util_pct", **others: Any) -> Graph:
    """One rank per host (h0, h1, ...) with `metric` set to each value in turn."""
    hosts = [f"h{i}" for i in range(len(values))]
    g = cluster(hosts)
    for i, (h, v) in enumerate(zip(hosts, values)):
        rank(g, h, 100 + i, i, **{metric: v, **others})
    return g


def nic(g: Graph, host: str, name: str = "ib0", speed_mbps: float = 100000.0, **metrics: Any) -> str:
    return g.entity_of("nic", f"nic:{host}:{name}", {"pci_address": "0000:3b:00.0"},
                       {"speed_mbps": speed_mbps, **metrics}).id


def nic_speeds(speeds: list[float]) -> Graph:
    hosts = [f"h{i}" for i in range(len(speeds))]
    g = cluster(hosts)
    for h, speed in zip(hosts, speeds):
        nic(g, h, speed_mbps=speed)
    return g
