"""The one place where entity types, edge types and metric names are defined, with units.

Collectors emit only names listed here, the diagnosis and the converters read only names listed
here, and `docs/graph-format` style references are generated from these tables. A metric name
carries its unit as a suffix (``_pct``, ``_bytes``, ``_bytes_per_s``, ``_per_s``, ``_us``, ``_ms``,
``_ns``, ``_mhz``, ``_w``, ``_c``, ``_gts``...). Window statistics of a sampled metric are stored
next to it as ``<name>_p95`` and ``<name>_max``. Metrics ending in ``_total`` are amounts over
the capture window (they add up when windows merge, see topology.merge).

Code names them through the constants of the classes T (entity types), E (edge types) and M
(metric names): ``T.PROCESS == "process"``, ``M.CPU_UTIL_PCT == "cpu_util_pct"``, so that a
misspelt name fails as an AttributeError instead of matching nothing. The tables below use the
same constants as keys and stay the documentation of each name's unit and meaning.
"""

from __future__ import annotations

from typing import NamedTuple

# the types of the attributes readers rely on live with the records (topology.models): checking a file needs
# them, not this module
from witty_profiler.topology.models import ATTR_TYPES, CPU_LIST  # noqa: F401


class T:
    """Entity types: the names of ENTITY_TYPES."""

    HOST = "host"
    CPU = "cpu"
    NUMA_NODE = "numa_node"
    PROCESS = "process"
    THREAD = "thread"
    CONTAINER = "container"
    CGROUP = "cgroup"
    GPU = "gpu"
    GPU_INSTANCE = "gpu_instance"
    NPU = "npu"
    PCI_DEVICE = "pci_device"
    BLOCK_DEVICE = "block_device"
    NIC = "nic"
    RDMA_PORT = "rdma_port"
    TCP_CONNECTION = "tcp_connection"
    SOCKET = "socket"
    SHARED_MEMORY = "shared_memory"
    NUMA_SET = "numa_set"
    RDMA_DEVICE = "rdma_device"
    RDMA_RESOURCE = "rdma_resource"
    JOB = "job"
    RANK = "rank"
    COLLECTIVE = "collective"
    OPAQUE = "opaque"


class E:
    """Edge types: the names of EDGE_TYPES."""

    PARENT_OF = "parent_of"
    HAS_THREAD = "has_thread"
    RUNS_ON = "runs_on"
    ALLOWED_ON = "allowed_on"
    ALLOCATES_ON = "allocates_on"
    HAS_CPU = "has_cpu"
    NUMA_DISTANCE = "numa_distance"
    LOCAL_TO = "local_to"
    USES_DEVICE = "uses_device"
    USES_RDMA = "uses_rdma"
    IN_CONTAINER = "in_container"
    IN_CGROUP = "in_cgroup"
    DEVICE_LINK = "device_link"
    NEAR_NIC = "near_nic"
    NETDEV_OF = "netdev_of"
    PCI_FUNCTION = "pci_function"
    PIPE = "pipe"
    UNIX_SOCKET = "unix_socket"
    TCP = "tcp"
    SHM = "shm"
    MSG_QUEUE = "msg_queue"
    OWNS_CONNECTION = "owns_connection"
    USES_SHM = "uses_shm"
    HAS_SOCKET = "has_socket"
    SENDS_TO = "sends_to"
    NUMA_SET_CONTAINS = "numa_set_contains"
    OWNS = "owns"
    ACCESSES = "accesses"
    CONNECTS_TO = "connects_to"
    HAS_PORT = "has_port"
    IPC = "ipc"
    MEMBER_OF = "member_of"
    INSTANCE_OF = "instance_of"
    TRACE_OF = "trace_of"
    TAKES_PART = "takes_part"
    RELATED = "related"


