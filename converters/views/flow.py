"""`flow`: the data and control flow of the workload, compactly: which process feeds which (pipes,
unix and TCP sockets, shared memory, message queues), the shared memory, RDMA ports and devices the
stages use, each edge with its rate and backlog where measured, and the stage that limits the flow
(judged by `diagnosis.flow` through the diagnosis handed to the view: the one the others wait on, else the busiest, named only from measured values).

`mermaid(ctx)` draws the same flows as a Mermaid flowchart to paste into a report.
"""

from __future__ import annotations

import re

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.render import Block, Column, Lines, Table, fit, pct, size
from witty_profiler.converters.views.folds import edge_query, fold_query
from witty_profiler.topology.flow import Flow, Link, flows, queued
from witty_profiler.topology.query import runnable_pct
from witty_profiler.topology import Edge, Entity
from witty_profiler.topology.vocabulary import E, M, T
from witty_profiler.topology.wording import counted

VIEW = "flow"
TITLE = "data and control flow"
FLOW_LINES = 4  # flows described line by line; the rest are rows of the tables and one count
CHAIN_STAGES = 12  # a longer flow names its first stages and counts the rest
NAME_MAX = 24


def label(entity: Entity | None, eid: str = "") -> str:
    """'name(pid)' for a process, the id for anything else."""
    if entity is None:
        return eid
    if entity.type == T.PROCESS:
        name = str(entity.attrs.get("name") or "?").replace("\n", " ")[:NAME_MAX]
        pid = entity.attrs.get("pid")
        return f"{name}({pid if pid is not None else entity.id})"
    return entity.id


def edge_measures(edge: Edge) -> str:
    """What was measured along an edge: its rate, the bytes queued at the end of the window and
    their growth; a device's utilisation is on the device."""
    m = edge.metrics
    parts = []
    if m.get(M.BYTES_PER_S) is not None:
        parts.append(size(m[M.BYTES_PER_S], per_s=True))
    elif m.get(M.BYTES_TOTAL) is not None:
        parts.append(f"{size(m[M.BYTES_TOTAL])} total")
    q = queued(edge)
    if q is not None:
        growth = m.get(M.QUEUED_BYTES_GROWTH_PER_S)
        grow = f" {'+' if growth >= 0 else ''}{size(growth, per_s=True)}" if isinstance(growth, (int, float)) \
            and growth else ""
        parts.append(f"q {size(q)}{grow}")
    if edge.type == E.USES_RDMA and m.get("qps") is not None:
        parts.append(f"{m['qps']:g} qps")
    return " ".join(parts)


def _arrow(link: Link) -> str:
    return "->" if link.ordered else "<->"


def _chain(ctx: GraphContext, flow: Flow) -> str:
    """The stages in feeding order, with the edge between consecutive stages where there is one."""
    between = {(link.edge.source, link.edge.target): link for link in flow.links}
    parts = []
    shown = flow.stages[:CHAIN_STAGES]
    for i, stage in enumerate(shown):
        if i:
            prev = shown[i - 1].id
            link = between.get((prev, stage.id)) or between.get((stage.id, prev))
            if link is None:
                parts.append(", ")
            else:
                measured = edge_measures(link.edge)
                parts.append(f" -{link.kind}{' ' + measured if measured else ''}{_arrow(link)} ")
        parts.append(label(stage))
    if len(flow.stages) > CHAIN_STAGES:
        parts.append(f" … +{len(flow.stages) - CHAIN_STAGES} more stages")
    return "".join(parts)


def _flow_lines(ctx: GraphContext, flow: Flow) -> list[str]:
    where = ", workload" if flow.in_workload else ""
    kinds = sorted({link.kind for link in flow.links})
    head = (f"flow {flow.number} ({counted(len(flow.stages), 'stages')}, {counted(len(flow.links), 'edges')}"
            f"{' ' + '/'.join(kinds) if kinds else ''}{where}): {_chain(ctx, flow)}")
    lines = [head]
    if flow.uses:
        used = sorted({f"{label(ctx.graph.entity(u.edge.source))}->{u.edge.target}" for u in flow.uses})
        more = f" … +{len(used) - 6}" if len(used) > 6 else ""
        lines.append(f"  uses: {', '.join(used[:6])}{more}")
    limit = flow.limit
    if limit is not None:
        if limit.stage is not None:
            lines.append(f"  limiting stage: {label(limit.stage)} [{limit.basis}]: {limit.why}")
            if limit.busiest is not None:
                lines.append(f"  busiest stage: {label(limit.busiest)} {pct(runnable_pct(limit.busiest))} running or "
                             "runnable (waits on nothing downstream that holds a backlog)")
        else:
            lines.append(f"  limiting stage: not identified ({limit.why})")
    return lines


