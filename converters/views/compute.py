"""Layer 1, compute: is the CPU or the accelerator the limit, and who is using them?"""

from __future__ import annotations

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.render import Block, Column, Table, duration_ns, num, pct
from witty_profiler.converters.views.common import coverage, ALLOWED, CPU, ID, NAME, ROLE, findings_block, legend, neg, rank
from witty_profiler.converters.views.folds import fold_query, per_type_query
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.query import cpu_number

LAYER = "compute"
NUMBER = 1
TITLE = "compute (layer 1)"


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
        ID, Column("cpu%", lambda h: pct(h.metrics.get("cpu_util_pct"))),
        Column("usr%", lambda h: pct(h.metrics.get("cpu_user_pct"))),
        Column("sys%", lambda h: pct(h.metrics.get("cpu_system_pct"))),
        Column("iowait%", lambda h: pct(h.metrics.get("cpu_iowait_pct"))),
        Column("steal%", lambda h: pct(h.metrics.get("cpu_steal_pct"))),
        Column("load1", lambda h: num(h.metrics.get("load1"))),
        Column("cpus", lambda h: num((ctx.graph.meta.host_info.get(host_of(h.id)) or {}).get("cpus"))),
    ], hosts, "hosts", fold_query(ctx, "host", hosts), pinned, weight=0.5))
    cpus, pinned = rank(ctx.graph.entities("cpu"), lambda c: neg(c.metrics.get("cpu_util_pct")), cited, ctx)
    out.append(Table("cpus, busiest first", [
        ID, Column("node", lambda c: num(ctx.query.node_of_cpu(host_of(c.id), cpu_number(c)))),
        Column("util%", lambda c: pct(c.metrics.get("cpu_util_pct"))),
        Column("usr%", lambda c: pct(c.metrics.get("cpu_user_pct"))),
        Column("sys%", lambda c: pct(c.metrics.get("cpu_system_pct"))),
        Column("iowait%", lambda c: pct(c.metrics.get("cpu_iowait_pct"))),
    ], cpus, "cpus", fold_query(ctx, "cpu", cpus, top="cpu_util_pct"), pinned, weight=0.7))
    procs, pinned = rank(ctx.graph.entities("process"), lambda p: neg(p.metrics.get("cpu_util_pct")), cited, ctx)
    out.append(Table("processes, workload first, then by cpu", [
        ID, NAME, ROLE, CPU, Column("usr%", lambda p: pct(p.metrics.get("cpu_user_pct"))),
        Column("sys%", lambda p: pct(p.metrics.get("cpu_system_pct"))),
        Column("threads", lambda p: num(p.metrics.get("num_threads"))), ALLOWED,
        Column("devices", lambda p: ",".join(d.id for d in ctx.devices(p)), left=True),
    ], procs, "processes", fold_query(ctx, "process", procs, top="cpu_util_pct"), pinned, weight=1.5))
    threads, pinned = rank(ctx.graph.entities("thread"), lambda t: (neg(t.metrics.get("cpu_util_pct")),
                                                              neg(_runtime_ns(t))), cited, ctx)
    out.append(Table("threads, workload first, then by cpu", [
        ID, NAME, CPU, Column("runtime", lambda t: duration_ns(_runtime_ns(t))), ALLOWED,
        Column("ran_on_cpus", lambda t: t.attrs.get("ran_on_cpus"), left=True),
    ], threads, "threads", fold_query(ctx, "thread", threads, top="cpu_util_pct"), pinned, weight=1.5))
    devices, pinned = rank(ctx.query.accelerators(), lambda d: neg(d.metrics.get("util_pct")), cited, ctx,
                           workload=lambda d: any(e.source in ctx.workload_ids for e in
                                                  ctx.query.in_edges(d.id, "uses_device")))
    out.append(Table("accelerators, in use by the workload first", [
        ID, Column("idx", lambda d: num(d.attrs.get("index"))), NAME,
        Column("util%", lambda d: pct(d.metrics.get("util_pct"))),
        Column("util_p95%", lambda d: pct(d.metrics.get("util_pct_p95"))),
        Column("clock", lambda d: _clock(d.metrics)),
        Column("temp", lambda d: f"{num(d.metrics['temperature_c'])}C" if d.metrics.get("temperature_c") is not None else ""),
        Column("power", lambda d: _power(d.metrics)),
        Column("throttle", lambda d: _throttle(d.metrics), left=True),
        Column("users", lambda d: ",".join(e.source for e in ctx.query.in_edges(d.id, "uses_device")), left=True),
    ], devices, "accelerators", per_type_query(ctx, devices, "util_pct"), pinned))
    return out


def _clock(m: dict) -> str:
    cur, top = m.get("sm_clock_mhz"), m.get("sm_clock_max_mhz")
    if cur is None:
        return ""
    return f"{num(cur)}/{num(top)}MHz" if top is not None else f"{num(cur)}MHz"


def _power(m: dict) -> str:
    cur, top = m.get("power_w"), m.get("power_limit_w")
    if cur is None:
        return ""
    return f"{num(cur)}/{num(top)}W" if top is not None else f"{num(cur)}W"


def _throttle(m: dict) -> str:
    return ",".join(k for k in ("thermal", "power") if m.get(f"throttle_{k}"))

