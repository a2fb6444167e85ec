"""Layer 1, compute: are the CPUs and accelerators doing the work, and doing it efficiently?"""

from __future__ import annotations

from typing import Any

from witty_profiler.diagnosis import evidence as ev
from witty_profiler.diagnosis.catalog import (
    Param,
    Pattern,
    Threshold,
    Verdict,
    clear,
    finding,
    not_evaluated,
    number,
    worst,
)
from witty_profiler.diagnosis.models import Evidence
from witty_profiler.diagnosis.patterns.traces import rank_label, sources, sources_of, with_traces
from witty_profiler.diagnosis.rules import (
    assess,
    busy_candidates,
    clear_text,
    cpu_wait_pct,
    hit_evidence,
    metric_check,
    metric_of,
    needs_workload,
    on_saturated_cpus,
    pmu_context,
    pmu_subjects,
    pmu_what,
    quota_advice,
    quota_cause,
    short_waits,
    slices_per_s,
    workload_devices,
)
from witty_profiler.diagnosis.scope import Scope, num
from witty_profiler.topology import Entity
from witty_profiler.topology.cpulist import cpu_set
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.vocabulary import E, M, T

DATAPLANE = ("dataplane.data_loading_bottleneck", "dataplane.preprocessing_bottleneck")


def dataplane_explanations(scope: Scope, subject_ids: set[str]) -> list[str]:
    """Data-plane findings whose subjects (the waiting consumers) include one of these ids."""
    found = []
    for pid in DATAPLANE:
        v = scope.verdict(pid)
        if v is not None and v.status == "finding" and subject_ids & set(v.subjects):
            found.append(pid)
    return found


# -- compute.cpu_starvation ---------------------------------------------------------------
def _cpu_starvation(scope: Scope, t: dict[str, Any]) -> Verdict:
    if (skip := needs_workload(scope)) is not None:
        return skip
    levels = t["cpu_util_pct"]
    candidates = busy_candidates(scope)
    if not candidates:
        return clear(f"no process of the workload ({scope.describe()}) is expected to be busy "
                     "(no trainer, inference engine or accelerator user)")
    a = assess(candidates, levels, metric_of(M.CPU_UTIL_PCT))
    if not a.measured:
        return not_evaluated(scope.missing("no CPU utilisation of the workload's processes", "process"))
    # Low CPU use is starvation only when the process wanted more: it waited for a CPU. A process
    # that sleeps or blocks by itself is idle (or waits for input: the data-plane layer says so).
    judged = [(e, v, s) for e, v, s in a.hits if cpu_wait_pct(e) is not None]
    waiting = [(e, v, s) for e, v, s in judged if (cpu_wait_pct(e) or 0.0) >= t["min_cpu_wait_pct"]]
    # and waited long each time: one that runs in bursts of microseconds (a synchronous writer,
    # a request loop) waits at every wake-up, thousands of times a second, briefly
    hits = [(e, v, s) for e, v, s in waiting if not short_waits(e, t["min_wait_per_slice_us"])]
    bursts = [e for e, _, _ in waiting if short_waits(e, t["min_wait_per_slice_us"])]
    if a.hits and not judged:
        return not_evaluated(scope.missing(f"{ev.counted(len(a.hits), 'processes', 'use')} little CPU, but without run-queue wait "
                                           "times (schedstat) idle cannot be told from starved", "process"))
    if not hits:
        if bursts:
            top = max(bursts, key=lambda e: (num(e, M.RUNQUEUE_WAIT_PER_SLICE_US) or 0.0, e.id))
            return clear(f"{ev.counted(len(bursts), 'processes', 'use')} little CPU and {ev.agree(len(bursts), 'wait')} for "
                         f"one often but briefly: {ev.name_of(top)} waits {ev.fmt(cpu_wait_pct(top), '%')} of the window, "
                         f"{ev.fmt(num(top, M.RUNQUEUE_WAIT_PER_SLICE_US), 'us')} per slice (<= "
                         f"{number(t['min_wait_per_slice_us'])} us){slices_per_s(top)}: it runs in short bursts and waits "
                         "at each wake-up, not starved")
        if judged:
            return clear(f"{ev.counted(len(judged), 'processes', 'use')} little CPU but hardly {ev.agree(len(judged), 'wait')} for one (< "
                         f"{number(t['min_cpu_wait_pct'])} % of the window in the run queue): idle or blocked by "
                         f"{'itself' if len(judged) == 1 else 'themselves'}, not starved")
        return clear(clear_text(a, "workload processes", M.CPU_UTIL_PCT))
    subjects = {e.id for e, _, _ in hits}
    explained = dataplane_explanations(scope, subjects)
    items = []
    for e, value, sev in hits[:ev.MAX_SUBJECTS]:
        items.append(ev.entity(e.id, M.CPU_UTIL_PCT, value, levels=levels, severity=sev, note=ev.name_of(e)))
        items.append(ev.statistic([e.id], "cpu_wait_pct", cpu_wait_pct(e), unit="%",
                                  note="share of the window spent waiting for a CPU",
                                  bound=(">=", t["min_cpu_wait_pct"])))
        if num(e, M.RUNQUEUE_WAIT_PER_SLICE_US) is not None:
            items.append(ev.entity(e.id, M.RUNQUEUE_WAIT_PER_SLICE_US, num(e, M.RUNQUEUE_WAIT_PER_SLICE_US), unit="us",
                                   note="mean wait each time it was ready to run",
                                   bound=(">", t["min_wait_per_slice_us"])))
        if num(e, M.VOLUNTARY_CTXT_SWITCHES_PER_S) is not None:
            items.append(ev.entity(e.id, M.VOLUNTARY_CTXT_SWITCHES_PER_S, num(e, M.VOLUNTARY_CTXT_SWITCHES_PER_S),
                                   unit="1/s"))
    if len(hits) > ev.MAX_SUBJECTS:
        items.append(ev.more(len(hits) - ev.MAX_SUBJECTS, "processes"))
    first = hits[0]
    text = (f"{ev.counted(len(hits), 'workload processes', 'get')} too little CPU: {ev.name_of(first[0])} runs "
            f"{ev.fmt(first[1], '%')} of one core (threshold < {number(levels.limit(first[2]))} %) and waits for a "
            f"CPU {ev.fmt(cpu_wait_pct(first[0]), '%')} of the window.")
    severity = worst(*(s for _, _, s in hits)) or "warning"
    # a CPU quota stops a throttled group's tasks, and schedstat counts that as run-queue wait
    quota = quota_cause(scope, [e for e, _, _ in hits])
    text += quota.text
    items += quota.evidence
    # the others wait because other work keeps the CPUs they may use busy
    crowded = on_saturated_cpus(scope, [e for e, _, _ in hits if e.id not in quota.held])
    if crowded:
        text += (f" {'It runs' if len(hits) == 1 else ev.counted(len(crowded), 'of them', 'run')} on saturated CPUs "
                 "(see compute.cpu_saturation).")
    if explained:
        # it also waits for its input: the producer is the first thing to fix
        severity = "notice"
        text += f" It also waits for its input producers: see {', '.join(explained)}."
    return finding(severity, text, items, subjects=sorted(subjects),
                   related=explained + quota.related + (["compute.cpu_saturation"] if crowded else []),
                   recommendations=quota.recommendations(subjects, QUOTA_RECOMMENDATIONS, CPU_STARVATION.recommendations))


