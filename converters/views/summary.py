"""The summary: what was measured, on what, for how long, what the workload is, and which
layers look unhealthy. It is the first thing an assistant reads, so it stays under 500 tokens
on any graph: lists are ranked and folded like every other view."""

from __future__ import annotations

from collections import Counter

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.hints import Slot
from witty_profiler.converters.render import Block, Column, Lines, Table, fit, num, pct
from witty_profiler.converters.views import LAYERS
from witty_profiler.converters.views.common import CPU, ID, NAME, ROLE, short
from witty_profiler.converters.views.folds import fold_query
from witty_profiler.topology.wording import counted

CAP = 499  # always under 500 tokens


def _window(ctx: GraphContext) -> str:
    meta = ctx.graph.meta
    if meta.duration_s is None:
        return "no capture window (a snapshot without time base)"
    interval = f", every {num(meta.interval_s)}s" if meta.interval_s else ""
    return f"{meta.started_at or 'unknown start'} for {num(meta.duration_s)}s{interval}"


def _counts(ctx: GraphContext) -> str:
    ents, edges = ctx.counts_by_type
    top = ", ".join(f"{k} {v}" for k, v in sorted(ents.items(), key=lambda kv: (-kv[1], kv[0]))[:6])
    return f"graph: {ctx.graph.entity_count()} entities ({top}), {ctx.graph.edge_count()} edges"


def _devices(ctx: GraphContext) -> str:
    parts = []
    for kind in ("gpu", "npu"):
        devs = ctx.entities(kind)
        if devs:
            nodes = Counter(ctx.device_node(d) for d in devs)
            where = ", ".join(f"node {n}: {c}" for n, c in sorted(nodes.items(), key=lambda kv: str(kv[0]))
                              if n is not None)
            used = sum(1 for d in devs if ctx.in_edges(d.id, "uses_device"))
            parts.append(f"{kind} {len(devs)} ({used} in use{'; ' + where if where else ''})")
    for kind, label in (("numa_node", "numa nodes"), ("cpu", "cpus"), ("nic", "nics"), ("rdma_port", "rdma ports"),
                        ("block_device", "disks")):
        n = len(ctx.entities(kind))
        if n:
            parts.append(f"{label} {n}")
    return "devices: " + ("; ".join(parts) if parts else "none recorded")


def _collectors(ctx: GraphContext) -> Table:
    cols = ctx.graph.meta.collectors
    by = Counter(c.status for c in cols.values())
    counts = ", ".join(f"{s} {by[s]}" for s in ("ok", "partial", "unavailable", "error") if by[s]) or "none recorded"
    rows = sorted(((n, c) for n, c in cols.items() if c.status != "ok"),
                  key=lambda nc: ({"error": 0, "unavailable": 1, "partial": 2}.get(nc[1].status, 3), nc[0]))
    return Table(f"collectors: {counts}; not ok", [
        Column("collector", lambda nc: nc[0], left=True), Column("status", lambda nc: nc[1].status, left=True),
        Column("why", lambda nc: short(nc[1].reason or "", 70), left=True),
    ], rows, "collectors", ctx.hints.collectors(), weight=0.6)


def _layers(ctx: GraphContext) -> list[str]:
    diag, why = ctx.diagnosis
    if diag is None:
        suspects = heuristic_suspects(ctx)
        head = f"layers that look unhealthy (metric heuristic; {why}): "
        return [head + ("; ".join(f"{k} ({v})" for k, v in suspects.items()) if suspects else "none")]
    lines = []
    for layer in LAYERS:
        found = ctx.findings(layer)
        if found:
            worst = min(f.priority for f in found)
            pats = ", ".join(sorted({f.pattern.split(".", 1)[-1] for f in found}))
            lines.append(f"  {layer}: {worst} {counted(len(found), 'findings')}: {pats}")
    head = f"unhealthy layers (diagnosis, {len(diag.findings)} findings):" if lines else \
        "unhealthy layers (diagnosis): none"
    return [head, *lines]


def heuristic_suspects(ctx: GraphContext) -> dict[str, str]:
    """Without the diagnosis: a few plain thresholds, enough to say where to look first."""
    out: dict[str, str] = {}
    hosts = ctx.hosts
    m = hosts[0].metrics if hosts else {}
    if (m.get("cpu_util_pct") or 0) > 90:
        out["compute"] = f"host cpu {pct(m['cpu_util_pct'])}"
    idle = [d for d in ctx.accelerators if ctx.in_edges(d.id, "uses_device") and (d.metrics.get("util_pct") or 100) < 30]
    if idle:
        out["compute"] = f"{counted(len(idle), 'accelerators')} in use under 30% busy"
    if (m.get("psi_memory_some_pct") or 0) > 10 or (m.get("swap_out_pages_per_s") or 0) > 0:
        out["memory"] = "memory pressure or swapping"
    from witty_profiler.converters.views.interconnect import _placement_flag
    bad = [p for p in ctx.workload if "OFF-NODE" in _placement_flag(ctx, p)]
    if bad:
        out["interconnect"] = f"{counted(len(bad), 'device users')} off their device's NUMA node"
    if (m.get("tcp_retrans_pct") or 0) > 1:
        out["network"] = f"tcp retransmits {pct(m['tcp_retrans_pct'])}"
    if (m.get("cpu_iowait_pct") or 0) > 20 or (m.get("psi_io_some_pct") or 0) > 20:
        out["storage"] = "iowait or io stalls"
    throttled = [c for c in ctx.entities("cgroup") if (c.metrics.get("throttled_periods_pct") or 0) > 10]
    if throttled or (m.get("psi_cpu_some_pct") or 0) > 20:
        out["control"] = "cpu throttling or run-queue stalls"
    growing = [e for k in ("pipe", "unix_socket", "tcp") for e in ctx.edges(k)
               if (e.metrics.get("queued_bytes_growth_per_s") or 0) > 0]
    if growing:
        out["dataplane"] = counted(len(growing), "growing IPC queues")
    return out


def blocks(ctx: GraphContext) -> list[Block]:
    meta = ctx.graph.meta
    out: list[Block] = [Lines([
        f"hosts: {', '.join(meta.hosts) or 'unknown'} · source: {meta.source or 'unknown'} · window: {_window(ctx)}",
        _counts(ctx)], essential=True)]
    out.append(Lines(_layers(ctx), essential=True))
    ai = ctx.workload
    roles = Counter(p.attrs.get("role") or "other" for p in ai)
    title = (f"workload: AI processes ({', '.join(f'{r} {n}' for r, n in sorted(roles.items()))}) "
             f"of {len(ctx.entities('process'))} in the graph" if ai else "workload: no AI process recognised")
    out.append(Table(title, [ID, NAME, ROLE, Column("fw", lambda p: p.attrs.get("framework"), left=True), CPU,
                             Column("devices", lambda p: ",".join(d.id for d in ctx.devices_of(p)), left=True)],
                     ai, "processes", fold_query(ctx, "process", ai, where="ai=true"), weight=1.0))
    out.append(Lines([_devices(ctx)], essential=True))
    out.append(_collectors(ctx))
    out.append(Lines([f"next: {ctx.hints.convert(Slot('LAYER'), LAYERS)}"], essential=True))
    return out


def render(ctx: GraphContext, max_tokens: int | None):
    from witty_profiler.converters.view import View
    budget = min(max_tokens or CAP, CAP)
    fitted = fit(ctx.blocks("summary"), lambda n: f"# witty-profiler summary · {n} tokens", budget)
    return View(layer="summary", text=fitted.text, tokens=fitted.tokens, truncated=fitted.truncated,
                omitted=fitted.omitted)



