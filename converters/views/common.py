"""Pieces several layer views use: the findings block, ranking with pinned citations, common columns."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import compress, repeat
from operator import attrgetter, is_, is_not, not_, or_
from typing import Any

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.evidence import evidence_lines
from witty_profiler.converters.layers import LAYER_NUMBERS
from witty_profiler.converters.render import Column, Lines, Ranked, num, pct
from witty_profiler.topology import Entity
from witty_profiler.topology.cpulist import cpu_set, format_cpulist
from witty_profiler.topology.vocabulary import M

LEGEND_START = "legend: ids work as "
NOT_EVALUATED = "not evaluated: "


def legend_line(ctx: GraphContext) -> str:
    return (f"{LEGEND_START}`{ctx.hints.around()}`; process/thread cpu% is % of one core; "
            "sizes in KiB/MiB/GiB (1024); '-' = not measured")


# the collectors whose absence leaves a hole in a layer's view (live and legacy names)
LAYER_COLLECTORS = {
    "compute": ("cpu", "host", "process", "gpu", "npu", "pmu"),
    "memory": ("memory", "host", "numa", "process", "pressure", "gpu", "npu", "cgroup"),
    "interconnect": ("numa", "pci", "gpu", "npu", "process"),
    "network": ("network", "sockets", "rdma", "kineto"),
    "storage": ("storage", "pressure"),
    "control": ("process", "cgroup", "pressure", "ebpf", "kineto"),
    "dataplane": ("ipc", "process", "sockets"),
}


def legend(ctx: GraphContext, *extra: str) -> Lines:
    return Lines([legend_line(ctx), *extra])


def coverage(ctx: GraphContext, layer: str) -> Lines:
    """The collectors of this layer that did not fully run, and why: a blank table is then explained."""
    lines = []
    for name, status in sorted(ctx.graph.meta.collectors.items()):
        base = name.split(":")[-1].split("@")[0]  # host-qualified names after a merge
        if status.status != "ok" and base in LAYER_COLLECTORS[layer]:
            lines.append(f"not measured: {name} {status.status}{' - ' + short(status.reason) if status.reason else ''}")
    return Lines(lines)


def short(text: str, limit: int = 80) -> str:
    """The first clause of a long reason: the whole of it is in the graph's collector statuses."""
    text = text.split(":")[0] if len(text) > limit else text
    return text if len(text) <= limit else text[: limit - 1].rsplit(" ", 1)[0] + "…"