QUOTA_RECOMMENDATIONS = quota_advice(
    "the process's", "it waits",
    "Match thread counts to the quota: OMP_NUM_THREADS, torch.set_num_threads and loader workers <= quota cores.",
    "If it also waits for input (see the data-plane findings), fix the producer first.",
)


CPU_STARVATION = Pattern(
    id="compute.cpu_starvation", layer=1, title="CPU starvation of the workload",
    why="A trainer or inference engine that gets little CPU although it is ready to run cannot feed its "
        "accelerator or answer requests; the time goes to waiting for a CPU, not computing.",
    metrics=("process.cpu_util_pct", "process.runqueue_wait_ms_per_s", "process.runqueue_wait_per_slice_us",
             "process.timeslices_per_s", "process.voluntary_ctxt_switches_per_s"),
    thresholds=(Threshold("cpu_util_pct", "%", "below", "CPU use of a busy workload process, % of one core",
                          critical=20, warning=30),),
    params=(Param("min_cpu_wait_pct", 10, "%", "the process must also wait for a CPU at least this share of the "
                  "window; one that sleeps or blocks by itself is idle, not starved"),
            Param("min_wait_per_slice_us", 1000, "us", "and wait longer than this each time, on average (run-queue "
                  "wait per timeslice, where measured): a process that runs in bursts of microseconds, thousands of "
                  "times a second, waits briefly at every wake-up (tens to hundreds of us, more on a VM's idle CPU), "
                  "which adds up to a large share without any queue behind other tasks")),
    evidence="Each trainer, inference, accelerator-using or named process of the workload under the threshold that "
             "waited for a CPU, and long each time, with its wait share, wait per slice and voluntary context "
             "switches. When a data-plane finding covers it too, the finding is lowered to a notice and points to it. "
             "When control.cpu_throttling finds the cgroup of a waiting process (or one above it) throttled, the "
             "finding names it with its throttled time and quota and recommends raising or removing the quota "
             "instead of moving competing work away; when compute.cpu_saturation finds the CPUs another waiting "
             "process may use saturated, it relates to that.",
    recommendations=(
        "Give the process CPUs of its own (taskset/cpuset) away from other busy work, or stop what competes.",
        "Check thread binding (OMP_NUM_THREADS, torch.set_num_threads) against the CPUs it is allowed on.",
        "If it also waits for input (see the data-plane findings), fix the producer first.",
    ),
    check=_cpu_starvation)


