"""What a graph read from Prometheus cannot hold, as collector statuses.

A pattern that cannot judge says what it missed and quotes the statuses of the collectors whose
names hold its keywords (diagnosis.scope.Scope.missing): 'pmu'/'perf' for hardware counters,
'cgroup' for quota throttling, 'ebpf' for futex waits, 'ipc' for pipes and sockets between
processes, 'socket' for per-connection RTT, 'nvlink' for link capacities, 'pci' for PCIe link
states. Each status below is named for those keywords and gives the precise reason, so the coverage
of a diagnosis of a Prometheus window says "not in Prometheus, because ..." instead of "no such
collector ran".
"""

from __future__ import annotations

from witty_profiler.topology.models import CollectorStatus

LIVE = "collect on the host (`witty-profiler collect`) for it"
NOT_HELD = {
    "prometheus.pmu_perf": "hardware counters (IPC, LLC misses, DRAM bandwidth) are not read from Prometheus: "
                           "node_exporter's perf collector is off by default and its node_perf_* series are not "
                           f"mapped; {LIVE}",
    "prometheus.cgroup": "CPU quota throttling per cgroup is not read from Prometheus (cAdvisor's "
                         f"container_cpu_cfs_* series are not mapped); {LIVE}",
    "prometheus.ebpf": "futex (lock) wait times come only from this tool's eBPF collector; no exporter read "
                       f"here exports them; {LIVE}",
    "prometheus.ipc": "pipes, unix sockets, local TCP and shared memory between processes are not exported "
                      f"by node_exporter or by `witty-profiler export`; {LIVE}",
    "prometheus.socket": "per-connection TCP round-trip times are not in Prometheus (node_exporter exports "
                         f"host-wide TCP counters only); {LIVE}",
    "prometheus.nvlink": "NVLink/HCCS utilisation needs each device's active links and their speed, which "
                         "dcgm-exporter and npu-exporter do not export: their link traffic is read "
                         f"(nvlink_*bytes_per_s), not judged against a capacity; {LIVE}",
    "prometheus.pci": "PCIe link speed and width are not in Prometheus (not among node_exporter's collectors "
                      f"nor dcgm-exporter's default counters); {LIVE}",
}


def not_held() -> dict[str, CollectorStatus]:
    """The statuses of what Prometheus does not hold (processes are prometheus.process's own status)."""
    return {name: CollectorStatus("unavailable", reason) for name, reason in NOT_HELD.items()}
