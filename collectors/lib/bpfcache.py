"""bcc programs kept loaded between the windows of one long-lived process (witty-mcp, the exporter).

Compiling a program with clang costs 0.35-0.6 s of CPU and about 110 MiB of memory at its peak,
every window. What clang produced does not change from one window to the next as long as the
program text and the kernel headers are the same, so the loaded program is kept instead: when a
window ends its tracepoints are detached (between windows the host pays nothing, not even the
syscall-tracepoint path) and its maps are emptied; the next window with the same key attaches
it again, which takes a few milliseconds.

What stays while it is kept: the program's maps in kernel memory (`memlock` in the map's fdinfo,
about 20 MiB for the futex program's three 65,536-entry hashes) and libbcc's module in this
process. A one-shot CLI run exits after its window, and bcc's own exit handler closes everything.

Two windows at once in one process (two MCP clients) do not share a program: the second one
compiles its own, and when both end only one is kept.
"""

from __future__ import annotations

import threading
from typing import Any

TRACEPOINT_FN_PREFIX = b"tracepoint__"


class LoadedPrograms:
    """Idle loaded programs by key (the program text and the kernel headers it was compiled with)."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, str], tuple[Any, list[bytes]]] = {}  # key -> (program, its tracepoints)
        self._lock = threading.Lock()

    def take(self, key: tuple[str, str]) -> Any | None:
        """The idle program of `key`, attached again, or None when there is none (compile one)."""
        with self._lock:
            bpf, tracepoints = self._idle.pop(key, (None, []))
        if bpf is None:
            return None
        try:
            for tp in tracepoints:  # bcc names a TRACEPOINT_PROBE's function after its tracepoint
                bpf.attach_tracepoint(tp=tp, fn_name=TRACEPOINT_FN_PREFIX + tp.replace(b":", b"__"))
        except Exception:  # noqa: BLE001 - bcc raises bare Exceptions; a fresh compile is the way out
            bpf.cleanup()
            return None
        return bpf

    def keep(self, key: tuple[str, str], bpf: Any) -> bool:
        """Detach `bpf`, empty its maps and keep it for the next window of `key`; False (and the
        program closed) when it could not be made idle or one is kept for that key already."""
        tracepoints = list(bpf.tracepoint_fds)
        try:
            for tp in tracepoints:
                bpf.detach_tracepoint(tp)
            for name in list(bpf.tables):
                _empty(bpf[name])
        except Exception:  # noqa: BLE001
            bpf.cleanup()
            return False
        with self._lock:
            if key not in self._idle:
                self._idle[key] = (bpf, tracepoints)
                return True
        bpf.cleanup()
        return False

    def release(self) -> None:
        """Close every idle program (their maps are freed with their last file descriptor)."""
        with self._lock:
            idle, self._idle = list(self._idle.values()), {}
        for bpf, _ in idle:
            bpf.cleanup()

    def __len__(self) -> int:
        return len(self._idle)


def _empty(table: Any) -> None:
    """Every entry of a map deleted: in batches where the kernel has them (5.6), else key by key."""
    try:
        for _ in table.items_lookup_and_delete_batch():
            pass
    except Exception:  # noqa: BLE001 - no batch operations on this kernel
        table.clear()


PROGRAMS = LoadedPrograms()  # this process's idle programs
