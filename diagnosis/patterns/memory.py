"""Layer 2, memory: caches, memory bandwidth, memory pressure, device memory."""

from __future__ import annotations

from typing import Any

from witty_profiler.diagnosis import evidence as ev
from witty_profiler.diagnosis.catalog import (
    Pattern,
    Threshold,
    Verdict,
    clear,
    finding,
    not_evaluated,
    number,
    with_unit,
)
from witty_profiler.diagnosis.models import Evidence
from witty_profiler.diagnosis.rules import (
    assess,
    clear_text,
    levels_check,
    metric_check,
    metric_of,
    pmu_context,
    pmu_subjects,
    pmu_what,
    scope_cgroups,
    workload_devices,
)
from witty_profiler.diagnosis.scope import Scope, num
from witty_profiler.topology import Entity
from witty_profiler.topology.vocabulary import M, T


# -- memory.cache_miss_storm --------------------------------------------------------------
def _llc_hit(e: Entity) -> float | None:
    miss = num(e, M.LLC_MISS_PCT)
    return None if miss is None else 100.0 - miss


def _cache_miss_storm(scope: Scope, t: dict[str, Any]) -> Verdict:
    subjects = [e for e in pmu_subjects(scope) if num(e, M.LLC_MISS_PCT) is not None]
    if not subjects:
        return not_evaluated(scope.missing(f"no llc_miss_pct from PMU counters for {pmu_what(scope)}",
                                           "pmu"))
    return metric_check(scope, subjects, t["llc_hit_pct"], "llc_hit_pct", "subjects with LLC counters", ("pmu",),
                        "{n:subjects|miss} the last-level cache often: {names}, LLC hit rate {worst} "
                        "(threshold < {limit}).", value=_llc_hit,
                        extra=lambda e: [ev.entity(e.id, M.LLC_MISS_PCT, num(e, M.LLC_MISS_PCT), unit="%")]
                        + pmu_context(e))


CACHE_MISS_STORM = Pattern(
    id="memory.cache_miss_storm", layer=2, title="Cache miss storm",
    why="When the last-level cache hit rate drops, most loads go to DRAM (or a remote NUMA node) and the "
        "cores stall; the CPU looks busy but does little.",
    metrics=("process.llc_miss_pct", "host.llc_miss_pct"),
    thresholds=(Threshold("llc_hit_pct", "%", "below", "last-level cache hit rate (100 - llc_miss_pct)",
                          critical=90, warning=95),),
    needs="hardware PMU counters (perf_event_open)",
    evidence="Each workload process (or the host) with its LLC hit rate.",
    recommendations=(
        "Shrink the working set per thread (smaller tiles or batches on the CPU side, fewer threads per socket).",
        "Keep memory local to the NUMA node the threads run on.",
        "Avoid false sharing and scattered accesses in hot loops.",
    ),
    check=_cache_miss_storm)


# -- memory.bandwidth_wall ----------------------------------------------------------------
def _bandwidth_wall(scope: Scope, t: dict[str, Any]) -> Verdict:
    subjects = [e for e in scope.hosts() + scope.graph.entities(T.NUMA_NODE) if num(e, M.DRAM_BW_UTIL_PCT) is not None]
    if not subjects:
        return not_evaluated(scope.missing("no dram_bw_util_pct of a host or NUMA node from DRAM bandwidth counters",
                                           "membw"))
    return metric_check(scope, subjects, t["dram_bw_util_pct"], M.DRAM_BW_UTIL_PCT, "memory domains (hosts, NUMA nodes)",
                        ("membw",), "Memory bandwidth is near its peak on {n:memory domains} (host or NUMA node): "
                        "{names} at {worst} (threshold > {limit}).", extra=_bandwidth_context)


def _bandwidth_context(e: Entity) -> list[Evidence]:
    return [ev.entity(e.id, m, num(e, m), unit="bytes/s") for m in
            (M.MEM_BYTES_PER_S, M.DRAM_BW_PEAK_BYTES_PER_S, M.MEM_READ_BYTES_PER_S, M.MEM_WRITE_BYTES_PER_S)
            if num(e, m) is not None]


BANDWIDTH_WALL = Pattern(
    id="memory.bandwidth_wall", layer=2, title="Memory bandwidth wall",
    why="Above about 80 % of peak DRAM bandwidth, memory latency climbs steeply; every memory-bound thread "
        "on that socket slows down together.",
    metrics=("host.dram_bw_util_pct", "numa_node.dram_bw_util_pct", "numa_node.mem_bytes_per_s",
             "numa_node.dram_bw_peak_bytes_per_s"),
    thresholds=(Threshold("dram_bw_util_pct", "%", "above", "DRAM bandwidth used, share of peak",
                          critical=90, warning=80),),
    needs="DRAM bandwidth counters (resctrl MBM or uncore memory-controller PMU) and the peak (SMBIOS or "
          "WITTY_DRAM_PEAK_GBS)",
    evidence="Each host or NUMA node over the threshold with its bytes/s (reads and writes where the counters split "
              "them) and its peak.",
    recommendations=(
        "Spread memory-heavy processes over NUMA nodes (one rank per node, memory bound with numactl --membind).",
        "Reduce copies: pinned memory and zero-copy paths, fewer format conversions in preprocessing.",
        "Use lower precision for host-side data where the model allows it.",
    ),
    check=_bandwidth_wall)


