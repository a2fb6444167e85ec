"""Shapes of test that many patterns share: compare one metric of a set of entities with a
levelled threshold, and turn the result into a finding, `clear` or `not_evaluated`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from witty_profiler.diagnosis import evidence as ev
from witty_profiler.diagnosis.catalog import (
    LEVELS,
    Levels,
    Verdict,
    clear,
    finding,
    not_evaluated,
    number,
    with_unit,
    worst,
)
from witty_profiler.diagnosis.models import Evidence
from witty_profiler.diagnosis.scope import Scope, num
from witty_profiler.topology import Entity
from witty_profiler.topology.cpulist import cpu_set
from witty_profiler.topology.ids import host_of, process_of_thread
from witty_profiler.topology.models import Fields
from witty_profiler.topology.query import runnable_pct  # noqa: F401 - the rules' users take it from here
from witty_profiler.topology.vocabulary import E, M, T

Value = Callable[[Entity], float | None]


class Assessment(Fields):  # not a dataclass: `convert` and `diagnose` import this module
    _FIELDS = ("levels", "measured", "hits")

    def __init__(self, levels: Levels, measured: list[tuple[Entity, float]] | None = None,
                 hits: list[tuple[Entity, float, str]] | None = None) -> None:
        self.levels = levels
        self.measured = [] if measured is None else measured
        self.hits = [] if hits is None else hits

    @property
    def severity(self) -> str | None:
        return worst(*(s for _, _, s in self.hits))

    def extreme(self) -> tuple[Entity, float] | None:
        """The measured entity closest to (or furthest past) the threshold."""
        if not self.measured:
            return None
        if self.levels.direction == "above":
            return max(self.measured, key=lambda m: (m[1], m[0].id))
        return min(self.measured, key=lambda m: (m[1], m[0].id))


def assess(entities: Iterable[Entity], levels: Levels, value: Value) -> Assessment:
    result = Assessment(levels)
    for entity in entities:
        v = value(entity)
        if v is None:
            continue
        result.measured.append((entity, v))
        severity = levels.severity(v)
        if severity:
            result.hits.append((entity, v, severity))
    sign = -1 if levels.direction == "above" else 1
    result.hits.sort(key=lambda h: (LEVELS.index(h[2]), sign * h[1], h[0].id))
    return result


def metric_of(metric: str) -> Value:
    return lambda e: num(e, metric)


def clear_text(a: Assessment, what: str, metric: str) -> str:
    ext = a.extreme()
    assert ext is not None
    word = "highest" if a.levels.direction == "above" else "lowest"
    sign = ">" if a.levels.direction == "above" else "<"
    return (f"{ev.counted(len(a.measured), what)} measured; {word} {metric} {ev.fmt(ext[1], a.levels.unit)} "
            f"({ev.name_of(ext[0])}), none {sign} {with_unit(number(a.levels.limit()), a.levels.unit)}")


def hit_evidence(a: Assessment, metric: str, note: Callable[[Entity, float], str | None] | None = None,
                 extra: Callable[[Entity], list[Evidence]] | None = None) -> list[Evidence]:
    items: list[Evidence] = []
    for entity, value, severity in a.hits[:ev.MAX_SUBJECTS]:
        items.append(ev.entity(entity.id, metric, value, levels=a.levels, severity=severity,
                               note=note(entity, value) if note else ev.name_of(entity)))
        if extra:
            items.extend(extra(entity))
    if len(a.hits) > ev.MAX_SUBJECTS:
        items.append(ev.more(len(a.hits) - ev.MAX_SUBJECTS, "above the threshold"))
    return items


def metric_check(scope: Scope, entities: list[Entity], levels: Levels, metric: str, what: str,
                 keywords: tuple[str, ...], sentence: str, value: Value | None = None,
                 extra: Callable[[Entity], list[Evidence]] | None = None) -> Verdict:
    """The common shape: `sentence` is formatted with n (hits: '{n:disks|are}' makes '1 disk is' or
    '2 disks are'), names, worst (value) and limit."""
    if not entities:
        return not_evaluated(scope.missing(f"no {what} in this graph", *keywords))
    a = assess(entities, levels, value or metric_of(metric))
    if not a.measured:
        return not_evaluated(scope.missing(f"no {what} with {metric} in this graph", *keywords))
    if not a.hits:
        return clear(clear_text(a, what, metric))
    names = ", ".join(ev.name_of(e) for e, _, _ in a.hits[:4]) + (" ..." if len(a.hits) > 4 else "")
    first = a.hits[0]
    text = sentence.format(n=ev.Count(len(a.hits)), names=names, worst=ev.fmt(first[1], levels.unit),
                           limit=with_unit(number(levels.limit(first[2])), levels.unit))
    return finding(a.severity or "warning", text, hit_evidence(a, metric, extra=extra),
                   subjects=[e.id for e, _, _ in a.hits])


def several_metrics_check(scope: Scope, entities: list[Entity], t: dict[str, Levels], what: str,
                          checks: tuple[tuple[str, Value | None, str], ...], missing: str,
                          keywords: tuple[str, ...], lead: str) -> Verdict:
    """Entities judged on several metrics at once (a NIC on its throughput and on its drops): each
    check is (metric, how to read it if not the metric itself, a sentence on its worst hit with
    {name} and {value}); any hit makes the finding."""
    assessed = [(assess(entities, t[metric], value or metric_of(metric)), metric, sentence)
                for metric, value, sentence in checks]
    if not any(a.measured for a, _, _ in assessed):
        return not_evaluated(scope.missing(missing, *keywords))
    if not any(a.hits for a, _, _ in assessed):
        return clear("; ".join(clear_text(a, what, metric) for a, metric, _ in assessed if a.measured))
    items = [item for a, metric, _ in assessed for item in hit_evidence(a, metric)]
    parts = [sentence.format(name=ev.name_of(a.hits[0][0]), value=ev.fmt(a.hits[0][1], a.levels.unit))
             for a, _, sentence in assessed if a.hits]
    return finding(worst(*(a.severity for a, _, _ in assessed)) or "warning", lead + "; ".join(parts) + ".", items,
                   subjects=[e.id for a, _, _ in assessed for e, _, _ in a.hits])


Reading = tuple[str, Value, str]  # metric, how to read it, unit


def levels_check(entities: list[Entity], readings: tuple[Reading, ...], t: dict[str, Levels], lead: str,
                 context: Callable[[Entity], list[Evidence]] | None = None,
                 after: Callable[[], list[Evidence]] | None = None) -> Verdict:
    """Host-level (or cgroup-level) readings, each against its own levels, e.g. iowait and PSI io:
    every reading over its levels is a part of the finding; `context` adds what explains an
    entity's hits, `after` what explains the finding as a whole."""
    items: list[Evidence] = []
    severities, subjects, parts = [], [], []
    for entity in entities:
        for metric, value_of, unit in readings:
            value = value_of(entity)
            sev = t[metric].severity(value)
            if sev:
                severities.append(sev)
                subjects.append(entity.id)
                where = "" if entity.type == T.HOST else f" in {ev.short(entity.id)}"
                parts.append(f"{metric} {ev.fmt(value, unit)}{where}")
                items.append(ev.entity(entity.id, metric, value, unit=unit, levels=t[metric], severity=sev))
        if context and entity.id in subjects:
            items.extend(context(entity))
    if not severities:
        shown = "; ".join(f"{metric} {ev.fmt(value_of(e), unit)}" for e in entities
                          for metric, value_of, unit in readings if value_of(e) is not None)
        return clear(f"{shown}: below every threshold")
    if after:
        items.extend(after())
    return finding(worst(*severities) or "warning", lead + ", ".join(parts) + ".", items, subjects=subjects)