def _findings(ctx: GraphContext, ids: set[str]) -> list[str]:
    """The data-plane findings of the diagnosis that cite a stage of the flows shown."""
    diag, why = ctx.diagnosis
    if diag is None:
        return [f"diagnosis: {why}"]
    found = [f for f in ctx.findings("dataplane")
             if ids & ({i for ev in f.evidence for i in (ev.ids or [])} | set(getattr(f, "subjects", None) or []))]
    if not found:
        return ["diagnosis (data plane): no finding cites these stages"]
    return [f"diagnosis: [{f.priority}] {f.pattern}: {f.description}" for f in found[:4]] + (
        [f"… +{len(found) - 4} more: {ctx.hints.diagnose('dataplane')}"] if len(found) > 4 else [])


def _flows(ctx: GraphContext) -> list[Flow]:
    """The flows, each with its limiting stage as the diagnosis handed to the view judges it (none without)."""
    judge = getattr(ctx.diagnosis[0], "flow_limit", None)
    return flows(ctx.query, ctx.workload, judge=judge)


def blocks(ctx: GraphContext) -> list[Block]:
    found = _flows(ctx)
    scope = ctx.scope
    who = scope.describe() if scope.mode != "host" else \
        "no workload named or recognised: every process with IPC or a device (narrow with --pid)"
    out: list[Block] = [
        Lines([f"legend: stage = process name(pid), in feeding order; A -pipe-> B: A writes, B reads; -tcp->: "
               "client -> server; <->: both ways (unix, shm, msg_queue); rates over the window, q = bytes queued at "
               "the end (+growth/s); cpu%/run% = % of one core running / running or waiting for a CPU; '-' = not "
               f"measured; ids work as `{ctx.hints.around()}`"]),
        Lines([f"scope: {who}; {counted(len(found), 'flows')}, "
               f"{counted(sum(len(f.stages) for f in found), 'stages')}"], essential=True)]
    if not found:
        out.append(Lines(["no IPC or device edges in scope: nothing feeds anything in this graph "
                          f"(IPC collector status: {ctx.hints.collectors()})"], essential=True))
        return out
    for flow in found[:FLOW_LINES]:
        out.append(Lines(_flow_lines(ctx, flow), essential=flow.number == 1))
    if len(found) > FLOW_LINES:
        rest = found[FLOW_LINES:]
        out.append(Lines([f"… +{counted(len(rest), 'more flows')} ({counted(sum(len(f.stages) for f in rest), 'stages')})"
                          " in the tables below"], essential=True))
    shown_ids = {s.id for f in found for s in f.stages}
    out.append(Lines(_findings(ctx, shown_ids), essential=True))
    limits = {f.limit.stage.id for f in found if f.limit is not None and f.limit.stage is not None}
    rows = [(f, i, s) for f in found for i, s in enumerate(f.stages, 1)]
    devices = {u.edge.source: [] for f in found for u in f.uses}
    for f in found:
        for u in f.uses:
            dev = ctx.graph.entity(u.edge.target)
            if dev is not None and dev.metrics.get(M.UTIL_PCT) is not None:
                devices[u.edge.source].append(f"{dev.id} {pct(dev.metrics[M.UTIL_PCT])}")
    out.append(Table("stages, by flow in feeding order", [
        Column("flow", lambda r: r[0].number), Column("#", lambda r: r[1]),
        Column("id", lambda r: r[2].id, left=True),
        Column("name", lambda r: str(r[2].attrs.get("name") or "").replace("\n", " ")[:NAME_MAX], left=True),
        Column("cpu%", lambda r: pct(r[2].metrics.get(M.CPU_UTIL_PCT))),
        Column("run%", lambda r: pct(runnable_pct(r[2]))),
        Column("limit", lambda r: "limit" if r[2].id in limits else "", left=True),
        Column("devices", lambda r: ", ".join(devices.get(r[2].id, [])), left=True, optional=True),
    ], rows, "stages", fold_query(ctx, T.PROCESS, [r[2] for r in rows]), weight=1.0,
        covers=lambda r: (r[2].id,), label=lambda r: r[2].id))
    links = [(f, link) for f in found for link in [*f.links, *f.uses]]
    links.sort(key=lambda fl: (fl[0].number, fl[0].order(fl[1].edge.source), fl[0].order(fl[1].edge.target),
                               fl[1].edge.id))
    names = {s.id: label(s) for f in found for s in f.stages}
    out.append(Table("edges, by flow and stage", [
        Column("flow", lambda fl: fl[0].number),
        Column("from", lambda fl: names.get(fl[1].edge.source, fl[1].edge.source), left=True),
        Column("via", lambda fl: fl[1].kind + ("" if fl[1].ordered else " <->"), left=True),
        Column("to", lambda fl: names.get(fl[1].edge.target, fl[1].edge.target), left=True),
        Column("ch", lambda fl: fl[1].edge.metrics.get(M.CHANNELS)),
        Column("measured", lambda fl: edge_measures(fl[1].edge), left=True),
    ], links, "edges", edge_query(ctx, [fl[1].edge for fl in links]), weight=1.5,
        covers=lambda fl: (fl[1].edge.id, fl[1].edge.source, fl[1].edge.target),
        label=lambda fl: f"{fl[1].edge.source}->{fl[1].edge.target}"))
    return out


