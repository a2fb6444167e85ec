"""Layer 7, data plane: does input reach the consumer (trainer, engine, accelerator) in time?

Producers of a consumer are the processes linked to it by IPC (a pipe writing into it; a unix
socket, TCP connection, shared memory or message queue in either direction) and its children
that are loader workers.
"""

from __future__ import annotations

from typing import Any

from witty_profiler.diagnosis import evidence as ev
from witty_profiler.diagnosis.catalog import (
    LEVELS,
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
from witty_profiler.diagnosis.rules import (
    busy_candidates,
    cpu_wait_pct,
    host_or_scope_processes,
    metric_check,
    needs_workload,
    runnable_pct,
    workload_devices,
)
from witty_profiler.diagnosis.patterns.traces import full_step_ms, rank_label, sources, sources_of, with_traces
from witty_profiler.diagnosis.scope import Scope, num
from witty_profiler.topology import Edge, Entity
from witty_profiler.topology.flow import QUEUED_KINDS
from witty_profiler.topology.vocabulary import IPC_EDGES, E, M, T


def producers_of(scope: Scope, consumer: Entity) -> list[tuple[Entity, Edge | None]]:
    """(producer, the IPC edge that links it, or None for a loader child), in id order."""
    found: dict[str, tuple[Entity, Edge | None]] = {}
    for kind in IPC_EDGES:
        edges = list(scope.query.in_edges(consumer.id, kind))
        # a pipe runs writer -> reader unless its direction is unknown; the others carry both ways
        edges += [e for e in scope.query.out_edges(consumer.id, kind)
                  if kind != E.PIPE or e.attrs.get("direction") == "unknown"]
        for edge in edges:
            other = edge.source if edge.target == consumer.id else edge.target
            peer = scope.graph.entity(other)
            if peer is not None and peer.type == T.PROCESS and peer.id != consumer.id:
                found.setdefault(peer.id, (peer, edge))
    for child in scope.query.children_of(consumer):
        if child.attrs.get("role") == "loader":
            found.setdefault(child.id, (child, None))
    return [found[k] for k in sorted(found)]


def _ipc_known(scope: Scope) -> bool:
    """Whether the graph says who talks to whom: an IPC collector ran, or IPC edges are there (a
    legacy file, a merged graph)."""
    ran = any(name.split("@")[0] == "ipc" and status.status in ("ok", "partial")
              for name, status in scope.meta.collectors.items())
    return ran or any(scope.graph.edges(kind) for kind in IPC_EDGES)


def _device_util(scope: Scope, consumer: Entity) -> list[tuple[Entity, float]]:
    return [(d, num(d, M.UTIL_PCT)) for _, d in scope.query.devices_of(consumer) if num(d, M.UTIL_PCT) is not None]


# -- dataplane.data_loading_bottleneck ----------------------------------------------------
def _data_loading_bottleneck(scope: Scope, t: dict[str, Any]) -> Verdict:
    return with_traces(scope, lambda: _host_data_loading(scope, t), lambda ranks: _trace_data_loading(ranks, t))


LOADING_MISSING = {
    "msprof": "msprof-analyze's step trace has no data-loading time",
    "kineto": "the Kineto trace holds no DataLoader spans (enumerate(DataLoader)#...__next__) within its profiled "
              "steps",
}


def _trace_data_loading(ranks: list[Entity], t: dict[str, Any]) -> Verdict:
    """Per rank, the data loader's share of the step while the accelerator is free for at least
    min_free_of_loading of that time: the step waits for its input."""
    levels, ratio = t["loading_step_pct"], t["min_free_of_loading"]
    measured, lacking = [], []
    for rank in ranks:
        loading, step = num(rank, M.DATA_LOADING_MS), full_step_ms(rank)
        if loading is None or not step or step <= 0:
            lacking.append(rank)
            continue
        measured.append((rank, round(loading * 100 / step, 6), loading, num(rank, M.FREE_MS), step))
    if not measured:
        return not_evaluated(f"{ev.counted(len(lacking), 'trace ranks')} ({sources_of(lacking)}) without "
                             f"{M.DATA_LOADING_MS}: " + "; ".join(LOADING_MISSING.get(source, "its format has no "
                                                                                           "data-loading time")
                                                                  for source in sources(lacking)))
    hits = []
    for rank, share, loading, free, step in measured:
        sev = levels.severity(share)
        if sev and free is not None and free >= ratio * loading:
            hits.append((rank, share, loading, free, step, sev))
    unjudged = f"; {ev.counted(len(lacking), 'ranks')} without {M.DATA_LOADING_MS} not judged" if lacking else ""
    if not hits:
        rank, share, loading, free, step = max(measured, key=lambda m: (m[1], m[0].id))
        return clear(f"{ev.counted(len(measured), 'trace ranks')} with {M.DATA_LOADING_MS}; the most loading per "
                     f"step is {rank_label(rank)}'s {ev.fmt(loading, 'ms')} of {ev.fmt(step, 'ms')} "
                     f"({ev.fmt(share, '%')}), free {ev.fmt(free, 'ms')}: none over {number(levels.limit())} % with "
                     f"the accelerator free at least {number(ratio)} times as long{unjudged}")
    hits.sort(key=lambda h: (LEVELS.index(h[5]), -h[1], h[0].id))
    items: list[Evidence] = []
    for rank, share, loading, free, step, sev in hits[:ev.MAX_SUBJECTS]:
        items.append(ev.entity(rank.id, "data_loading_step_pct", share, levels=levels, severity=sev,
                               note=f"{rank_label(rank)}: data loading {ev.fmt(loading, 'ms')} of a "
                                    f"{ev.fmt(step, 'ms')} step"))
        items.append(ev.entity(rank.id, M.DATA_LOADING_MS, loading, "ms", note=_per_step(rank, M.DATA_LOADING_MS)))
        items.append(ev.entity(rank.id, M.FREE_MS, free, "ms", bound=(">=", round(ratio * loading, 3)),
                               note=f"accelerator free {ev.fmt(free * 100 / step, '%')} of the step; "
                                    + _per_step(rank, M.FREE_MS)))
    if len(hits) > ev.MAX_SUBJECTS:
        items.append(ev.more(len(hits) - ev.MAX_SUBJECTS, "ranks waiting for input"))
    rank, share, loading, free, step, _ = hits[0]
    text = (f"{ev.counted(len(hits), 'ranks')} {ev.agree(len(hits), 'wait')} for input every step: "
            f"{rank_label(rank)} ({rank.id}) spends {ev.fmt(loading, 'ms')} of its {ev.fmt(step, 'ms')} step in the "
            f"data loader ({ev.fmt(share, '%')}, threshold > {number(levels.limit(hits[0][5]))} %) while its "
            f"accelerator is free {ev.fmt(free, 'ms')} ({ev.fmt(free * 100 / step, '%')})")
    if len(hits) > 1:
        text += f"; {ev.counted(len(hits) - 1, 'more ranks')} likewise"
    return finding(worst(*(h[5] for h in hits)) or "warning", text + unjudged + ".", items,
                   subjects=[h[0].id for h in hits])


def _per_step(rank: Entity, metric: str) -> str:
    """'mean of 3 steps, p95 25.6 ms, max 26 ms'."""
    steps = num(rank, M.STEPS)
    if steps is None:
        text = "per step"
    else:
        text = "1 step" if int(steps) == 1 else f"mean of {int(steps)} steps"
    for suffix in ("p95", "max"):
        value = num(rank, f"{metric}_{suffix}")
        if value is not None:
            text += f", {suffix} {ev.fmt(value, 'ms')}"
    return text


def _host_data_loading(scope: Scope, t: dict[str, Any]) -> Verdict:
    if (skip := needs_workload(scope)) is not None:
        return skip
    levels = t["consumer_cpu_util_pct"]
    consumers = [c for c in busy_candidates(scope) if num(c, M.CPU_UTIL_PCT) is not None]
    if not consumers:
        return not_evaluated(scope.missing("no CPU utilisation of the workload's consumers (trainers, engines, "
                                           "the named processes)", "process"))
    linked, hits = 0, []
    for consumer in consumers:
        producers = producers_of(scope, consumer)
        if not producers:
            continue
        linked += 1
        devices = _device_util(scope, consumer)
        if devices and max(u for _, u in devices) > t["device_busy_pct"]:
            continue  # its accelerator is busy: the input keeps up
        value = num(consumer, M.CPU_UTIL_PCT)
        sev = levels.severity(value)
        if not sev or (cpu_wait_pct(consumer) or 0.0) > t["max_cpu_wait_pct"]:
            continue  # not waiting, or waiting for a CPU rather than for input (control.scheduling_latency)
        busy = [(p, e) for p, e in producers if (runnable_pct(p) or 0.0) > t["producer_busy_pct"]]
        if not busy:
            continue
        if devices and min(u for _, u in devices) < t["device_idle_pct"]:
            sev = "critical"  # an accelerator starves for this input
        hits.append((consumer, value, busy, devices, sev))
    if not linked:
        if not _ipc_known(scope):
            return not_evaluated(scope.missing(f"{ev.counted(len(consumers), 'consumers')} in scope without loader workers, "
                                               "and no IPC in this graph to find who else feeds them", "ipc"))
        return clear(f"{ev.counted(len(consumers), 'consumers')} in scope; none is fed by IPC or loader workers in this graph")
    if not hits:
        return clear(f"{ev.counted(linked, 'consumers')} with producers; none waits (CPU < {number(levels.limit())} %) while a producer "
                     f"is busy (runnable > {number(t['producer_busy_pct'])} %) and its accelerator idle")
    hits.sort(key=lambda h: (h[4] != "critical", h[1], h[0].id))
    items: list[Evidence] = []
    for consumer, value, busy, devices, sev in hits[:ev.MAX_SUBJECTS]:
        items.append(ev.entity(consumer.id, M.CPU_UTIL_PCT, value, levels=levels, severity=levels.severity(value),
                               note=f"consumer {ev.name_of(consumer)}"))
        if num(consumer, M.VOLUNTARY_CTXT_SWITCHES_PER_S) is not None:
            items.append(ev.entity(consumer.id, M.VOLUNTARY_CTXT_SWITCHES_PER_S,
                                   num(consumer, M.VOLUNTARY_CTXT_SWITCHES_PER_S), unit="1/s", note="blocking"))
        if cpu_wait_pct(consumer) is not None:
            items.append(ev.statistic([consumer.id], "cpu_wait_pct", cpu_wait_pct(consumer), unit="%",
                                      note="share of the window waiting for a CPU: not starved",
                                      bound=("<=", t["max_cpu_wait_pct"])))
        for producer, edge in busy[:ev.MAX_SUBJECTS]:
            if edge is not None:
                volume = next(((m, num(edge, m)) for m in (M.BYTES_PER_S, M.BYTES_TOTAL, M.BYTES_SENT_TOTAL)
                               if num(edge, m) is not None), (None, None))
                items.append(ev.edge(edge.id, volume[0], volume[1],
                                     unit="bytes/s" if volume[0] == M.BYTES_PER_S else ("bytes" if volume[0] else None),
                                     note=f"{edge.type}: {ev.name_of(producer)} -> {ev.name_of(consumer)}"))
            items.append(ev.statistic([producer.id], "runnable_pct", runnable_pct(producer), unit="%",
                                      note=f"producer {ev.name_of(producer)}" + (" (loader worker)" if edge is None
                                                                                  else "") + ": running or waiting "
                                           "for a CPU", bound=(">", t["producer_busy_pct"])))
            if num(producer, M.CPU_UTIL_PCT) is not None:
                items.append(ev.entity(producer.id, M.CPU_UTIL_PCT, num(producer, M.CPU_UTIL_PCT), unit="%"))
        for device, util in devices:
            items.append(ev.entity(device.id, M.UTIL_PCT, util, unit="%", note=f"{ev.name_of(device)} of the consumer",
                                   bound=("<", t["device_idle_pct"])))
    consumer, value, busy, devices, _ = hits[0]
    text = (f"{ev.name_of(consumer)} waits for its input: it runs {ev.fmt(value, '%')} of one core while "
            f"{ev.counted(len(busy), 'producers')} feeding it {ev.agree(len(busy), 'are')} busy ({ev.name_of(busy[0][0])} running or runnable "
            f"{ev.fmt(runnable_pct(busy[0][0]), '%')} of the window)")
    if devices:
        text += f" and its accelerator is busy only {ev.fmt(min(u for _, u in devices), '%')}"
    if len(hits) > 1:
        text += f"; {ev.counted(len(hits) - 1, 'more consumers')} likewise"
    return finding(worst(*(h[4] for h in hits)) or "warning", text + ".", items, subjects=[h[0].id for h in hits])


DATA_LOADING_BOTTLENECK = Pattern(
    id="dataplane.data_loading_bottleneck", layer=7, title="Data loading bottleneck",
    why="The consumer (trainer, inference engine, the device behind it) is only as fast as its input: when it "
        "spends the window blocked while the producers that feed it are busy, the input pipeline sets the pace. "
        "In a training trace, the same shows as time in the data loader every step while the accelerator is free.",
    metrics=("process.cpu_util_pct", "process.voluntary_ctxt_switches_per_s", "process.runqueue_wait_pct",
             E.PIPE, E.UNIX_SOCKET, E.TCP, E.SHM, E.MSG_QUEUE, "gpu.util_pct", "npu.util_pct",
             "rank.data_loading_ms", "rank.free_ms", "rank.step_time_ms"),
    thresholds=(Threshold("consumer_cpu_util_pct", "%", "below", "CPU use of the waiting consumer, % of one core",
                          critical=20, warning=50),
                Threshold("loading_step_pct", "%", "above", "training traces: a rank's data_loading_ms / step time "
                          "(step_time_ms, + bubble_ms for msprof), counted only where the accelerator is free for "
                          "min_free_of_loading of that time. A loader that keeps up (workers, prefetching) hands the "
                          "next batch over in well under 1 % of a step; 5 % of every step spent waiting for it is "
                          "worth a look, 10 % is a step one tenth slower than it needs to be, 25 % a quarter of the "
                          "accelerator time paid for and lost", critical=25, warning=10, notice=5)),
    params=(Param("producer_busy_pct", 50, "%", "a producer running or waiting for a CPU (cpu_util_pct + run-queue "
                  "wait) more than this share of the window counts as busy"),
            Param("max_cpu_wait_pct", 50, "%", "a consumer waiting for a CPU (run queue) more than this share of the "
                  "window is starved for CPU, not for input"),
            Param("device_busy_pct", 50, "%", "a consumer whose accelerator is busier than this is not input-bound"),
            Param("device_idle_pct", 30, "%", "an accelerator of the consumer below this makes the finding critical"),
            Param("min_free_of_loading", 0.5, "ratio", "training traces: a rank's data loading counts as waited for "
                  "only where the accelerator is free (free_ms) at least this many times the data-loading time per "
                  "step; loading that runs while the kernels do (prefetching) costs the step nothing")),
    evidence="The consumer's CPU use, voluntary context switches and run-queue wait; each busy producer (running or "
             "runnable share, CPU use, run-queue wait) with the IPC edge (and its volume) that links it; the "
             "consumer's accelerators and their utilisation. From training traces (import-trace): each rank over "
             "the threshold with its data-loading share of the step, data_loading_ms and free_ms per step (mean, "
             "p95, max). With both, the worse first and the other's evidence after it; the text names the source.",
    recommendations=(
        "Add producers: more DataLoader workers (num_workers) or preprocessing processes, on CPUs of the "
        "consumer's NUMA node.",
        "Make each item cheaper: decode/augment on the device (DALI, torchvision v2 on GPU), cache decoded data.",
        "Overlap: prefetch_factor, pin_memory=True, non_blocking copies, persistent_workers=True.",
    ),
    check=_data_loading_bottleneck)


# -- dataplane.preprocessing_bottleneck ---------------------------------------------------
def _preprocessing_bottleneck(scope: Scope, t: dict[str, Any]) -> Verdict:
    if (skip := needs_workload(scope)) is not None:
        return skip
    levels = t["loader_cpu_util_pct"]
    waiting = scope.verdict("dataplane.data_loading_bottleneck")
    waiting_ids = set(waiting.subjects) if waiting is not None and waiting.status == "finding" else set()
    groups, unmeasured = [], set()
    for consumer in busy_candidates(scope):
        producers = [p for p, _ in producers_of(scope, consumer)]
        workers = [p for p in producers if num(p, M.CPU_UTIL_PCT) is not None]
        unmeasured |= {p.id for p in producers if num(p, M.CPU_UTIL_PCT) is None}
        if workers:
            groups.append((consumer, workers))
    grouped = {w.id for _, ws in groups for w in ws}
    loaders = [p for p in scope.processes if p.attrs.get("role") == "loader" and p.id not in grouped]
    orphans = [p for p in loaders if num(p, M.CPU_UTIL_PCT) is not None]
    unmeasured |= {p.id for p in loaders if num(p, M.CPU_UTIL_PCT) is None}
    if orphans:
        groups.append((None, orphans))
    if not groups:
        if unmeasured:
            return not_evaluated(scope.missing(f"no CPU utilisation of the {ev.counted(len(unmeasured), 'loader/producer processes')}"
                                               f" of {scope.describe()}", "process"))
        return clear(f"no loader or preprocessing workers in {scope.describe()}")
    hits = []
    for consumer, workers in groups:
        mean = sum(num(w, M.CPU_UTIL_PCT) or 0.0 for w in workers) / len(workers)
        sev = levels.severity(mean)
        if not sev:
            continue
        starving = consumer is not None and (consumer.id in waiting_ids or any(
            u < 30 for _, u in _device_util(scope, consumer)))
        if not starving:
            sev = "notice"  # saturated, but the consumer keeps up for now
        hits.append((consumer, workers, mean, sev, starving))
    if not hits:
        return clear(f"{ev.counted(sum(len(w) for _, w in groups), 'loader/producer workers')} measured; none saturated "
                     f"(mean > {number(levels.limit())} % of a core)")
    hits.sort(key=lambda h: (h[3] != "critical", -h[2], h[0].id if h[0] else ""))
    items: list[Evidence] = []
    for consumer, workers, mean, sev, starving in hits[:ev.MAX_SUBJECTS]:
        items.append(ev.statistic([w.id for w in workers], M.CPU_UTIL_PCT, mean, levels=levels,
                                  severity=levels.severity(mean),
                                  note=f"mean of {ev.counted(len(workers), 'workers')}"
                                       + (f" feeding {ev.name_of(consumer)}" if consumer is not None else "")))
        for w in sorted(workers, key=lambda w: (-(num(w, M.CPU_UTIL_PCT) or 0.0), w.id))[:4]:
            items.append(ev.entity(w.id, M.CPU_UTIL_PCT, num(w, M.CPU_UTIL_PCT), unit="%", note=ev.name_of(w)))
    consumer, workers, mean, _, starving = hits[0]
    text = (f"{ev.counted(len(workers), 'loader/preprocessing workers', 'are')} saturated at {ev.fmt(mean, '%')} of a core on "
            f"average" + (f" feeding {ev.name_of(consumer)}" if consumer is not None else ""))
    text += ", and the consumer waits for them." if starving else "; the consumer keeps up for now."
    related = ["dataplane.data_loading_bottleneck"] if any(h[4] for h in hits) and waiting_ids else []
    return finding(worst(*(h[3] for h in hits)) or "warning", text, items,
                   subjects=[h[0].id for h in hits if h[0] is not None] + [w.id for h in hits for w in h[1]],
                   related=related)


PREPROCESSING_BOTTLENECK = Pattern(
    id="dataplane.preprocessing_bottleneck", layer=7, title="Preprocessing bottleneck",
    why="Loader and preprocessing workers that run flat out cannot produce faster; when the consumer waits "
        "for them, more or cheaper preprocessing is the only way to speed up the job.",
    metrics=("process.cpu_util_pct", "process.role", E.PARENT_OF, E.PIPE, E.UNIX_SOCKET, E.SHM),
    thresholds=(Threshold("loader_cpu_util_pct", "%", "above", "mean CPU use of the workers feeding one consumer, "
                          "% of one core", critical=95, warning=80),),
    evidence="For each consumer, the mean CPU use of the workers feeding it and the busiest of them. Lowered to a "
             "notice when the consumer does not wait for them.",
    recommendations=(
        "Add workers if CPUs are free; otherwise make each sample cheaper (simpler augmentation, cached decoding).",
        "Move decoding and augmentation to the accelerator (NVIDIA DALI, GPU transforms).",
        "Preprocess offline once and store the result in a fast record format.",
    ),
    check=_preprocessing_bottleneck)


# -- dataplane.pipeline_bubble ------------------------------------------------------------
def _bubble(e: Entity, metric: str, min_busy: float) -> float | None:
    mean = num(e, metric)
    peak = num(e, f"{metric}_p95")
    if peak is None:
        peak = num(e, f"{metric}_max")
    if mean is None or peak is None or peak < min_busy or peak <= 0:
        return None
    if metric == M.CPU_UTIL_PCT:
        # time spent runnable in the run queue is CPU contention (control.scheduling_latency),
        # not a gap in the pipeline: the process wanted to run then
        mean += (num(e, M.RUNQUEUE_WAIT_MS_PER_S) or 0.0) / 10.0
    return max(0.0, (peak - mean) * 100 / peak)


def _pipeline_bubble(scope: Scope, t: dict[str, Any]) -> Verdict:
    return with_traces(scope, lambda: _host_pipeline_bubble(scope, t), lambda ranks: _trace_bubble(ranks, t))


def _trace_bubble(ranks: list[Entity], t: dict[str, Any]) -> Verdict:
    """Per rank, the share of the step the accelerator is idle: free (neither computing nor communicating)
    plus msprof's bubble (receive operators waiting for the previous pipeline stage)."""
    levels = t["step_idle_pct"]
    measured, lacking = [], []
    for rank in ranks:
        free, bubble, step = num(rank, M.FREE_MS), num(rank, M.BUBBLE_MS), full_step_ms(rank)
        if (free is None and bubble is None) or not step or step <= 0:
            lacking.append(rank)
            continue
        measured.append((rank, round(((free or 0.0) + (bubble or 0.0)) * 100 / step, 6), free, bubble, step))
    if not measured:
        return not_evaluated(f"{ev.counted(len(lacking), 'trace ranks')} ({sources_of(lacking)}) without "
                             f"{M.FREE_MS} or {M.BUBBLE_MS} and a step time")
    unjudged = (f"; {ev.counted(len(lacking), 'ranks')} without {M.FREE_MS} or a step time not judged"
                if lacking else "")
    hits = [(r, share, free, bubble, step, levels.severity(share)) for r, share, free, bubble, step in measured
            if levels.severity(share)]
    if not hits:
        rank, share, free, bubble, step = max(measured, key=lambda m: (m[1], m[0].id))
        return clear(f"{ev.counted(len(measured), 'trace ranks')} measured; the most idle, {rank_label(rank)}, "
                     f"{_idle_parts(free, bubble)} of a {ev.fmt(step, 'ms')} step ({ev.fmt(share, '%')}), none over "
                     f"{number(levels.limit())} %{unjudged}")
    hits.sort(key=lambda h: (LEVELS.index(h[5]), -h[1], h[0].id))
    items: list[Evidence] = []
    for rank, share, free, bubble, step, sev in hits[:ev.MAX_SUBJECTS]:
        items.append(ev.entity(rank.id, "step_idle_pct", share, levels=levels, severity=sev,
                               note=f"{rank_label(rank)}: {_idle_parts(free, bubble, every=True)} of a "
                                    f"{ev.fmt(step, 'ms')} step ({_per_step(rank, M.STEP_TIME_MS)})"))
        if free is not None:
            items.append(ev.entity(rank.id, M.FREE_MS, free, "ms", note="accelerator neither computing nor "
                                                                         "communicating; " + _per_step(rank, M.FREE_MS)))
        if bubble:
            items.append(ev.entity(rank.id, M.BUBBLE_MS, bubble, "ms", note="pipeline bubble (receive operators "
                                                                             "waiting for the previous stage); "
                                                                             + _per_step(rank, M.BUBBLE_MS)))
    if len(hits) > ev.MAX_SUBJECTS:
        items.append(ev.more(len(hits) - ev.MAX_SUBJECTS, "idle ranks"))
    rank, share, free, bubble, step, sev = hits[0]
    devices = "accelerator" if len(hits) == 1 else "accelerators"
    text = (f"{ev.counted(len(hits), 'ranks', 'leave')} {ev.their(len(hits))} {devices} idle for much of each step: "
            f"{rank_label(rank)} ({rank.id}) {_idle_parts(free, bubble)} of its {ev.fmt(step, 'ms')} step "
            f"({_per_step(rank, M.STEP_TIME_MS).split(',')[0]}), {ev.fmt(share, '%')} (threshold > "
            f"{number(levels.limit(sev))} %)")
    if len(hits) > 1:
        low = min(hits, key=lambda h: (h[1], h[0].id))
        text += f"; the least idle of them, {rank_label(low[0])}, {ev.fmt(low[1], '%')}"
    return finding(worst(*(h[5] for h in hits)) or "warning", text + unjudged + ".", items,
                   subjects=[h[0].id for h in hits])


def _idle_parts(free: float | None, bubble: float | None, every: bool = False) -> str:
    """'free 169.9 ms', 'free 12 ms + bubble 30 ms' (a bubble of 0 ms only with every)."""
    parts = [f"{name} {ev.fmt(v, 'ms')}" for name, v in (("free", free), ("bubble", bubble))
             if v or (every and v is not None)]
    return " + ".join(parts) if parts else "free 0 ms"


def _host_pipeline_bubble(scope: Scope, t: dict[str, Any]) -> Verdict:
    if (skip := needs_workload(scope)) is not None:
        return skip
    levels = t["bubble_pct"]
    devices = [d for d in workload_devices(scope) if num(d, M.UTIL_PCT) is not None]
    if devices:
        subjects, metric = devices, M.UTIL_PCT
    else:
        subjects, metric = busy_candidates(scope), M.CPU_UTIL_PCT
    with_series = [s for s in subjects if num(s, f"{metric}_p95") is not None or num(s, f"{metric}_max") is not None]
    if not with_series:
        return not_evaluated(scope.missing(f"no per-sample statistics ({metric}_p95) of the consumers: needs a windowed "
                                           "capture with several samples", "process", "gpu"))
    if all(_bubble(s, metric, t["min_busy_pct"]) is None for s in with_series):
        return clear(f"{ev.counted(len(with_series), 'consumers')} sampled; none reached {number(t['min_busy_pct'])} % {metric} "
                     "(p95), so there are no busy phases with gaps between them")
    return metric_check(scope, with_series, levels, "bubble_pct", f"consumers with {metric} samples", ("process",),
                        "{n:consumers|alternate} between busy and idle: {names} idle {worst} of the time they "
                        "could be busy (threshold > {limit}).",
                        value=lambda e: _bubble(e, metric, t["min_busy_pct"]),
                        extra=lambda e: [ev.entity(e.id, m, num(e, m), unit="%") for m in
                                         (metric, f"{metric}_p95", f"{metric}_max") if num(e, m) is not None])


PIPELINE_BUBBLE = Pattern(
    id="dataplane.pipeline_bubble", layer=7, title="Pipeline bubbles",
    why="A consumer that is busy in bursts with idle gaps between them (mean far below its busy level) loses "
        "the gaps every step: synchronous input, host-device copies or pipeline-parallel bubbles. A training "
        "trace measures the gaps directly: the accelerator's free time and pipeline bubble in each step.",
    metrics=("gpu.util_pct", "gpu.util_pct_p95", "npu.util_pct_p95", "process.cpu_util_pct_p95", "rank.free_ms",
             "rank.bubble_ms", "rank.step_time_ms"),
    thresholds=(Threshold("bubble_pct", "%", "above", "(p95 - mean) / p95 of the consumer's utilisation over the "
                          "window's samples; a process's run-queue wait counts as busy", critical=50, warning=30),
                Threshold("step_idle_pct", "%", "above", "training traces: a rank's (free_ms + bubble_ms) / step time "
                          "(step_time_ms, + bubble_ms for msprof, whose Stage leaves the receive operators out), per "
                          "step. The warning and critical levels are bubble_pct's: idle a third, half of the time it "
                          "could be busy. A step tuned for throughput keeps its accelerator idle well under 10 % "
                          "(launch gaps, the optimizer's host work); more idle time, recurring every step, is host-"
                          "side work or synchronisation the device waits for", critical=50, warning=30, notice=10)),
    params=(Param("min_busy_pct", 50, "%", "only consumers whose p95 utilisation reaches this have busy phases to "
                  "compare with"),),
    evidence="Each device of the workload (else each consumer process) over the threshold, with its mean, p95 and "
             "maximum utilisation. From training traces (import-trace): each rank over step_idle_pct with its idle "
             "share, free_ms and bubble_ms (mean, p95, max per step) and step time. With both, the worse first and "
             "the other's evidence after it; the text names the source.",
    recommendations=(
        "Prefetch the next batch while the current one computes (DataLoader prefetch, CUDA streams).",
        "Remove synchronisation points in the step (.item(), .cpu(), logging every step).",
        "For pipeline parallelism, use more micro-batches or an interleaved schedule.",
    ),
    check=_pipeline_bubble)


# -- dataplane.ipc_backlog ----------------------------------------------------------------


def _kinds(edges: list[Edge]) -> str:
    """'2 tcp edges, 1 shm edge', in a fixed order."""
    counts: dict[str, int] = {}
    for e in edges:
        counts[e.type] = counts.get(e.type, 0) + 1
    return ", ".join(ev.counted(n, f"{kind} edges") for kind, n in sorted(counts.items()))


def _readers(e: Edge) -> tuple[list[str], list[str]]:
    """(the ends the queued bytes wait for, the ends that write them): a socket says which way
    (queued_toward); a pipe or message queue is read by its target."""
    toward = e.attrs.get("queued_toward")
    if toward == "source":
        return [e.source], [e.target]
    if toward == "both":
        return [e.source, e.target], [e.source, e.target]
    return [e.target], [e.source]


def _ipc_backlog(scope: Scope, t: dict[str, Any]) -> Verdict:
    levels = t["queued_bytes_growth_per_s"]
    processes = {p.id for p in host_or_scope_processes(scope)}
    edges = [e for kind in IPC_EDGES for p in sorted(processes) for e in scope.query.out_edges(p, kind)]
    edges += [e for kind in IPC_EDGES for p in sorted(processes) for e in scope.query.in_edges(p, kind)
              if e.source not in processes]
    unique = sorted({e.id: e for e in edges}.values(), key=lambda e: e.id)
    if not unique:
        return not_evaluated(scope.missing("no IPC edges (pipes, sockets, shared memory) of the workload", "ipc"))
    queues = [e for e in unique if e.type in QUEUED_KINDS]
    if not queues:
        return not_evaluated(f"{_kinds(unique)} of the workload, no queue between them: shared memory and IPC of an "
                             "unnamed kind have no queue depth to follow")
    measured = [e for e in queues if num(e, M.QUEUED_BYTES_GROWTH_PER_S) is not None]
    unmeasured = [e for e in queues if num(e, M.QUEUED_BYTES_GROWTH_PER_S) is None]
    if not measured:
        return not_evaluated(scope.missing(f"{_kinds(queues)}, none with queue depths at both ends of the window "
                                           "(queued_bytes_growth_per_s)", "ipc"))
    hits = []
    for e in measured:
        growth = num(e, M.QUEUED_BYTES_GROWTH_PER_S)
        sev = levels.severity(growth)
        if sev and (num(e, M.QUEUED_BYTES) or 0.0) >= t["min_queued_bytes"]:
            hits.append((e, growth, sev))
    if not hits:
        kinds = ", ".join(sorted({e.type for e in measured}))
        missing = f"; {_kinds(unmeasured)} without queue depths not judged" if unmeasured else ""
        return clear(f"{ev.counted(len(measured), 'IPC queues')} measured ({kinds}); none grows faster than "
                     f"{number(levels.limit())} bytes/s with >= {number(t['min_queued_bytes'])} bytes queued{missing}")
    hits.sort(key=lambda h: (h[2] != "critical", -h[1], h[0].id))
    items = []
    for e, growth, sev in hits[:ev.MAX_SUBJECTS]:
        readers, _ = _readers(e)
        items.append(ev.edge(e.id, M.QUEUED_BYTES_GROWTH_PER_S, growth, levels=levels, severity=sev,
                             note=f"{e.type} {ev.short(e.source)} -> {ev.short(e.target)}, read by "
                                  f"{' and '.join(ev.short(r) for r in readers)}"))
        items.append(ev.edge(e.id, M.QUEUED_BYTES, num(e, M.QUEUED_BYTES), unit="bytes"))
    e, growth, _ = hits[0]
    readers, writers = _readers(e)
    if len(readers) == 1:
        who = f"{ev.short(readers[0])} reads it more slowly than {ev.short(writers[0])} writes"
    else:
        who = "neither end reads as fast as the other writes"
    return finding(worst(*(h[2] for h in hits)) or "warning",
                   f"{ev.counted(len(hits), 'IPC queues', 'keep')} growing: the {e.type} between {ev.short(e.source)} and "
                   f"{ev.short(e.target)} grows {ev.fmt(growth, 'bytes/s')}; {who}: the reading stage cannot keep up.",
                   items, subjects=[r for h in hits for r in _readers(h[0])[0]])


IPC_BACKLOG = Pattern(
    id="dataplane.ipc_backlog", layer=7, title="IPC backlog",
    why="A queue between two stages that grows through the window means the downstream stage is slower than "
        "the upstream one: latency grows without bound until the queue fills and the producer blocks.",
    metrics=("pipe.queued_bytes", "pipe.queued_bytes_growth_per_s", "unix_socket.queued_bytes",
             "unix_socket.queued_bytes_growth_per_s", "tcp.queued_bytes", "tcp.queued_bytes_growth_per_s",
             "msg_queue.queued_bytes", "msg_queue.queued_bytes_growth_per_s"),
    thresholds=(Threshold("queued_bytes_growth_per_s", "bytes/s", "above", "growth of the bytes waiting in a pipe, "
                          "unix socket, TCP connection (send and receive queues) or message queue over the window",
                          critical=1048576, warning=65536),),
    params=(Param("min_queued_bytes", 65536, "bytes", "ignore queues holding less than this at the end of the window"),),
    evidence="Each IPC edge of the workload with a queue (pipe, unix socket, TCP, message queue) over the threshold, "
             "with its queue depth and the end that reads too slowly (a socket's queued_toward, else the target). "
             "Shared memory has no queue: an edge of that kind alone is not evaluated.",
    recommendations=(
        "Speed up or add instances of the reading stage.",
        "Bound the queue (backpressure) so the producer slows down instead of buffering without limit.",
        "Batch messages to reduce per-message overhead in the reader.",
    ),
    check=_ipc_backlog)


PATTERNS = [DATA_LOADING_BOTTLENECK, PREPROCESSING_BOTTLENECK, PIPELINE_BUBBLE, IPC_BACKLOG]
