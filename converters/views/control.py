"""Layer 6, control plane: do runnable threads wait for a CPU, are they throttled or too many?"""

from __future__ import annotations

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.render import Block, Column, Table, duration_ms, duration_us, num, pct, rate
from witty_profiler.converters.views.common import (
    CPU,
    ID,
    ROLE,
    SHORT_NAME,
    coverage,
    findings_block,
    legend,
    neg,
    rank,
    with_any,
)
from witty_profiler.converters.views.folds import fold_query
from witty_profiler.topology.cpulist import cpu_set
from witty_profiler.topology.vocabulary import E, M, T

LAYER = "control"


def _allowed_count(e) -> int | None:
    n = e.metrics.get(M.CPUS_ALLOWED_COUNT)
    if n is None and e.attrs.get("cpus_allowed") is not None:
        n = len(cpu_set(e.attrs["cpus_allowed"]))
    return n


def _per_cpu(p) -> str:
    threads, cpus = p.metrics.get(M.RUNNABLE_THREADS) or p.metrics.get(M.NUM_THREADS), _allowed_count(p)
    if not threads or not cpus:
        return ""
    return num(threads / cpus)


def blocks(ctx: GraphContext) -> list[Block]:
    cited = ctx.cited(LAYER)
    out: list[Block] = [legend(ctx, "rq_wait% = share of runnable time waiting for a CPU; vcs/ivcs = voluntary/"
                                    "involuntary context switches per second; per_cpu = threads per allowed CPU; "
                                    "futex% = share of the window in futex waits (locks, the GIL), "
                                    "lock% = of which woken by another thread or under 10 ms (not timed-out sleeps), "
                                    "wakeups/s = futex waits another thread ended, per second (eBPF)",
                                    *["ranks (trace): per step means over a trace's ProfilerStep spans; compute/"
                                    "exposed/overlap = accelerator kernels, communication no kernel hides / hidden "
                                    "under compute; free = accelerator idle; load = in the data loader"][:bool(ctx.graph.entities(T.RANK))]),
                        *findings_block(ctx, LAYER, on_rows={M.CPU_UTIL_PCT: (T.PROCESS, T.THREAD)}),
                        coverage(ctx, LAYER)]
    hosts, pinned = rank(ctx.hosts, lambda h: 0, cited, ctx)
    out.append(Table("host", [
        ID, Column("load1", lambda h: num(h.metrics.get(M.LOAD1))),
        Column("runnable", lambda h: num(h.metrics.get(M.RUNNABLE_THREADS))),
        Column("ctxsw", lambda h: rate(h.metrics.get(M.CONTEXT_SWITCHES_PER_S))),
        Column("psi_cpu%", lambda h: pct(h.metrics.get(M.PSI_CPU_SOME_PCT))),
    ], hosts, "hosts", fold_query(ctx, T.HOST, hosts), pinned, weight=0.5))
    proc_metrics = (M.NUM_THREADS, M.RUNNABLE_THREADS, M.RUNQUEUE_WAIT_PCT, M.VOLUNTARY_CTXT_SWITCHES_PER_S,
                    M.NONVOLUNTARY_CTXT_SWITCHES_PER_S)
    procs = with_any(ctx.graph.entities(T.PROCESS), proc_metrics, cited)
    procs, pinned = rank(procs, lambda p: (neg(p.metrics.get(M.RUNQUEUE_WAIT_PCT)),
                                                            neg(p.metrics.get(M.NONVOLUNTARY_CTXT_SWITCHES_PER_S))),
                         cited, ctx)
    out.append(Table("processes, workload first, then by run-queue wait", [
        ID, SHORT_NAME, ROLE, CPU, Column("threads", lambda p: num(p.metrics.get(M.NUM_THREADS)), optional=True),
        Column("runnable", lambda p: num(p.metrics.get(M.RUNNABLE_THREADS))),
        Column("cpus", lambda p: num(_allowed_count(p))), Column("per_cpu", _per_cpu, optional=True),
        Column("rq_wait%", lambda p: pct(p.metrics.get(M.RUNQUEUE_WAIT_PCT))),
        Column("rq/slice", lambda p: duration_us(p.metrics.get(M.RUNQUEUE_WAIT_PER_SLICE_US))),
        Column("vcs", lambda p: rate(p.metrics.get(M.VOLUNTARY_CTXT_SWITCHES_PER_S))),
        Column("ivcs", lambda p: rate(p.metrics.get(M.NONVOLUNTARY_CTXT_SWITCHES_PER_S))),
    ], procs, "processes", fold_query(ctx, T.PROCESS, procs, top=M.RUNQUEUE_WAIT_PCT), pinned, weight=1.5))
    thread_metrics = (M.RUNQUEUE_WAIT_PCT, M.CPU_UTIL_PCT, M.VOLUNTARY_CTXT_SWITCHES_PER_S, M.FUTEX_WAKEUPS_PER_S,
                      M.NONVOLUNTARY_CTXT_SWITCHES_PER_S, M.FUTEX_WAIT_PCT, M.FUTEX_LOCK_WAIT_PCT)
    threads = with_any(ctx.graph.entities(T.THREAD), thread_metrics, cited)
    threads, pinned = rank(threads, lambda t: (neg(t.metrics.get(M.RUNQUEUE_WAIT_PCT)),
                                                              neg(t.metrics.get(M.CPU_UTIL_PCT))), cited, ctx)
    out.append(Table("threads, workload first, then by run-queue wait", [
        ID, SHORT_NAME, CPU,
        Column("rq_wait%", lambda t: pct(t.metrics.get(M.RUNQUEUE_WAIT_PCT))),
        Column("rq/slice", lambda t: duration_us(t.metrics.get(M.RUNQUEUE_WAIT_PER_SLICE_US))),
        Column("vcs", lambda t: rate(t.metrics.get(M.VOLUNTARY_CTXT_SWITCHES_PER_S))),
        Column("ivcs", lambda t: rate(t.metrics.get(M.NONVOLUNTARY_CTXT_SWITCHES_PER_S))),
        Column("futex%", lambda t: pct(t.metrics.get(M.FUTEX_WAIT_PCT))),
        Column("lock%", lambda t: pct(t.metrics.get(M.FUTEX_LOCK_WAIT_PCT))),
        Column("wakeups/s", lambda t: rate(t.metrics.get(M.FUTEX_WAKEUPS_PER_S))),
    ], threads, "threads", fold_query(ctx, T.THREAD, threads, top=M.RUNQUEUE_WAIT_PCT), pinned, weight=1.5))
    groups = [c for c in ctx.graph.entities(T.CGROUP) if c.metrics.get(M.CPU_QUOTA_CORES) is not None
              or c.metrics.get(M.THROTTLED_PERIODS_PCT) or c.id in cited]
    groups, pinned = rank(groups, lambda c: neg(c.metrics.get(M.THROTTLED_PERIODS_PCT)), cited, ctx,
                          workload=lambda c: any(e.source in ctx.workload_ids
                                                 for e in ctx.query.in_edges(c.id, E.IN_CGROUP)))
    out.append(Table("cgroups with a CPU quota or throttling", [
        ID, Column("quota", lambda c: f"{num(c.metrics[M.CPU_QUOTA_CORES])} cores"
                   if c.metrics.get(M.CPU_QUOTA_CORES) is not None else ""),
        Column("throttled%", lambda c: pct(c.metrics.get(M.THROTTLED_PERIODS_PCT))),
        Column("throttled", lambda c: f"{duration_ms(c.metrics.get(M.THROTTLED_MS_PER_S))}/s"
               if c.metrics.get(M.THROTTLED_MS_PER_S) is not None else ""),
        Column("members", lambda c: _members(ctx, c, cited), left=True),
    ], groups, "cgroups", fold_query(ctx, T.CGROUP, groups, top=M.THROTTLED_PERIODS_PCT), pinned))
    out.append(rank_table(ctx, cited))
    return out