# -- compute.cpu_saturation ---------------------------------------------------------------
def _workload_cpus(scope: Scope) -> dict[str, set[int]]:
    """host -> the CPUs the workload may use, where that is a strict subset of the host's CPUs."""
    found: dict[str, set[int]] = {}
    for p in scope.processes:
        cpus = cpu_set(p.attrs.get("cpus_allowed"))
        if cpus:
            found.setdefault(host_of(p.id), set()).update(cpus)
    return found


def _cpu_saturation(scope: Scope, t: dict[str, Any]) -> Verdict:
    levels = t["cpu_util_pct"]
    hosts = [h for h in scope.hosts() if num(h, M.CPU_UTIL_PCT) is not None]
    cpus = [c for c in scope.graph.entities(T.CPU) if num(c, M.CPU_UTIL_PCT) is not None]
    if not hosts and not cpus:
        return not_evaluated(scope.missing("no host or per-CPU utilisation in this graph", "cpu", "host"))
    items = []
    severities: list[str | None] = []
    subjects = []
    parts = []
    for host in hosts:
        value, stolen = num(host, M.CPU_UTIL_PCT), num(host, M.CPU_STEAL_PCT) or 0.0
        sev = levels.severity(value + stolen)
        if sev:
            severities.append(sev)
            subjects.append(host.id)
            if stolen:  # a VM: what the hypervisor gave to others was not there for the workload either
                parts.append(f"host {host_of(host.id)} CPUs {ev.fmt(value, '%')} busy and {ev.fmt(stolen, '%')} "
                             f"stolen by the hypervisor")
                items.append(ev.statistic([host.id], "cpu_busy_or_stolen_pct", round(value + stolen, 2),
                                          levels=levels, severity=sev, note="cpu_util_pct + cpu_steal_pct"))
                items.append(ev.entity(host.id, M.CPU_UTIL_PCT, value, unit="%", note="host average"))
                items.append(ev.entity(host.id, M.CPU_STEAL_PCT, stolen, unit="%", note="time the hypervisor ran "
                                       "other guests on these CPUs"))
            else:
                parts.append(f"host {host_of(host.id)} CPUs {ev.fmt(value, '%')} busy")
                items.append(ev.entity(host.id, M.CPU_UTIL_PCT, value, levels=levels, severity=sev,
                                       note="host average"))
            for m, u in ((M.LOAD1, "runnable tasks"), (M.PSI_CPU_SOME_PCT, "%")):
                if num(host, m) is not None:
                    items.append(ev.entity(host.id, m, num(host, m), unit=u))
    by_host: dict[str, list[Entity]] = {}
    for c in cpus:
        by_host.setdefault(host_of(c.id), []).append(c)
    for host, allowed in sorted(_workload_cpus(scope).items()):
        mine = [c for c in by_host.get(host, []) if c.attrs.get("cpu", _cpu_number(c)) in allowed]
        if not mine or len(mine) == len(by_host.get(host, [])):
            continue  # the workload may use every CPU: the host average already says it
        mean = sum(num(c, M.CPU_UTIL_PCT) or 0.0 for c in mine) / len(mine)
        sev = levels.severity(mean)
        if sev:
            severities.append(sev)
            subjects.extend(c.id for c in mine)
            parts.append(f"the workload's {ev.counted(len(mine), 'CPUs')} on {host} {ev.fmt(mean, '%')} busy")
            items.append(ev.statistic([c.id for c in mine], M.CPU_UTIL_PCT, mean, levels=levels, severity=sev,
                                      note=f"mean over the {ev.counted(len(mine), 'CPUs')} the workload may use"))
    if severities:
        busy = [c for c in cpus if (levels.severity(num(c, M.CPU_UTIL_PCT)))]
        if busy:
            items.append(ev.statistic([c.id for c in busy], "cpus_over_threshold", len(busy), unit="CPUs",
                                      note=f"{len(busy)} of {len(cpus)} CPUs above {number(levels.limit())} %"))
        return finding(worst(*severities) or "warning", "CPUs are saturated: " + "; ".join(parts) + ".", items,
                       subjects=subjects)
    top = max(hosts, key=lambda h: ((num(h, M.CPU_UTIL_PCT) or 0.0) + (num(h, M.CPU_STEAL_PCT) or 0.0), h.id),
              default=None)
    where = f"{ev.counted(len(cpus), 'CPUs')} measured"
    if top is not None:
        stolen = num(top, M.CPU_STEAL_PCT) or 0.0
        where = f"host CPU use {ev.fmt(num(top, M.CPU_UTIL_PCT), '%')}" + (f" + {ev.fmt(stolen, '%')} stolen"
                                                                         if stolen else "")
    return clear(f"{where}, none > {number(levels.limit())} %")


