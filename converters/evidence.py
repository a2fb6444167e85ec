"""How the views write a finding's evidence: one line per metric with its values, thresholds and the
entity each value belongs to; the same text the table cells use for a value a finding computed."""

from __future__ import annotations

from typing import Any

from witty_profiler.converters.render import num, size
from witty_profiler.topology.ids import process_of_thread

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
