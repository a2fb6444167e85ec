"""Pieces several layer views use: the findings block, ranking with pinned citations, common columns."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from witty_profiler.converters.context import LAYER_NUMBERS, GraphContext, compact_list, cpu_list
from witty_profiler.converters.render import Column, Lines, Ranked, num, pct, size
from witty_profiler.topology import Entity
from witty_profiler.topology.ids import process_of_thread

LEGEND_START = "legend: ids work as "


def legend_line(ctx: GraphContext) -> str:
    return (f"{LEGEND_START}`{ctx.hints.around()}`; process/thread cpu% is % of one core; "
            "sizes in KiB/MiB/GiB (1024); '-' = not measured")


# the collectors whose absence leaves a hole in a layer's view (live and legacy names)
LAYER_COLLECTORS = {
    "compute": ("cpu", "host", "process", "gpu", "npu", "pmu"),
    "memory": ("memory", "host", "numa", "process", "pressure", "gpu", "npu", "cgroup"),
    "interconnect": ("numa", "pci", "gpu", "npu", "process"),
    "network": ("network", "sockets", "rdma"),
    "storage": ("storage", "pressure"),
    "control": ("process", "cgroup", "pressure", "ebpf"),
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


def has_any(e: Any, names: Iterable[str]) -> bool:
    return any(e.metrics.get(n) is not None for n in names)


def rank(items: Iterable[Any], key: Callable[[Any], Any], cited: set[str], ctx: GraphContext,
         ident: Callable[[Any], str] = lambda x: x.id,
         workload: Callable[[Any], bool] | None = None) -> tuple[Ranked, int]:
    """Cited items first (pinned), then workload items, then by `key` (ascending: negate for 'top')."""
    members = ctx.workload_members
    in_workload = workload or (lambda x: ident(x) in members)
    first, rest = [], []
    for x in items:
        (first if ident(x) in cited else rest).append(x)
    full_key = lambda x: (not in_workload(x), key(x), ident(x))  # noqa: E731
    first.sort(key=full_key)
    return Ranked(first, rest, full_key), len(first)


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
            Lines([f"not evaluated: {r.pattern} ({short(r.reason, 70)})" for r in skipped])]


LIST_MAX = 12  # values of one metric named one by one; a longer run reads as its range


def evidence_lines(evidence: list[Any], on_rows: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """One line per measured metric: `metric (> threshold): value id; value id...`, each value with
    the entity it belongs to, so that a figure the diagnosis computed (a share, an imbalance) is
    read where no table has a column for it. Relations and settings (a device used, a node, allowed
    CPUs) and the metrics of `on_rows` are in the rows of the tables below: they are named on one
    line."""
    by_metric: dict[str, list[Any]] = {}
    for ev in evidence:
        relation = ev.kind == "edge" and ev.ids and "|" in ev.ids[0] and ev.ids[0].split("|", 1)[0]
        by_metric.setdefault(ev.metric or relation or ev.kind, []).append(ev)
    out, shown_below = [], []
    for name, items in by_metric.items():
        thresholds = sorted({evidence_value(ev.threshold, ev.unit) for ev in items if ev.threshold is not None})
        head = name + (f" ({' / '.join(thresholds)})" if thresholds else "")
        if not all(_measured(ev.value) for ev in items) or all(ev.kind == "edge" for ev in items):
            shown_below.append(name)  # a relation or a setting: its rows show it
            continue
        kinds = (on_rows or {}).get(name, ())
        if kinds and all((item_owner(ev.ids or []) or "").split(":", 1)[0] in kinds for ev in items):
            shown_below.append(head)  # a column of the rows of the entities the values belong to
            continue
        numbers = [ev.value for ev in items if not isinstance(ev.value, dict)]
        if len(items) > LIST_MAX and len(numbers) == len(items):
            unit = items[0].unit
            values = f"{evidence_value(min(numbers), unit)}..{evidence_value(max(numbers), unit)} ({len(items)} values)"
        else:
            values = "; ".join(evidence_value(ev.value, ev.unit) + _named(ev.ids or []) for ev in items)
        out.append(f"{head}: {values}")
    if shown_below:
        out.append(f"in the rows below: {', '.join(shown_below)}")
    return out


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _measured(value: Any) -> bool:
    """A number, or numbers by key (pages or run time per NUMA node)."""
    if isinstance(value, dict):
        return bool(value) and all(is_number(v) for v in value.values())
    return is_number(value)


def evidence_value(value: Any, unit: str | None) -> str:
    """An evidence value as the findings block writes it: `94.9%`, `18 ms`, `1.5GiB`, or by key, largest first,
    `7:70.4% 5:29.5%` (run time per NUMA node), `6:573587 0:40779` (pages per node)."""
    unit = unit or ""
    sep = "" if unit in ("%", "") else " "
    if isinstance(value, dict):
        pairs = sorted(value.items(), key=lambda kv: (-kv[1], str(kv[0])))
        return " ".join(f"{k}:{num(v)}{'%' if unit == '%' else ''}" for k, v in pairs if v)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-" if value is None else str(value)
    if unit in ("bytes", "bytes/s"):
        return size(value, per_s=unit == "bytes/s")
    if unit == "1/s":
        return f"{num(value)}/s"  # as the tables write rates
    return f"{num(value)}{sep}{unit}"


def _named(ids: list[str]) -> str:
    """The entities a value belongs to: the first id cited (and how many more), or its owner."""
    ents = [i for i in ids if "|" not in i]
    if len(ents) > 1:
        return f" {ents[0]} +{len(ents) - 1}"
    owner = item_owner(ids)
    return f" {owner}" if owner else ""


def item_owner(ids: list[str]) -> str | None:
    """The one entity an evidence value belongs to: its only entity id, or for edges their common
    source (or the process of the threads whose run time a share adds up)."""
    ents = [i for i in ids if "|" not in i]
    if ents:
        return ents[0] if len(ents) == 1 else None
    sources = {i.split("|")[1] for i in ids if i.count("|") >= 2}
    owners = {process_of_thread(src) or src for src in sources}
    return next(iter(sources)) if len(sources) == 1 else next(iter(owners)) if len(owners) == 1 else None


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
CPU = Column("cpu%", lambda e: pct(e.metrics.get("cpu_util_pct")))


def allowed_cell(e: Entity) -> str:
    cpus = e.attrs.get("cpus_allowed")
    if cpus is None:
        n = e.metrics.get("cpus_allowed_count")
        return f"{num(n)} cpus" if n is not None else ""
    return compact_list(cpu_list(cpus)) if not isinstance(cpus, str) else cpus


ALLOWED = Column("allowed_cpus", allowed_cell, left=True)