def _cpu_number(cpu: Entity) -> int | None:
    try:
        return int(cpu.id.rsplit(":", 1)[1])
    except ValueError:
        return None


CPU_SATURATION = Pattern(
    id="compute.cpu_saturation", layer=1, title="CPU saturation",
    why="When every CPU is busy, each thread waits in the run queue: data loading, kernel launches and "
        "communication threads all slow down, and latency grows without any single process looking guilty.",
    metrics=("host.cpu_util_pct", "host.cpu_steal_pct", "cpu.cpu_util_pct", "host.load1", "host.psi_cpu_some_pct"),
    thresholds=(Threshold("cpu_util_pct", "%", "above", "busy share of the host's CPUs (with the share a hypervisor "
                          "stole, on a VM), or of the CPUs the workload may use", critical=95, warning=90),),
    evidence="The host's average CPU use and steal (with load and PSI cpu), the mean over the CPUs the workload is "
             "allowed on when that is a subset, and how many CPUs are above the threshold.",
    recommendations=(
        "Find what else is busy on these CPUs (witty-profiler query GRAPH --top cpu_util_pct --type process) "
        "and move or stop it.",
        "Give the workload more CPUs (cpuset, container CPU limits) or fewer threads per process.",
        "Reduce CPU work per step: fewer or lighter data-loader workers, move preprocessing to the device.",
    ),
    check=_cpu_saturation)


# -- compute.accelerator_idle -------------------------------------------------------------
TRACE_DATAPLANE = ("dataplane.data_loading_bottleneck", "dataplane.pipeline_bubble")


def _accelerator_idle(scope: Scope, t: dict[str, Any]) -> Verdict:
    return with_traces(scope, lambda: _host_accelerator_idle(scope, t),
                       lambda ranks: _trace_accelerator_idle(scope, ranks, t))


def _trace_accelerator_idle(scope: Scope, ranks: list[Entity], t: dict[str, Any]) -> Verdict:
    """Per rank, the share of the step the accelerator runs kernels (kernel_busy_pct), under util_pct's levels:
    both are the device's busy share of time."""
    levels = t["util_pct"]
    measured = [r for r in ranks if num(r, M.KERNEL_BUSY_PCT) is not None]
    lacking = [r for r in ranks if num(r, M.KERNEL_BUSY_PCT) is None]
    if not measured:
        why = {"msprof": "msprof-analyze's step trace gives compute, communication and free times, not the kernels' "
                         "busy share"}
        return not_evaluated(f"{ev.counted(len(lacking), 'trace ranks')} ({sources_of(lacking)}) without "
                             f"{M.KERNEL_BUSY_PCT}" + "".join(f"; {why[s]}" for s in sources(lacking) if s in why)
                             + " (dataplane.pipeline_bubble judges their free time)")
    a = assess(measured, levels, metric_of(M.KERNEL_BUSY_PCT))
    unjudged = f"; {ev.counted(len(lacking), 'ranks')} without {M.KERNEL_BUSY_PCT} not judged" if lacking else ""
    if not a.hits:
        return clear(clear_text(a, "trace ranks", M.KERNEL_BUSY_PCT) + unjudged)
    hit_ids = {r.id for r, _, _ in a.hits}
    explained = []
    for pid in TRACE_DATAPLANE:
        v = scope.verdict(pid)
        if v is not None and v.status == "finding" and hit_ids & set(v.subjects):
            explained.append(pid)

    def context(rank: Entity) -> list[Evidence]:
        items = []
        for metric in (M.COMPUTE_MS, M.COMM_MS, M.FREE_MS, M.STEP_TIME_MS):
            if num(rank, metric) is not None:
                items.append(ev.entity(rank.id, metric, num(rank, metric), "ms", note="per step, mean of "
                                       + ev.counted(int(num(rank, M.STEPS) or 1), "steps")))
        return items

    items = hit_evidence(a, M.KERNEL_BUSY_PCT, extra=context,
                         note=lambda r, v: f"{rank_label(r)}: kernels running, share of the step" + (
                             f"; p95 {ev.fmt(num(r, M.KERNEL_BUSY_PCT + '_p95'), '%')}"
                             if num(r, M.KERNEL_BUSY_PCT + "_p95") is not None else ""))
    rank, value, sev = a.hits[0]
    text = (f"{ev.counted(len(a.hits), 'ranks', 'have')} a mostly idle accelerator: {rank_label(rank)} ({rank.id}) "
            f"runs kernels {ev.fmt(value, '%')} of its step (threshold < {number(levels.limit(sev))} %)")
    if num(rank, M.FREE_MS) is not None and num(rank, M.STEP_TIME_MS):
        text += f", free {ev.fmt(num(rank, M.FREE_MS), 'ms')} of {ev.fmt(num(rank, M.STEP_TIME_MS), 'ms')}"
    text += unjudged + "."
    if explained:
        text += f" See {', '.join(explained)} for what it waits for."
    return finding(a.severity or "warning", text, items, subjects=[r.id for r, _, _ in a.hits], related=explained)


