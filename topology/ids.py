"""Stable, readable entity and edge ids, namespaced by host.

An id is ``<type>:<host>:<key>[:<key>...]``. Keys are the entity's own identity and never a
relation that may change: a process is keyed by its pid (not its parent), a thread by its
process and its tid, a PCI device by its full bus address. Graphs from several hosts therefore
merge without clashes, and the same object seen twice gets the same id.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Iterable

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.lazy import LazyPattern
from witty_profiler.topology.vocabulary import T

_HOST_NAME = LazyPattern(globals(), "_HOST_NAME", r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,252}")


def entity_id(kind: str, host: str, *keys: object) -> str:
    return ":".join([kind, host, *(str(k) for k in keys)])


def edge_id(kind: str, source: str, target: str, qualifier: str | None = None) -> str:
    base = f"{kind}|{source}|{target}"
    return f"{base}|{qualifier}" if qualifier else base


def host_of(eid: str) -> str:
    """The host of an id: 'process:node1:42' -> 'node1' ('' for an id without one)."""
    parts = eid.split(":", 2)
    return parts[1] if len(parts) > 1 else ""


def check_host_name(name: str) -> str:
    """A host name as ids carry it (letters, digits, '.', '-', '_'; no ':' or '|', which separate the
    parts of an id), or an InputError."""
    if not isinstance(name, str) or not _HOST_NAME.fullmatch(name):
        raise InputError(f"bad host name {name!r}: use letters, digits, '.', '-' or '_' (at most 253), "
                         "as in a hostname or a Slurm node name")
    return name


def host_id(host: str) -> str:
    return entity_id(T.HOST, host)


def process_id(host: str, pid: int) -> str:
    return entity_id(T.PROCESS, host, pid)


def thread_id(host: str, pid: int, tid: int) -> str:
    return entity_id(T.THREAD, host, pid, tid)


def process_of_thread(eid: str) -> str:
    """The process of a thread id: 'thread:node1:42:43' -> 'process:node1:42' ('' for any other id)."""
    parts = eid.split(":")
    return process_id(parts[1], parts[2]) if parts[0] == T.THREAD and len(parts) >= 4 else ""


def threads_of_processes(thread_ids: Iterable[str], process_ids: Collection[str]) -> list[str]:
    """The ids among `thread_ids` whose process_of_thread is one of `process_ids`, without a look at each of
    them (a host has 100,000 threads): the ids of the threads of 'process:H:P' are those that start with
    'thread:H:P:', one run of the ids in order, found by bisection."""
    ordered = sorted(thread_ids)
    found: list[str] = []
    for pid in process_ids:
        if pid.startswith(f"{T.PROCESS}:") and pid.count(":") == 2:
            head = f"{T.THREAD}:{pid[len(T.PROCESS) + 1:]}:"
            found += ordered[bisect_left(ordered, head):bisect_left(ordered, head[:-1] + ";")]  # ';' follows ':'
    return found


def numa_id(host: str, node: int) -> str:
    return entity_id(T.NUMA_NODE, host, node)


def cpu_id(host: str, cpu: int) -> str:
    return entity_id(T.CPU, host, cpu)


def pci_address(bdf: str) -> str:
    """Normalise a PCI address to the 4-hex-digit domain form, lower case.

    NVML reports an 8-digit domain (``00000000:3B:00.0``), sysfs and npu-smi a 4-digit one;
    both must name the same device.
    """
    bdf = bdf.strip().lower()
    parts = bdf.split(":")
    if len(parts) == 2:  # bus:dev.fn without a domain
        parts.insert(0, "0000")
    # drop leading zeros beyond four digits, but keep a real wide domain (Intel VMD: 10000)
    domain = parts[0].lstrip("0").rjust(4, "0")
    return ":".join([domain, *parts[1:]])