class M:
    """Metric names: the names of METRICS."""

    # CPU time, per host, cpu, process, thread and cgroup
    CPU_UTIL_PCT = "cpu_util_pct"
    CPU_USER_PCT = "cpu_user_pct"
    CPU_SYSTEM_PCT = "cpu_system_pct"
    CPU_SOFTIRQ_PCT = "cpu_softirq_pct"
    CPU_IOWAIT_PCT = "cpu_iowait_pct"
    CPU_STEAL_PCT = "cpu_steal_pct"
    LOAD1 = "load1"
    CPUS_ALLOWED_COUNT = "cpus_allowed_count"
    RUNQUEUE_WAIT_PCT = "runqueue_wait_pct"
    RUNQUEUE_WAIT_MS_PER_S = "runqueue_wait_ms_per_s"
    RUNQUEUE_WAIT_PER_SLICE_US = "runqueue_wait_per_slice_us"
    TIMESLICES_PER_S = "timeslices_per_s"
    VOLUNTARY_CTXT_SWITCHES_PER_S = "voluntary_ctxt_switches_per_s"
    NONVOLUNTARY_CTXT_SWITCHES_PER_S = "nonvoluntary_ctxt_switches_per_s"
    CONTEXT_SWITCHES_PER_S = "context_switches_per_s"
    NUM_THREADS = "num_threads"
    RUNNABLE_THREADS = "runnable_threads"
    # memory
    RSS_BYTES = "rss_bytes"
    MEM_TOTAL_BYTES = "mem_total_bytes"
    MEM_FREE_BYTES = "mem_free_bytes"
    MEM_AVAILABLE_BYTES = "mem_available_bytes"
    MEM_USED_PCT = "mem_used_pct"
    SWAP_TOTAL_BYTES = "swap_total_bytes"
    SWAP_USED_BYTES = "swap_used_bytes"
    MAJOR_FAULTS_PER_S = "major_faults_per_s"
    SWAP_IN_PAGES_PER_S = "swap_in_pages_per_s"
    SWAP_OUT_PAGES_PER_S = "swap_out_pages_per_s"
    NUMA_PAGES_TOTAL = "numa_pages_total"
    NUMA_REMOTE_PAGES_PCT = "numa_remote_pages_pct"
    NUMA_HIT_PER_S = "numa_hit_per_s"
    NUMA_MISS_PER_S = "numa_miss_per_s"
    NUMA_FOREIGN_PER_S = "numa_foreign_per_s"
    NUMA_LOCAL_PER_S = "numa_local_per_s"
    NUMA_OTHER_PER_S = "numa_other_per_s"
    NUMA_REMOTE_ALLOC_PCT = "numa_remote_alloc_pct"
    NUMA_HIT = "numa_hit"
    NUMA_MISS = "numa_miss"
    NUMA_LOCAL = "numa_local"
    NUMA_OTHER = "numa_other"
    CPU_MEM_COLOCATION_PCT = "cpu_mem_colocation_pct"
    # pressure stall information
    PSI_CPU_SOME_PCT = "psi_cpu_some_pct"
    PSI_IO_SOME_PCT = "psi_io_some_pct"
    PSI_IO_FULL_PCT = "psi_io_full_pct"
    PSI_MEMORY_SOME_PCT = "psi_memory_some_pct"
    PSI_MEMORY_FULL_PCT = "psi_memory_full_pct"
    # I/O
    READ_BYTES_PER_S = "read_bytes_per_s"
    WRITE_BYTES_PER_S = "write_bytes_per_s"
    READ_IOPS = "read_iops"
    WRITE_IOPS = "write_iops"
    DISK_UTIL_PCT = "disk_util_pct"
    AWAIT_MS = "await_ms"
    WRITE_BURST_S = "write_burst_s"
    IO_BLOCKED_PCT = "io_blocked_pct"
    # network
    RX_BYTES_PER_S = "rx_bytes_per_s"
    TX_BYTES_PER_S = "tx_bytes_per_s"
    RX_PACKETS_PER_S = "rx_packets_per_s"
    TX_PACKETS_PER_S = "tx_packets_per_s"
    RX_DROPS_PER_S = "rx_drops_per_s"
    TX_DROPS_PER_S = "tx_drops_per_s"
    RX_ERRORS_PER_S = "rx_errors_per_s"
    TX_ERRORS_PER_S = "tx_errors_per_s"
    LINK_UTIL_PCT = "link_util_pct"
    SPEED_MBPS = "speed_mbps"
    TCP_OUT_SEGS_PER_S = "tcp_out_segs_per_s"
    TCP_RETRANS_SEGS_PER_S = "tcp_retrans_segs_per_s"
    TCP_RETRANS_PCT = "tcp_retrans_pct"
    RTT_US = "rtt_us"
    RTT_VAR_US = "rtt_var_us"
    RETRANS_TOTAL = "retrans_total"
    BYTES_SENT_TOTAL = "bytes_sent_total"
    BYTES_RECEIVED_TOTAL = "bytes_received_total"
    BYTES_PER_S = "bytes_per_s"
    BYTES_TOTAL = "bytes_total"
    PACKETS_TOTAL = "packets_total"
    QUEUED_BYTES = "queued_bytes"
    QUEUED_BYTES_GROWTH_PER_S = "queued_bytes_growth_per_s"
    CHANNELS = "channels"
    MEM_READ_BYTES_PER_S = "mem_read_bytes_per_s"
    MEM_WRITE_BYTES_PER_S = "mem_write_bytes_per_s"
    MEM_BYTES_PER_S = "mem_bytes_per_s"
    # cgroups
    CPU_QUOTA_CORES = "cpu_quota_cores"
    THROTTLED_PERIODS_PCT = "throttled_periods_pct"
    THROTTLED_MS_PER_S = "throttled_ms_per_s"
    MEMORY_LIMIT_BYTES = "memory_limit_bytes"
    MEMORY_LIMIT_HITS_PER_S = "memory_limit_hits_per_s"
    MEMORY_USAGE_BYTES = "memory_usage_bytes"
    # accelerators
    UTIL_PCT = "util_pct"
    MEM_BW_UTIL_PCT = "mem_bw_util_pct"
    MEMORY_USED_BYTES = "memory_used_bytes"
    MEMORY_TOTAL_BYTES = "memory_total_bytes"
    MEMORY_USED_PCT = "memory_used_pct"
    PCIE_TX_BYTES_PER_S = "pcie_tx_bytes_per_s"
    PCIE_RX_BYTES_PER_S = "pcie_rx_bytes_per_s"
    PCIE_UTIL_PCT = "pcie_util_pct"
    PCIE_LINK_GEN = "pcie_link_gen"
    PCIE_LINK_GEN_MAX = "pcie_link_gen_max"
    PCIE_LINK_WIDTH = "pcie_link_width"
    PCIE_LINK_WIDTH_MAX = "pcie_link_width_max"
    LINK_SPEED_GTS = "link_speed_gts"
    LINK_SPEED_MAX_GTS = "link_speed_max_gts"
    LINK_WIDTH = "link_width"
    LINK_WIDTH_MAX = "link_width_max"
    NVLINK_TX_BYTES_PER_S = "nvlink_tx_bytes_per_s"
    NVLINK_RX_BYTES_PER_S = "nvlink_rx_bytes_per_s"
    NVLINK_BYTES_PER_S = "nvlink_bytes_per_s"
    NVLINK_UTIL_PCT = "nvlink_util_pct"
    NVLINK_LINKS_UP = "nvlink_links_up"
    NVLINK_LINKS = "nvlink_links"
    NVLINK_LINKS_DOWN = "nvlink_links_down"
    SM_CLOCK_MHZ = "sm_clock_mhz"
    SM_CLOCK_MAX_MHZ = "sm_clock_max_mhz"
    MEM_CLOCK_MHZ = "mem_clock_mhz"
    MEM_CLOCK_MAX_MHZ = "mem_clock_max_mhz"
    TEMPERATURE_C = "temperature_c"
    POWER_W = "power_w"
    POWER_LIMIT_W = "power_limit_w"
    THROTTLE_THERMAL = "throttle_thermal"
    THROTTLE_POWER = "throttle_power"
    ECC_ERRORS_TOTAL = "ecc_errors_total"
    ECC_CORRECTED_ERRORS_TOTAL = "ecc_corrected_errors_total"
    PCIE_REPLAYS_TOTAL = "pcie_replays_total"
    XID_ERRORS_TOTAL = "xid_errors_total"
    SM_ACTIVE_PCT = "sm_active_pct"
    SM_OCCUPANCY_PCT = "sm_occupancy_pct"
    TENSOR_ACTIVE_PCT = "tensor_active_pct"
    TENSOR_HMMA_ACTIVE_PCT = "tensor_hmma_active_pct"
    TENSOR_DFMA_ACTIVE_PCT = "tensor_dfma_active_pct"
    HBM_BW_UTIL_PCT = "hbm_bw_util_pct"
    # RDMA
    PORT_RCV_BYTES_PER_S = "port_rcv_bytes_per_s"
    PORT_XMIT_BYTES_PER_S = "port_xmit_bytes_per_s"
    PORT_UTIL_PCT = "port_util_pct"
    RATE_GBPS = "rate_gbps"
    PORT_ERRORS_PER_S = "port_errors_per_s"
    PORT_RETRANS_PER_S = "port_retrans_per_s"
    PFC_RX_FRAMES_PER_S = "pfc_rx_frames_per_s"
    PFC_TX_FRAMES_PER_S = "pfc_tx_frames_per_s"
    CNP_RX_PACKETS_PER_S = "cnp_rx_packets_per_s"
    CNP_TX_PACKETS_PER_S = "cnp_tx_packets_per_s"
    OPTICAL_RX_POWER_MW = "optical_rx_power_mw"
    OPTICAL_TX_POWER_MW = "optical_tx_power_mw"
    QPS = "qps"
    QPS_ERROR = "qps_error"
    QPS_CREATED_TOTAL = "qps_created_total"
    QPS_DESTROYED_TOTAL = "qps_destroyed_total"
    # PMU and eBPF (only where the host has them)
    IPC = "ipc"
    LLC_MISS_PCT = "llc_miss_pct"
    STALLED_CYCLES_FRONTEND_PCT = "stalled_cycles_frontend_pct"
    STALLED_CYCLES_BACKEND_PCT = "stalled_cycles_backend_pct"
    PMU_RUNNING_PCT = "pmu_running_pct"
    DRAM_BW_UTIL_PCT = "dram_bw_util_pct"
    DRAM_BW_PEAK_BYTES_PER_S = "dram_bw_peak_bytes_per_s"
    FUTEX_WAIT_PCT = "futex_wait_pct"
    FUTEX_LOCK_WAIT_PCT = "futex_lock_wait_pct"
    FUTEX_WAKEUPS_PER_S = "futex_wakeups_per_s"
    STACK_SAMPLES_TOTAL = "stack_samples_total"
    HOT_FUNCTION_PCT = "hot_function_pct"
    STACK_UNKNOWN_PCT = "stack_unknown_pct"
    # legacy time bases
    RUNTIME_NS_TOTAL = "runtime_ns_total"
    RUNTIME_SHARE_PCT = "runtime_share_pct"
    PAGES = "pages"
    PAGE_SHARE_PCT = "page_share_pct"
    # traces (per step of a rank, per collective)
    STEPS = "steps"
    STEP_TIME_MS = "step_time_ms"
    COMPUTE_MS = "compute_ms"
    COMM_MS = "comm_ms"
    COMM_EXPOSED_MS = "comm_exposed_ms"
    COMM_OVERLAPPED_MS = "comm_overlapped_ms"
    FREE_MS = "free_ms"
    BUBBLE_MS = "bubble_ms"
    DATA_LOADING_MS = "data_loading_ms"
    KERNEL_BUSY_PCT = "kernel_busy_pct"
    CALLS = "calls"
    DURATION_MS = "duration_ms"
    ELAPSE_MS = "elapse_ms"
    TRANSIT_MS = "transit_ms"
    WAIT_MS = "wait_ms"
    SYNC_MS = "sync_ms"
    IDLE_MS = "idle_ms"
    WAIT_RATIO = "wait_ratio"
    LAST_ARRIVALS = "last_arrivals"
    TRANSIT_BYTES = "transit_bytes"
    BANDWIDTH_GBYTES_PER_S = "bandwidth_gbytes_per_s"
    MESSAGE_BYTES = "message_bytes"
    BUS_BANDWIDTH_GBYTES_PER_S = "bus_bandwidth_gbytes_per_s"


