"""Text predicates over entities, shared by the CLI, the MCP server and scripts.

A condition is ``FIELD OP VALUE`` with OP one of ``= != > >= < <= ~`` (``~`` = contains, case
insensitive). FIELD is ``attrs.NAME``, ``metrics.NAME``, ``id``, ``type``, or a bare NAME looked up
in metrics first, then attrs. Several conditions must all hold. Examples:
``metrics.cpu_util_pct>=50``, ``name~vllm``, ``numa_node=6``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.lazy import LazyPattern

Predicate = Callable[[Any], bool]

_CONDITION = LazyPattern(globals(), "_CONDITION", r"^\s*([A-Za-z_][\w.]*)\s*(>=|<=|!=|=|>|<|~)\s*(.*?)\s*$")


def _lookup(entity: Any, field: str) -> Any:
    if field in ("id", "type"):
        return getattr(entity, field)
    if field.startswith("attrs."):
        return entity.attrs.get(field[6:])
    if field.startswith("metrics."):
        return entity.metrics.get(field[8:])
    if field in entity.metrics:
        return entity.metrics[field]
    return entity.attrs.get(field)


def _coerce(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "null": None}.get(text.lower(), text.strip("'\""))


def _compare(value: Any, op: str, wanted: Any) -> bool:
    if op == "~":
        return value is not None and str(wanted).lower() in str(value).lower()
    if op in ("=", "!="):
        equal = value == wanted or (value is not None and str(value) == str(wanted))
        return equal if op == "=" else not equal
    if not isinstance(value, (int, float)) or not isinstance(wanted, (int, float)) or isinstance(value, bool):
        return False
    return {">": value > wanted, ">=": value >= wanted, "<": value < wanted, "<=": value <= wanted}[op]


def parse_condition(text: str) -> tuple[str, str, Any]:
    match = _CONDITION.match(text)
    if not match:
        raise InputError(f"cannot read condition {text!r}: write FIELD OP VALUE, e.g. metrics.cpu_util_pct>50")
    field, op, value = match.groups()
    return field, op, _coerce(value)


def compile_where(where: str | Iterable[str] | None) -> Predicate:
    if where is None:
        return lambda _e: True
    texts = [where] if isinstance(where, str) else list(where)
    conditions = [parse_condition(t) for t in texts if t.strip()]

    def predicate(entity: Any) -> bool:
        return all(_compare(_lookup(entity, f), op, v) for f, op, v in conditions)

    return predicate