def _host_accelerator_idle(scope: Scope, t: dict[str, Any]) -> Verdict:
    levels = t["util_pct"]
    devices = workload_devices(scope)
    if not devices:
        if scope.query.accelerators():
            return clear(f"no accelerator is used by the workload ({scope.describe()})")
        return not_evaluated(scope.missing("no GPU or NPU in this graph", "gpu", "npu", "nvml", "accel"))
    used = [d for d in devices if scope.query.device_users(d)]
    if not used:
        return clear(f"{ev.counted(len(devices), 'accelerators')} present, none used by a process")
    a = assess(used, levels, metric_of(M.UTIL_PCT))
    if not a.measured:
        return not_evaluated(scope.missing("no utilisation of the accelerators in use", "gpu", "npu", "nvml"))
    if not a.hits:
        return clear(clear_text(a, "accelerators in use", M.UTIL_PCT))
    users = {u.id for d, _, _ in a.hits for u in scope.query.device_users(d)}
    explained = []
    for pid in DATAPLANE:
        v = scope.verdict(pid)
        if v is not None and v.status == "finding" and users & (set(v.subjects) | _producers(v)):
            explained.append(pid)
    items = hit_evidence(a, M.UTIL_PCT, extra=lambda d: [
        ev.edge(e.id, None, ev.name_of(scope.graph.entity(e.source)) if scope.graph.entity(e.source) else e.source,
                note="used by") for e in scope.query.in_edges(d.id, E.USES_DEVICE)][:4])
    first = a.hits[0]
    text = (f"{ev.counted(len(a.hits), 'accelerators')} in use {ev.agree(len(a.hits), 'are')} mostly idle: {ev.name_of(first[0])} busy "
            f"{ev.fmt(first[1], '%')} (threshold < {number(levels.limit(first[2]))} %).")
    if explained:
        text += f" They wait for input from the host: see {', '.join(explained)}."
    return finding(a.severity or "warning", text, items, subjects=[d.id for d, _, _ in a.hits], related=explained)


def _producers(verdict: Verdict) -> set[str]:
    return {i for e in verdict.evidence for i in e.ids}


ACCELERATOR_IDLE = Pattern(
    id="compute.accelerator_idle", layer=1, title="Accelerator idle",
    why="The GPU/NPU is the expensive part; when it is busy less than half the time, the step is bound "
        "by something else (input pipeline, host CPU, communication, synchronisation).",
    metrics=("gpu.util_pct", "npu.util_pct", E.USES_DEVICE, "rank.kernel_busy_pct"),
    thresholds=(Threshold("util_pct", "%", "below", "busy share of a device the workload uses; from training "
                          "traces, a rank's kernel_busy_pct (kernels running, share of the step): the same measure",
                          critical=30, warning=50),),
    evidence="Each device in use under the threshold and the processes using it. When a data-plane finding "
             "covers those processes, the finding points to it as the cause. From training traces (import-trace): "
             "each rank under the threshold with its kernel_busy_pct and compute, communication, free and step time "
             "per step; related to the data-plane findings on the same ranks. With both, the worse first and the "
             "other's evidence after it; the text names the source.",
    recommendations=(
        "Follow the related data-plane finding if there is one: feed the device faster (more loader "
        "workers, prefetching, pinned memory).",
        "Check the host side of each step (CPU saturation, scheduling latency, NUMA placement of the process).",
        "Increase the work per launch (batch size, fused kernels, CUDA graphs) so launch overhead matters less.",
    ),
    check=_accelerator_idle)


