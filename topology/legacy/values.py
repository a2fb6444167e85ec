"""Checked conversion of legacy field values: numbers, CPU lists, NUMA maps, meminfo sizes.

Every function takes the field's path in the file (``edges[12].proc_status.cpus_allowed_list``)
and raises `LegacyValueError` naming it when the value is impossible, so that a broken file is
rejected with one line that says where, instead of loading as a wrong picture.
"""

from __future__ import annotations

import math
import re
from typing import Any

from witty_profiler.topology.cpulist import parse_cpulist
from witty_profiler.topology.privacy import redact_cmdline


class LegacyValueError(ValueError):
    """An impossible value at a path in the legacy file (the reader adds the file name)."""

    def __init__(self, where: str, problem: str) -> None:
        # the message quotes the wrong value and is shown and logged: redacted like the value would be
        super().__init__(redact_cmdline(f"{where}: {problem}"))


def integer(value: Any, where: str, minimum: int | None = 0, maximum: int | None = None) -> int:
    """An integer (JSON ints, and floats with no fraction, as some writers emit them)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LegacyValueError(where, f"expected an integer, found {_show(value)}")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise LegacyValueError(where, f"expected an integer, found {value!r}")
        value = int(value)
    if minimum is not None and value < minimum:
        raise LegacyValueError(where, f"{value} is impossible here (must be >= {minimum})")
    if maximum is not None and value > maximum:
        raise LegacyValueError(where, f"{value} is impossible here (must be <= {maximum})")
    return value


def number(value: Any, where: str, minimum: float | None = 0.0, maximum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LegacyValueError(where, f"expected a number, found {_show(value)}")
    if minimum is not None and value < minimum:
        raise LegacyValueError(where, f"{value} is impossible here (must be >= {minimum})")
    if maximum is not None and value > maximum:
        raise LegacyValueError(where, f"{value} is impossible here (must be <= {maximum})")
    return value


def text(value: Any, where: str, default: str | None = None) -> str | None:
    if value is None:
        return default
    if isinstance(value, (dict, list)):
        raise LegacyValueError(where, f"expected a string, found {_show(value)}")
    return str(value)


def mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise LegacyValueError(where, f"expected an object, found {_show(value)}")
    return value


def cpu_list(value: Any, where: str) -> list[int]:
    """Parse the kernel's list format ("0-23,48,50-51"); "" is the empty list."""
    spec = text(value, where, "")
    try:
        return parse_cpulist(spec)
    except ValueError as exc:
        raise LegacyValueError(where, str(exc)) from None


def node_counts(value: Any, where: str, real: bool = False) -> dict[int, float | int]:
    """A {numa node: count} object, keys as strings or ints, counts non-negative."""
    out: dict[int, float | int] = {}
    for key, count in mapping(value, where).items():
        node = node_key(key, f"{where}[{key!r}]")
        out[node] = (number if real else integer)(count, f"{where}[{key!r}]")
    return dict(sorted(out.items()))


def node_key(key: Any, where: str) -> int:
    if isinstance(key, str) and key.strip().isdigit():
        return int(key)
    if isinstance(key, int) and not isinstance(key, bool) and key >= 0:
        return key
    raise LegacyValueError(where, f"{_show(key)} is not a NUMA node number")


def vector(value: Any, where: str, real: bool) -> list[float]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise LegacyValueError(where, f"expected a list, found {_show(value)}")
    check = number if real else integer
    return [check(v, f"{where}[{i}]") for i, v in enumerate(value)]


_SIZE = re.compile(r"^\s*(\d+)\s*(kB|KB|kb)?\s*$")


def meminfo(value: Any, where: str) -> tuple[dict[str, int], dict[str, int]]:
    """Split a node's meminfo into byte sizes ("N kB" fields) and plain counts (HugePages_*)."""
    sizes: dict[str, int] = {}
    counts: dict[str, int] = {}
    for key, raw in mapping(value, where).items():
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            counts[key] = integer(raw, f"{where}.{key}")
            continue
        m = _SIZE.match(str(raw))
        if not m:
            raise LegacyValueError(f"{where}.{key}", f"cannot read {raw!r} (expected e.g. '1024 kB')")
        if m.group(2):
            sizes[key] = int(m.group(1)) * 1024
        else:
            counts[key] = int(m.group(1))
    return dict(sorted(sizes.items())), dict(sorted(counts.items()))


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "a list"
    return repr(value)
