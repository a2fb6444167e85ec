"""Building evidence items and the numbers in descriptions, the same way in every pattern."""

from __future__ import annotations

from typing import Any

from witty_profiler.diagnosis.catalog import Levels, number, with_unit
from witty_profiler.diagnosis.models import Evidence
from witty_profiler.topology.vocabulary import T
from witty_profiler.topology.wording import Count, agree, counted, listed, their  # noqa: F401  (the patterns' sentences use them as ev.*)

MAX_SUBJECTS = 8  # subjects shown in full; the rest are counted in one statistic
Bound = tuple[str, float]  # a pattern parameter as a threshold: (">=", 10) -> ">= 10"


def fmt(value: Any, unit: str = "") -> str:
    """A number for a sentence: 3 significant digits at most, with its unit."""
    if isinstance(value, float):
        text = f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"
        if text.endswith(".0"):
            text = text[:-2]
    else:
        text = str(value)
    return with_unit(text, unit)


def entity(eid: str, metric: str | None, value: Any, unit: str | None = None, levels: Levels | None = None,
           severity: str | None = None, note: str | None = None, bound: Bound | None = None) -> Evidence:
    return Evidence(kind="entity", ids=[eid], metric=metric, value=value, threshold=_threshold(levels, severity, bound),
                    unit=unit or (levels.unit if levels else None), note=_within(note, levels, severity))


def edge(eid: str, metric: str | None, value: Any, unit: str | None = None, levels: Levels | None = None,
         severity: str | None = None, note: str | None = None, bound: Bound | None = None) -> Evidence:
    return Evidence(kind="edge", ids=[eid], metric=metric, value=value, threshold=_threshold(levels, severity, bound),
                    unit=unit or (levels.unit if levels else None), note=_within(note, levels, severity))


def statistic(ids: list[str], metric: str | None, value: Any, unit: str | None = None, levels: Levels | None = None,
              severity: str | None = None, note: str | None = None, bound: Bound | None = None) -> Evidence:
    return Evidence(kind="statistic", ids=sorted(ids), metric=metric, value=value,
                    threshold=_threshold(levels, severity, bound), unit=unit or (levels.unit if levels else None),
                    note=_within(note, levels, severity))


def more(count: int, what: str) -> Evidence:
    return Evidence(kind="statistic", ids=[], metric=None, value=count, note=f"{count} more {what} not shown")


def _threshold(levels: Levels | None, severity: str | None, bound: Bound | None = None) -> Any:
    """The level the value crossed; None when it crossed none, so that a threshold in the evidence
    always means "past this" (the level it stayed within goes into the note)."""
    if bound is not None:
        return f"{bound[0]} {number(bound[1])}"
    if levels is None or severity is None:
        return None
    limit = levels.limit(severity)
    return None if limit is None else f"{_sign(levels)} {number(limit)}"


def _within(note: str | None, levels: Levels | None, severity: str | None) -> str | None:
    """A metric shown beside the ones that fired, with the level it did not cross."""
    if levels is None or severity is not None or levels.limit() is None:
        return note
    within = f"within the threshold ({_sign(levels)} {number(levels.limit())})"
    return f"{note}; {within}" if note else within


def _sign(levels: Levels) -> str:
    return ">" if levels.direction == "above" else "<"


def short(eid: str) -> str:
    """A readable name for an entity id in a sentence: 'process:h:1234' -> 'process 1234'."""
    parts = eid.split(":")
    if len(parts) >= 3:
        return f"{parts[0].replace('_', ' ')} {':'.join(parts[2:])}"
    return eid


def name_of(entity: Any) -> str:
    """'pid 1234 (python3)' for a process, 'NPU0 (0000:c1:00.0)' for a device, else a short id."""
    attrs = entity.attrs
    if entity.type == T.PROCESS:
        name = attrs.get("name")
        return f"pid {attrs.get('pid', short(entity.id).split()[-1])}" + (f" ({name})" if name else "")
    if entity.type == T.THREAD:
        name = attrs.get("name")
        return f"tid {attrs.get('tid', short(entity.id).split(':')[-1])}" + (f" ({name})" if name else "")
    if entity.type in (T.GPU, T.NPU):
        index = attrs.get("index")
        label = f"{entity.type.upper()}{index}" if index is not None else entity.type.upper()
        return f"{label} ({entity.id.split(':', 2)[2]})"
    return short(entity.id)
