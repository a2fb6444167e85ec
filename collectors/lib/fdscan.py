"""Who holds which file: one walk over /proc/PID/fd, shared by the collectors of a round.

The walk costs one readlink per open file of every process (a few ms per thousand fds), so the
IPC and network collectors share one walk per phase of the round (start, end) through
`Context.cache`. Processes that exit while being walked, and fds closed under us,
are skipped; fds we may not read (another user's process, not root) are counted so the caller
can report a partial view.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from witty_profiler.topology.models import Fields

MAX_AGE_S = 0.5
_MODE_BITS = {0o400: "r", 0o200: "w", 0o600: "rw"}
_INODE = re.compile(r"^(\w+):\[(\d+)\]$")


class FdTable(Fields):
    _FIELDS = ("links", "denied", "taken_at", "by_kind")

    def __init__(self, links: dict[int, dict[int, str]] | None = None, denied: int = 0, taken_at: float = 0.0,
                 by_kind: dict[str, dict[int, dict[int, list[int]]]] | None = None) -> None:
        self.links = {} if links is None else links  # pid -> fd -> link target
        self.denied = denied  # processes whose fds we could not read
        self.taken_at = taken_at
        self.by_kind = by_kind  # inodes(), built once

    def inodes(self, kind: str) -> dict[int, dict[int, list[int]]]:
        """inode -> pid -> fds, for links like 'socket:[123]' or 'pipe:[456]'. One pass over the
        table for every kind (the IPC and network collectors ask for pipes and sockets several times)."""
        if self.by_kind is None:
            self.by_kind = {}
            for pid, fds in self.links.items():
                for fd, target in fds.items():
                    # cheap tests first: most links are paths ('/...'), and anon_inode:x has no '['
                    if target[-1:] != "]" or target[:1] == "/":
                        continue
                    m = _INODE.match(target)
                    if m:
                        found = self.by_kind.setdefault(m.group(1), {})
                        found.setdefault(int(m.group(2)), {}).setdefault(pid, []).append(fd)
        return self.by_kind.get(kind, {})


def pids(proc: Path) -> list[int]:
    return sorted(int(name) for name in os.listdir(proc) if name.isdigit())


def scan(proc: Path = Path("/proc")) -> FdTable:
    table = FdTable(taken_at=time.monotonic())
    for pid in pids(proc):
        fd_dir = f"{proc}/{pid}/fd"
        try:
            names = os.listdir(fd_dir)
        except PermissionError:
            table.denied += 1
            continue
        except OSError:  # exited, or a zombie
            continue
        fds: dict[int, str] = {}
        for name in names:
            try:
                fds[int(name)] = os.readlink(f"{fd_dir}/{name}")
            except OSError:
                continue
        table.links[pid] = fds
    return table


def shared_scan(proc: Path, cache: dict, phase: str) -> FdTable:
    """The fd table of one phase ('start' or 'end') of the round, shared by the collectors that
    read it then; walked again if the cached one is older than MAX_AGE_S."""
    key = f"fdscan:{proc}:{phase}"
    table = cache.get(key)
    if table is None or time.monotonic() - table.taken_at > MAX_AGE_S:
        table = scan(proc)
        cache[key] = table
    return table


def access_mode(proc: Path, pid: int, fd: int) -> str | None:
    """'r', 'w' or 'rw' from the open flags; None if gone.

    The kernel gives the /proc/PID/fd/FD link the owner bits of the file's open mode (read:
    r-x, write: -wx), so one lstat answers; /proc/PID/fdinfo/FD, three system calls and a text
    to parse, is read only when neither bit is set (an O_PATH descriptor)."""
    try:
        bits = os.lstat(f"{proc}/{pid}/fd/{fd}").st_mode & 0o600
    except OSError:
        return None
    if bits:
        return _MODE_BITS[bits]
    try:
        with open(f"{proc}/{pid}/fdinfo/{fd}") as f:
            text = f.read()
    except OSError:
        return None
    return parse_fdinfo_mode(text)


def parse_fdinfo_mode(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("flags:"):
            mode = int(line.split()[1], 8) & 0o3  # O_ACCMODE
            return {0: "r", 1: "w", 2: "rw"}.get(mode)
    return None


def comm(proc: Path, pid: int) -> str | None:
    try:
        fd = os.open(f"{proc}/{pid}/comm", os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode("utf-8", "replace").strip()  # a name is at most 64 bytes
    except OSError:
        return None
    finally:
        os.close(fd)