# -- memory.hbm_bandwidth_limit -----------------------------------------------------------
def _bandwidth_metric(e: Entity) -> str:
    """GPM's DRAM bandwidth share where the GPU has it (bytes moved against peak); else NVML's share of
    time memory was busy on a GPU, npu-smi's HBM bandwidth usage rate on an NPU."""
    return M.HBM_BW_UTIL_PCT if num(e, M.HBM_BW_UTIL_PCT) is not None else M.MEM_BW_UTIL_PCT


def _hbm_bandwidth_limit(scope: Scope, t: dict[str, Any]) -> Verdict:
    devices = workload_devices(scope)
    if not any(_bandwidth_metric(d) == M.HBM_BW_UTIL_PCT for d in devices):
        return metric_check(scope, devices, t["mem_bw_util_pct"], M.MEM_BW_UTIL_PCT,
                            "accelerators of the workload", ("gpu", "npu", "nvml"),
                            "Device memory bandwidth is saturated on {n:accelerators}: {names} at {worst} "
                            "(threshold > {limit}).")
    levels = t["mem_bw_util_pct"]
    a = assess(devices, levels, lambda e: num(e, _bandwidth_metric(e)))
    if not a.hits:
        return clear(clear_text(a, "accelerators of the workload", "HBM bandwidth share (GPM hbm_bw_util_pct "
                                "where measured)"))
    items = [ev.entity(e.id, _bandwidth_metric(e), v, levels=levels, severity=sev, note=ev.name_of(e))
             for e, v, sev in a.hits[:ev.MAX_SUBJECTS]]
    names = ", ".join(ev.name_of(e) for e, _, _ in a.hits[:4]) + (" ..." if len(a.hits) > 4 else "")
    return finding(a.severity or "warning",
                   f"Device memory bandwidth is saturated on {ev.Count(len(a.hits)):accelerators}: {names} at "
                   f"{ev.fmt(a.hits[0][1], levels.unit)} of peak (GPM DRAM counters; threshold > "
                   f"{with_unit(number(levels.limit(a.hits[0][2])), levels.unit)}).", items, subjects=[e.id for e, _, _ in a.hits])


HBM_BANDWIDTH_LIMIT = Pattern(
    id="memory.hbm_bandwidth_limit", layer=2, title="HBM bandwidth limit",
    why="A kernel mix that saturates the device's memory bandwidth is memory-bound: faster compute units "
        "will not help, less data movement will.",
    metrics=("gpu.hbm_bw_util_pct", "gpu.mem_bw_util_pct", "npu.mem_bw_util_pct"),
    thresholds=(Threshold("mem_bw_util_pct", "%", "above", "device memory-controller (HBM) bandwidth used",
                          critical=95, warning=85),),
    needs="a GPU (NVML; GPM counters on Hopper and later) or NPU (npu-smi) collector",
    evidence="Each device of the workload over the threshold, with the figure it was judged on: GPM's DRAM "
             "bandwidth share (hbm_bw_util_pct) where the GPU has it, else mem_bw_util_pct.",
    recommendations=(
        "Fuse memory-bound kernels (torch.compile, fused optimisers, FlashAttention).",
        "Use lower-precision activations and KV cache (bf16/fp8) where accuracy allows.",
        "Increase arithmetic intensity: larger batches or tiles per kernel.",
    ),
    check=_hbm_bandwidth_limit)


# -- memory.pressure ----------------------------------------------------------------------
def _swap_rate(e: Entity) -> float | None:
    rates = [num(e, m) for m in (M.SWAP_IN_PAGES_PER_S, M.SWAP_OUT_PAGES_PER_S)]
    known = [r for r in rates if r is not None]
    return sum(known) if known else None


def _pressure(scope: Scope, t: dict[str, Any]) -> Verdict:
    checks = ((M.PSI_MEMORY_SOME_PCT, metric_of(M.PSI_MEMORY_SOME_PCT), "%"),
              ("swap_pages_per_s", _swap_rate, "pages/s"),
              (M.MAJOR_FAULTS_PER_S, metric_of(M.MAJOR_FAULTS_PER_S), "1/s"))
    hosts = scope.hosts()
    measured = [h for h in hosts if any(f(h) is not None for _, f, _ in checks)]
    # the workload's own cgroups: a memory limit stalls it even when the host has memory to spare
    # (v2 says so in its PSI; v1 has none, but a limit that evicts the page cache shows as major faults)
    cgroups = [c for c in scope_cgroups(scope) if scope.has_workload and not c.id.endswith(":/")
               and (num(c, M.PSI_MEMORY_SOME_PCT) is not None or num(c, M.MAJOR_FAULTS_PER_S) is not None)]
    measured += cgroups
    if not measured:
        return not_evaluated(scope.missing("no PSI memory, swap or major-fault rates of the host", "memory",
                                           "host", "pressure"))
    return levels_check(measured, checks, t, "The workload stalls on memory: ", context=_memory_sizes)


