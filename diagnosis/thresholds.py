"""Threshold overrides from a TOML file, validated against the catalog.

The file has one table per pattern id; a levelled threshold is a table of its levels, a
parameter a number::

    ["compute.cpu_saturation"]
    cpu_util_pct = { warning = 85, critical = 97 }

    [dataplane.data_loading_bottleneck]        # a dotted table name works as well
    producer_busy_pct = 40

Anything the catalog does not know (a pattern id, a threshold or level name), a value that is
not a number, or levels in the wrong order is an `InputError` naming the place in the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from witty_profiler.diagnosis.catalog import LEVELS, Levels, Pattern, catalog
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.files import MAX_SMALL_BYTES, read_bytes

Overrides = dict[str, dict[str, Any]]  # pattern id -> name -> {level: value} | value


def load_thresholds(path: str | os.PathLike[str]) -> Overrides:
    p = Path(path)
    shown = str(p) if len(str(p)) <= 200 else str(p)[:200] + "..."
    if "\0" in str(p):
        raise InputError(f"{shown!r}: holds a NUL character; not a thresholds file")
    try:
        missing = not p.exists() and not p.is_symlink()
    except (OSError, ValueError) as exc:  # a name too long, a NUL in it
        raise InputError(f"{shown!r}: not a thresholds file ({getattr(exc, 'strerror', None) or exc})") from None
    if missing:
        raise InputError(f"{shown}: no such thresholds file")
    raw = read_bytes(p, "thresholds file", MAX_SMALL_BYTES, error=InputError)  # regular, small: or one line why
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{p}: cannot read the thresholds file (not UTF-8 text)") from None
    import tomllib  # only when there is a file to read
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{p}: not valid TOML ({exc})") from None
    return validate(data, str(p))


def _flatten(data: dict[str, Any]) -> dict[str, Any]:
    """{'compute': {'cpu_saturation': {...}}} and {'compute.cpu_saturation': {...}} -> by full id."""
    known = catalog()
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if key in known or "." in key or not isinstance(value, dict):
            flat[key] = value
            continue
        for sub, inner in value.items():
            flat[f"{key}.{sub}"] = inner
    return flat


def validate(data: dict[str, Any], name: str = "thresholds") -> Overrides:
    known = catalog()
    result: Overrides = {}
    for pid, table in sorted(_flatten(data).items()):
        if pid not in known:
            raise InputError(f"{name}: unknown pattern id {pid!r}; list them with: witty-profiler patterns")
        if not isinstance(table, dict):
            raise InputError(f"{name}: [{pid}] must be a table of thresholds, found {type(table).__name__}")
        result[pid] = _validate_pattern(known[pid], table, name)
    return result


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: expected a number, found {value!r}")
    if value != value or value in (float("inf"), float("-inf")):
        raise InputError(f"{where}: expected a finite number, found {value!r}")
    return float(value)


def _validate_pattern(pattern: Pattern, table: dict[str, Any], name: str) -> dict[str, Any]:
    thresholds = {t.name: t for t in pattern.thresholds}
    params = {p.name: p for p in pattern.params}
    out: dict[str, Any] = {}
    for key, value in table.items():
        where = f"{name}: {pattern.id}.{key}"
        if key in params:
            out[key] = _number(value, where)
            continue
        if key not in thresholds:
            names = ", ".join(sorted(thresholds) + sorted(params)) or "none"
            raise InputError(f"{where}: unknown threshold {key!r} (this pattern has: {names})")
        if not isinstance(value, dict):
            raise InputError(f"{where}: expected a table of levels like {{ warning = 80, critical = 90 }}, found "
                             f"{value!r}")
        levels = {}
        for level, v in value.items():
            if level not in LEVELS:
                raise InputError(f"{where}.{level}: unknown level (use critical, warning or notice)")
            levels[level] = _number(v, f"{where}.{level}")
        merged = {**thresholds[key].levels(), **levels}
        _check_order(thresholds[key].direction, merged, where)
        out[key] = levels
    return out


def _check_order(direction: str, levels: dict[str, float], where: str) -> None:
    """notice <= warning <= critical for 'above' thresholds, the reverse for 'below'."""
    ordered = [(lv, levels[lv]) for lv in ("notice", "warning", "critical") if lv in levels]
    for (low_name, low), (high_name, high) in zip(ordered, ordered[1:]):
        bad = low > high if direction == "above" else low < high
        if bad:
            relation = "<=" if direction == "above" else ">="
            raise InputError(f"{where}: {low_name} ({low:g}) must be {relation} {high_name} ({high:g}) for a "
                             f"threshold that fires {direction} its levels")


def effective(pattern: Pattern, overrides: Overrides | None) -> dict[str, Any]:
    """The values a pattern's check receives: defaults with the overrides applied."""
    values = pattern.defaults()
    for key, value in (overrides or {}).get(pattern.id, {}).items():
        if isinstance(value, dict):
            base = values[key]
            values[key] = Levels(base.threshold, {**base.values, **value})
        else:
            values[key] = value
    return values


def coerce(thresholds: Any) -> Overrides | None:
    """Accept None, a path to a TOML file, or an already parsed mapping (validated here)."""
    if thresholds is None:
        return None
    if isinstance(thresholds, (str, os.PathLike)):
        return load_thresholds(thresholds)
    if isinstance(thresholds, dict):
        return validate(thresholds, "thresholds")
    raise InputError(f"thresholds must be a TOML file path or a mapping, found {type(thresholds).__name__}")