def compact_list(values: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8'; nothing -> '-' (a table cell is never empty)."""
    return format_cpulist(values) or "-"


def has_any(e: Any, names: Iterable[str]) -> bool:
    """Whether `e` has a value for any of the metrics `names` (asked of 100,000 threads: no Python frame
    per name)."""
    return not all(map(is_, map(e.metrics.get, names), repeat(None)))


_ID = attrgetter("id")
_METRICS = attrgetter("metrics")


def with_any(items: Iterable[Any], names: Iterable[str], cited: set[str]) -> list[Any]:
    """The items that have a value for any of the metrics `names`, or are cited: has_any asked of 100,000
    threads a metric at a time, at C speed, until every item has one (most have the first)."""
    items, names = list(items), tuple(names)
    try:
        keep = [False] * len(items)
        for i, name in enumerate(names):
            has = map(is_not, map(dict.get, map(_METRICS, items), repeat(name)), repeat(None))
            keep = list(map(or_, keep, has)) if i else list(has)  # the first alone: most items have it
            if all(keep):
                return items
    except TypeError:  # metrics that are another kind of mapping
        keep = [has_any(x, names) for x in items]
    return list(compress(items, map(or_, keep, map(cited.__contains__, map(_ID, items)))))


def rank(items: Iterable[Any], key: Callable[[Any], Any], cited: set[str], ctx: GraphContext,
         ident: Callable[[Any], str] = _ID,
         workload: Callable[[Any], bool] | None = None) -> tuple[Ranked, int]:
    """Cited items first (pinned), then workload items, then by `key` (ascending: negate for 'top').
    The items are split with C-level passes (map, compress), and the rest is ranked in two groups,
    the workload's and the others, so that a budget that reads a few hundred rows ranks a few hundred
    workload threads, not the 100,000 threads of the host."""
    members = ctx.workload_members
    in_workload = workload or (lambda x: ident(x) in members)
    items = list(items)
    ids = list(map(ident, items))
    if cited.isdisjoint(ids):  # none pinned (most tables): no passes to split them
        first, rest, rest_ids = [], items, ids
    else:
        pinned = list(map(cited.__contains__, ids))
        first = list(compress(items, pinned))
        rest = list(compress(items, map(not_, pinned)))
        rest_ids = compress(ids, map(not_, pinned))
    inside = list(map(workload, rest)) if workload is not None else \
        list(map(members.__contains__, rest_ids))  # in_workload, at C speed
    groups = [list(compress(rest, inside)), list(compress(rest, map(not_, inside)))]
    first.sort(key=lambda x: (not in_workload(x), key(x), ident(x)))
    return Ranked(first, rest, lambda x: (key(x), ident(x)), groups), len(first)


def neg(value: Any) -> float:
    """Sort key for 'highest first' that puts missing values last."""
    return -float(value) if isinstance(value, (int, float)) else float("inf")


def metric(name: str) -> Callable[[Any], Any]:
    return lambda x: x.metrics.get(name)


def findings_block(ctx: GraphContext, layer: str, on_rows: dict[str, tuple[str, ...]] | None = None) -> list[Lines]:
    """What the diagnosis found in this layer (essential), then what it could not evaluate.

    Per finding: one line per metric with the observed values and the threshold. The entities
    and relations a finding cites are rows of the tables below, pinned first; ids no table can
    show get a row of their own. `on_rows`: metric -> the entity types whose rows show it (a column
    of the metric, or of ctx.cited_values); their values are left to those rows."""
    diag, why = ctx.diagnosis
    if diag is None:
        return [Lines([f"findings: {why}"], essential=True)]
    found = ctx.findings(layer)
    rows = [r for r in getattr(diag, "coverage", []) if getattr(r, "layer", None) == LAYER_NUMBERS[layer]]
    clear = sum(1 for r in rows if r.status == "clear")
    skipped = [r for r in rows if r.status == "not_evaluated"]
    lines = [f"findings: {len(found)} · clear {clear} · not evaluated {len(skipped)}"]
    for f in found:
        lines.append(f"[{f.priority}] {f.pattern}: {f.title}")
        lines.extend("  " + line for line in evidence_lines(f.evidence, on_rows or {}))
    return [Lines(lines, essential=True),
            Lines([f"{NOT_EVALUATED}{r.pattern} ({short(r.reason, 70)})" for r in skipped])]


def edge_ends(edge: Any) -> tuple[str, ...]:
    """What a row of an edge table shows: the edge and both its ends."""
    return (edge.id, edge.source, edge.target)


def edge_label(edge: Any) -> str:
    return f"{edge.source}->{edge.target}"


# -- common columns ---------------------------------------------------------------------------
ID = Column("id", lambda e: e.id, left=True)
NAME = Column("name", lambda e: (e.attrs.get("name") or "")[:24], left=True)
# where many rows are cited the name goes before any of them: the id and the role say which it is
SHORT_NAME = Column("name", NAME.cell, left=True, optional=True)


def role_cell(e: Entity) -> str:
    role = e.attrs.get("role")
    if not role:
        return ""
    rank_ = e.attrs.get("rank")
    return f"{role}{'' if rank_ is None else f'#{rank_}'}"


ROLE = Column("role", role_cell, left=True)
CPU = Column("cpu%", lambda e: pct(e.metrics.get(M.CPU_UTIL_PCT)))


def allowed_cell(e: Entity) -> str:
    cpus = e.attrs.get("cpus_allowed")
    if cpus is None:
        n = e.metrics.get(M.CPUS_ALLOWED_COUNT)
        return f"{num(n)} cpus" if n is not None else ""
    return compact_list(cpu_set(cpus)) if not isinstance(cpus, str) else cpus


ALLOWED = Column("allowed_cpus", allowed_cell, left=True)
