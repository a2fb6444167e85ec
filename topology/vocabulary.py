"""The one place where entity types, edge types and metric names are defined, with units.

Collectors emit only names listed here, the diagnosis and the converters read only names listed
here, and `docs/graph-format` style references are generated from these tables. A metric name
carries its unit as a suffix (``_pct``, ``_bytes``, ``_bytes_per_s``, ``_per_s``, ``_us``, ``_ms``,
``_ns``, ``_mhz``, ``_w``, ``_c``, ``_gts``...). Window statistics of a sampled metric are stored
next to it as ``<name>_p95`` and ``<name>_max``. Metrics ending in ``_total`` are amounts over
the capture window (they add up when windows merge, see topology.merge).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    help: str


ENTITY_TYPES: dict[str, str] = {
    "host": "a machine; id host:<host>",
    "cpu": "a logical CPU; id cpu:<host>:<n>",
    "numa_node": "a NUMA node; id numa_node:<host>:<n>; attrs cpus, distances {node: distance}",
    "process": "a process; id process:<host>:<pid>; attrs pid, ppid, name, cmdline (redacted), cpus_allowed, mems_allowed, numa_pages, role, framework, rank, env (allowlisted), state, started_at, started_in_window, exited_in_window, in_scope, cgroup, ran_on_cpus (CPU lists in the kernel's '0-3,8' form)",
    "thread": "a thread; id thread:<host>:<pid>:<tid>; attrs tid, pid, name, state, cpus_allowed, ran_on_cpus, numa_runtime_ns, exited_in_window, role (loader, compute or launcher, from the names PyTorch gives its threads), futex_addr and futex_mapping (the futex word it spent the most lock wait on, hex, and the mapping it lies in: a file, [heap], [anon]; eBPF)",
    "container": "a container or pod; id container:<host>:<id>; attrs runtime, name, pod",
    "cgroup": "a cgroup; id cgroup:<host>:<version>:<path> (version v1 or v2); attrs version, path, controllers",
    "gpu": "an NVIDIA GPU; id gpu:<host>:<pci address>; attrs index, name, uuid, pci_address, numa_node, local_cpus, driver_version, throttle_reasons, pcie_link_degraded, nvlink_version",
    "npu": "an Ascend NPU chip; id npu:<host>:<pci address>; attrs index, chip, phy_id or device, name, health, pci_address, numa_node, cpu_affinity",
    "pci_device": "a PCI function; id pci_device:<host>:<pci address>; attrs class, numa_node, link speeds and widths",
    "block_device": "a disk; id block_device:<host>:<name>",
    "nic": "a network interface; id nic:<host>:<name>; attrs speed_mbps, pci_address, numa_node",
    "rdma_port": "an InfiniBand/RoCE port; id rdma_port:<host>:<device>:<port>; attrs state, phys_state, rate, link_layer, netdev, pci_address, numa_node, error/retrans/congestion_counters_delta",
    "tcp_connection": "one TCP connection; id tcp_connection:<host>:<local>:<remote>; attrs local, remote, state, pid",
    "socket": "a socket endpoint seen by the legacy format; id socket:<host>:<proto>:<addr>:<port>",
    "shared_memory": "a /dev/shm file or SysV shared memory segment; id shared_memory:<host>:<key>",
    "numa_set": "a set of NUMA nodes (legacy format); id numa_set:<host>:<list>",
    "rdma_device": "an RDMA device (HCA) seen by the legacy format; id rdma_device:<host>:<name>",
    "rdma_resource": "an RDMA protection domain, queue pair or memory region (legacy); id rdma_resource:<host>:<pd|qp|mr>:<keys>",
    "opaque": "a legacy record of a type this version does not know, kept as is",
}

EDGE_TYPES: dict[str, str] = {
    "parent_of": "process -> child process",
    "has_thread": "process -> thread",
    "runs_on": "process or thread -> numa_node where it ran; metrics runtime_share_pct, runtime_ns_total",
    "allowed_on": "process or thread -> numa_node it may run on (cpus_allowed)",
    "allocates_on": "process -> numa_node holding its pages; metrics pages, page_share_pct",
    "has_cpu": "numa_node -> cpu",
    "numa_distance": "numa_node -> numa_node; attrs distance (SLIT, 10 = local)",
    "local_to": "device (gpu, npu, nic, pci_device, rdma_port) -> its numa_node",
    "uses_device": "process -> gpu or npu; metrics memory_used_bytes",
    "in_container": "process -> container",
    "in_cgroup": "process -> cgroup",
    "device_link": "device -> device; attrs link_type (NVLink, HCCS, PIX, PXB, PHB, NODE, SYS, SIO...)",
    "near_nic": "gpu/npu -> nic or rdma_port closest to it on the PCIe tree; attrs link_type",
    "netdev_of": "rdma_port -> nic",
    "pci_function": "gpu, npu, nic or rdma_port -> the pci_device that implements it (its PCIe link state)",
    "pipe": "process -> process through a pipe (writer -> reader where known); attrs inode",
    "unix_socket": "process -> process through a connected unix socket pair; attrs inode",
    "tcp": "process -> process over local TCP (client -> server); metrics bytes_sent_total, bytes_received_total",
    "shm": "process -> process sharing a shared memory object; attrs path",
    "msg_queue": "process -> process sharing a SysV message queue; metrics queued_bytes",
    "owns_connection": "process -> tcp_connection",
    "uses_shm": "process -> shared_memory object it maps or holds open",
    "has_socket": "thread or process -> socket (legacy)",
    "sends_to": "thread -> socket, with a byte and packet flow (legacy); metrics bytes_total, packets_total, bytes_per_s",
    "numa_set_contains": "numa_set -> numa_node (legacy)",
    "owns": "a legacy ownership not covered above (e.g. process -> rdma_resource, pd -> queue pair)",
    "accesses": "a legacy access not covered above (e.g. rdma_resource -> rdma_device)",
    "connects_to": "rdma_resource (queue pair) -> its peer queue pair (legacy)",
    "has_port": "rdma_device -> rdma_port (legacy)",
    "ipc": "process -> process communicating by an IPC mechanism the legacy format does not name",
    "related": "a legacy edge of a type this version does not know, kept as is",
}

# process -> process relations of inter-process communication ('ipc': the legacy format's unnamed kind)
IPC_EDGES = ("pipe", "unix_socket", "tcp", "shm", "msg_queue", "ipc")

_M = Metric
METRICS: dict[str, Metric] = {m.name: m for m in [
    # CPU time, per host, cpu, process, thread and cgroup
    _M("cpu_util_pct", "%", "busy share of the window; for a process or thread in % of ONE core (200 = two cores busy)"),
    _M("cpu_user_pct", "%", "user-mode share of the window (same base as cpu_util_pct)"),
    _M("cpu_system_pct", "%", "kernel-mode share of the window (same base as cpu_util_pct)"),
    _M("cpu_iowait_pct", "%", "share of the window a CPU was idle with I/O outstanding"),
    _M("cpu_steal_pct", "%", "share of the window taken by the hypervisor"),
    _M("load1", "runnable tasks", "1-minute load average at the end of the window"),
    _M("cpus_allowed_count", "CPUs", "number of CPUs a task may run on"),
    _M("runqueue_wait_pct", "%", "share of runnable time spent waiting for a CPU (schedstat wait / (run + wait))"),
    _M("runqueue_wait_ms_per_s", "ms/s", "run-queue wait per second of the window"),
    _M("runqueue_wait_per_slice_us", "us", "mean run-queue wait per timeslice"),
    _M("timeslices_per_s", "1/s", "timeslices started per second"),
    _M("voluntary_ctxt_switches_per_s", "1/s", "voluntary context switches per second (blocking)"),
    _M("nonvoluntary_ctxt_switches_per_s", "1/s", "involuntary context switches per second (preemption)"),
    _M("context_switches_per_s", "1/s", "host context switches per second"),
    _M("num_threads", "threads", "threads of a process at the end of the window"),
    _M("runnable_threads", "threads", "threads in state R at the end of the window"),
    # memory
    _M("rss_bytes", "bytes", "resident set size"),
    _M("mem_total_bytes", "bytes", "memory installed (host or NUMA node)"),
    _M("mem_free_bytes", "bytes", "free memory (NUMA node)"),
    _M("mem_available_bytes", "bytes", "memory available without swapping (host)"),
    _M("mem_used_pct", "%", "used share of memory"),
    _M("swap_total_bytes", "bytes", "swap configured"),
    _M("swap_used_bytes", "bytes", "swap in use"),
    _M("major_faults_per_s", "1/s", "major page faults per second (host, process or cgroup)"),
    _M("swap_in_pages_per_s", "pages/s", "pages swapped in per second"),
    _M("swap_out_pages_per_s", "pages/s", "pages swapped out per second"),
    _M("numa_pages_total", "pages", "pages a process has mapped, all nodes together (numa_maps)"),
    _M("numa_remote_pages_pct", "%", "share of a process's pages on nodes other than where it mostly ran"),
    _M("numa_hit_per_s", "pages/s", "allocations satisfied on the intended node"),
    _M("numa_miss_per_s", "pages/s", "allocations that landed here though intended elsewhere"),
    _M("numa_foreign_per_s", "pages/s", "allocations intended here that landed elsewhere"),
    _M("numa_local_per_s", "pages/s", "allocations on the node of the running CPU"),
    _M("numa_other_per_s", "pages/s", "allocations on a node other than the running CPU's"),
    _M("numa_remote_alloc_pct", "%", "other / (local + other) allocations over the window"),
    _M("numa_hit", "pages", "cumulative numa_hit at capture (legacy: no time base)"),
    _M("numa_miss", "pages", "cumulative numa_miss at capture (legacy: no time base)"),
    _M("numa_local", "pages", "cumulative local_node at capture (legacy: no time base)"),
    _M("numa_other", "pages", "cumulative other_node at capture (legacy: no time base)"),
    _M("cpu_mem_colocation_pct", "%", "overlap of where a task ran and where its pages are (100 = same nodes)"),
    # pressure stall information
    _M("psi_cpu_some_pct", "%", "share of the window some task stalled on CPU"),
    _M("psi_io_some_pct", "%", "share of the window some task stalled on I/O"),
    _M("psi_io_full_pct", "%", "share of the window all non-idle tasks stalled on I/O"),
    _M("psi_memory_some_pct", "%", "share of the window some task stalled on memory"),
    _M("psi_memory_full_pct", "%", "share of the window all non-idle tasks stalled on memory"),
    # I/O
    _M("read_bytes_per_s", "bytes/s", "storage bytes read per second (process: /proc/PID/io; disk: diskstats)"),
    _M("write_bytes_per_s", "bytes/s", "storage bytes written per second"),
    _M("read_iops", "1/s", "completed reads per second"),
    _M("write_iops", "1/s", "completed writes per second"),
    _M("disk_util_pct", "%", "share of the window the device had I/O in flight"),
    _M("await_ms", "ms", "mean time per completed I/O, queue included"),
    _M("write_burst_s", "s", "longest run of consecutive samples in which a process wrote"),
    # network
    _M("rx_bytes_per_s", "bytes/s", "bytes received per second"),
    _M("tx_bytes_per_s", "bytes/s", "bytes sent per second"),
    _M("rx_packets_per_s", "1/s", "packets received per second"),
    _M("tx_packets_per_s", "1/s", "packets sent per second"),
    _M("rx_drops_per_s", "1/s", "received packets dropped per second"),
    _M("tx_drops_per_s", "1/s", "sent packets dropped per second"),
    _M("rx_errors_per_s", "1/s", "receive errors per second"),
    _M("tx_errors_per_s", "1/s", "transmit errors per second"),
    _M("link_util_pct", "%", "max(rx, tx) throughput as a share of the link speed"),
    _M("speed_mbps", "Mbit/s", "negotiated link speed"),
    _M("tcp_out_segs_per_s", "1/s", "TCP segments sent per second (host)"),
    _M("tcp_retrans_segs_per_s", "1/s", "TCP segments retransmitted per second (host)"),
    _M("tcp_retrans_pct", "%", "retransmitted / sent TCP segments over the window"),
    _M("rtt_us", "us", "smoothed round-trip time of a TCP connection"),
    _M("rtt_var_us", "us", "round-trip time variance"),
    _M("retrans_total", "segments", "retransmissions of a TCP connection during the window"),
    _M("bytes_sent_total", "bytes", "bytes sent (acked) by a TCP connection or along an edge"),
    _M("bytes_received_total", "bytes", "bytes received by a TCP connection or along an edge"),
    _M("bytes_per_s", "bytes/s", "data rate along an edge over the window"),
    _M("bytes_total", "bytes", "bytes carried along an edge over its window"),
    _M("packets_total", "packets", "packets carried along an edge over its window"),
    _M("queued_bytes", "bytes", "bytes waiting in a pipe, socket or queue at the end of the window"),
    _M("queued_bytes_growth_per_s", "bytes/s", "growth of queued_bytes over the window"),
    _M("channels", "channels", "pipes, sockets, connections or queues aggregated into one IPC edge at the end of the window"),
    _M("mem_read_bytes_per_s", "bytes/s", "DRAM read bandwidth of a NUMA node (uncore PMU; legacy DDR bandwidth)"),
    _M("mem_write_bytes_per_s", "bytes/s", "DRAM write bandwidth of a NUMA node (uncore PMU; legacy DDR bandwidth)"),
    # cgroups
    _M("cpu_quota_cores", "cores", "CPU quota / period (cgroup)"),
    _M("throttled_periods_pct", "%", "share of enforcement periods in which the cgroup was throttled"),
    _M("throttled_ms_per_s", "ms/s", "time throttled per second of the window"),
    _M("memory_limit_bytes", "bytes", "cgroup memory limit"),
    _M("memory_limit_hits_per_s", "1/s", "times per second the cgroup's usage hit its memory limit (v1 memory.failcnt, "
       "v2 memory.events max)"),
    _M("memory_usage_bytes", "bytes", "cgroup memory usage"),
    # accelerators
    _M("util_pct", "%", "device busy share (GPU SM / NPU AI Core utilisation)"),
    _M("mem_bw_util_pct", "%", "device memory-controller (HBM) bandwidth utilisation"),
    _M("memory_used_bytes", "bytes", "device memory in use (device, or one process on it)"),
    _M("memory_total_bytes", "bytes", "device memory installed"),
    _M("memory_used_pct", "%", "device memory in use"),
    _M("pcie_tx_bytes_per_s", "bytes/s", "PCIe bytes sent by the device"),
    _M("pcie_rx_bytes_per_s", "bytes/s", "PCIe bytes received by the device"),
    _M("pcie_util_pct", "%", "max(tx, rx) PCIe throughput as a share of the link's capacity"),
    _M("pcie_link_gen", "generation", "current PCIe link generation"),
    _M("pcie_link_gen_max", "generation", "maximum PCIe link generation"),
    _M("pcie_link_width", "lanes", "current PCIe link width"),
    _M("pcie_link_width_max", "lanes", "maximum PCIe link width"),
    _M("link_speed_gts", "GT/s", "current PCIe link speed"),
    _M("link_speed_max_gts", "GT/s", "maximum PCIe link speed"),
    _M("link_width", "lanes", "current PCIe link width (sysfs)"),
    _M("link_width_max", "lanes", "maximum PCIe link width (sysfs)"),
    _M("nvlink_tx_bytes_per_s", "bytes/s", "NVLink/HCCS bytes sent"),
    _M("nvlink_rx_bytes_per_s", "bytes/s", "NVLink/HCCS bytes received"),
    _M("nvlink_util_pct", "%", "NVLink/HCCS throughput as a share of the links' capacity"),
    _M("nvlink_links_up", "links", "active NVLink links"),
    _M("nvlink_links", "links", "NVLink/HCCS links the device reports a state for, up or not"),
    _M("nvlink_links_down", "links", "NVLink/HCCS links of the device that are not active (did not train, "
                                     "failed, or are not wired on this board)"),
    _M("sm_clock_mhz", "MHz", "current SM / AI Core clock"),
    _M("sm_clock_max_mhz", "MHz", "maximum SM / AI Core clock"),
    _M("mem_clock_mhz", "MHz", "current device memory clock"),
    _M("mem_clock_max_mhz", "MHz", "maximum device memory clock"),
    _M("temperature_c", "degC", "device temperature"),
    _M("power_w", "W", "device power draw"),
    _M("power_limit_w", "W", "device power limit"),
    _M("throttle_thermal", "0/1", "thermal clock throttling active during the window"),
    _M("throttle_power", "0/1", "power-cap clock throttling active during the window"),
    _M("ecc_errors_total", "errors", "uncorrected ECC errors"),
    _M("xid_errors_total", "errors", "XID errors during the window"),
    # RDMA
    _M("port_rcv_bytes_per_s", "bytes/s", "RDMA port bytes received"),
    _M("port_xmit_bytes_per_s", "bytes/s", "RDMA port bytes sent"),
    _M("port_util_pct", "%", "RDMA port throughput as a share of its rate"),
    _M("rate_gbps", "Gbit/s", "RDMA port rate"),
    _M("port_errors_per_s", "1/s", "RDMA error counters (symbol, link, rcv, xmit discards...) per second"),
    _M("port_retrans_per_s", "1/s", "RDMA retransmit-like counters (local_ack_timeout, out_of_sequence, ...) per second"),
    # PMU and eBPF (only where the host has them)
    _M("ipc", "instructions/cycle", "instructions per cycle (PMU)"),
    _M("llc_miss_pct", "%", "last-level cache misses / references (PMU)"),
    _M("dram_bw_util_pct", "%", "DRAM bandwidth used as a share of the peak, host or NUMA node (uncore PMU)"),
    _M("futex_wait_pct", "%", "share of the window a thread spent in futex waits (locks, condition variables, "
       "the GIL), timed out or woken (eBPF)"),
    _M("futex_lock_wait_pct", "%", "share of the window a thread spent in futex waits that another thread ended or "
       "that lasted under 10 ms (lock hand-overs, GIL waits), leaving out sleeps that ran to a longer timeout (eBPF)"),
    _M("futex_wakeups_per_s", "1/s", "futex waits of a thread that another thread ended by a wake-up, per second: "
       "high for a thread contending for a lock, low for an idle one (eBPF)"),
    # legacy time bases
    _M("runtime_ns_total", "ns", "CPU time of a task on a NUMA node"),
    _M("runtime_share_pct", "%", "share of a task's CPU time on a NUMA node"),
    _M("pages", "pages", "pages of a process on a NUMA node"),
    _M("page_share_pct", "%", "share of a process's pages on a NUMA node"),
]}

WINDOW_SUFFIXES = ("_p95", "_max")


def metric_info(name: str) -> Metric | None:
    """The definition of a metric, resolving window statistics (``x_p95``, ``x_max``) to ``x``."""
    if name in METRICS:
        return METRICS[name]
    for suffix in WINDOW_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in METRICS:
            base = METRICS[name[: -len(suffix)]]
            return Metric(name, base.unit, f"{suffix[1:]} over the window's samples of {base.name}")
    return None
