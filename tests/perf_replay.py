"""A stand-in for perf_event_open(2) on a CPU this machine lacks: it opens what that CPU's PMU
offers, refuses what its kernel would (with the kernel's errno), and answers read(2) on a group
leader with the bytes the kernel returns (nr, time_enabled, time_running, one u64 per member in the
order the members were opened), from counts recorded per thread or CPU.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field

from witty_profiler.collectors.lib.perf_event import Event, group_bytes


@dataclass
class Recorded:
    """One group's counts by event name (a list: one value per successive read), and its enabled/running ns."""

    counts: dict[str, int | list[int]]
    enabled_ns: int
    running_ns: int | None = None  # None: ran the whole time


@dataclass
class ReplayedPerf:
    # (pid, cpu) -> the groups in the order they are opened (core, then stalls); pid -1 for a CPU,
    # cpu -1 for a thread
    recorded: dict[tuple[int, int], list[Recorded]]
    lacking: set[str] = field(default_factory=set)  # events this CPU does not offer: ENOENT
    refused: dict[tuple[int, int], int] = field(default_factory=dict)  # (pid, cpu) -> errno
    opened: dict[int, tuple[Event, int, int, int, int]] = field(default_factory=dict)
    closed: list[int] = field(default_factory=list)
    flags_seen: set[int] = field(default_factory=set)
    next_fd: int = 100
    leaders: dict[int, int] = field(default_factory=dict)  # leader fd -> which group of its thread or CPU
    reads: dict[int, int] = field(default_factory=dict)  # leader fd -> reads so far

    def open(self, event: Event, pid: int, cpu: int, group_fd: int, flags: int) -> int:
        if event.name in self.lacking:
            raise OSError(errno.ENOENT, "No such file or directory")
        if (pid, cpu) in self.refused:
            code = self.refused[(pid, cpu)]
            raise OSError(code, errno.errorcode[code])
        if (pid, cpu) not in self.recorded:
            raise OSError(errno.ESRCH, "No such process")
        self.next_fd += 1
        if group_fd == -1:
            self.leaders[self.next_fd] = sum(1 for f in self.leaders if self.opened[f][1:3] == (pid, cpu))
        self.opened[self.next_fd] = (event, pid, cpu, group_fd, flags)
        self.flags_seen.add(flags)
        return self.next_fd

    def read(self, fd: int, size: int) -> bytes:
        event, pid, cpu, group_fd, _ = self.opened[fd]
        assert group_fd == -1, "read on a group member"
        members = [e for f, (e, *_rest, g, _fl) in sorted(self.opened.items()) if f == fd or g == fd]
        rec = self.recorded[(pid, cpu)][self.leaders[fd]]
        n = self.reads[fd] = self.reads.get(fd, -1) + 1
        values = [rec.counts[e.name] for e in members]
        data = group_bytes([v[min(n, len(v) - 1)] if isinstance(v, list) else v for v in values], rec.enabled_ns,
                           rec.enabled_ns if rec.running_ns is None else rec.running_ns)
        return data[:size]

    def close(self, fd: int) -> None:
        assert fd in self.opened and fd not in self.closed
        self.closed.append(fd)

    @property
    def all_closed(self) -> bool:
        return set(self.closed) == set(self.opened)
