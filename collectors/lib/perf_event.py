"""perf_event_open(2) through ctypes: groups of counting events on a thread or a CPU, read as one
group (PERF_FORMAT_GROUP) with the times the group was enabled and running.

A group's members are scheduled onto the PMU together, so ratios of two members (instructions /
cycles) come from the same stretch of time; when there are more events than hardware counters the
kernel multiplexes groups, and time_running / time_enabled says which share of the window a group
was counted. Counts are scaled by enabled / running; the share is reported with the values.

`Syscalls` is the real reader. Anything with its three methods can stand in for it: tests replay
recorded reads (the bytes read(2) returns on a group leader) and the errors the kernel gave.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from typing import NamedTuple, Protocol

from witty_profiler.topology.models import Fields

PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1

PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FORMAT_GROUP = 1 << 3
READ_FORMAT = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING

# bits of perf_event_attr's flags word (include/uapi/linux/perf_event.h)
ATTR_INHERIT = 1 << 1
ATTR_EXCLUDE_KERNEL = 1 << 5
ATTR_EXCLUDE_HV = 1 << 6

PERF_FLAG_FD_CLOEXEC = 1 << 3
PERF_ATTR_SIZE_VER5 = 112  # every kernel since 4.1 accepts it

SYSCALL_NR = {"x86_64": 298, "aarch64": 241, "riscv64": 241, "loongarch64": 241, "ppc64le": 319, "ppc64": 319,
              "s390x": 331, "i686": 336, "armv7l": 364}
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long


def syscall_nr(machine: str | None = None) -> int:
    """perf_event_open's number on `machine` (this one's by default); OSError ENOSYS where none is known."""
    machine = machine or os.uname().machine  # platform.machine(), without importing platform
    if machine not in SYSCALL_NR:
        raise OSError(errno.ENOSYS, f"no perf_event_open syscall number known for {machine}")
    return SYSCALL_NR[machine]


def perf_event_open(attr: bytes, pid: int, cpu: int, group_fd: int = -1, nr: int | None = None) -> int:
    """perf_event_open(2) of a struct perf_event_attr (PERF_ATTR_SIZE_VER5 bytes), close-on-exec: its
    descriptor, or OSError with the kernel's errno."""
    buffer = ctypes.create_string_buffer(attr, PERF_ATTR_SIZE_VER5)
    fd = _LIBC.syscall(ctypes.c_long(syscall_nr() if nr is None else nr), buffer, ctypes.c_int(pid),
                       ctypes.c_int(cpu), ctypes.c_int(group_fd), ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return fd


class Event(NamedTuple):
    name: str
    type: int
    config: int


CYCLES = Event("cycles", PERF_TYPE_HARDWARE, 0)
INSTRUCTIONS = Event("instructions", PERF_TYPE_HARDWARE, 1)
# "usually the last-level cache" (perf_event_open(2)): what `perf stat` calls cache-references/-misses
CACHE_REFERENCES = Event("cache-references", PERF_TYPE_HARDWARE, 2)
CACHE_MISSES = Event("cache-misses", PERF_TYPE_HARDWARE, 3)
STALLED_FRONTEND = Event("stalled-cycles-frontend", PERF_TYPE_HARDWARE, 7)
STALLED_BACKEND = Event("stalled-cycles-backend", PERF_TYPE_HARDWARE, 8)
TASK_CLOCK = Event("task-clock", PERF_TYPE_SOFTWARE, 1)
CONTEXT_SWITCHES = Event("context-switches", PERF_TYPE_SOFTWARE, 3)


def attr_bytes(event: Event, flags: int) -> bytes:
    """struct perf_event_attr (PERF_ATTR_SIZE_VER5), counting (no sampling), enabled at open."""
    raw = bytearray(PERF_ATTR_SIZE_VER5)
    # type, size, config, sample_period, sample_type, read_format, flags
    struct.pack_into("=IIQQQQQ", raw, 0, event.type, PERF_ATTR_SIZE_VER5, event.config, 0, 0, READ_FORMAT, flags)
    return bytes(raw)


class PerfEvents(Protocol):
    """open raises OSError with the kernel's errno; read returns what read(2) gave on the fd."""

    def open(self, event: Event, pid: int, cpu: int, group_fd: int, flags: int) -> int: ...

    def read(self, fd: int, size: int) -> bytes: ...

    def close(self, fd: int) -> None: ...


class Syscalls:
    """The kernel's perf_event_open(2), read(2) and close(2)."""

    def __init__(self, machine: str | None = None) -> None:
        self.nr = syscall_nr(machine)

    def open(self, event: Event, pid: int, cpu: int, group_fd: int, flags: int) -> int:
        return perf_event_open(attr_bytes(event, flags), pid, cpu, group_fd, self.nr)

    def read(self, fd: int, size: int) -> bytes:
        return os.read(fd, size)

    def close(self, fd: int) -> None:
        os.close(fd)


class SoftwareStandIn(Syscalls):
    """The real syscalls with each hardware event swapped for a software event the kernel counts in
    the same place, at the task's context switches (task-clock for cycles, context-switches for
    instructions, ...): the groups keep their shape, so the cost and the plumbing of the counting can
    be measured and tested on a host without a PMU (a guest without a virtual PMU). The values mean
    what the software events mean, not IPC."""

    HARDWARE_TO_SOFTWARE = {0: 1, 1: 3, 2: 4, 3: 2, 7: 5, 8: 6}  # config -> software config

    def open(self, event: Event, pid: int, cpu: int, group_fd: int, flags: int) -> int:
        if event.type == PERF_TYPE_HARDWARE:
            event = Event(event.name, PERF_TYPE_SOFTWARE, self.HARDWARE_TO_SOFTWARE[event.config])
        return super().open(event, pid, cpu, group_fd, flags)


class Reading(Fields):
    """One read of a group: raw counts by event name and the group's enabled/running times (ns)."""

    _FIELDS = ("counts", "enabled_ns", "running_ns")

    def __init__(self, counts: dict[str, int], enabled_ns: int, running_ns: int) -> None:
        self.counts = counts
        self.enabled_ns = enabled_ns
        self.running_ns = running_ns

    def scaled(self, name: str) -> float | None:
        """The count extrapolated to the whole enabled time (None: the group never ran)."""
        if name not in self.counts or not self.running_ns:
            return None
        return self.counts[name] * self.enabled_ns / self.running_ns

    @property
    def running_share(self) -> float | None:
        return self.running_ns / self.enabled_ns if self.enabled_ns else None


def parse_group(data: bytes, names: list[str]) -> Reading:
    """struct read_format for PERF_FORMAT_GROUP | TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING:
    u64 nr, u64 time_enabled, u64 time_running, u64 value[nr]; values in the order the members
    were opened, leader first."""
    if len(data) < 24:
        raise ValueError(f"short perf group read: {len(data)} bytes")
    nr, enabled, running = struct.unpack_from("=QQQ", data)
    if nr != len(names) or len(data) < 24 + 8 * nr:
        raise ValueError(f"perf group read has {nr} values for {len(names)} events")
    values = struct.unpack_from(f"={nr}Q", data, 24)
    return Reading(dict(zip(names, values)), enabled, running)


def group_bytes(counts: list[int], enabled_ns: int, running_ns: int) -> bytes:
    """What read(2) returns on a group leader with these counts: the inverse of parse_group."""
    return struct.pack(f"=QQQ{len(counts)}Q", len(counts), enabled_ns, running_ns, *counts)


class Group:
    """Events opened as one group on a thread (pid) or a CPU; `names` in member order."""

    def __init__(self, perf: PerfEvents, fds: list[int], names: list[str]) -> None:
        self.perf, self.fds, self.names = perf, fds, names

    def read(self) -> Reading:
        return parse_group(self.perf.read(self.fds[0], 24 + 8 * len(self.names)), self.names)

    def close(self) -> None:
        for fd in reversed(self.fds):
            try:
                self.perf.close(fd)
            except OSError:
                pass


def open_group(perf: PerfEvents, events: list[Event], pid: int, cpu: int, flags: int,
               optional: frozenset[str] = frozenset()) -> tuple[Group, dict[str, str]]:
    """Open events[0] as leader and the others as members. A member named in `optional` that the
    CPU lacks (ENOENT, EOPNOTSUPP, EINVAL) is left out and returned in the second value with the
    error's name; any other failure closes what was opened and raises the OSError."""
    fds: list[int] = []
    names: list[str] = []
    skipped: dict[str, str] = {}
    try:
        for event in events:
            try:
                fd = perf.open(event, pid, cpu, fds[0] if fds else -1, flags)
            except OSError as exc:
                if fds and event.name in optional and exc.errno in (errno.ENOENT, errno.EOPNOTSUPP, errno.EINVAL):
                    skipped[event.name] = errno.errorcode.get(exc.errno or 0, str(exc.errno))
                    continue
                raise PerfOpenError(event, exc) from None
            fds.append(fd)
            names.append(event.name)
    except BaseException:
        Group(perf, fds, names).close()
        raise
    return Group(perf, fds, names), skipped


class PerfOpenError(OSError):
    """perf_event_open of one event failed: the event and the kernel's errno."""

    def __init__(self, event: Event, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror)
        self.event = event

    @property
    def code(self) -> str:
        return errno.errorcode.get(self.errno or 0, str(self.errno))


def paranoid_level(proc: str = "/proc") -> int | None:
    try:
        with open(f"{proc}/sys/kernel/perf_event_paranoid") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def refusal_reason(exc: PerfOpenError, *, paranoid: int | None, root: bool, cpu_wide: bool,
                   virtual: bool) -> str:
    """The exact reason a perf_event_open failed, in words a reader can act on."""
    call = f"perf_event_open({exc.event.name}) gave {exc.code}"
    if exc.errno == errno.ENOENT and exc.event.type == PERF_TYPE_HARDWARE:
        where = ("virtual machine without a virtual PMU" if virtual
                 else "the kernel has no PMU driver for this CPU")
        return f"no hardware PMU: {call} ({where})"
    if exc.errno in (errno.EACCES, errno.EPERM):
        if root:
            return f"{call} although running as root (a security module or seccomp refuses perf events)"
        if cpu_wide:
            return (f"{call}: kernel.perf_event_paranoid = {paranoid} does not allow counting whole CPUs without "
                    "root; it needs -1 or 0 (or CAP_PERFMON)")
        if paranoid is not None and paranoid > 2:
            return (f"{call}: kernel.perf_event_paranoid = {paranoid} does not allow perf events without root; "
                    "it needs 2 or lower (or CAP_PERFMON)")
        return f"{call}: counting another user's process needs root (or CAP_PERFMON)"
    if exc.errno == errno.ENOSYS:
        return f"{call}: the kernel has no perf events (CONFIG_PERF_EVENTS)"
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return f"{call}: out of file descriptors (ulimit -n)"
    if exc.errno == errno.EOPNOTSUPP:
        return f"{call}: the PMU does not support this event"
    return f"{call} ({exc.strerror})"
