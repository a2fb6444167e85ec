"""Layer 6, control plane: do runnable threads wait for a CPU, are they throttled or too many?"""

from __future__ import annotations

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.render import Block, Column, Table, duration_ms, duration_us, num, pct, rate
from witty_profiler.converters.views.common import coverage, has_any, CPU, ID, SHORT_NAME, ROLE, findings_block, legend, neg, rank
from witty_profiler.converters.views.folds import fold_query
from witty_profiler.topology.cpulist import cpu_set

LAYER = "control"
NUMBER = 6
TITLE = "control plane (layer 6)"


def _allowed_count(e) -> int | None:
    n = e.metrics.get("cpus_allowed_count")
    if n is None and e.attrs.get("cpus_allowed") is not None:
        n = len(cpu_set(e.attrs["cpus_allowed"]))
    return n


def _per_cpu(p) -> str:
    threads, cpus = p.metrics.get("runnable_threads") or p.metrics.get("num_threads"), _allowed_count(p)
    if not threads or not cpus:
        return ""
    return num(threads / cpus)


def blocks(ctx: GraphContext) -> list[Block]:
    cited = ctx.cited(LAYER)
    out: list[Block] = [legend(ctx, "rq_wait% = share of runnable time waiting for a CPU; vcs/ivcs = voluntary/"
                                    "involuntary context switches per second; per_cpu = threads per allowed CPU; "
                                    "futex% = share of the window in futex waits (locks, the GIL), "
                                    "lock% = of which woken by another thread or under 10 ms (not timed-out sleeps), "
                                    "wakeups/s = futex waits another thread ended, per second (eBPF)"),
                        *findings_block(ctx, LAYER, on_rows={"cpu_util_pct": ("process", "thread")}),
                        coverage(ctx, LAYER)]
    hosts, pinned = rank(ctx.hosts, lambda h: 0, cited, ctx)
    out.append(Table("host", [
        ID, Column("load1", lambda h: num(h.metrics.get("load1"))),
        Column("runnable", lambda h: num(h.metrics.get("runnable_threads"))),
        Column("ctxsw", lambda h: rate(h.metrics.get("context_switches_per_s"))),
        Column("psi_cpu%", lambda h: pct(h.metrics.get("psi_cpu_some_pct"))),
    ], hosts, "hosts", fold_query(ctx, "host", hosts), pinned, weight=0.5))
    proc_metrics = ("num_threads", "runnable_threads", "runqueue_wait_pct", "voluntary_ctxt_switches_per_s",
                    "nonvoluntary_ctxt_switches_per_s")
    procs = [p for p in ctx.graph.entities("process") if has_any(p, proc_metrics) or p.id in cited]
    procs, pinned = rank(procs, lambda p: (neg(p.metrics.get("runqueue_wait_pct")),
                                                            neg(p.metrics.get("nonvoluntary_ctxt_switches_per_s"))),
                         cited, ctx)
    out.append(Table("processes, workload first, then by run-queue wait", [
        ID, SHORT_NAME, ROLE, CPU, Column("threads", lambda p: num(p.metrics.get("num_threads")), optional=True),
        Column("runnable", lambda p: num(p.metrics.get("runnable_threads"))),
        Column("cpus", lambda p: num(_allowed_count(p))), Column("per_cpu", _per_cpu, optional=True),
        Column("rq_wait%", lambda p: pct(p.metrics.get("runqueue_wait_pct"))),
        Column("rq/slice", lambda p: duration_us(p.metrics.get("runqueue_wait_per_slice_us"))),
        Column("vcs", lambda p: rate(p.metrics.get("voluntary_ctxt_switches_per_s"))),
        Column("ivcs", lambda p: rate(p.metrics.get("nonvoluntary_ctxt_switches_per_s"))),
    ], procs, "processes", fold_query(ctx, "process", procs, top="runqueue_wait_pct"), pinned, weight=1.5))
    thread_metrics = ("runqueue_wait_pct", "cpu_util_pct", "voluntary_ctxt_switches_per_s", "futex_wakeups_per_s",
                      "nonvoluntary_ctxt_switches_per_s", "futex_wait_pct", "futex_lock_wait_pct")
    threads = [t for t in ctx.graph.entities("thread") if has_any(t, thread_metrics) or t.id in cited]
    threads, pinned = rank(threads, lambda t: (neg(t.metrics.get("runqueue_wait_pct")),
                                                              neg(t.metrics.get("cpu_util_pct"))), cited, ctx)
    out.append(Table("threads, workload first, then by run-queue wait", [
        ID, SHORT_NAME, CPU,
        Column("rq_wait%", lambda t: pct(t.metrics.get("runqueue_wait_pct"))),
        Column("rq/slice", lambda t: duration_us(t.metrics.get("runqueue_wait_per_slice_us"))),
        Column("vcs", lambda t: rate(t.metrics.get("voluntary_ctxt_switches_per_s"))),
        Column("ivcs", lambda t: rate(t.metrics.get("nonvoluntary_ctxt_switches_per_s"))),
        Column("futex%", lambda t: pct(t.metrics.get("futex_wait_pct"))),
        Column("lock%", lambda t: pct(t.metrics.get("futex_lock_wait_pct"))),
        Column("wakeups/s", lambda t: rate(t.metrics.get("futex_wakeups_per_s"))),
    ], threads, "threads", fold_query(ctx, "thread", threads, top="runqueue_wait_pct"), pinned, weight=1.5))
    groups = [c for c in ctx.graph.entities("cgroup") if c.metrics.get("cpu_quota_cores") is not None
              or c.metrics.get("throttled_periods_pct") or c.id in cited]
    groups, pinned = rank(groups, lambda c: neg(c.metrics.get("throttled_periods_pct")), cited, ctx,
                          workload=lambda c: any(e.source in ctx.workload_ids for e in ctx.query.in_edges(c.id, "in_cgroup")))
    out.append(Table("cgroups with a CPU quota or throttling", [
        ID, Column("quota", lambda c: f"{num(c.metrics['cpu_quota_cores'])} cores"
                   if c.metrics.get("cpu_quota_cores") is not None else ""),
        Column("throttled%", lambda c: pct(c.metrics.get("throttled_periods_pct"))),
        Column("throttled", lambda c: f"{duration_ms(c.metrics.get('throttled_ms_per_s'))}/s"
               if c.metrics.get("throttled_ms_per_s") is not None else ""),
        Column("members", lambda c: _members(ctx, c, cited), left=True),
    ], groups, "cgroups", fold_query(ctx, "cgroup", groups, top="throttled_periods_pct"), pinned))
    return out


def _members(ctx: GraphContext, group, cited: set[str]) -> str:
    """The cited and workload processes in a cgroup (at most 3), and how many others: the row then
    shows which process a quota throttles."""
    ids = [e.source for e in ctx.query.in_edges(group.id, "in_cgroup")]
    named = sorted((i for i in ids if i in cited or i in ctx.workload_ids),
                   key=lambda i: (i not in cited, i))[:3]
    rest = len(ids) - len(named)
    return " ".join(named) + (f" +{rest}" if rest else "") if named else (f"{rest} processes" if rest else "")