def rank_table(ctx: GraphContext, cited: set[str]) -> Table:
    """The ranks of traces (Kineto, msprof), slowest step first: where a step's time goes."""
    ranks = [r for r in ctx.graph.entities(T.RANK) if r.metrics.get(M.STEP_TIME_MS) is not None or r.id in cited]
    ranks, pinned = rank(ranks, lambda r: (neg(r.metrics.get(M.STEP_TIME_MS)), r.attrs.get("rank") or 0), cited,
                         ctx, workload=lambda r: False)
    ms = lambda name: lambda r: duration_ms(r.metrics.get(name))  # noqa: E731
    return Table("ranks (trace), slowest step first", [
        ID, Column("steps", lambda r: num(r.metrics.get(M.STEPS))),
        Column("step", ms(M.STEP_TIME_MS)), Column("step_max", ms(M.STEP_TIME_MS + "_max"), optional=True),
        Column("compute", ms(M.COMPUTE_MS)), Column("exposed", ms(M.COMM_EXPOSED_MS)),
        Column("overlap", ms(M.COMM_OVERLAPPED_MS)), Column("free", ms(M.FREE_MS)),
        Column("load", ms(M.DATA_LOADING_MS)), Column("busy%", lambda r: pct(r.metrics.get(M.KERNEL_BUSY_PCT))),
    ], ranks, "ranks", fold_query(ctx, T.RANK, ranks, top=M.STEP_TIME_MS), pinned)


def _members(ctx: GraphContext, group, cited: set[str]) -> str:
    """The cited and workload processes in a cgroup (at most 3), and how many others: the row then
    shows which process a quota throttles."""
    ids = [e.source for e in ctx.query.in_edges(group.id, E.IN_CGROUP)]
    named = sorted((i for i in ids if i in cited or i in ctx.workload_ids),
                   key=lambda i: (i not in cited, i))[:3]
    rest = len(ids) - len(named)
    return " ".join(named) + (f" +{rest}" if rest else "") if named else (f"{rest} processes" if rest else "")