def host_or_scope_processes(scope: Scope) -> list[Entity]:
    return scope.processes if scope.has_workload else scope.graph.entities(T.PROCESS)


def pmu_subjects(scope: Scope) -> list[Entity]:
    """What CPU performance counters are judged on: the workload's processes, else the hosts."""
    return scope.processes if scope.has_workload else scope.hosts()


def pmu_what(scope: Scope) -> str:
    return "the workload's processes" if scope.has_workload else "the host"


def pmu_context(entity: Entity) -> list[Evidence]:
    """The stall shares of a subject judged on its PMU counters, and the share of the window they
    were counted when the PMU multiplexed them (the counts are scaled up from that share)."""
    items = [ev.entity(entity.id, m, num(entity, m), unit="%") for m in
             (M.STALLED_CYCLES_BACKEND_PCT, M.STALLED_CYCLES_FRONTEND_PCT) if num(entity, m) is not None]
    running = num(entity, M.PMU_RUNNING_PCT)
    if running is not None and running < 100:
        items.append(ev.entity(entity.id, M.PMU_RUNNING_PCT, running, unit="%",
                               note="counters multiplexed: counts scaled from this share of the window"))
    return items


def workload_devices(scope: Scope) -> list[Entity]:
    """Accelerators used by the workload; on the whole host, every accelerator."""
    if scope.has_workload:
        found = {d.id: d for p in scope.processes for _, d in scope.query.devices_of(p)}
        return [found[k] for k in sorted(found)]
    return scope.query.accelerators()