# -- compute.compute_bound ----------------------------------------------------------------
def _compute_bound(scope: Scope, t: dict[str, Any]) -> Verdict:
    levels = t["cpu_util_pct"]
    subjects = pmu_subjects(scope)
    with_pmu = [e for e in subjects if num(e, M.IPC) is not None or num(e, M.LLC_MISS_PCT) is not None]
    if not with_pmu:
        return not_evaluated(scope.missing(f"no ipc or llc_miss_pct from PMU counters for {pmu_what(scope)}", "pmu"))
    a = assess(with_pmu, levels, metric_of(M.CPU_UTIL_PCT))
    hits = []
    for entity, value, sev in a.hits:
        ipc, llc = num(entity, M.IPC), num(entity, M.LLC_MISS_PCT)
        if (llc is not None and llc > t["llc_miss_pct"]) or (ipc is not None and ipc < t["ipc"]):
            hits.append((entity, value, sev))
    if not hits:
        return clear(f"{ev.counted(len(with_pmu), 'subjects')} with PMU counters; none busy > {number(levels.limit())} % with "
                     f"LLC misses > {number(t['llc_miss_pct'])} % or IPC < {number(t['ipc'])}")
    items = []
    for entity, value, sev in hits[:ev.MAX_SUBJECTS]:
        items.append(ev.entity(entity.id, M.CPU_UTIL_PCT, value, levels=levels, severity=sev, note=ev.name_of(entity)))
        for m, limit, sign in ((M.LLC_MISS_PCT, t["llc_miss_pct"], ">"), (M.IPC, t["ipc"], "<")):
            if num(entity, m) is not None:
                items.append(ev.entity(entity.id, m, num(entity, m), unit="%" if m.endswith("pct") else "ratio",
                                       bound=(sign, limit)))
        items.extend(pmu_context(entity))
    return finding(worst(*(s for _, _, s in hits)) or "warning",
                   f"{ev.counted(len(hits), 'busy subjects', 'spend')} {ev.their(len(hits))} cycles stalled: {ev.name_of(hits[0][0])} "
                   f"at {ev.fmt(hits[0][1], '%')} CPU with poor cache behaviour or IPC.",
                   items, subjects=[e.id for e, _, _ in hits])


COMPUTE_BOUND = Pattern(
    id="compute.compute_bound", layer=1, title="CPU-bound with poor efficiency",
    why="A process that keeps its CPUs busy while missing the last-level cache or retiring few instructions "
        "per cycle is limited by memory access inside the CPU, not by the amount of work.",
    metrics=("process.cpu_util_pct", "process.ipc", "process.llc_miss_pct", "host.ipc"),
    thresholds=(Threshold("cpu_util_pct", "%", "above", "CPU use of the subject", warning=90),),
    params=(Param("llc_miss_pct", 5, "%", "LLC miss share above which a busy subject counts as stalled"),
            Param("ipc", 0.8, "instructions/cycle", "IPC below which a busy subject counts as stalled")),
    needs="hardware PMU counters (perf_event_open)",
    evidence="Each busy workload process (or the host) with its LLC miss share and IPC.",
    recommendations=(
        "Improve data locality: block/tile loops, use contiguous tensors, avoid pointer-chasing structures.",
        "Keep each process's memory on its own NUMA node (see the interconnect layer).",
        "Add CPUs or move the hot loop to the accelerator.",
    ),
    check=_compute_bound)


# -- compute.low_ipc ----------------------------------------------------------------------
def _low_ipc(scope: Scope, t: dict[str, Any]) -> Verdict:
    subjects = pmu_subjects(scope)
    active = [e for e in subjects if (num(e, M.CPU_UTIL_PCT) or 0.0) >= t["min_cpu_util_pct"]
              or num(e, M.CPU_UTIL_PCT) is None]
    if not any(num(e, M.IPC) is not None for e in subjects):
        return not_evaluated(scope.missing(f"no ipc from PMU counters for {pmu_what(scope)}", "pmu"))
    return metric_check(scope, active, t["ipc"], M.IPC, "active subjects with PMU counters", ("pmu",),
                        "{n:active subjects|retire} few instructions per cycle: {names}, IPC {worst} "
                        "(threshold < {limit}).", extra=pmu_context)