class Metric(NamedTuple):  # not a dataclass: `collect` imports this module
    name: str
    unit: str
    help: str


ENTITY_TYPES: dict[str, str] = {
    T.HOST: "a machine; id host:<host>",
    T.CPU: "a logical CPU; id cpu:<host>:<n>",
    T.NUMA_NODE: "a NUMA node; id numa_node:<host>:<n>; attrs cpus, distances {node: distance}",
    T.PROCESS: "a process; id process:<host>:<pid>; attrs pid, ppid, name, cmdline (redacted), cpus_allowed, "
               "mems_allowed, numa_pages, role, framework, rank, local_rank, world_size, job (the id of its job entity), "
               "master_addr, env (allowlisted), state, started_at, "
               "started_in_window, exited_in_window, in_scope, cgroup, ran_on_cpus (CPU lists in the kernel's "
               "'0-3,8' form)",
    T.THREAD: "a thread; id thread:<host>:<pid>:<tid>; attrs tid, pid, name, state, cpus_allowed, ran_on_cpus, "
              "numa_runtime_ns, exited_in_window, role (loader, compute or launcher, from the names PyTorch gives "
              "its threads), futex_addr and futex_mapping (the futex word it spent the most lock wait on, hex, and "
              "the mapping it lies in: a file, [heap], [anon]; eBPF), top_stacks (collect --stacks: the most sampled "
              "on-CPU stacks, each {stack: 'root;...;leaf' folded like stackcollapse, kernel frames ending _[k], "
              "samples, pct of the thread's samples}), hot_function ('leaf \u2190 caller', the leaf with most "
              "samples) and stacks_from (bcc: native stacks; py-spy: Python frames)",
    T.CONTAINER: "a container or pod; id container:<host>:<id>; attrs runtime, name, pod",
    T.CGROUP: "a cgroup; id cgroup:<host>:<version>:<path> (version v1 or v2); attrs version, path, controllers",
    T.GPU: "an NVIDIA GPU; id gpu:<host>:<pci address>; attrs index, name, uuid, pci_address, numa_node, "
           "local_cpus, driver_version, throttle_reasons, pcie_link_degraded, nvlink_version; from dcgm-exporter "
           "also remapped_rows {correctable, uncorrectable}, row_remap_failure, retired_pages {single_bit, "
           "double_bit, pending}, xid_codes",
    T.GPU_INSTANCE: "a MIG GPU instance of an NVIDIA GPU; id gpu_instance:<host>:<gpu pci address>:<instance id>; "
                    "attrs gpu_instance_id; metrics from GPM (sm_active_pct, tensor_active_pct, hbm_bw_util_pct...)",
    T.NPU: "an Ascend NPU chip; id npu:<host>:<pci address>; attrs index, chip, phy_id or device, name, health, "
           "pci_address, numa_node, cpu_affinity; from npu-exporter also error_codes, hccs_crc_errors (HCCS CRC "
           "errors in the window)",
    T.PCI_DEVICE: "a PCI function; id pci_device:<host>:<pci address>; attrs class, numa_node, link speeds and widths",
    T.BLOCK_DEVICE: "a disk; id block_device:<host>:<name>",
    T.NIC: "a network interface; id nic:<host>:<name>; attrs speed_mbps, pci_address, numa_node, operstate, mtu, "
           "virtual (no device behind it: sysfs path, or from Prometheus a MAC address that is not permanent)",
    T.RDMA_PORT: "an InfiniBand/RoCE port; id rdma_port:<host>:<device>:<port>; attrs state, phys_state, rate, "
                 "link_layer, netdev, pci_address, numa_node, error/retrans/congestion_counters_delta; from "
                 "`rdma res show qp`: qp_states (QPs per state), kernel_qps (QPs per kernel module); an Ascend NPU's "
                 "own RoCE port (hccn_tool) is rdma_port:<host>:npu<device id>:0 with state (UP/DOWN), net_health, "
                 "ip, optical_present, optical_rx_power_low",
    T.TCP_CONNECTION: "one TCP connection; id tcp_connection:<host>:<local>:<remote>; attrs local, remote, state, pid",
    T.SOCKET: "a socket endpoint seen by the legacy format; id socket:<host>:<proto>:<addr>:<port>",
    T.SHARED_MEMORY: "a /dev/shm file or SysV shared memory segment; id shared_memory:<host>:<key>",
    T.NUMA_SET: "a set of NUMA nodes (legacy format); id numa_set:<host>:<list>",
    T.RDMA_DEVICE: "an RDMA device (HCA) seen by the legacy format; id rdma_device:<host>:<name>",
    T.RDMA_RESOURCE: "an RDMA protection domain, queue pair or memory region (legacy); "
                     "id rdma_resource:<host>:<pd|qp|mr>:<keys>",
    T.JOB: "a distributed job whose ranks may run on many hosts; id job:<scheduler>:<key> (slurm:<job id>, "
           "torchelastic:<run id>, world:<master address>:<port>:<world size>, pod:<uid>), the one id without a host "
           "so that the host graphs of one job merge into one entity; attrs scheduler, job_id, world_size, "
           "master_addr",
    T.RANK: "a rank of a distributed job as a training trace saw it (PyTorch profiler / Kineto, msprof-analyze); "
            "id rank:<job key>:<rank> (the job key as in the job's id, without 'job:'); attrs rank, world_size, "
            "source (kineto or msprof), file, pid and hostname where the trace names them; metrics per step",
    T.COLLECTIVE: "a collective operation of a job seen in traces, by process group and op; id "
                  "collective:<job key>:<group>:<op>; attrs op (allreduce, allgather, broadcast...), group, ranks; "
                  "metrics calls, duration_ms (mean, _p95, _max), transit_bytes",
    T.OPAQUE: "a legacy record of a type this version does not know, kept as is",
}