def needs_workload(scope: Scope) -> Verdict | None:
    if scope.has_workload:
        return None
    return not_evaluated("no workload in scope: name it with --pid, or run an AI training/inference process "
                         "that the collectors recognise")


BUSY_ROLES = ("trainer", "inference")


def busy_candidates(scope: Scope) -> list[Entity]:
    """The processes of the workload that are supposed to be busy: the named ones, trainers and
    inference engines, and accelerator users (launchers and loader workers are not)."""
    named = set(scope.requested_pids)
    found = []
    for p in scope.processes:
        if p.attrs.get("pid") in named or p.attrs.get("role") in BUSY_ROLES or scope.query.devices_of(p):
            if p.attrs.get("role") not in ("loader", "launcher") or p.attrs.get("pid") in named:
                found.append(p)
    return found


def cpu_wait_pct(e: Entity) -> float | None:
    """Share of the whole window a task spent waiting for a CPU. Not the share of its runnable
    time: a task runnable for 1 ms that waited 0.8 ms of it is not starved."""
    per_s = num(e, M.RUNQUEUE_WAIT_MS_PER_S)
    if per_s is not None:
        return per_s / 10.0
    return None


def short_waits(e: Entity, min_wait_per_slice_us: float) -> bool:
    """Whether a task's run-queue waits are short each time (a mean wait per timeslice at most
    the bound): a task that runs in bursts of microseconds waits at every wake-up, which makes a
    large share of its runnable time without anything holding it up. Unknown: not short."""
    per_slice = num(e, M.RUNQUEUE_WAIT_PER_SLICE_US)
    return per_slice is not None and per_slice <= min_wait_per_slice_us


def slices_per_s(e: Entity) -> str:
    """' over 4200 slices a second', or nothing where the rate is not known."""
    rate = num(e, M.TIMESLICES_PER_S)
    return f" over {ev.fmt(rate)} slices a second" if rate is not None else ""


def _cgroup_path(cg: Entity) -> tuple[str, str, str]:
    parts = cg.id.split(":", 3)
    return (parts[1], parts[2], parts[3]) if len(parts) == 4 else ("", "", cg.id)


def _under(path: str, ancestor: str) -> bool:
    return path == ancestor or ancestor == "/" or path.startswith(ancestor.rstrip("/") + "/")


def throttled_by_quota(scope: Scope, tasks: Iterable[Entity]) -> dict[str, list[Entity]]:
    """task id -> the cgroups that control.cpu_throttling found throttled and that hold the task
    (its process's cgroup or one above it), for the tasks held back by a CPU quota. Time a
    throttled group's tasks spend stopped counts as run-queue wait in schedstat: it is the quota,
    not other tasks, that keeps them from a CPU."""
    verdict = scope.verdict("control.cpu_throttling")
    if verdict is None or verdict.status != "finding":
        return {}
    throttled = [cg for cg in (scope.graph.entity(i) for i in verdict.subjects) if cg is not None and cg.type == T.CGROUP]
    found: dict[str, list[Entity]] = {}
    for task in tasks:
        process = process_of_thread(task.id) if task.type == T.THREAD else task.id
        homes = [_cgroup_path(cg) for cg in (scope.graph.entity(e.target)
                                             for e in scope.query.out_edges(process, E.IN_CGROUP)) if cg is not None]
        held = []
        for cg in throttled:
            host, version, path = _cgroup_path(cg)
            if any(h == host and v == version and _under(own, path) for h, v, own in homes):
                held.append(cg)
        if held:
            found[task.id] = held
    return found


def scope_cgroups(scope: Scope) -> list[Entity]:
    """The workload's cgroups and their ancestors (a limit on an ancestor applies just the same);
    every cgroup on the whole host."""
    all_cgroups = scope.graph.entities(T.CGROUP)
    if not scope.has_workload:
        return all_cgroups
    direct = {e.target for p in scope.processes for e in scope.query.out_edges(p.id, E.IN_CGROUP)}
    paths = [_cgroup_path(c) for c in all_cgroups if c.id in direct]
    chosen = []
    for cg in all_cgroups:
        host, version, path = _cgroup_path(cg)
        # a quota on an ancestor throttles the workload just the same
        if cg.id in direct or any(h == host and v == version and (p.startswith(path.rstrip("/") + "/") or path == "/")
                                  for h, v, p in paths):
            chosen.append(cg)
    return chosen