def render(ctx: GraphContext, max_tokens: int | None):
    from witty_profiler.converters.view import View
    if VIEW not in ctx.blocks:
        ctx.blocks[VIEW] = blocks(ctx)
    limit = f" of {max_tokens}" if max_tokens is not None else ""
    fitted = fit(ctx.blocks[VIEW], lambda n: f"## {TITLE} · {n} tokens{limit}", max_tokens)
    return View(layer=VIEW, text=fitted.text, tokens=fitted.tokens, truncated=fitted.truncated,
                omitted=fitted.omitted)


# -- Mermaid ----------------------------------------------------------------------------------
MERMAID_FLOWS = 6  # flows drawn; the rest are counted in a comment
MERMAID_NODES = 60
_SAFE = re.compile(r"[A-Za-z0-9 _.,:;=+\-/%()@'*~!?^$]")


def mermaid_text(text: str, limit: int = 60) -> str:
    """A label that cannot end or break its Mermaid string: every character outside a small safe
    set becomes an entity code (#34; for a double quote), control characters become spaces."""
    text = re.sub(r"[\x00-\x1f\x7f\u2028\u2029]+", " ", str(text)).strip()
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return "".join(c if _SAFE.fullmatch(c) else f"#{ord(c)};" for c in text)


def mermaid(ctx: GraphContext) -> str:
    """The flows as a Mermaid flowchart (left to right): a subgraph per flow, a node per stage and
    per resource it uses, an edge per IPC link labelled with its kind and what was measured on it;
    the limiting stage is drawn thick and red. Node ids are n1, n2, ... (a process name never
    becomes an id); every label is escaped by `mermaid_text`."""
    found = _flows(ctx)
    lines = ["flowchart LR"]
    ids: dict[str, str] = {}

    def node(eid: str) -> str:
        if eid not in ids:
            ids[eid] = f"n{len(ids) + 1}"
        return ids[eid]

    limits: list[str] = []
    drawn = 0
    for flow in found[:MERMAID_FLOWS]:
        if drawn + len(flow.stages) > MERMAID_NODES and drawn:
            break
        drawn += len(flow.stages) + len(flow.resources)
        lines.append(f'  subgraph f{flow.number}["{mermaid_text(f"flow {flow.number}")}"]')
        for stage in flow.stages:
            cpu = runnable_pct(stage)
            text = label(stage) + (f" run {pct(cpu)}" if cpu is not None else "")
            lines.append(f'    {node(stage.id)}["{mermaid_text(text)}"]')
        for res in flow.resources:
            util = res.metrics.get(M.UTIL_PCT)
            text = res.id + (f" util {pct(util)}" if util is not None else "")
            lines.append(f'    {node(res.id)}{{{{"{mermaid_text(text)}"}}}}')
        lines.append("  end")
        for link in [*flow.links, *flow.uses]:
            measured = edge_measures(link.edge)
            text = mermaid_text(f"{link.kind} {measured}".strip())
            arrow = "-->" if link.ordered else "<-->"
            lines.append(f'  {node(link.edge.source)} {arrow}|"{text}"| {node(link.edge.target)}')
        if flow.limit is not None and flow.limit.stage is not None:
            limits.append(node(flow.limit.stage.id))
    if limits:
        lines.append("  classDef limit stroke:#c00,stroke-width:3px")
        lines.append(f"  class {','.join(limits)} limit")
    left = len(found) - sum(1 for line in lines if line.startswith("  subgraph "))
    if left > 0:
        lines.append(f"  %% {counted(left, 'more flows')} not drawn: see the flow view")
    if not found:
        lines.append(f'  n0["{mermaid_text("no IPC or device edges in scope")}"]')
    return "\n".join(lines) + "\n"
