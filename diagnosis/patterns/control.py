"""Layer 6, control plane: scheduling, CPU quotas, locks, balance between workers, thread counts."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
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
from witty_profiler.diagnosis.patterns.cluster import STRAGGLER_HOST
from witty_profiler.diagnosis.patterns.traces import SLOW_RANK
from witty_profiler.diagnosis.rules import (
    host_or_scope_processes,
    needs_workload,
    on_saturated_cpus,
    oversubscribed,
    quota_advice,
    quota_cause,
    runnable_pct,
    scope_cgroups,
    short_waits,
    slices_per_s,
)
from witty_profiler.diagnosis.scope import Scope, num
from witty_profiler.topology import Entity
from witty_profiler.topology.cpulist import cpu_set
from witty_profiler.topology.ids import host_of, process_of_thread
from witty_profiler.topology.vocabulary import E, M, T
from witty_profiler.topology.workload import program


# -- control.scheduling_latency -----------------------------------------------------------
def _scheduling_latency(scope: Scope, t: dict[str, Any]) -> Verdict:
    wait, per_slice, psi = t["runqueue_wait_pct"], t["runqueue_wait_per_slice_us"], t["psi_cpu_some_pct"]
    tasks = host_or_scope_processes(scope)
    if not any(num(p, M.RUNQUEUE_WAIT_PCT) is not None for p in tasks):
        tasks = scope.scope_threads() if scope.has_workload else scope.graph.entities(T.THREAD)
    measured = [p for p in tasks if num(p, M.RUNQUEUE_WAIT_PCT) is not None or num(p, M.RUNQUEUE_WAIT_PER_SLICE_US)
                is not None]
    active = [p for p in measured if (runnable_pct(p) or 0.0) >= t["min_runnable_pct"]]
    hosts = [h for h in scope.hosts() if num(h, M.PSI_CPU_SOME_PCT) is not None]
    if not measured and not hosts:
        return not_evaluated(scope.missing("no run-queue wait (schedstat) of tasks and no PSI cpu", "process",
                                           "sched", "pressure"))
    hits, brief = [], []
    for task in active:
        sev_w = wait.severity(num(task, M.RUNQUEUE_WAIT_PCT))
        if sev_w and short_waits(task, t["min_wait_per_slice_us"]):
            # a large share made of short waits: a task that runs in bursts and waits at each wake-up
            sev_w = None
            brief.append(task)
        sev_s = per_slice.severity(num(task, M.RUNQUEUE_WAIT_PER_SLICE_US))
        if sev_w or sev_s:
            hits.append((task, worst(sev_w, sev_s)))
    host_hits = [] if scope.has_workload else [(h, psi.severity(num(h, M.PSI_CPU_SOME_PCT))) for h in hosts]
    host_hits = [(h, s) for h, s in host_hits if s]
    if not hits and not host_hits:
        long_waits = [p for p in active if p not in brief]
        top = max((num(p, M.RUNQUEUE_WAIT_PCT) or 0.0 for p in long_waits), default=None)
        parts = [f"{ev.counted(len(active), 'active tasks')} measured" + (f", highest run-queue wait {ev.fmt(top, '%')} of their "
                                                             f"runnable time" if top is not None else "")]
        if brief:
            first = max(brief, key=lambda p: (num(p, M.RUNQUEUE_WAIT_PCT) or 0.0, p.id))
            parts.append(f"{ev.counted(len(brief), 'tasks', 'wait')} longer in all but in short waits: {ev.name_of(first)} "
                         f"{ev.fmt(num(first, M.RUNQUEUE_WAIT_PCT), '%')} of its runnable time, "
                         f"{ev.fmt(num(first, M.RUNQUEUE_WAIT_PER_SLICE_US), 'us')} per slice (<= "
                         f"{number(t['min_wait_per_slice_us'])} us){slices_per_s(first)}: it wakes up often, nothing "
                         "holds it up")
        parts += [f"PSI cpu {ev.fmt(num(h, M.PSI_CPU_SOME_PCT), '%')}" for h in hosts]
        return clear("; ".join(parts) + f"; none over {number(wait.limit())} % / {number(per_slice.limit())} us per slice")
    hits.sort(key=lambda h: (h[1] != "critical", -(num(h[0], M.RUNQUEUE_WAIT_PCT) or 0.0), h[0].id))
    items: list[Evidence] = []
    for task, sev in hits[:ev.MAX_SUBJECTS]:
        for metric, levels in ((M.RUNQUEUE_WAIT_PCT, wait), (M.RUNQUEUE_WAIT_PER_SLICE_US, per_slice)):
            value = num(task, metric)
            if value is not None:
                items.append(ev.entity(task.id, metric, value, levels=levels, severity=levels.severity(value),
                                       note=ev.name_of(task)))
        if num(task, M.CPU_UTIL_PCT) is not None:
            items.append(ev.entity(task.id, M.CPU_UTIL_PCT, num(task, M.CPU_UTIL_PCT), unit="%"))
    if len(hits) > ev.MAX_SUBJECTS:
        items.append(ev.more(len(hits) - ev.MAX_SUBJECTS, "tasks"))
    for host in hosts:
        sev = psi.severity(num(host, M.PSI_CPU_SOME_PCT))
        items.append(ev.entity(host.id, M.PSI_CPU_SOME_PCT, num(host, M.PSI_CPU_SOME_PCT), levels=psi, severity=sev,
                               note="host-wide CPU pressure"))
    text = []
    if hits:
        first = hits[0][0]
        text.append(f"{ev.counted(len(hits), 'runnable tasks', 'wait')} for a CPU: {ev.name_of(first)} waits "
                    f"{ev.fmt(num(first, M.RUNQUEUE_WAIT_PCT), '%')} of its runnable time"
                    + (f", {ev.fmt(num(first, M.RUNQUEUE_WAIT_PER_SLICE_US), 'us')} per slice"
                       if num(first, M.RUNQUEUE_WAIT_PER_SLICE_US) is not None else ""))
    for host, _ in host_hits:
        text.append(f"some task stalled on CPU {ev.fmt(num(host, M.PSI_CPU_SOME_PCT), '%')} of the window on "
                    f"{host_of(host.id)} (PSI)")
    # a CPU quota stops a throttled group's tasks, and schedstat counts that as run-queue wait
    quota = quota_cause(scope, [task for task, _ in hits])
    # the others wait because other work keeps the CPUs busy, or the workload's own threads do
    free = [task for task, _ in hits if task.id not in quota.held]
    crowded, own = on_saturated_cpus(scope, free), oversubscribed(scope, free)
    causes = quota.text
    if crowded:
        causes += (f" {'It runs' if len(hits) == 1 else ev.counted(len(crowded), 'of them', 'run')} on saturated CPUs "
                   "(see compute.cpu_saturation).")
    if own:
        causes += (" The workload keeps more threads runnable than the CPUs it may use "
                   "(see control.thread_oversubscription).")
    related = quota.related + (["compute.cpu_saturation"] if crowded else []) + \
        (["control.thread_oversubscription"] if own else [])
    subjects = [h.id for h, _ in hits + host_hits]
    return finding(worst(*(s for _, s in hits + host_hits)) or "warning", "; ".join(text) + "." + causes,
                   items + quota.evidence, subjects=subjects, related=related,
                   recommendations=quota.recommendations(subjects, QUOTA_RECOMMENDATIONS,
                                                         SCHEDULING_LATENCY.recommendations))


QUOTA_RECOMMENDATIONS = quota_advice(
    "the workload's", "its tasks wait",
    "Reduce runnable threads to the quota: OMP_NUM_THREADS / torch.set_num_threads and loader workers <= quota cores.",
    "Lengthen the period (cpu.cfs_period_us) if bursts must fit within one period.",
)


SCHEDULING_LATENCY = Pattern(
    id="control.scheduling_latency", layer=6, title="Scheduling latency (run-queue wait)",
    why="A thread that is ready but waits for a CPU delays whatever depends on it: the next kernel launch, "
        "the next batch, the reply to a collective. It shows as wait in the run queue, not as CPU use.",
    metrics=("process.runqueue_wait_pct", "process.runqueue_wait_per_slice_us", "process.runqueue_wait_ms_per_s",
             "process.timeslices_per_s", "thread.runqueue_wait_pct", "thread.runqueue_wait_per_slice_us",
             "host.psi_cpu_some_pct"),
    thresholds=(Threshold("runqueue_wait_pct", "%", "above", "share of runnable time spent waiting for a CPU",
                          critical=50, warning=20),
                Threshold("runqueue_wait_per_slice_us", "us", "above", "mean run-queue wait per timeslice",
                          critical=50000, warning=10000),
                Threshold("psi_cpu_some_pct", "%", "above", "host-wide PSI cpu stall share (judged on the whole host "
                          "only; evidence otherwise)", critical=50, warning=20)),
    params=(Param("min_runnable_pct", 5, "%", "ignore tasks runnable (running + waiting) less than this share of "
                  "the window"),
            Param("min_wait_per_slice_us", 1000, "us", "a task's wait share counts only where its waits last longer "
                  "than this on average (run-queue wait per timeslice, where measured): a task that runs in bursts "
                  "of microseconds waits briefly at every wake-up (tens to hundreds of us, more on a VM's idle CPU), "
                  "a large share of its runnable time without any queue behind other tasks")),
    evidence="The workload's active tasks (all active processes on the whole host) over a threshold with their "
             "wait share, wait per slice and CPU use, and the host's PSI cpu. A wait share made of short waits (see "
             "min_wait_per_slice_us) is not counted. When control.cpu_throttling finds the cgroup of a waiting task "
             "(or one above it) throttled, the finding names it with its throttled time and quota and recommends "
             "raising or removing the quota instead of moving competing work away. A task not held back by a "
             "quota relates the finding to compute.cpu_saturation when the CPUs it may use are saturated, and to "
             "control.thread_oversubscription when its process is one of those keeping too many threads "
             "runnable.",
    recommendations=(
        "Give the workload CPUs of its own (cpuset/isolcpus) or move other busy processes away.",
        "Reduce runnable threads: OMP_NUM_THREADS / torch.set_num_threads to the CPUs available, fewer loader workers.",
        "Raise the workload's priority only as a last resort (nice, SCHED_FIFO for a latency-critical thread).",
    ),
    check=_scheduling_latency)


# -- control.cpu_throttling ---------------------------------------------------------------
def _cpu_throttling(scope: Scope, t: dict[str, Any]) -> Verdict:
    periods, ms = t["throttled_periods_pct"], t["throttled_ms_per_s"]
    cgroups = scope_cgroups(scope)
    measured = [c for c in cgroups if num(c, M.THROTTLED_PERIODS_PCT) is not None or num(c, M.THROTTLED_MS_PER_S)
                is not None]
    if not measured:
        what = "no cgroup of the workload with CPU throttling counters" if scope.has_workload else \
            "no cgroup with CPU throttling counters"
        return not_evaluated(scope.missing(what, "cgroup"))
    hits = []
    for cg in measured:
        sev = worst(periods.severity(num(cg, M.THROTTLED_PERIODS_PCT)), ms.severity(num(cg, M.THROTTLED_MS_PER_S)))
        if sev:
            hits.append((cg, sev))
    if not hits:
        top = max(measured, key=lambda c: (num(c, M.THROTTLED_PERIODS_PCT) or 0.0, c.id))
        return clear(f"{ev.counted(len(measured), 'cgroups')} measured; most throttled {ev.short(top.id)} in "
                     f"{ev.fmt(num(top, M.THROTTLED_PERIODS_PCT) or 0.0, '%')} of periods")
    hits.sort(key=lambda h: (h[1] != "critical", -(num(h[0], M.THROTTLED_PERIODS_PCT) or 0.0), h[0].id))
    items: list[Evidence] = []
    for cg, _ in hits[:ev.MAX_SUBJECTS]:
        for metric, levels in ((M.THROTTLED_PERIODS_PCT, periods), (M.THROTTLED_MS_PER_S, ms)):
            if num(cg, metric) is not None:
                items.append(ev.entity(cg.id, metric, num(cg, metric), levels=levels,
                                       severity=levels.severity(num(cg, metric)), note=ev.short(cg.id)))
        if num(cg, M.CPU_QUOTA_CORES) is not None:
            items.append(ev.entity(cg.id, M.CPU_QUOTA_CORES, num(cg, M.CPU_QUOTA_CORES), unit="cores"))
        members = [e for e in scope.query.in_edges(cg.id, E.IN_CGROUP) if scope.in_scope(e.source) or not scope.has_workload]
        for edge in members[:4]:
            proc = scope.graph.entity(edge.source)
            items.append(ev.edge(edge.id, E.IN_CGROUP, ev.name_of(proc) if proc else edge.source,
                                 note="a workload process in this cgroup"))
    cg = hits[0][0]
    quota = num(cg, M.CPU_QUOTA_CORES)
    return finding(worst(*(s for _, s in hits)) or "warning",
                   f"A CPU quota throttles the workload: {ev.short(cg.id)} was throttled in "
                   f"{ev.fmt(num(cg, M.THROTTLED_PERIODS_PCT) or 0.0, '%')} of its periods"
                   + (f" ({ev.fmt(num(cg, M.THROTTLED_MS_PER_S), 'ms/s')} stalled)"
                      if num(cg, M.THROTTLED_MS_PER_S) is not None else "")
                   + (f", quota {ev.fmt(quota, 'cores')}" if quota is not None else "") + ".",
                   items, subjects=[c.id for c, _ in hits])


CPU_THROTTLING = Pattern(
    id="control.cpu_throttling", layer=6, title="CPU quota throttling",
    why="A cgroup CPU quota (container CPU limit) stops every thread of the group for the rest of the period "
        "once the quota is spent: the workload stalls in bursts even though the host has idle CPUs.",
    metrics=("cgroup.throttled_periods_pct", "cgroup.throttled_ms_per_s", "cgroup.cpu_quota_cores", E.IN_CGROUP),
    thresholds=(Threshold("throttled_periods_pct", "%", "above", "share of enforcement periods in which the cgroup "
                          "was throttled", critical=50, warning=20, notice=5),
                Threshold("throttled_ms_per_s", "ms/s", "above", "time throttled per second of the window",
                          critical=250, warning=100)),
    evidence="The workload's cgroups (and their ancestors; every cgroup on the whole host) over a threshold, with "
             "their quota and the workload processes in them.",
    recommendations=(
        "Raise or remove the CPU limit (docker --cpus, Kubernetes limits.cpu) or use a cpuset instead of a quota.",
        "Match thread counts to the quota: OMP_NUM_THREADS and loader workers <= quota cores.",
        "Lengthen the period (cpu.cfs_period_us) if bursts must fit within one period.",
    ),
    check=_cpu_throttling)


# -- control.lock_contention --------------------------------------------------------------
def _lock_contention(scope: Scope, t: dict[str, Any]) -> Verdict:
    share, often = t["futex_lock_wait_pct"], t["min_futex_wakeups_per_s"]
    threads = scope.scope_threads() if scope.has_workload else scope.graph.entities(T.THREAD)
    measured = [th for th in threads if num(th, M.FUTEX_LOCK_WAIT_PCT) is not None]
    # without a workload the collector reports only the threads that waited: none is a clear host
    traced = any(name.split("@")[0] == "ebpf" and status.status == "ok" for name, status in scope.meta.collectors.items())
    if not measured and (scope.has_workload or not traced):
        return not_evaluated(scope.missing("no futex wait times: needs the eBPF collector (syscalls futex "
                                           "tracepoints)", "ebpf"))
    # a thread woken rarely sleeps on a condition (an idle pool, a queue with nothing in it), not on a lock
    woken_often = [th for th in measured if (num(th, M.FUTEX_WAKEUPS_PER_S) or 0.0) >= often]
    often_ids = {th.id for th in woken_often}
    hits = [(th, share.severity(num(th, M.FUTEX_LOCK_WAIT_PCT))) for th in woken_often]
    hits = [(th, sev) for th, sev in hits if sev]
    if not hits:
        # sleeping on futexes (all waits, timed-out sleeps included) without being woken often: idle
        idle = [th for th in measured if share.severity(num(th, M.FUTEX_WAIT_PCT)) and th.id not in often_ids]
        if woken_often:
            top = max(num(th, M.FUTEX_LOCK_WAIT_PCT) or 0.0 for th in woken_often)
            what = (f"none of the {len(woken_often)} woken at least {number(often)}/s waited over "
                    f"{number(share.limit())} % of the window on locks (highest {ev.fmt(top, '%')})")
        else:
            what = f"none was woken from futex waits {number(often)} times a second or more"
        return clear(f"{ev.counted(len(measured), 'threads')} traced; {what}"
                     + (f"; {ev.counted(len(idle), 'idle threads')} slept longer on futexes but were woken less often"
                        if idle else ""))
    hits.sort(key=lambda h: (h[1] != "critical", -(num(h[0], M.FUTEX_LOCK_WAIT_PCT) or 0.0), h[0].id))
    items: list[Evidence] = []
    for th, sev in hits[:ev.MAX_SUBJECTS]:
        process = scope.graph.entity(process_of_thread(th.id))
        of = f" of {ev.name_of(process)}" if process is not None else ""
        items.append(ev.entity(th.id, M.FUTEX_LOCK_WAIT_PCT, num(th, M.FUTEX_LOCK_WAIT_PCT), levels=share,
                               severity=sev, note=f"{ev.name_of(th)}{of}"))
        items.append(ev.entity(th.id, M.FUTEX_WAKEUPS_PER_S, num(th, M.FUTEX_WAKEUPS_PER_S), unit="1/s",
                               bound=(">=", often), note="wake-ups by another thread per second"))
        if num(th, M.CPU_UTIL_PCT) is not None:
            items.append(ev.entity(th.id, M.CPU_UTIL_PCT, num(th, M.CPU_UTIL_PCT), unit="%"))
    if len(hits) > ev.MAX_SUBJECTS:
        items.append(ev.more(len(hits) - ev.MAX_SUBJECTS, "threads"))
    shared = _shared_locks([th for th, _ in hits])
    items += _where_they_wait(scope, [th for th, _ in hits], measured, shared)
    names = ", ".join(ev.name_of(th) for th, _ in hits[:4]) + (" ..." if len(hits) > 4 else "")
    first = hits[0][0]
    one_lock = ""
    if shared:
        (_, slot), members = shared[0]
        one_lock = f"; {len(members)} of them wait mostly on one lock (futex 0x{slot:x})"
    return finding(worst(*(s for _, s in hits)) or "warning",
                   f"{ev.counted(len(hits), 'threads', 'spend')} {ev.their(len(hits))} time waiting on locks: "
                   + (f"{names}; the worst, " if len(hits) > 1 else "")
                   + f"{ev.name_of(first)}, waits {ev.fmt(num(first, M.FUTEX_LOCK_WAIT_PCT), '%')} of the window on "
                   f"locks and is woken {ev.fmt(num(first, M.FUTEX_WAKEUPS_PER_S))} times a second "
                   f"(threshold > {number(share.limit(hits[0][1]))} %){one_lock}.",
                   items, subjects=[th.id for th, _ in hits])


def _where_they_wait(scope: Scope, contended: list[Entity], measured: list[Entity],
                     shared: list[tuple[tuple[str, int], list[Entity]]]) -> list[Evidence]:
    """Per process, how many of its traced threads contend; per lock that several of them wait on,
    which threads, and where the lock lies."""
    items = []
    traced = Counter(process_of_thread(th.id) for th in measured)
    by_process = Counter(process_of_thread(th.id) for th in contended)
    for pid_id, n in sorted(by_process.items(), key=lambda kv: (-kv[1], kv[0])):
        process = scope.graph.entity(pid_id)
        if process is not None:
            of = f"of the {ev.counted(traced[pid_id], 'traced threads')} of {ev.name_of(process)}"
            items.append(ev.statistic([pid_id], "contended_threads", n, unit="threads", note=of))
    for (_, slot), members in shared:
        where = next((m.attrs["futex_mapping"] for m in members if m.attrs.get("futex_mapping")), None)
        items.append(ev.statistic([m.id for m in members], "threads_on_one_lock", len(members), unit="threads",
                                  note=f"wait mostly on one lock: the futex at 0x{slot:x}"
                                       + (f" in {where}" if where else "")))
    return items


def _shared_locks(threads: list[Entity]) -> list[tuple[tuple[str, int], list[Entity]]]:
    """Groups of two or more threads of one process whose main lock (futex_addr) is the same, most
    threads first. Words in one 8-byte slot are one lock: a glibc condition variable makes its
    waiters wait on two neighbouring words in turn."""
    groups: dict[tuple[str, int], list[Entity]] = {}
    for th in threads:
        try:
            slot = int(str(th.attrs.get("futex_addr")), 16) & ~7
        except ValueError:  # absent, or not an address (an edited file)
            continue
        groups.setdefault((process_of_thread(th.id), slot), []).append(th)
    return sorted(((key, members) for key, members in groups.items() if len(members) >= 2),
                  key=lambda kv: (-len(kv[1]), kv[0]))


LOCK_CONTENTION = Pattern(
    id="control.lock_contention", layer=6, title="Lock contention",
    why="Threads that wait on futexes (mutexes, condition variables, the GIL's underlying lock) are "
        "serialised: adding threads adds waiting, not throughput.",
    metrics=("thread.futex_lock_wait_pct", "thread.futex_wait_pct", "thread.futex_wakeups_per_s"),
    thresholds=(Threshold("futex_lock_wait_pct", "%", "above", "share of the window a thread spent waiting on locks: "
                          "futex waits another thread ended, or under 10 ms (not a poller's timed-out sleeps)",
                          critical=60, warning=30),),
    params=(Param("min_futex_wakeups_per_s", 25, "1/s", "a thread must be woken from futex waits at least this often: "
                  "one that sleeps long and is woken rarely is idle (a pool or queue with no work), not contended"),),
    needs="the eBPF collector (futex syscall tracepoints, root)",
    evidence="Each workload thread (every traced thread on the whole host) over the threshold and woken often enough, "
             "with its wake-up rate and CPU use, per process how many of its threads contend, and the contended "
             "threads that wait mostly on one lock (the same futex word, with the mapping it lies in).",
    recommendations=(
        "Find the contended lock (offcputime, py-spy dump) and shorten its critical section or shard it.",
        "In Python, move work from threads to processes (GIL contention).",
        "Use lock-free queues between pipeline stages; if the threads wait for work rather than for a lock, "
        "run fewer of them (OMP_NUM_THREADS, torch.set_num_threads).",
    ),
    check=_lock_contention)


# -- control.load_imbalance ---------------------------------------------------------------
Group = tuple[str, list[Entity]]  # what makes them one job ("ranks" or "workers"), the members


def _world(p: Entity) -> tuple[str, ...] | None:
    """The distributed job a ranked process belongs to: its world size and rendezvous address
    (MASTER_ADDR/MASTER_PORT where the environment was kept, else its host: ranks on one host
    with the same world size)."""
    if p.attrs.get("rank") is None:
        return None
    env = p.attrs.get("env") if isinstance(p.attrs.get("env"), dict) else {}
    master = (str(env.get("MASTER_ADDR", "")), str(env.get("MASTER_PORT", "")))
    where = ("master", *master) if any(master) else ("host", host_of(p.id))
    return (str(p.attrs.get("world_size")), *where)


def _inherited_rank(scope: Scope, p: Entity) -> bool:
    """A process started by a rank (a shell, a tool) keeps its environment, RANK included: it is
    not another rank."""
    parent = scope.query.parent_of(p)
    return parent is not None and _world(parent) == _world(p) and parent.attrs.get("rank") == p.attrs.get("rank")


def _groups(scope: Scope) -> tuple[list[Group], int]:
    """Workers of one job: the ranks of one world (distinct ranks), and processes of one parent
    and role running the same program (the command line but for its numbers: the tensor-parallel
    workers of vLLM differ in a pipe handle). Also how many processes share a parent and a name
    but have no command line to tell whether they run the same program."""
    groups: dict[tuple[str, ...], list[Entity]] = defaultdict(list)
    unknown: dict[tuple[str, ...], list[Entity]] = defaultdict(list)
    for p in scope.processes:
        parent = scope.query.parent_of(p)
        cmdline = str(p.attrs.get("cmdline") or "")
        world = _world(p)
        # one parent (by its entity, else by the pid the process names); ranks are grouped by their world
        key = (parent.id if parent else f"ppid {p.attrs.get('ppid')}", str(p.attrs.get("role")))
        if world is None and cmdline:
            groups[("workers", *key, program(cmdline))].append(p)
        elif world is None:
            unknown[(*key, str(p.attrs.get("name")))].append(p)
        if world is not None and p.attrs.get("role") not in ("loader", "launcher") and not _inherited_rank(scope, p):
            groups[("ranks", *world)].append(p)
    found: list[Group] = []
    seen: set[tuple[str, ...]] = set()
    for key in sorted(groups):
        members = sorted(groups[key], key=lambda e: e.id)
        ranks = [m.attrs.get("rank") for m in members]
        if key[0] == "ranks" and len(set(map(str, ranks))) < len(ranks):
            continue  # one rank twice: two jobs alike, which cannot be told apart
        ids = tuple(m.id for m in members)
        if len(members) >= 2 and ids not in seen:
            seen.add(ids)
            found.append((key[0], members))
    ungrouped = sum(len(ms) for ms in unknown.values() if len(ms) >= 2)
    return found, ungrouped


def _work(scope: Scope, group: list[Entity]) -> tuple[str, dict[str, float]] | None:
    """('device util_pct' | 'cpu_util_pct', member id -> work) with one value for every member."""
    device_work = {}
    for p in group:
        utils = [num(d, M.UTIL_PCT) for _, d in scope.query.devices_of(p)]
        utils = [u for u in utils if u is not None]
        if utils:
            device_work[p.id] = sum(utils) / len(utils)
    if len(device_work) == len(group):
        return M.UTIL_PCT, device_work
    cpu = {p.id: num(p, M.CPU_UTIL_PCT) for p in group}
    if all(v is not None for v in cpu.values()):
        return M.CPU_UTIL_PCT, cpu  # type: ignore[return-value]
    return None


def _load_imbalance(scope: Scope, t: dict[str, Any]) -> Verdict:
    if (skip := needs_workload(scope)) is not None:
        return skip
    levels, floor = t["imbalance_pct"], t["min_work_pct"]
    groups, ungrouped = _groups(scope)
    if not groups:
        if ungrouped:
            return not_evaluated(f"{ev.counted(ungrouped, 'processes', 'share')} a parent and a name but have no command "
                                 "line (nor ranks) to tell whether they are workers of one job")
        return clear(f"no workers of one job (ranks of one world, or siblings running one command line) in "
                     f"{scope.describe()}")
    measured, idle, hits = 0, 0, []
    for kind, group in groups:
        work = _work(scope, group)
        if work is None:
            continue
        metric, values = work
        top, low = max(values.values()), min(values.values())
        measured += 1
        idle += top < floor
        # the gap against the busiest member's work, and against min_work_pct at least: a near-idle
        # group counts as less imbalanced in proportion, so no value flips the verdict at a bound
        imbalance = (top - low) * 100 / max(top, floor) if top > 0 else 0.0
        sev = levels.severity(imbalance)
        if sev:
            hits.append((kind, group, metric, values, imbalance, sev))
    if not measured:
        return not_evaluated(scope.missing(f"{ev.counted(len(groups), 'worker groups')}, but no comparable work measure (CPU or "
                                           f"device utilisation over the window) for all members", "process", "gpu"))
    if not hits:
        if idle == measured:
            return clear(f"{ev.counted(measured, 'worker groups')} measured, all idle or nearly (busiest member under "
                         f"{number(floor)} %, against which their gaps are measured): nothing to balance")
        return clear(f"{ev.counted(measured, 'worker groups')} compared; none differs by more than {number(levels.limit())} %")
    hits.sort(key=lambda h: (h[5] != "critical", -h[4], h[1][0].id))
    items: list[Evidence] = []
    for kind, group, metric, values, imbalance, sev in hits[:ev.MAX_SUBJECTS]:
        top = max(values.values())
        against = "max" if top >= floor else f"{number(floor)} (min_work_pct, above the busiest member's work)"
        items.append(ev.statistic(list(values), "imbalance_pct", imbalance, levels=levels, severity=sev,
                                  note=f"(max - min) / {against} of {metric} over {_members(kind, len(group))}"))
        for pid, value in sorted(values.items(), key=lambda kv: (kv[1], kv[0]))[:1] + \
                sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))[:1]:
            items.append(ev.entity(pid, metric, value, unit="%", note="least busy" if value == min(values.values())
                                   else "busiest"))
    kind, group, metric, values, imbalance, _ = hits[0]
    return finding(worst(*(h[5] for h in hits)) or "warning",
                   f"Workers of one job do unequal work: {_members(kind, len(group))} differ by {ev.fmt(imbalance, '%')} "
                   f"in {metric} ({ev.fmt(min(values.values()), '%')} to {ev.fmt(max(values.values()), '%')}); the "
                   f"fastest wait for the slowest at every synchronisation.",
                   items, subjects=[pid for h in hits for pid in h[3]])


def _members(kind: str, n: int) -> str:
    return f"{n} ranks of one job" if kind == "ranks" else f"{n} workers running one command line"


LOAD_IMBALANCE = Pattern(
    id="control.load_imbalance", layer=6, title="Load imbalance between workers",
    why="Data-parallel ranks and tensor-parallel workers synchronise every step; the step takes as long as "
        "the slowest member, so the others idle for the difference.",
    metrics=("process.cpu_util_pct", "gpu.util_pct", "npu.util_pct", E.PARENT_OF, "process.rank",
             "process.world_size", "process.cmdline"),
    thresholds=(Threshold("imbalance_pct", "%", "above", "(max - min) / max of the work done by workers of one job "
                          "(max: the busiest member's work, or min_work_pct if that is more)",
                          critical=60, warning=30),),
    params=(Param("min_work_pct", 20, "%", "the least work the gap between members is measured against: in a group "
                  "whose busiest member does less, the gap counts in proportion, so a near-idle group fades out "
                  "instead of its verdict flipping when one member crosses a bound"),),
    evidence="Each group of workers of one job (the ranks of one world: same world size and rendezvous address, "
             "distinct ranks, leaving out processes that inherited a parent's rank; or processes of one parent and "
             "role running the same command line) over the threshold, with the least and the most busy member. "
             "Processes that share a parent and a name without a known command line are not grouped.",
    recommendations=(
        "Balance the input: bucket sequences by length, equal shard sizes per rank.",
        "Check that the slow member is not placed worse (NUMA, shared CPUs, a throttled device).",
        "For pipeline parallelism, rebalance layers per stage.",
    ),
    check=_load_imbalance)


# -- control.thread_oversubscription ------------------------------------------------------
def _runnable(p: Entity) -> float | None:
    for metric in ("runnable_threads_p95", "runnable_threads_max", M.RUNNABLE_THREADS):
        if num(p, metric) is not None:
            return num(p, metric)
    return None


def _host_cpus(scope: Scope, host: str) -> int | None:
    info = scope.meta.host_info.get(host, {})
    if isinstance(info.get("cpus"), int):
        return info["cpus"]
    cpus = [c for c in scope.graph.entities(T.CPU) if host_of(c.id) == host]
    return len(cpus) or None


def _thread_oversubscription(scope: Scope, t: dict[str, Any]) -> Verdict:
    if (skip := needs_workload(scope)) is not None:
        return skip
    levels = t["runnable_per_cpu"]
    by_host: dict[str, list[Entity]] = defaultdict(list)
    for p in scope.processes:
        by_host[host_of(p.id)].append(p)
    measured, hits = 0, []
    for host, procs in sorted(by_host.items()):
        runnable = [(p, _runnable(p)) for p in procs]
        known = [(p, r) for p, r in runnable if r is not None]
        if not known:
            continue
        cpus: set[int] = set()
        for p in procs:
            cpus |= cpu_set(p.attrs.get("cpus_allowed"))
        n_cpus = len(cpus) or _host_cpus(scope, host)
        if not n_cpus:
            continue
        measured += 1
        total = sum(r for _, r in known)
        ratio = total / n_cpus
        sev = levels.severity(ratio)
        if sev:
            hits.append((host, known, total, n_cpus, ratio, sev))
    if not measured:
        return not_evaluated(scope.missing("no runnable-thread counts of the workload's processes", "process"))
    if not hits:
        return clear(f"runnable threads of the workload per allowed CPU at most {number(levels.limit())}")
    items: list[Evidence] = []
    for host, known, total, n_cpus, ratio, sev in hits:
        items.append(ev.statistic([p.id for p, _ in known], "runnable_per_cpu", ratio, levels=levels, severity=sev,
                                  note=f"{number(total)} runnable threads on {n_cpus} allowed CPUs"))
        for p, r in sorted(known, key=lambda x: (-(x[1] or 0), x[0].id))[:4]:
            items.append(ev.entity(p.id, M.RUNNABLE_THREADS, r, unit="threads", note=ev.name_of(p)))
            if num(p, M.NUM_THREADS) is not None:
                items.append(ev.entity(p.id, M.NUM_THREADS, num(p, M.NUM_THREADS), unit="threads"))
    host, _, total, n_cpus, ratio, _ = hits[0]
    return finding(worst(*(h[5] for h in hits)) or "warning",
                   f"The workload keeps {number(total)} threads runnable on {n_cpus} CPUs ({ratio:.1f} per CPU): threads "
                   f"preempt each other instead of working.", items, subjects=[p.id for h in hits for p, _ in h[1]])


THREAD_OVERSUBSCRIPTION = Pattern(
    id="control.thread_oversubscription", layer=6, title="Thread oversubscription",
    why="Each framework sizes its thread pools to the whole machine by default (OpenMP, MKL, tokenizers, "
        "loader workers x their own pools); with several per host they fight for the same CPUs and spend "
        "their time in context switches and cache refills.",
    metrics=("process.runnable_threads", "process.runnable_threads_p95", "process.num_threads",
             "process.cpus_allowed"),
    thresholds=(Threshold("runnable_per_cpu", "threads/CPU", "above", "runnable threads of the workload per CPU it may "
                          "use", critical=4, warning=2),),
    evidence="The workload's runnable threads against the CPUs it may use, and its processes with the most "
             "runnable threads.",
    recommendations=(
        "Set OMP_NUM_THREADS / MKL_NUM_THREADS per process to (CPUs available / processes).",
        "Set TOKENIZERS_PARALLELISM=false in loader workers, and torch.set_num_threads(1) inside them.",
        "Reduce the number of loader workers to the CPUs left after the trainers.",
    ),
    check=_thread_oversubscription)


PATTERNS = [SCHEDULING_LATENCY, CPU_THROTTLING, LOCK_CONTENTION, LOAD_IMBALANCE, STRAGGLER_HOST, SLOW_RANK,
            THREAD_OVERSUBSCRIPTION]