class QuotaCause(Fields):
    """What a finding about tasks waiting for a CPU says when CPU quotas hold some of them back."""

    _FIELDS = ("held", "text", "evidence")

    def __init__(self, held: dict[str, list[Entity]], text: str, evidence: list[Evidence]) -> None:
        self.held = held  # task id -> throttled cgroups that hold it
        self.text = text  # a sentence to add to the description
        self.evidence = evidence

    @property
    def related(self) -> list[str]:
        return ["control.cpu_throttling"] if self.held else []

    def recommendations(self, subjects: Iterable[str], quota: tuple[str, ...], own: tuple[str, ...]) -> list[str]:
        """`quota` alone when the quota holds back every subject; its first item then `own` when
        only some; none (the pattern's own) when it holds back none."""
        subjects = set(subjects)
        if not self.held:
            return []
        if subjects <= set(self.held):
            return list(quota)
        return [quota[0], *own]


def quota_advice(whose: str, waiting: str, *more: str) -> tuple[str, ...]:
    """The advice of a finding whose tasks a CPU quota holds back (compute.cpu_starvation and
    control.scheduling_latency): lift the quota of `whose` cgroup, since `waiting` is on the quota, then the
    pattern's own `more`."""
    return (f"Raise or remove the CPU quota of {whose} cgroup (docker --cpus, Kubernetes limits.cpu), or give it a "
            f"cpuset instead: {waiting} for {'its' if waiting == 'it waits' else 'the'} quota, not for other "
            f"processes (see control.cpu_throttling).", *more)


def quota_cause(scope: Scope, tasks: list[Entity]) -> QuotaCause:
    held = throttled_by_quota(scope, tasks)
    if not held:
        return QuotaCause({}, "", [])
    groups = sorted({cg.id: cg for cgs in held.values() for cg in cgs}.values(), key=lambda cg: cg.id)
    first = groups[0]
    quota, stalled = num(first, M.CPU_QUOTA_CORES), num(first, M.THROTTLED_MS_PER_S)
    n, total = len(held), len(tasks)
    who = ("It is" if total == 1 else f"All {total} are" if n == total else f"{n} of them are")
    them = "it" if n == 1 else "them"
    names = ", ".join(ev.short(cg.id) for cg in groups[:3]) + (" ..." if len(groups) > 3 else "")
    text = (f" {who} in {names}, throttled by {'its' if len(groups) == 1 else 'their'} CPU quota"
            + (f" of {ev.fmt(quota, 'cores')}" if quota is not None else "")
            + (f" ({ev.fmt(stalled, 'ms/s')} stalled)" if stalled is not None else "")
            + f": the quota holds {them} back, not other processes; raise or remove it (see control.cpu_throttling).")
    items = []
    for cg in groups[:ev.MAX_SUBJECTS]:
        inside = [ev.short(t) for t, cgs in sorted(held.items()) if cg in cgs]
        for metric, unit in ((M.THROTTLED_MS_PER_S, "ms/s"), (M.THROTTLED_PERIODS_PCT, "%"), (M.CPU_QUOTA_CORES, "cores")):
            if num(cg, metric) is not None:
                items.append(ev.entity(cg.id, metric, num(cg, metric), unit=unit,
                                       note=f"CPU quota of {ev.short(cg.id)}, holding {', '.join(inside[:4])}"
                                            + (" ..." if len(inside) > 4 else "")))
    return QuotaCause(held, text, items)


def _process_of(scope: Scope, task: Entity) -> Entity | None:
    return scope.graph.entity(process_of_thread(task.id)) if task.type == T.THREAD else task


def on_saturated_cpus(scope: Scope, tasks: list[Entity]) -> list[str]:
    """The tasks that run where compute.cpu_saturation found the CPUs saturated: on a saturated
    host, or allowed on CPUs of the saturated set the workload may use."""
    verdict = scope.verdict("compute.cpu_saturation")
    if verdict is None or verdict.status != "finding":
        return []
    hosts = {host_of(s) for s in verdict.subjects if s.startswith(T.HOST + ":")}
    cpus: dict[str, set[int]] = {}
    for s in verdict.subjects:
        if s.startswith(T.CPU + ":") and s.rsplit(":", 1)[1].isdigit():
            cpus.setdefault(host_of(s), set()).add(int(s.rsplit(":", 1)[1]))
    found = []
    for task in tasks:
        process = _process_of(scope, task)
        allowed = cpu_set((task.attrs.get("cpus_allowed") or (process.attrs.get("cpus_allowed") if process else None)))
        if host_of(task.id) in hosts or allowed & cpus.get(host_of(task.id), set()):
            found.append(task.id)
    return found


def oversubscribed(scope: Scope, tasks: list[Entity]) -> list[str]:
    """The tasks of processes that control.thread_oversubscription names: the workload keeps more
    threads runnable than the CPUs it may use."""
    verdict = scope.verdict("control.thread_oversubscription")
    if verdict is None or verdict.status != "finding":
        return []
    subjects = set(verdict.subjects)
    return [t.id for t in tasks if (p := _process_of(scope, t)) is not None and p.id in subjects]
