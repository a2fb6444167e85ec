"""Layer 1, compute: is the CPU or the accelerator the limit, and who is using them?"""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.render import Block, Column, Table, duration_ns, num, pct, unordered
from witty_profiler.converters.views.common import (
    ALLOWED,
    CPU,
    ID,
    NAME,
    ROLE,
    coverage,
    findings_block,
    legend,
    neg,
    rank,
)
from witty_profiler.converters.views.folds import fold_query, per_type_query
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.query import cpu_number
from witty_profiler.topology.vocabulary import E, M, T

LAYER = "compute"
_ATTRS = attrgetter("attrs")


def _runtime_ns(e) -> float | None:
    per_node = e.attrs.get("numa_runtime_ns")
    if isinstance(per_node, dict) and per_node:
        return float(sum(v for v in per_node.values() if isinstance(v, (int, float))))
    return None


def blocks(ctx: GraphContext) -> list[Block]:
    cited = ctx.cited(LAYER)
    out: list[Block] = [legend(ctx, "usr/sys/iowait/steal: % of the window; load1 in runnable tasks; "
                                    "runtime = on-CPU time seen by the legacy format"), *findings_block(ctx, LAYER),
                        coverage(ctx, LAYER)]
    hosts, pinned = rank(ctx.hosts, lambda h: 0, cited, ctx)
    out.append(Table("host", [
        ID, Column("cpu%", lambda h: pct(h.metrics.get(M.CPU_UTIL_PCT))),
        Column("usr%", lambda h: pct(h.metrics.get(M.CPU_USER_PCT))),
        Column("sys%", lambda h: pct(h.metrics.get(M.CPU_SYSTEM_PCT))),
        Column("iowait%", lambda h: pct(h.metrics.get(M.CPU_IOWAIT_PCT))),
        Column("steal%", lambda h: pct(h.metrics.get(M.CPU_STEAL_PCT))),
        Column("load1", lambda h: num(h.metrics.get(M.LOAD1))),
        Column("cpus", lambda h: num((ctx.graph.meta.host_info.get(host_of(h.id)) or {}).get("cpus"))),
    ], hosts, "hosts", fold_query(ctx, T.HOST, hosts), pinned, weight=0.5))
    cpus, pinned = rank(ctx.graph.entities(T.CPU), lambda c: neg(c.metrics.get(M.CPU_UTIL_PCT)), cited, ctx)
    out.append(Table("cpus, busiest first", [
        ID, Column("node", lambda c: num(ctx.query.node_of_cpu(host_of(c.id), cpu_number(c)))),
        Column("util%", lambda c: pct(c.metrics.get(M.CPU_UTIL_PCT))),
        Column("usr%", lambda c: pct(c.metrics.get(M.CPU_USER_PCT))),
        Column("sys%", lambda c: pct(c.metrics.get(M.CPU_SYSTEM_PCT))),
        Column("iowait%", lambda c: pct(c.metrics.get(M.CPU_IOWAIT_PCT))),
    ], cpus, "cpus", fold_query(ctx, T.CPU, cpus, top=M.CPU_UTIL_PCT), pinned, weight=0.7))
    procs, pinned = rank(ctx.graph.entities(T.PROCESS), lambda p: neg(p.metrics.get(M.CPU_UTIL_PCT)), cited, ctx)
    out.append(Table("processes, workload first, then by cpu", [
        ID, NAME, ROLE, CPU, Column("usr%", lambda p: pct(p.metrics.get(M.CPU_USER_PCT))),
        Column("sys%", lambda p: pct(p.metrics.get(M.CPU_SYSTEM_PCT))),
        Column("threads", lambda p: num(p.metrics.get(M.NUM_THREADS))), ALLOWED,
        Column("devices", lambda p: ",".join(d.id for d in ctx.devices(p)), left=True),
    ], procs, "processes", fold_query(ctx, T.PROCESS, procs, top=M.CPU_UTIL_PCT), pinned, weight=1.5))
    threads, pinned = rank(ctx.graph.entities(T.THREAD), lambda t: (neg(t.metrics.get(M.CPU_UTIL_PCT)),
                                                              neg(_runtime_ns(t))), cited, ctx)
    columns = [ID, NAME, CPU, Column("runtime", lambda t: duration_ns(_runtime_ns(t))), ALLOWED,
               Column("ran_on_cpus", lambda t: t.attrs.get("ran_on_cpus"), left=True)]
    # collect --stacks: the code each thread runs (asked of every thread unranked: iterating the ranking would sort them all)
    if any(map(dict.get, map(_ATTRS, unordered(threads)), repeat("hot_function"))):
        columns.append(Column("hot function (% of samples)", _hot_function, left=True))
    out.append(Table("threads, workload first, then by cpu", columns, threads, "threads", fold_query(ctx, T.THREAD, threads, top=M.CPU_UTIL_PCT), pinned, weight=1.5))
    devices, pinned = rank(ctx.query.accelerators(), lambda d: neg(d.metrics.get(M.UTIL_PCT)), cited, ctx,
                           workload=lambda d: any(e.source in ctx.workload_ids for e in
                                                  ctx.query.in_edges(d.id, E.USES_DEVICE)))
    out.append(Table("accelerators, in use by the workload first", [
        ID, Column("idx", lambda d: num(d.attrs.get("index"))), NAME,
        Column("util%", lambda d: pct(d.metrics.get(M.UTIL_PCT))),
        Column("util_p95%", lambda d: pct(d.metrics.get("util_pct_p95"))),
        Column("sm_active%", lambda d: pct(d.metrics.get(M.SM_ACTIVE_PCT))),
        Column("tensor%", lambda d: pct(d.metrics.get(M.TENSOR_ACTIVE_PCT))),
        Column("clock", lambda d: _clock(d.metrics)),
        Column("temp", lambda d: f"{num(d.metrics[M.TEMPERATURE_C])}C"
               if d.metrics.get(M.TEMPERATURE_C) is not None else ""),
        Column("power", lambda d: _power(d.metrics)),
        Column("throttle", lambda d: _throttle(d.metrics), left=True),
        Column("users", lambda d: ",".join(e.source for e in ctx.query.in_edges(d.id, E.USES_DEVICE)), left=True),
    ], devices, "accelerators", per_type_query(ctx, devices, M.UTIL_PCT), pinned))
    return out


def _hot_function(t) -> str:
    where, share = t.attrs.get("hot_function"), t.metrics.get(M.HOT_FUNCTION_PCT)
    if not where:
        return ""
    return f"{where} ({pct(share)})" if share is not None else str(where)


def _clock(m: dict) -> str:
    cur, top = m.get(M.SM_CLOCK_MHZ), m.get(M.SM_CLOCK_MAX_MHZ)
    if cur is None:
        return ""
    return f"{num(cur)}/{num(top)}MHz" if top is not None else f"{num(cur)}MHz"


def _power(m: dict) -> str:
    cur, top = m.get(M.POWER_W), m.get(M.POWER_LIMIT_W)
    if cur is None:
        return ""
    return f"{num(cur)}/{num(top)}W" if top is not None else f"{num(cur)}W"


def _throttle(m: dict) -> str:
    return ",".join(k for k in ("thermal", "power") if m.get(f"throttle_{k}"))