LOW_IPC = Pattern(
    id="compute.low_ipc", layer=1, title="Low instructions per cycle",
    why="Low IPC means the cores wait on memory, branches or the front end; more CPU time buys little work.",
    metrics=("process.ipc", "host.ipc", "process.cpu_util_pct"),
    thresholds=(Threshold("ipc", "instructions/cycle", "below", "instructions retired per cycle",
                          critical=0.5, warning=0.8),),
    params=(Param("min_cpu_util_pct", 10, "%", "ignore subjects less busy than this: IPC of idle code means nothing"),),
    needs="hardware PMU counters (perf_event_open)",
    evidence="Each active workload process (or the host) with its IPC.",
    recommendations=(
        "Profile the hot functions (perf record) and look for cache misses and branch mispredictions.",
        "Check NUMA placement: remote memory lowers IPC (interconnect layer).",
        "Use vectorised libraries (MKL, oneDNN, OpenBLAS builds for this CPU).",
    ),
    check=_low_ipc)


# -- compute.hot_thread -------------------------------------------------------------------
def _hot_thread(scope: Scope, t: dict[str, Any]) -> Verdict:
    if (skip := needs_workload(scope)) is not None:
        return skip
    levels = t["thread_cpu_util_pct"]
    measured = 0
    hits = []
    for process in scope.processes:
        threads = [(th, num(th, M.CPU_UTIL_PCT)) for th in scope.query.threads_of(process)]
        threads = [(th, v) for th, v in threads if v is not None]
        if len(threads) < 2:
            continue
        measured += 1
        hot, value = max(threads, key=lambda x: (x[1], x[0].id))
        others = [v for th, v in threads if th.id != hot.id]
        siblings = sum(others) / len(others)
        sev = levels.severity(value)
        if sev and siblings < t["siblings_cpu_util_pct"]:
            hits.append((process, hot, value, siblings, len(others), sev))
    if not measured:
        return not_evaluated(scope.missing("no per-thread CPU use of multi-threaded workload processes", "process",
                                           "thread"))
    if not hits:
        return clear(f"{ev.counted(measured, 'multi-threaded workload processes')} measured; no thread > {number(levels.limit())} % "
                     f"while its siblings average < {number(t['siblings_cpu_util_pct'])} %")
    hits.sort(key=lambda h: (h[5] != "critical", -h[2], h[1].id))
    items = []
    for process, hot, value, siblings, n, sev in hits[:ev.MAX_SUBJECTS]:
        items.append(ev.entity(hot.id, M.CPU_UTIL_PCT, value, levels=levels, severity=sev,
                               note=f"{ev.name_of(hot)} of {ev.name_of(process)}"))
        items.append(ev.statistic([th.id for th in scope.query.threads_of(process) if th.id != hot.id], M.CPU_UTIL_PCT,
                                  siblings, unit="%", note=f"mean of its {n} sibling threads",
                                  bound=("<", t["siblings_cpu_util_pct"])))
        code = hot_code(hot)
        if code is not None:
            items.append(ev.entity(hot.id, M.HOT_FUNCTION_PCT, code[1], unit="%", note=code[0]))
    process, hot, value, siblings, n, _ = hits[0]
    code = hot_code(hot)
    runs = f"; {ev.fmt(code[1], '%')} of its samples in {code[0]}" if code is not None else ""
    return finding(worst(*(h[5] for h in hits)) or "warning",
                   f"A serial bottleneck: {ev.name_of(hot)} of {ev.name_of(process)} keeps one core "
                   f"{ev.fmt(value, '%')} busy while its {n} siblings average {ev.fmt(siblings, '%')}{runs}.",
                   items, subjects=[h[1].id for h in hits])


def hot_code(thread: Any) -> tuple[str, float] | None:
    """(the function a thread ran most, 'leaf ← caller', and its share of the thread's samples) where its
    stacks were sampled (collect --stacks), else None."""
    where, share = thread.attrs.get("hot_function"), num(thread, M.HOT_FUNCTION_PCT)
    if not isinstance(where, str) or not where or share is None:
        return None
    return where, share


HOT_THREAD = Pattern(
    id="compute.hot_thread", layer=1, title="Hot thread (serial bottleneck)",
    why="One thread pinned near 100 % of a core while the others wait means the process runs at the speed "
        "of that thread: adding cores or workers will not help.",
    metrics=("thread.cpu_util_pct", E.HAS_THREAD),
    thresholds=(Threshold("thread_cpu_util_pct", "%", "above", "CPU use of the busiest thread, % of one core",
                          warning=90),),
    params=(Param("siblings_cpu_util_pct", 30, "%", "the other threads' mean CPU use must be below this"),),
    evidence="The busiest thread of each multi-threaded workload process and the mean of its siblings.",
    recommendations=(
        "Find what the thread does (collect --stacks names its hot function; py-spy dump / perf top -t TID) and "
        "split or parallelise it.",
        "In PyTorch, look for Python-side work in the training loop (logging, metrics, .item() syncs).",
        "Make sure the hot thread is not sharing its core with other busy work (pin it).",
    ),
    check=_hot_thread)


