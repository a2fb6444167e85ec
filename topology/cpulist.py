"""The kernel's two ways of writing a set of CPUs (or NUMA nodes): the list "0-3,8,10-11"
(cpulist files, Cpus_allowed_list, local_cpulist) and the hex mask "00000000,0000ffff"
(cpumap files, Cpus_allowed, local_cpus).

Collectors read them from /proc and /sys, the legacy reader from old graph files and the
diagnosis from graph attributes; all of them parse and write them here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_ITEM = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")
MAX_CPU = 1 << 16  # far above any real machine; a list holds no more (guards "0-999999999" or repeats)


def parse_cpulist(text: str | None) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11] (sorted, each once); None or '' -> [].

    Raises ValueError, with a message that quotes the list, for anything the kernel would not write.
    """
    spec = text or ""
    cpus: list[int] = []
    in_order = True
    for part in spec.split(","):
        if not part.strip():
            continue
        m = _ITEM.match(part)
        if not m:
            raise ValueError(f"cannot read CPU/node list {spec!r} (expected e.g. '0-23,48')")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo or hi >= MAX_CPU:
            raise ValueError(f"impossible range {part.strip()!r} in {spec!r}")
        if len(cpus) + hi - lo + 1 > MAX_CPU:  # ranges that repeat add up: the whole list is bounded
            raise ValueError(f"more than {MAX_CPU} CPUs in {spec[:60]!r}{'...' if len(spec) > 60 else ''}")
        in_order = in_order and (not cpus or lo > cpus[-1])
        cpus.extend(range(lo, hi + 1))
    # the kernel writes ascending ranges; only a hand-written list needs sorting
    return cpus if in_order else sorted(set(cpus))


def cpu_set(value: object) -> set[int]:
    """The CPUs (or nodes) of a graph attribute: a list string ('0-3,8'), a list of numbers or one
    number. Readers of a graph use it, so a malformed attribute reads as no CPUs instead of stopping a
    view or a pattern; the collectors and the legacy reader, which must reject bad input, use
    parse_cpulist."""
    if value is None or value == "" or isinstance(value, bool):
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, (list, tuple, set, frozenset)):
        if all((isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, str) and v.isdigit())
               for v in value):
            return {int(v) for v in value}
        return set()
    return set(_text_cpus(str(value)))


_SEEN: dict[str, frozenset[int]] = {}  # the lists met so far: 100,000 threads share a few masks
_ROOM = [1 << 16]  # lists and CPUs _SEEN may still take: no file makes it grow without limit


def _text_cpus(text: str) -> frozenset[int]:
    """The CPUs of a list string, parsed once per distinct string (a malformed one: none)."""
    found = _SEEN.get(text)
    if found is None:
        try:
            found = frozenset(parse_cpulist(text))
        except ValueError:
            found = frozenset()
        if 1 + len(found) <= _ROOM[0]:
            _SEEN[text] = found
            _ROOM[0] -= 1 + len(found)
    return found


def parse_cpumask(text: str | None) -> list[int]:
    """'00000000,0000ffff' (32-bit hex words, most significant first) -> [0, 1, ..., 15]."""
    bits = int("".join((text or "").strip().split(",")) or "0", 16)
    return [i for i in range(bits.bit_length()) if bits >> i & 1]


def format_cpulist(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8'; nothing -> ''."""
    items = sorted(set(cpus))
    ranges: list[str] = []
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        ranges.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(ranges)
