"""The summary: what was measured, on what, for how long, what the workload is, and which
layers look unhealthy. It is the first thing an assistant reads, so it stays under 500 tokens
on any graph: lists are ranked and folded like every other view."""

from __future__ import annotations

from collections import Counter

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.hints import Slot
from witty_profiler.converters.render import Block, Column, Lines, Table, fit, num
from witty_profiler.converters.views import LAYERS, view_blocks
from witty_profiler.converters.views.common import CPU, ID, NAME, ROLE, short
from witty_profiler.converters.views.folds import fold_query
from witty_profiler.topology.wording import counted

CAP = 499  # always under 500 tokens
WORKLOAD_ROWS = "processes"  # what a row of the workload table is


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
        devs = ctx.graph.entities(kind)
        if devs:
            nodes = Counter(ctx.query.device_node(d)[0] for d in devs)
            where = ", ".join(f"node {n}: {c}" for n, c in sorted(nodes.items(), key=lambda kv: str(kv[0]))
                              if n is not None)
            used = sum(1 for d in devs if ctx.query.in_edges(d.id, "uses_device"))
            parts.append(f"{kind} {len(devs)} ({used} in use{'; ' + where if where else ''})")
    for kind, label in (("numa_node", "numa nodes"), ("cpu", "cpus"), ("nic", "nics"), ("rdma_port", "rdma ports"),
                        ("block_device", "disks")):
        n = len(ctx.graph.entities(kind))
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
        return [f"unhealthy layers: not judged ({why})"]
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


def blocks(ctx: GraphContext) -> list[Block]:
    meta = ctx.graph.meta
    out: list[Block] = [Lines([
        f"hosts: {', '.join(meta.hosts) or 'unknown'} · source: {meta.source or 'unknown'} · window: {_window(ctx)}",
        _counts(ctx)], essential=True)]
    out.append(Lines(_layers(ctx), essential=True))
    ai = ctx.workload
    roles = ", ".join(f"{r} {n}" for r, n in sorted(Counter(p.attrs.get("role") or "other" for p in ai).items()))
    of_all = f"of {len(ctx.graph.entities('process'))} in the graph"
    if ctx.scope.mode == "pids":
        title = f"workload: {ctx.scope.describe()}: {roles} {of_all}"
    else:
        title = f"workload: AI processes ({roles}) {of_all}" if ai else "workload: no AI process recognised"
    out.append(Table(title, [ID, NAME, ROLE, Column("fw", lambda p: p.attrs.get("framework"), left=True), CPU,
                             Column("devices", lambda p: ",".join(d.id for d in ctx.devices(p)), left=True)],
                     ai, WORKLOAD_ROWS, fold_query(ctx, "process", ai, where="ai=true"), weight=1.0))
    out.append(Lines([_devices(ctx)], essential=True))
    out.append(_collectors(ctx))
    out.append(Lines([f"next: {ctx.hints.convert(Slot('LAYER'), LAYERS)}"], essential=True))
    return out


def render(ctx: GraphContext, max_tokens: int | None, in_all: bool = False):
    """The summary; `in_all`: as the head of `all`, without the workload table (the compute view that
    follows lists the same processes, with their roles and devices)."""
    from witty_profiler.converters.view import View
    budget = min(max_tokens or CAP, CAP)
    blocks = view_blocks(ctx, "summary")
    if in_all:
        blocks = [b for b in blocks if not (isinstance(b, Table) and b.noun == WORKLOAD_ROWS)]
    fitted = fit(blocks, lambda n: f"# witty-profiler summary · {n} tokens", budget)
    return View(layer="summary", text=fitted.text, tokens=fitted.tokens, truncated=fitted.truncated,
                omitted=fitted.omitted)