def _memory_sizes(e: Entity) -> list[Evidence]:
    items = [ev.entity(e.id, m, num(e, m), unit="bytes") for m in (M.MEM_AVAILABLE_BYTES, M.SWAP_USED_BYTES,
                                                                  M.MEMORY_USAGE_BYTES, M.MEMORY_LIMIT_BYTES)
             if num(e, m) is not None]
    if num(e, M.MEMORY_LIMIT_HITS_PER_S):
        items.append(ev.entity(e.id, M.MEMORY_LIMIT_HITS_PER_S, num(e, M.MEMORY_LIMIT_HITS_PER_S), unit="1/s",
                               note="charges that hit the cgroup's memory limit and had to reclaim first"))
    return items


PRESSURE = Pattern(
    id="memory.pressure", layer=2, title="Memory pressure",
    why="When tasks stall on memory (reclaim, swap-in, major faults), every step takes longer in ways that "
        "do not show up as CPU use; in the worst case the OOM killer ends the job.",
    metrics=("host.psi_memory_some_pct", "host.swap_in_pages_per_s", "host.swap_out_pages_per_s",
             "host.major_faults_per_s", "host.mem_available_bytes", "cgroup.psi_memory_some_pct",
             "cgroup.major_faults_per_s", "cgroup.memory_usage_bytes", "cgroup.memory_limit_bytes",
             "cgroup.memory_limit_hits_per_s"),
    thresholds=(Threshold("psi_memory_some_pct", "%", "above", "share of the window some task stalled on memory",
                          critical=30, warning=10),
                Threshold("swap_pages_per_s", "pages/s", "above", "pages swapped in plus out per second",
                          critical=1000, warning=100),
                Threshold("major_faults_per_s", "1/s", "above", "major page faults per second",
                          warning=5000, notice=500)),
    evidence="The host's PSI memory stall share, swap rate and major-fault rate over their thresholds, with "
             "available memory and swap in use; the PSI memory stall or major-fault rate of the workload's own "
             "cgroups (a container memory limit) with their usage, limit and limit hits.",
    recommendations=(
        "Lower the memory footprint: fewer data-loader workers (each copies the dataset object), smaller "
        "prefetch queues, shared memory for datasets.",
        "Disable or limit swap for training hosts, and set container memory limits above the peak.",
        "Load model weights once and share them (mmap, shared memory) instead of per-process copies.",
    ),
    check=_pressure)


# -- memory.accelerator_memory_full -------------------------------------------------------
def _device_mem_pct(e: Entity) -> float | None:
    pct = num(e, M.MEMORY_USED_PCT)
    if pct is not None:
        return pct
    used, total = num(e, M.MEMORY_USED_BYTES), num(e, M.MEMORY_TOTAL_BYTES)
    return used * 100 / total if used is not None and total else None


def _accelerator_memory_full(scope: Scope, t: dict[str, Any]) -> Verdict:
    return metric_check(scope, workload_devices(scope), t["memory_used_pct"], M.MEMORY_USED_PCT,
                        "accelerators of the workload", ("gpu", "npu", "nvml"),
                        "Device memory is almost full on {n:accelerators}: {names} at {worst} "
                        "(threshold > {limit}).", value=_device_mem_pct)


ACCELERATOR_MEMORY_FULL = Pattern(
    id="memory.accelerator_memory_full", layer=2, title="Accelerator memory full",
    why="A device at its memory limit forces small batches, allocator retries and fragmentation, and one "
        "spike away from an out-of-memory error. Serving engines that preallocate on purpose (vLLM's "
        "gpu_memory_utilization) show here too: check that it is intended.",
    metrics=("gpu.memory_used_pct", "gpu.memory_used_bytes", "gpu.memory_total_bytes", "npu.memory_used_pct"),
    thresholds=(Threshold("memory_used_pct", "%", "above", "device memory in use", critical=99, warning=95),),
    needs="a GPU (NVML; GPM counters on Hopper and later) or NPU (npu-smi) collector",
    evidence="Each device of the workload over the threshold, with the figure it was judged on: GPM's DRAM "
             "bandwidth share (hbm_bw_util_pct) where the GPU has it, else mem_bw_util_pct.",
    recommendations=(
        "If the engine preallocates (vLLM, TGI), leave headroom (e.g. gpu_memory_utilization 0.90).",
        "Use activation checkpointing, smaller micro-batches or ZeRO/FSDP sharding.",
        "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation.",
    ),
    check=_accelerator_memory_full)


PATTERNS = [CACHE_MISS_STORM, BANDWIDTH_WALL, HBM_BANDWIDTH_LIMIT, PRESSURE, ACCELERATOR_MEMORY_FULL]