EDGE_TYPES: dict[str, str] = {
    E.PARENT_OF: "process -> child process",
    E.HAS_THREAD: "process -> thread",
    E.RUNS_ON: "process or thread -> numa_node where it ran; metrics runtime_share_pct, runtime_ns_total",
    E.ALLOWED_ON: "process or thread -> numa_node it may run on (cpus_allowed)",
    E.ALLOCATES_ON: "process -> numa_node holding its pages; metrics pages, page_share_pct",
    E.HAS_CPU: "numa_node -> cpu",
    E.NUMA_DISTANCE: "numa_node -> numa_node; attrs distance (SLIT, 10 = local)",
    E.LOCAL_TO: "device (gpu, npu, nic, pci_device, rdma_port) -> its numa_node",
    E.USES_DEVICE: "process -> gpu or npu; metrics memory_used_bytes",
    E.USES_RDMA: "process -> rdma_port it holds queue pairs on (`rdma res show qp`); attrs pid, comm, qp_states, "
                 "qp_types; metrics qps, qps_error",
    E.IN_CONTAINER: "process -> container",
    E.IN_CGROUP: "process -> cgroup",
    E.DEVICE_LINK: "device -> device; attrs link_type (NVLink, HCCS, PIX, PXB, PHB, NODE, SYS, SIO...)",
    E.NEAR_NIC: "gpu/npu -> nic or rdma_port closest to it on the PCIe tree; attrs link_type",
    E.NETDEV_OF: "rdma_port -> nic",
    E.PCI_FUNCTION: "gpu, npu, nic or rdma_port -> the pci_device that implements it (its PCIe link state)",
    E.PIPE: "process -> process through a pipe (writer -> reader where known); attrs inode",
    E.UNIX_SOCKET: "process -> process through a connected unix socket pair; attrs inode, queued_toward (the end "
                   "the queued bytes wait for: target, source or both); metrics queued_bytes",
    E.TCP: "process -> process over local TCP (client -> server); attrs queued_toward (the end the queued bytes "
           "wait for: target, source or both); metrics bytes_sent_total, bytes_received_total, queued_bytes (unread: "
           "in the writer's send queue or the reader's receive queue)",
    E.SHM: "process -> process sharing a shared memory object; attrs path",
    E.MSG_QUEUE: "process -> process sharing a SysV message queue; metrics queued_bytes",
    E.OWNS_CONNECTION: "process -> tcp_connection",
    E.USES_SHM: "process -> shared_memory object it maps or holds open",
    E.HAS_SOCKET: "thread or process -> socket (legacy)",
    E.SENDS_TO: "thread -> socket, with a byte and packet flow (legacy); metrics bytes_total, packets_total, "
                "bytes_per_s",
    E.NUMA_SET_CONTAINS: "numa_set -> numa_node (legacy)",
    E.OWNS: "a legacy ownership not covered above (e.g. process -> rdma_resource, pd -> queue pair)",
    E.ACCESSES: "a legacy access not covered above (e.g. rdma_resource -> rdma_device)",
    E.CONNECTS_TO: "rdma_resource (queue pair) -> its peer queue pair (legacy)",
    E.HAS_PORT: "rdma_device -> rdma_port (legacy); npu -> its own RoCE port (hccn_tool)",
    E.IPC: "process -> process communicating by an IPC mechanism the legacy format does not name",
    E.MEMBER_OF: "process -> the job it is a rank of; attrs rank, local_rank (the rank order of the job)",
    E.INSTANCE_OF: "gpu_instance -> the gpu it is a MIG slice of",
    E.TRACE_OF: "rank -> the process it is (a trace's pid on the graph's host); the rank keeps the trace's own "
                "window",
    E.TAKES_PART: "rank -> collective; metrics of that rank in it: calls, elapse_ms, transit_ms, wait_ms, sync_ms, "
                  "idle_ms, wait_ratio, last_arrivals, transit_bytes, bandwidth_gbytes_per_s; attrs link (RDMA, HCCS, "
                  "PCIE, SDMA, NVLink) for a per-link edge",
    E.RELATED: "a legacy edge of a type this version does not know, kept as is",
}

