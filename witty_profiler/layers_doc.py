"""`references/layers.md` of the Agent Skill, generated: for each of the seven layers, what it
covers and where its data comes from (written here), its patterns and the metrics they read
(from the diagnosis catalog and topology.vocabulary), so the page cannot drift from the code.

`witty-profiler skill layers > skills/bottleneck-identification/references/layers.md`
regenerates it; tests/test_skill.py fails when the file is stale.
"""

from __future__ import annotations

from witty_profiler.diagnosis.catalog import catalog
from witty_profiler.diagnosis.models import LAYERS
from witty_profiler.topology.vocabulary import METRICS, metric_info

# layer name -> (what it covers, where its data comes from)
ABOUT: dict[str, tuple[str, str]] = {
    "compute": (
        "Whether the processors do useful work: CPU busy time of the host, the workload's "
        "processes and threads, accelerator (GPU/NPU) busy time and clocks, instructions per "
        "cycle, single threads that serialise the work.",
        "/proc/stat, /proc/PID/stat and /proc/PID/task/TID/stat over the window; NVML for NVIDIA "
        "GPUs, npu-smi for Ascend NPUs; perf_event_open hardware counters where the host has a PMU."),
    "memory": (
        "Whether memory feeds the processors: last-level cache misses, memory and HBM bandwidth, "
        "memory pressure (PSI stalls, swapping, major faults), device memory filling up.",
        "/proc/meminfo, /proc/vmstat, /proc/pressure/memory, /proc/PID/stat (faults), cgroup memory "
        "files; NVML / npu-smi for device memory and HBM bandwidth; PMU counters for the cache; resctrl "
        "memory bandwidth monitoring or uncore memory-controller PMUs for DRAM bandwidth, SMBIOS memory devices "
        "for its peak."),
    "interconnect": (
        "Whether data crosses the host's internal links well: NUMA placement of threads and "
        "pages against the devices they use, remote memory access, PCIe throughput and link "
        "training, NVLink/HCCS use.",
        "/sys/devices/system/node (CPUs, distances), /proc/PID/numa_maps (pages per node), "
        "/proc/PID/status (allowed CPUs and nodes), schedstat (where threads ran), /proc/vmstat "
        "numa_* counters, /sys/bus/pci/devices (numa_node, local_cpulist, link speed and width), NVML."),
    "network": (
        "Whether traffic between hosts flows: round-trip times, TCP retransmissions, RDMA port "
        "throughput and errors, NIC throughput against link speed, drops.",
        "/proc/net/dev, /proc/net/snmp, TCP per-connection state from sock_diag (ss -ti), "
        "/sys/class/net (speed), /sys/class/infiniband (port counters)."),
    "storage": (
        "Whether the disks keep up: CPU time lost waiting for I/O, device busy time and latency, "
        "long write bursts such as checkpoints.",
        "/proc/stat (iowait), /proc/pressure/io, /proc/diskstats, /proc/PID/io."),
    "control": (
        "Whether the scheduler and the resource controls let the work run: run-queue delay, "
        "cgroup CPU quota throttling, lock (futex) waits, imbalance between sibling workers, "
        "more runnable threads than allowed CPUs.",
        "/proc/PID/task/TID/schedstat and status (run-queue wait, context switches), cgroup v1/v2 "
        "cpu.stat and cpu.max / cfs_quota, eBPF tracepoints (futex) where available."),
    "dataplane": (
        "Whether the pipeline between stages flows: a consumer (trainer, accelerator user) waiting "
        "for input from busy producers, saturated preprocessing workers, idle gaps in the "
        "consumer's activity, queues between stages that keep growing.",
        "The IPC topology (pipes and unix sockets from /proc/PID/fd and sock_diag, local TCP, "
        "shared memory, SysV queues) joined with the per-process CPU, blocking and queue metrics."),
}


UNIT_SUFFIXES = ("_pct", "_per_s", "_bytes", "_us", "_ms", "_ns", "_mhz", "_w", "_c", "_gts", "_total", "_s",
                 "_gbps", "_mbps", "_cores", "_p95", "_max")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def split_reads(names: set[str]) -> tuple[dict[str, set[str]], dict[str, set[str]], set[str]]:
    """A pattern reads `<entity or edge type>.<name>` or a bare edge type. Returns
    (metric -> types, attribute -> types, relations)."""
    metrics: dict[str, set[str]] = {}
    attrs: dict[str, set[str]] = {}
    relations: set[str] = set()
    for item in names:
        owner, _, name = item.rpartition(".")
        if not owner:
            relations.add(name)
        elif metric_info(name) or name.endswith(UNIT_SUFFIXES):
            metrics.setdefault(name, set()).add(owner)
        else:
            attrs.setdefault(name, set()).add(owner)
    return metrics, attrs, relations


def undefined_metrics() -> list[str]:
    """Metric names the catalog reads that topology/vocabulary.py does not define."""
    metrics, _, _ = split_reads({m for p in catalog().values() for m in p.metrics})
    return sorted(m for m in metrics if metric_info(m) is None)


def _order(name: str) -> tuple[int, str]:
    base = name.removesuffix("_p95").removesuffix("_max")
    return (list(METRICS).index(base) if base in METRICS else len(METRICS), name)


def layers_markdown() -> str:
    patterns = list(catalog().values())
    out = ["# The seven layers", "",
           "Generated from the diagnosis catalog and topology/vocabulary.py by "
           "`witty-profiler skill layers`; do not edit by hand.",
           "Thresholds: [thresholds.md](thresholds.md). Each pattern in full: [patterns.md](patterns.md).", ""]
    for number, name, title in LAYERS:
        covers, sources = ABOUT[name]
        mine = [p for p in patterns if p.layer == number]
        out += [f"## Layer {number}: {title} (`{name}`)", "", covers, "", f"Sources: {sources}", "",
                "| pattern | title | needs |", "|---|---|---|"]
        out += [f"| `{p.id}` | {_cell(p.title)} | {_cell(p.needs) or '/proc and /sys'} |" for p in mine]
        metrics, attrs, relations = split_reads({m for p in mine for m in p.metrics})
        out += ["", "| metric | on | unit | meaning |", "|---|---|---|---|"]
        for metric in sorted(metrics, key=_order):
            info = metric_info(metric)
            unit, meaning = (info.unit, info.help) if info else ("?", "not defined in topology/vocabulary.py")
            out.append(f"| `{metric}` | {', '.join(sorted(metrics[metric]))} | {_cell(unit)} | {_cell(meaning)} |")
        if attrs:
            out += ["", "Attributes read: " + ", ".join(
                f"`{a}` ({', '.join(sorted(attrs[a]))})" for a in sorted(attrs)) + "."]
        if relations:
            out += ["", "Relations followed: " + ", ".join(f"`{r}`" for r in sorted(relations)) + "."]
        out.append("")
    return "\n".join(out)