# -- compute.accelerator_throttling -------------------------------------------------------
def _accelerator_throttling(scope: Scope, t: dict[str, Any]) -> Verdict:
    levels = t["clock_pct"]
    devices = workload_devices(scope)
    if not devices:
        return not_evaluated(scope.missing("no GPU or NPU in this graph", "gpu", "npu", "nvml"))
    measured = [d for d in devices if any(num(d, m) is not None for m in (M.THROTTLE_THERMAL, M.THROTTLE_POWER))]
    if not measured:
        return not_evaluated(scope.missing("no throttle reasons reported for the accelerators", "gpu", "npu", "nvml"))
    hits = []
    for d in measured:
        reasons = [m.split("_")[1] for m in (M.THROTTLE_THERMAL, M.THROTTLE_POWER) if (num(d, m) or 0) >= 1]
        if not reasons:
            continue
        clock, top = num(d, M.SM_CLOCK_MHZ), num(d, M.SM_CLOCK_MAX_MHZ)
        ratio = clock * 100 / top if clock is not None and top else None
        sev = levels.severity(ratio) if ratio is not None else "warning"
        if sev:
            hits.append((d, reasons, ratio, sev))
    if not hits:
        return clear(f"{ev.counted(len(measured), 'accelerators')} measured; none clock-throttled below "
                     f"{number(levels.limit())} % of its maximum clock")
    items = []
    for d, reasons, ratio, sev in hits[:ev.MAX_SUBJECTS]:
        for m in (M.THROTTLE_THERMAL, M.THROTTLE_POWER):
            if (num(d, m) or 0) >= 1:
                items.append(ev.entity(d.id, m, 1, unit="0/1", note=ev.name_of(d)))
        if ratio is not None:
            items.append(ev.entity(d.id, M.SM_CLOCK_MHZ, num(d, M.SM_CLOCK_MHZ), unit="MHz",
                                   note=f"{ev.fmt(ratio, '%')} of {ev.fmt(num(d, M.SM_CLOCK_MAX_MHZ), 'MHz')}"))
            items.append(ev.statistic([d.id], "clock_pct", ratio, levels=levels, severity=sev))
        for m, u in ((M.TEMPERATURE_C, "degC"), (M.POWER_W, "W"), (M.POWER_LIMIT_W, "W")):
            if num(d, m) is not None:
                items.append(ev.entity(d.id, m, num(d, m), unit=u))
    d, reasons, ratio, _ = hits[0]
    return finding(worst(*(h[3] for h in hits)) or "warning",
                   f"{ev.counted(len(hits), 'accelerators')} in use {ev.agree(len(hits), 'are')} clock-throttled ({'/'.join(reasons)} on "
                   f"{ev.name_of(d)}" + (f", at {ev.fmt(ratio, '%')} of the maximum clock)." if ratio else ")."),
                   items, subjects=[h[0].id for h in hits])


ACCELERATOR_THROTTLING = Pattern(
    id="compute.accelerator_throttling", layer=1, title="Accelerator clock throttling",
    why="A device that hits its thermal or power limit lowers its clocks: every kernel runs slower and, in a "
        "multi-device job, the slowest device sets the pace of all.",
    metrics=("gpu.throttle_thermal", "gpu.throttle_power", "gpu.sm_clock_mhz", "gpu.sm_clock_max_mhz",
             "gpu.temperature_c", "gpu.power_w"),
    thresholds=(Threshold("clock_pct", "%", "below", "current clock as a share of the maximum while a throttle "
                          "reason is active", critical=70, warning=90),),
    evidence="Each throttled device in use with its throttle reasons, clock vs maximum, temperature and power.",
    recommendations=(
        "Check cooling and airflow (fans, inlet temperature) for thermal throttling.",
        "For power throttling, check the power limit (nvidia-smi -q -d POWER) and the PSU/rack budget.",
        "Balance work so one hot device does not slow down all ranks.",
    ),
    check=_accelerator_throttling)


PATTERNS = [CPU_STARVATION, CPU_SATURATION, ACCELERATOR_IDLE, COMPUTE_BOUND, LOW_IPC, HOT_THREAD,
            ACCELERATOR_THROTTLING]