# process -> process relations of inter-process communication ('ipc': the legacy format's unnamed kind)
IPC_EDGES = (E.PIPE, E.UNIX_SOCKET, E.TCP, E.SHM, E.MSG_QUEUE, E.IPC)

_M = Metric
METRICS: dict[str, Metric] = {m.name: m for m in [
    # CPU time, per host, cpu, process, thread and cgroup
    _M(M.CPU_UTIL_PCT, "%", "busy share of the window; for a process or thread in % of ONE core "
       "(200 = two cores busy)"),
    _M(M.CPU_USER_PCT, "%", "user-mode share of the window (same base as cpu_util_pct)"),
    _M(M.CPU_SYSTEM_PCT, "%", "kernel-mode share of the window (same base as cpu_util_pct)"),
    _M(M.CPU_SOFTIRQ_PCT, "%", "share of CPU time spent in softirq (network and block completions; inside "
       "cpu_system_pct)"),
    _M(M.CPU_IOWAIT_PCT, "%", "share of the window a CPU was idle with I/O outstanding"),
    _M(M.CPU_STEAL_PCT, "%", "share of the window taken by the hypervisor"),
    _M(M.LOAD1, "runnable tasks", "1-minute load average at the end of the window"),
    _M(M.CPUS_ALLOWED_COUNT, "CPUs", "number of CPUs a task may run on"),
    _M(M.RUNQUEUE_WAIT_PCT, "%", "share of runnable time spent waiting for a CPU (schedstat wait / (run + wait))"),
    _M(M.RUNQUEUE_WAIT_MS_PER_S, "ms/s", "run-queue wait per second of the window"),
    _M(M.RUNQUEUE_WAIT_PER_SLICE_US, "us", "mean run-queue wait per timeslice"),
    _M(M.TIMESLICES_PER_S, "1/s", "timeslices started per second"),
    _M(M.VOLUNTARY_CTXT_SWITCHES_PER_S, "1/s", "voluntary context switches per second (blocking)"),
    _M(M.NONVOLUNTARY_CTXT_SWITCHES_PER_S, "1/s", "involuntary context switches per second (preemption)"),
    _M(M.CONTEXT_SWITCHES_PER_S, "1/s", "host context switches per second"),
    _M(M.NUM_THREADS, "threads", "threads of a process at the end of the window"),
    _M(M.RUNNABLE_THREADS, "threads", "threads in state R at the end of the window"),
    # memory
    _M(M.RSS_BYTES, "bytes", "resident set size"),
    _M(M.MEM_TOTAL_BYTES, "bytes", "memory installed (host or NUMA node)"),
    _M(M.MEM_FREE_BYTES, "bytes", "free memory (NUMA node)"),
    _M(M.MEM_AVAILABLE_BYTES, "bytes", "memory available without swapping (host)"),
    _M(M.MEM_USED_PCT, "%", "used share of memory"),
    _M(M.SWAP_TOTAL_BYTES, "bytes", "swap configured"),
    _M(M.SWAP_USED_BYTES, "bytes", "swap in use"),
    _M(M.MAJOR_FAULTS_PER_S, "1/s", "major page faults per second (host, process or cgroup)"),
    _M(M.SWAP_IN_PAGES_PER_S, "pages/s", "pages swapped in per second"),
    _M(M.SWAP_OUT_PAGES_PER_S, "pages/s", "pages swapped out per second"),
    _M(M.NUMA_PAGES_TOTAL, "pages", "pages a process has mapped, all nodes together (numa_maps)"),
    _M(M.NUMA_REMOTE_PAGES_PCT, "%", "share of a process's pages on nodes other than where it mostly ran"),
    _M(M.NUMA_HIT_PER_S, "pages/s", "allocations satisfied on the intended node"),
    _M(M.NUMA_MISS_PER_S, "pages/s", "allocations that landed here though intended elsewhere"),
    _M(M.NUMA_FOREIGN_PER_S, "pages/s", "allocations intended here that landed elsewhere"),
    _M(M.NUMA_LOCAL_PER_S, "pages/s", "allocations on the node of the running CPU"),
    _M(M.NUMA_OTHER_PER_S, "pages/s", "allocations on a node other than the running CPU's"),
    _M(M.NUMA_REMOTE_ALLOC_PCT, "%", "other / (local + other) allocations over the window"),
    _M(M.NUMA_HIT, "pages", "cumulative numa_hit at capture (legacy: no time base)"),
    _M(M.NUMA_MISS, "pages", "cumulative numa_miss at capture (legacy: no time base)"),
    _M(M.NUMA_LOCAL, "pages", "cumulative local_node at capture (legacy: no time base)"),
    _M(M.NUMA_OTHER, "pages", "cumulative other_node at capture (legacy: no time base)"),
    _M(M.CPU_MEM_COLOCATION_PCT, "%", "overlap of where a task ran and where its pages are (100 = same nodes)"),
    # pressure stall information
    _M(M.PSI_CPU_SOME_PCT, "%", "share of the window some task stalled on CPU"),
    _M(M.PSI_IO_SOME_PCT, "%", "share of the window some task stalled on I/O"),
    _M(M.PSI_IO_FULL_PCT, "%", "share of the window all non-idle tasks stalled on I/O"),
    _M(M.PSI_MEMORY_SOME_PCT, "%", "share of the window some task stalled on memory"),
    _M(M.PSI_MEMORY_FULL_PCT, "%", "share of the window all non-idle tasks stalled on memory"),
    # I/O
    _M(M.READ_BYTES_PER_S, "bytes/s", "storage bytes read per second (process: /proc/PID/io; disk: diskstats)"),
    _M(M.WRITE_BYTES_PER_S, "bytes/s", "storage bytes written per second"),
    _M(M.READ_IOPS, "1/s", "completed reads per second"),
    _M(M.WRITE_IOPS, "1/s", "completed writes per second"),
    _M(M.DISK_UTIL_PCT, "%", "share of the window the device had I/O in flight"),
    _M(M.AWAIT_MS, "ms", "mean time per completed I/O, queue included"),
    _M(M.IO_BLOCKED_PCT, "%", "share of the window a process's main thread was blocked on block I/O (delay "
       "accounting: /proc/PID/stat delayacct_blkio_ticks; needs kernel.task_delayacct=1 on Linux 5.14 and later)"),
    _M(M.WRITE_BURST_S, "s", "longest run of consecutive samples in which a process wrote"),
    # network
    _M(M.RX_BYTES_PER_S, "bytes/s", "bytes received per second"),
    _M(M.TX_BYTES_PER_S, "bytes/s", "bytes sent per second"),
    _M(M.RX_PACKETS_PER_S, "1/s", "packets received per second"),
    _M(M.TX_PACKETS_PER_S, "1/s", "packets sent per second"),
    _M(M.RX_DROPS_PER_S, "1/s", "received packets dropped per second"),
    _M(M.TX_DROPS_PER_S, "1/s", "sent packets dropped per second"),
    _M(M.RX_ERRORS_PER_S, "1/s", "receive errors per second"),
    _M(M.TX_ERRORS_PER_S, "1/s", "transmit errors per second"),
    _M(M.LINK_UTIL_PCT, "%", "max(rx, tx) throughput as a share of the link speed"),
    _M(M.SPEED_MBPS, "Mbit/s", "negotiated link speed"),
    _M(M.TCP_OUT_SEGS_PER_S, "1/s", "TCP segments sent per second (host)"),
    _M(M.TCP_RETRANS_SEGS_PER_S, "1/s", "TCP segments retransmitted per second (host)"),
    _M(M.TCP_RETRANS_PCT, "%", "retransmitted / sent TCP segments over the window"),
    _M(M.RTT_US, "us", "smoothed round-trip time of a TCP connection"),
    _M(M.RTT_VAR_US, "us", "round-trip time variance"),
    _M(M.RETRANS_TOTAL, "segments", "retransmissions of a TCP connection during the window"),
    _M(M.BYTES_SENT_TOTAL, "bytes", "bytes sent (acked) by a TCP connection or along an edge"),
    _M(M.BYTES_RECEIVED_TOTAL, "bytes", "bytes received by a TCP connection or along an edge"),
    _M(M.BYTES_PER_S, "bytes/s", "data rate along an edge over the window"),
    _M(M.BYTES_TOTAL, "bytes", "bytes carried along an edge over its window"),
    _M(M.PACKETS_TOTAL, "packets", "packets carried along an edge over its window"),
    _M(M.QUEUED_BYTES, "bytes", "bytes waiting in a pipe, socket or queue at the end of the window"),
    _M(M.QUEUED_BYTES_GROWTH_PER_S, "bytes/s", "growth of queued_bytes over the window"),
    _M(M.CHANNELS, "channels", "pipes, sockets, connections or queues aggregated into one IPC edge at the end of "
       "the window"),
    _M(M.MEM_READ_BYTES_PER_S, "bytes/s", "DRAM read bandwidth of a NUMA node (uncore PMU; legacy DDR bandwidth)"),
    _M(M.MEM_WRITE_BYTES_PER_S, "bytes/s", "DRAM write bandwidth of a NUMA node (uncore PMU; legacy DDR bandwidth)"),
    _M(M.MEM_BYTES_PER_S, "bytes/s", "DRAM bandwidth, reads and writes, of a NUMA node or the host (resctrl MBM: "
       "traffic leaving the L3 for memory; uncore PMU: memory-controller reads + writes)"),
    # cgroups
    _M(M.CPU_QUOTA_CORES, "cores", "CPU quota / period (cgroup)"),
    _M(M.THROTTLED_PERIODS_PCT, "%", "share of enforcement periods in which the cgroup was throttled"),
    _M(M.THROTTLED_MS_PER_S, "ms/s", "time throttled per second of the window"),
    _M(M.MEMORY_LIMIT_BYTES, "bytes", "cgroup memory limit"),
    _M(M.MEMORY_LIMIT_HITS_PER_S, "1/s", "times per second the cgroup's usage hit its memory limit (v1 memory.failcnt, "
       "v2 memory.events max)"),
    _M(M.MEMORY_USAGE_BYTES, "bytes", "cgroup memory usage"),
    # accelerators
    _M(M.UTIL_PCT, "%", "device busy share (GPU SM / NPU AI Core utilisation)"),
    _M(M.MEM_BW_UTIL_PCT, "%", "device memory-controller (HBM) bandwidth utilisation"),
    _M(M.SM_ACTIVE_PCT, "%", "share of the GPU's SMs busy over the window, averaged over SMs and time (NVML GPM "
       "SM_UTIL; DCGM's SM_ACTIVE): unlike util_pct, a kernel on a few SMs counts as a few"),
    _M(M.SM_OCCUPANCY_PCT, "%", "resident warps as a share of the SMs' maximum (NVML GPM SM_OCCUPANCY)"),
    _M(M.TENSOR_ACTIVE_PCT, "%", "share of SM cycles a tensor pipe of any precision was busy (NVML GPM "
       "ANY_TENSOR_UTIL)"),
    _M(M.TENSOR_HMMA_ACTIVE_PCT, "%", "share of SM cycles the half-precision (FP16/BF16) tensor pipe was busy "
       "(NVML GPM HMMA_TENSOR_UTIL)"),
    _M(M.TENSOR_DFMA_ACTIVE_PCT, "%", "share of SM cycles the FP64 tensor pipe was busy (NVML GPM DFMA_TENSOR_UTIL)"),
    _M(M.HBM_BW_UTIL_PCT, "%", "device DRAM (HBM) bandwidth used as a share of its peak, from the GPU's counters "
       "(NVML GPM DRAM_BW_UTIL); mem_bw_util_pct on a GPU is NVML's share of time memory was read or written"),
    _M(M.MEMORY_USED_BYTES, "bytes", "device memory in use (device, or one process on it)"),
    _M(M.MEMORY_TOTAL_BYTES, "bytes", "device memory installed"),
    _M(M.MEMORY_USED_PCT, "%", "device memory in use"),
    _M(M.PCIE_TX_BYTES_PER_S, "bytes/s", "PCIe bytes sent by the device"),
    _M(M.PCIE_RX_BYTES_PER_S, "bytes/s", "PCIe bytes received by the device"),
    _M(M.PCIE_UTIL_PCT, "%", "max(tx, rx) PCIe throughput as a share of the link's capacity"),
    _M(M.PCIE_LINK_GEN, "generation", "current PCIe link generation"),
    _M(M.PCIE_LINK_GEN_MAX, "generation", "maximum PCIe link generation"),
    _M(M.PCIE_LINK_WIDTH, "lanes", "current PCIe link width"),
    _M(M.PCIE_LINK_WIDTH_MAX, "lanes", "maximum PCIe link width"),
    _M(M.LINK_SPEED_GTS, "GT/s", "current PCIe link speed"),
    _M(M.LINK_SPEED_MAX_GTS, "GT/s", "maximum PCIe link speed"),
    _M(M.LINK_WIDTH, "lanes", "current PCIe link width (sysfs)"),
    _M(M.LINK_WIDTH_MAX, "lanes", "maximum PCIe link width (sysfs)"),
    _M(M.NVLINK_TX_BYTES_PER_S, "bytes/s", "NVLink/HCCS bytes sent"),
    _M(M.NVLINK_RX_BYTES_PER_S, "bytes/s", "NVLink/HCCS bytes received"),
    _M(M.NVLINK_BYTES_PER_S, "bytes/s", "NVLink/HCCS traffic of a device, both directions, all links (where only "
       "the sum is known: dcgm-exporter's DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL)"),
    _M(M.NVLINK_UTIL_PCT, "%", "NVLink/HCCS throughput as a share of the links' capacity"),
    _M(M.NVLINK_LINKS_UP, "links", "active NVLink links"),
    _M(M.NVLINK_LINKS, "links", "NVLink/HCCS links the device reports a state for, up or not"),
    _M(M.NVLINK_LINKS_DOWN, "links", "NVLink/HCCS links of the device that are not active (did not train, "
                                     "failed, or are not wired on this board)"),
    _M(M.SM_CLOCK_MHZ, "MHz", "current SM / AI Core clock"),
    _M(M.SM_CLOCK_MAX_MHZ, "MHz", "maximum SM / AI Core clock"),
    _M(M.MEM_CLOCK_MHZ, "MHz", "current device memory clock"),
    _M(M.MEM_CLOCK_MAX_MHZ, "MHz", "maximum device memory clock"),
    _M(M.TEMPERATURE_C, "degC", "device temperature"),
    _M(M.POWER_W, "W", "device power draw"),
    _M(M.POWER_LIMIT_W, "W", "device power limit"),
    _M(M.THROTTLE_THERMAL, "0/1", "thermal clock throttling active during the window"),
    _M(M.THROTTLE_POWER, "0/1", "power-cap clock throttling active during the window"),
    _M(M.ECC_ERRORS_TOTAL, "errors", "uncorrected ECC errors"),
    _M(M.ECC_CORRECTED_ERRORS_TOTAL, "errors", "corrected (single-bit) ECC errors during the window"),
    _M(M.PCIE_REPLAYS_TOTAL, "replays", "PCIe link-level retries (replays) during the window: a rising count "
       "points at a bad riser, slot or cable"),
    _M(M.XID_ERRORS_TOTAL, "errors", "XID errors during the window"),
    # RDMA
    _M(M.PORT_RCV_BYTES_PER_S, "bytes/s", "RDMA port bytes received"),
    _M(M.PORT_XMIT_BYTES_PER_S, "bytes/s", "RDMA port bytes sent"),
    _M(M.PORT_UTIL_PCT, "%", "RDMA port throughput as a share of its rate"),
    _M(M.RATE_GBPS, "Gbit/s", "RDMA port rate"),
    _M(M.PORT_ERRORS_PER_S, "1/s", "RDMA error counters (symbol, link, rcv, xmit discards...) per second"),
    _M(M.PORT_RETRANS_PER_S, "1/s", "RDMA retransmit-like counters (local_ack_timeout, out_of_sequence, ...) "
       "per second"),
    _M(M.PFC_RX_FRAMES_PER_S, "1/s", "PFC pause frames received per second: the switch asks this port to stop sending"),
    _M(M.PFC_TX_FRAMES_PER_S, "1/s", "PFC pause frames sent per second: this port cannot take what it receives"),
    _M(M.CNP_RX_PACKETS_PER_S, "1/s", "RoCE congestion notification packets received per second (this port's flows "
       "are told to slow down: ECN marks on their path)"),
    _M(M.CNP_TX_PACKETS_PER_S, "1/s", "RoCE congestion notification packets sent per second (ECN-marked packets "
       "arrived)"),
    _M(M.OPTICAL_RX_POWER_MW, "mW", "optical module receive power, weakest lane"),
    _M(M.OPTICAL_TX_POWER_MW, "mW", "optical module transmit power, weakest lane"),
    _M(M.QPS, "queue pairs", "RDMA queue pairs at the end of the window (of a port, or of one process on it)"),
    _M(M.QPS_ERROR, "queue pairs", "of those, in an error state (ERR or SQE: peer gone, retries exhausted)"),
    _M(M.QPS_CREATED_TOTAL, "queue pairs", "queue pairs that appeared during the window (connection churn)"),
    _M(M.QPS_DESTROYED_TOTAL, "queue pairs", "queue pairs that went away during the window"),
    # PMU and eBPF (only where the host has them)
    _M(M.IPC, "instructions/cycle", "instructions per cycle (PMU)"),
    _M(M.LLC_MISS_PCT, "%", "last-level cache misses / references (PMU cache-misses / cache-references)"),
    _M(M.STALLED_CYCLES_FRONTEND_PCT, "%", "cycles the front end issued nothing, share of all cycles (PMU, where the "
       "CPU offers the event)"),
    _M(M.STALLED_CYCLES_BACKEND_PCT, "%", "cycles the back end retired nothing while waiting (memory, execution "
       "units), share of all cycles (PMU, where the CPU offers the event)"),
    _M(M.PMU_RUNNING_PCT, "%", "share of the window the PMU counters of a process, CPU or host were running "
       "(under 100: multiplexed with other counters, the counts are scaled up)"),
    _M(M.DRAM_BW_UTIL_PCT, "%", "DRAM bandwidth used (mem_bytes_per_s) as a share of the peak, host or NUMA node"),
    _M(M.DRAM_BW_PEAK_BYTES_PER_S, "bytes/s", "peak DRAM bandwidth of a NUMA node or the host (SMBIOS memory devices: "
       "configured speed x data width over the populated channels, or WITTY_DRAM_PEAK_GBS)"),
    _M(M.FUTEX_WAIT_PCT, "%", "share of the window a thread spent in futex waits (locks, condition variables, "
       "the GIL), timed out or woken (eBPF)"),
    _M(M.FUTEX_LOCK_WAIT_PCT, "%", "share of the window a thread spent in futex waits that another thread ended or "
       "that lasted under 10 ms (lock hand-overs, GIL waits), leaving out sleeps that ran to a longer timeout (eBPF)"),
    _M(M.FUTEX_WAKEUPS_PER_S, "1/s", "futex waits of a thread that another thread ended by a wake-up, per second: "
       "high for a thread contending for a lock, low for an idle one (eBPF)"),
    # on-CPU stacks, per thread (collect --stacks)
    _M(M.STACK_SAMPLES_TOTAL, "samples", "on-CPU stack samples of a thread in the window (49 Hz: a sample is ~20 ms on "
       "a CPU)"),
    _M(M.HOT_FUNCTION_PCT, "%", "share of a thread's stack samples whose leaf function (with its caller) is its "
       "hot_function"),
    _M(M.STACK_UNKNOWN_PCT, "%", "share of a thread's stack samples holding a frame no symbol named ([unknown]: "
       "stripped code, no frame pointers, JIT code)"),
    # traces: per step of a rank (mean over the steps; _p95 and _max over them), per collective
    _M(M.STEPS, "steps", "profiler steps a trace holds for a rank"),
    _M(M.STEP_TIME_MS, "ms", "wall time of one step (ProfilerStep#N; msprof: Stage)"),
    _M(M.COMPUTE_MS, "ms", "accelerator compute time per step (kernels that are not communication)"),
    _M(M.COMM_MS, "ms", "communication time per step (collective kernels), overlapped or not"),
    _M(M.COMM_EXPOSED_MS, "ms", "communication per step that no computation overlaps: the step waits for it"),
    _M(M.COMM_OVERLAPPED_MS, "ms", "communication per step hidden under computation"),
    _M(M.FREE_MS, "ms", "time per step the accelerator does neither (idle: waiting for the host or input)"),
    _M(M.BUBBLE_MS, "ms", "pipeline-parallel bubble per step (msprof: Bubble)"),
    _M(M.DATA_LOADING_MS, "ms", "time per step in the data loader (enumerate(DataLoader) spans)"),
    _M(M.KERNEL_BUSY_PCT, "%", "share of the step time the accelerator runs any kernel"),
    _M(M.CALLS, "calls", "times a collective ran in the trace"),
    _M(M.DURATION_MS, "ms", "duration of one call of a collective"),
    _M(M.ELAPSE_MS, "ms", "a rank's total time in a collective (msprof: Elapse Time)"),
    _M(M.TRANSIT_MS, "ms", "time spent moving data in a collective (msprof: Transit Time)"),
    _M(M.WAIT_MS, "ms", "time a rank waited in a collective for its peers (msprof: Wait Time)"),
    _M(M.SYNC_MS, "ms", "time a rank spent synchronising before a collective's transfers (msprof: Synchronization Time)"),
    _M(M.IDLE_MS, "ms", "time between a rank's collectives (msprof: Idle Time)"),
    _M(M.WAIT_RATIO, "ratio", "wait / (wait + transit) of a rank in a collective"),
    _M(M.LAST_ARRIVALS, "calls", "calls of a collective in which this rank waited least of its group: it arrived "
       "last and its peers waited for it (msprof's slow-rank vote)"),
    _M(M.TRANSIT_BYTES, "bytes", "bytes a collective moved (per link where the edge names one)"),
    _M(M.BANDWIDTH_GBYTES_PER_S, "GB/s", "transfer bandwidth of a collective (per link where the edge names one; "
       "Kineto: nccl-tests' algorithm bandwidth, message bytes / kernel time)"),
    _M(M.MESSAGE_BYTES, "bytes", "mean message size of one call of a collective (nccl-tests' S: the larger of "
       "the input and output element counts times the dtype's size)"),
    _M(M.BUS_BANDWIDTH_GBYTES_PER_S, "GB/s", "nccl-tests' bus bandwidth of a collective: the algorithm bandwidth "
       "times 2(n-1)/n (AllReduce), (n-1)/n (AllGather, ReduceScatter, AllToAll) or 1, comparable with a link's peak"),
    # legacy time bases
    _M(M.RUNTIME_NS_TOTAL, "ns", "CPU time of a task on a NUMA node"),
    _M(M.RUNTIME_SHARE_PCT, "%", "share of a task's CPU time on a NUMA node"),
    _M(M.PAGES, "pages", "pages of a process on a NUMA node"),
    _M(M.PAGE_SHARE_PCT, "%", "share of a process's pages on a NUMA node"),
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

