"""NUMA nodes: their CPUs, memory and SLIT distances (has_cpu and numa_distance edges), and the
rates of each node's allocation counters (/sys/devices/system/node/nodeN/numastat) over the window.

`numa_topology` is shared with the process collector (which maps the CPU a task ran on to its node).
"""

from __future__ import annotations

import os
import time

from witty_profiler.collectors.base import Context, CounterCollector, register
from witty_profiler.collectors.lib.procfs import parse_kv_numbers, parse_meminfo, read_text
from witty_profiler.collectors.memory import remote_alloc_pct
from witty_profiler.topology import Graph
from witty_profiler.topology.cpulist import format_cpulist, parse_cpulist
from witty_profiler.topology.ids import cpu_id, numa_id
from witty_profiler.topology.vocabulary import E, M, T

_NUMASTAT_RATES = {"numa_hit": M.NUMA_HIT_PER_S, "numa_miss": M.NUMA_MISS_PER_S, "numa_foreign": M.NUMA_FOREIGN_PER_S,
                   "local_node": M.NUMA_LOCAL_PER_S, "other_node": M.NUMA_OTHER_PER_S}


def numa_topology(ctx: Context) -> dict[int, dict]:
    """{node: {"cpus": [..], "distances": {node: d}}} from sysfs, read once per round.
    A kernel without NUMA support shows no node directory: then everything is node 0."""
    cached = ctx.cache.get("numa_topology")
    if cached is not None:
        return cached
    base = f"{ctx.sys}/devices/system/node"
    nodes: dict[int, dict] = {}
    try:
        names = [n for n in os.listdir(base) if n.startswith("node") and n[4:].isdigit()]
    except OSError:
        names = []
    for name in sorted(names, key=lambda n: int(n[4:])):
        node = int(name[4:])
        cpus = parse_cpulist(read_text(f"{base}/{name}/cpulist"))
        dist = (read_text(f"{base}/{name}/distance") or "").split()
        nodes[node] = {"cpus": cpus, "distances": {}}
        nodes[node]["_dist"] = [int(d) for d in dist]
    order = sorted(nodes)
    for node in order:  # distance file columns follow the order of the online nodes
        row = nodes[node].pop("_dist")
        nodes[node]["distances"] = {other: d for other, d in zip(order, row)}
    ctx.cache["numa_topology"] = nodes
    return nodes


def cpu_to_node(ctx: Context) -> dict[int, int]:
    cached = ctx.cache.get("cpu_to_node")
    if cached is None:
        cached = {cpu: node for node, info in numa_topology(ctx).items() for cpu in info["cpus"]}
        ctx.cache["cpu_to_node"] = cached
    return cached


@register
class NumaCollector(CounterCollector):
    name = "numa"
    reads = "/sys/devices/system/node (CPUs, distances, meminfo, numastat)"
    needs = "any user"

    def start(self) -> None:
        self.nodes = numa_topology(self.ctx)
        super().start()

    def _read(self) -> None:
        for node in self.nodes:
            text = read_text(f"{self.ctx.sys}/devices/system/node/node{node}/numastat")
            if text is not None:
                self.series.add_many(node, time.monotonic(), parse_kv_numbers(text, sep=" "),
                                     keep=lambda k: k in _NUMASTAT_RATES)

    def finish(self) -> Graph:
        self._read()
        if not self.nodes:
            return self.unavailable(f"{self.ctx.sys}/devices/system/node not found: kernel without NUMA support")
        g = self.fragment()
        host = self.ctx.host
        for node, info in self.nodes.items():
            metrics: dict[str, float] = {}
            mem = parse_meminfo(read_text(f"{self.ctx.sys}/devices/system/node/node{node}/meminfo") or "")
            if "MemTotal" in mem:
                metrics[M.MEM_TOTAL_BYTES] = mem["MemTotal"]
                metrics[M.MEM_FREE_BYTES] = mem.get("MemFree", 0)
            metrics.update(self.series.rates({(node, key): name for key, name in _NUMASTAT_RATES.items()}, digits=2))
            pct = remote_alloc_pct(self.series.get((node, "local_node")), self.series.get((node, "other_node")))
            if pct is not None:
                metrics[M.NUMA_REMOTE_ALLOC_PCT] = pct
            nid = numa_id(host, node)
            g.entity_of(T.NUMA_NODE, nid, {"node": node, "cpus": format_cpulist(info["cpus"]),
                                           "distances": {str(k): v for k, v in info["distances"].items()}}, metrics)
            for cpu in info["cpus"]:
                g.entity_of(T.CPU, cpu_id(host, cpu), {"cpu": cpu, "numa_node": node})
                g.edge_of(E.HAS_CPU, nid, cpu_id(host, cpu))
            for other_node, distance in info["distances"].items():
                if other_node != node:
                    g.edge_of(E.NUMA_DISTANCE, nid, numa_id(host, other_node), {"distance": distance})
        return g
