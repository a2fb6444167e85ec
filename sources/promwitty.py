"""This tool's own exporter series read back from Prometheus: `witty-profiler export` on each host
(scraped by Prometheus through --listen, or through node_exporter's textfile collector) -> the
processes, threads and placement of a past window.

Rows are (host, labels, values) as a range query gives them, values [(t, v), ...] at each step.
What each series becomes (ids as the live collectors make them, `host` being the graph's host,
i.e. the node_exporter instance the series came from, not the exporter's own `host` label):

  witty_process_{cpu_utilisation,runqueue_wait,numa_remote_pages,cpu_mem_colocation}_ratio
      -> process:<host>:<pid> cpu_util_pct, runqueue_wait_pct, numa_remote_pages_pct,
         cpu_mem_colocation_pct (x 100); mean over the window with _p95 and _max
  witty_process_runnable_threads -> runnable_threads (mean, _p95, _max)
  witty_process_resident_memory_bytes -> rss_bytes at the end of the window, with _max
  witty_process_write_burst_seconds -> write_burst_s, the longest of the exporter's windows (a
      burst across two of its windows counts as two)
  witty_thread_*_ratio -> thread:<host>:<pid>:<tid> (has_thread from its process) cpu_util_pct, runqueue_wait_pct
  witty_process_numa_runtime_ratio{numa_node} -> runs_on process -> numa_node, runtime_share_pct
  witty_process_numa_pages{numa_node} -> allocates_on process -> numa_node, pages (at the end)
  witty_process_device_info{device,numa_node} -> uses_device process -> gpu/npu (the entity
      dcgm-exporter or npu-exporter gave, else a bare one) and local_to device -> numa_node
  witty_finding{pattern,priority,layer} -> meta.exporter_findings: what the host's exporter judged
      on its own windows, with the part of this window it reported it in; a fact recorded, not a
      verdict of this diagnosis
  witty_collector_up, witty_window_seconds -> the status of prometheus.process and host_info

Each exported value is already the mean over one of the exporter's windows (`--duration`), so the
mean here is of those means, and p95/max are of window means, not of single samples.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from witty_profiler.sources.promapi import iso
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.ids import entity_id, numa_id, pci_address, process_id, thread_id
from witty_profiler.topology.models import CollectorStatus
from witty_profiler.topology.vocabulary import E, M, T
from witty_profiler.topology.windowstats import gauge

WITTY_SERIES = ("witty_process_.+|witty_thread_.+|witty_finding|witty_findings|witty_collector_up|"
                "witty_window_seconds")
# exported name -> (graph metric, factor back to the graph's unit)
PROCESS_GAUGES = {"witty_process_cpu_utilisation_ratio": (M.CPU_UTIL_PCT, 100.0),
                  "witty_process_runqueue_wait_ratio": (M.RUNQUEUE_WAIT_PCT, 100.0),
                  "witty_process_numa_remote_pages_ratio": (M.NUMA_REMOTE_PAGES_PCT, 100.0),
                  "witty_process_cpu_mem_colocation_ratio": (M.CPU_MEM_COLOCATION_PCT, 100.0),
                  "witty_process_runnable_threads": (M.RUNNABLE_THREADS, 1.0)}
BURST = "witty_process_write_burst_seconds"  # the longest burst of any of the exporter's windows
THREAD_GAUGES = {"witty_thread_cpu_utilisation_ratio": (M.CPU_UTIL_PCT, 100.0),
                 "witty_thread_runqueue_wait_ratio": (M.RUNQUEUE_WAIT_PCT, 100.0)}
AI_ROLES = ("trainer", "inference", "loader", "launcher")  # topology.workload's roles of AI processes
DEVICE_TYPES = (T.GPU, T.NPU, T.PCI_DEVICE, T.NIC, T.BLOCK_DEVICE, T.RDMA_PORT)
HOW = ("run `witty-profiler export` on the hosts (--listen, scraped by this Prometheus, or --textfile for "
       "node_exporter's textfile collector)")


def _int(text: Any) -> int | None:
    return int(text) if isinstance(text, str) and text.isdigit() else None


def _merged(found: list[list]) -> list[tuple[float, float]]:
    """The samples of one quantity from several series (a renamed process, a restarted exporter), by time."""
    by_time: dict[float, float] = {}
    for values in found:
        by_time.update({t: v for t, v in values})
    return sorted(by_time.items())


def _stats(metric: str, values: list[tuple[float, float]], factor: float) -> dict[str, float]:
    return gauge(metric, [v * factor for _, v in values])


class _Rows:
    """The rows grouped by what they describe."""

    def __init__(self, rows: list[tuple[str, dict, list]]) -> None:
        self.processes: dict[tuple[str, int], dict[str, list]] = defaultdict(lambda: defaultdict(list))
        self.labels: dict[tuple[str, int], dict[str, str]] = defaultdict(dict)
        self.threads: dict[tuple[str, int, int], dict[str, list]] = defaultdict(lambda: defaultdict(list))
        self.thread_labels: dict[tuple[str, int, int], dict[str, str]] = defaultdict(dict)
        self.numa: dict[tuple[str, int, str, int], list] = defaultdict(list)
        self.devices: dict[tuple[str, int, str], tuple[str, list]] = {}
        self.findings: dict[tuple[str, str, str, str], list] = defaultdict(list)
        self.up: dict[tuple[str, str], list] = defaultdict(list)
        self.window: dict[str, list] = defaultdict(list)
        self.exporter_host: dict[str, str] = {}
        for host, labels, values in rows:
            self._add(host, labels, values)

    def _add(self, host: str, labels: dict, values: list) -> None:
        name = labels.get("__name__", "")
        pid = _int(labels.get("pid"))
        if labels.get("host"):
            self.exporter_host[host] = labels["host"]
        if name in PROCESS_GAUGES or name in ("witty_process_resident_memory_bytes", BURST):
            if pid is not None:
                self.processes[(host, pid)][name].append(values)
                self.labels[(host, pid)].update({k: v for k, v in labels.items() if v})
        elif name in THREAD_GAUGES:
            tid = _int(labels.get("tid"))
            if pid is not None and tid is not None:
                self.threads[(host, pid, tid)][name].append(values)
                self.thread_labels[(host, pid, tid)].update({k: v for k, v in labels.items() if v})
        elif name in ("witty_process_numa_runtime_ratio", "witty_process_numa_pages"):
            node = _int(labels.get("numa_node"))
            if pid is not None and node is not None:
                self.numa[(host, pid, name, node)].append(values)
        elif name == "witty_process_device_info":
            device = labels.get("device", "")
            if pid is not None and device:
                self.devices[(host, pid, device)] = (labels.get("numa_node", ""), values)
        elif name == "witty_finding":
            self.findings[(host, labels.get("pattern", ""), labels.get("priority", ""),
                           labels.get("layer", ""))].append(values)
        elif name == "witty_collector_up":
            self.up[(host, labels.get("collector", ""))].append(values)
        elif name == "witty_window_seconds":
            self.window[host].append(values)


def _numa_node(g: Graph, host: str, node: int) -> str:
    nid = numa_id(host, node)
    if g.entity(nid) is None:
        g.entity_of(T.NUMA_NODE, nid, {"node": node})
    return nid


def _device(g: Graph, host: str, short: str, node: str) -> str | None:
    """The entity of a device the exporter named 'gpu:0000:3b:00.0' (its id without the host)."""
    kind, _, key = short.partition(":")
    if kind not in DEVICE_TYPES or not key:
        return None
    if kind in (T.GPU, T.NPU, T.PCI_DEVICE):
        key = pci_address(key)
    eid = entity_id(kind, host, key)
    device = g.entity(eid)
    if device is None:
        attrs: dict[str, Any] = {"pci_address": key} if kind in (T.GPU, T.NPU, T.PCI_DEVICE) else {"name": key}
        device = g.entity_of(kind, eid, attrs)
    numa = _int(node)
    if numa is not None:
        device.attrs.setdefault("numa_node", numa)
        g.edge_of(E.LOCAL_TO, eid, _numa_node(g, host, numa))
    return eid


class WittyReadBack:
    """The read-back of a window read in batches of hosts: `add` each batch's rows, then `status`."""

    def __init__(self, g: Graph, step: float) -> None:
        self.g, self.step = g, step  # step: the query's, how long one sample stands for
        self.hosts: list[str] = []
        self.exporting: set[str] = set()
        self.down: set[str] = set()

    def add(self, rows: Iterable[tuple[str, dict, list]], hosts: list[str]) -> None:
        """Processes, threads, placement and the exporters' findings of `hosts` from their witty_* series."""
        g, r = self.g, _Rows(rows)
        self.hosts.extend(hosts)
        for (host, pid), series in sorted(r.processes.items()):
            labels = r.labels[(host, pid)]
            attrs: dict[str, Any] = {"pid": pid, "name": labels.get("comm", "")}
            role = labels.get("role")
            if role:
                attrs["role"] = role
            attrs["ai"] = role in AI_ROLES
            rank = labels.get("rank")
            if rank:
                attrs["rank"] = _int(rank) if _int(rank) is not None else rank
            metrics: dict[str, float] = {}
            for name, (metric, factor) in PROCESS_GAUGES.items():
                if name in series:
                    metrics.update(_stats(metric, _merged(series[name]), factor))
            rss = _merged(series.get("witty_process_resident_memory_bytes", []))
            if rss:
                metrics[M.RSS_BYTES] = int(rss[-1][1])
                metrics[f"{M.RSS_BYTES}_max"] = int(max(v for _, v in rss))
            bursts = _merged(series.get(BURST, []))
            if bursts:
                metrics[M.WRITE_BURST_S] = max(v for _, v in bursts)
            g.entity_of(T.PROCESS, process_id(host, pid), attrs, metrics)
        for (host, pid, tid), series in sorted(r.threads.items()):
            labels = r.thread_labels[(host, pid, tid)]
            attrs = {"tid": tid, "pid": pid, "name": labels.get("comm", "")}
            metrics = {}
            for name, (metric, factor) in THREAD_GAUGES.items():
                if name in series:
                    metrics.update(_stats(metric, _merged(series[name]), factor))
            tid_id = g.entity_of(T.THREAD, thread_id(host, pid, tid), attrs, metrics).id
            g.edge_of(E.HAS_THREAD, process_id(host, pid), tid_id)
        for (host, pid, name, node), found in sorted(r.numa.items()):
            values = _merged(found)
            nid = _numa_node(g, host, node)
            if name == "witty_process_numa_runtime_ratio":
                g.edge_of(E.RUNS_ON, process_id(host, pid), nid,
                          metrics=gauge(M.RUNTIME_SHARE_PCT, [v * 100 for _, v in values]))
            else:
                g.edge_of(E.ALLOCATES_ON, process_id(host, pid), nid, metrics={M.PAGES: int(values[-1][1])})
        for (host, pid, short), (node, _) in sorted(r.devices.items()):
            eid = _device(g, host, short, node)
            if eid is not None and g.entity(process_id(host, pid)) is not None:
                g.edge_of(E.USES_DEVICE, process_id(host, pid), eid)
        findings = []
        for (host, pattern, priority, layer), found in sorted(r.findings.items()):
            seen = [t for t, v in _merged(found) if v >= 1]
            if not seen or not pattern:
                continue
            findings.append({"host": host, "pattern": pattern, "priority": priority,
                             **({"layer": int(layer)} if layer.isdigit() else {}),
                             "first_seen": iso(seen[0]), "last_seen": iso(seen[-1]),
                             "reported_s": round(len(seen) * self.step, 3),
                             "source": f"witty-profiler export on {r.exporter_host.get(host, host)}"})
        if findings:
            g.meta.extra.setdefault("exporter_findings", []).extend(findings)
        for host, found in r.window.items():
            values = _merged(found)
            if values:
                g.meta.host_info.setdefault(host, {})["exporter_window_s"] = values[-1][1]
        self.exporting |= {h for h, _ in r.processes} | {h for h, *_ in r.findings} | set(r.window)
        self.down |= {f"{c} on {h}" for (h, c), found in r.up.items() if _merged(found) and _merged(found)[-1][1] == 0}

    def status(self) -> CollectorStatus:
        """The status of prometheus.process over every batch."""
        if not self.exporting:
            return CollectorStatus("unavailable", "no witty_* series: Prometheus holds no per-process, per-thread or "
                                                  f"placement metrics of these hosts; {HOW}")
        down = sorted(self.down)
        notes = [f"the hosts' exporters report collector(s) down: {', '.join(down[:6])}"
                 f"{' …' if len(down) > 6 else ''}"] if down else []
        lacking = [h for h in self.hosts if h not in self.exporting]
        if lacking:
            notes.insert(0, f"no witty_* series on {len(lacking)} of {len(self.hosts)} hosts ({', '.join(lacking[:3])}"
                            f"{' …' if len(lacking) > 3 else ''}): no processes there; {HOW}")
        return CollectorStatus("partial", "; ".join(notes)) if notes else CollectorStatus("ok")


def add_witty(g: Graph, rows: Iterable[tuple[str, dict, list]], step: float, hosts: list[str]) -> CollectorStatus:
    """The read-back of one set of rows (see WittyReadBack); the status of prometheus.process."""
    back = WittyReadBack(g, step)
    back.add(rows, hosts)
    return back.status()
