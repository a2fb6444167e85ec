"""What the process collector remembers about each process and thread during a window.

Cheap counters are appended every interval (a process's stat; a scope thread's stat and
schedstat); counters that only need a rate over the window (status context switches, io,
the schedstat of threads outside the scope) are kept at the first and last observation only.
Every read tolerates the task vanishing between listing and reading: a vanished task simply
stops being observed and is reported as exited.
"""

from __future__ import annotations

import os
from array import array

from witty_profiler.collectors.lib.procfs import (
    Stat,
    parse_kv_numbers,
    parse_schedstat,
    parse_stat,
    parse_status,
    read_text,
)
from witty_profiler.collectors.lib.sampling import Series


class ThreadState:
    __slots__ = ("tid", "name", "cpu_ticks", "user_ticks", "system_ticks", "run_ns", "wait_ns", "slices",
                 "cpus", "node_ns", "state", "status_first", "status_last", "cpus_allowed")

    def __init__(self, tid: int) -> None:
        self.tid = tid
        self.name = ""
        self.cpu_ticks, self.user_ticks, self.system_ticks = Series(), Series(), Series()
        self.run_ns, self.wait_ns, self.slices = Series(), Series(), Series()
        self.cpus: set[int] = set()  # CPUs it was seen on (the 'processor' field)
        self.node_ns: dict[int, int] = {}  # on-CPU ns attributed to the node of the CPU it was seen on
        self.state = ""
        self.status_first: tuple[float, dict[str, str]] | None = None  # (time, status) at first and last read
        self.status_last: tuple[float, dict[str, str]] | None = None
        self.cpus_allowed = ""

    def observe_stat(self, t: float, st: Stat) -> None:
        self.name = st.comm
        self.state = st.state
        self.cpus.add(st.processor)
        self.user_ticks.add(t, st.utime)
        self.system_ticks.add(t, st.stime)
        self.cpu_ticks.add(t, st.utime + st.stime)

    def observe_schedstat(self, t: float, values: tuple[int, int, int], node: int | None) -> None:
        if node is not None and self.run_ns.values:
            delta = values[0] - self.run_ns.values[-1]
            if delta > 0:
                self.node_ns[node] = self.node_ns.get(node, 0) + delta
        self.run_ns.add(t, values[0])
        self.wait_ns.add(t, values[1])
        self.slices.add(t, values[2])

    def observe_status(self, t: float, status: dict[str, str]) -> None:
        if self.status_first is None:
            self.status_first = (t, status)
        self.status_last = (t, status)
        self.cpus_allowed = status.get("Cpus_allowed_list", self.cpus_allowed)


class ProcState:
    """A process. Its stat is read every interval, so its counters are kept as parallel arrays
    (one time array) rather than Series: appending is the hot path of every sample."""

    __slots__ = ("pid", "starttime", "name", "ppid", "kernel", "times", "utime", "stime", "majflt", "state",
                 "rss_pages", "num_threads", "cpus", "node_ticks", "started_in_window", "gone", "in_scope",
                 "threads", "cmdline", "cgroups", "status_first", "status_last", "io_read", "io_write", "extra",
                 "first_state", "sched_first", "sched_last", "idle_samples", "last_stat", "cpu_ticks_seen",
                 "blkio_first")

    def __init__(self, pid: int, st: Stat, started_in_window: bool) -> None:
        self.pid = pid
        self.starttime = st.starttime
        self.name = st.comm
        self.ppid = st.ppid
        self.kernel = st.kernel_thread
        self.first_state = st.state
        self.blkio_first = st.blkio  # delayacct_blkio_ticks as first seen
        # typed arrays, not lists: an hour at 1 s for 1000 processes stays ~100 MB, not ~500
        self.times = array("d")
        self.utime = array("q")
        self.stime = array("q")
        self.majflt = array("q")
        self.state, self.rss_pages, self.num_threads = "", 0, 0
        self.cpus: set[int] = set()
        self.node_ticks: dict[int, int] = {}
        self.started_in_window = started_in_window
        self.gone = False
        self.in_scope = False
        self.threads: dict[int, ThreadState] = {}
        self.cmdline: str | None = None
        self.cgroups: dict[str, str] | None = None
        self.status_first: tuple[float, dict[str, str]] | None = None  # (time, status)
        self.status_last: tuple[float, dict[str, str]] | None = None
        # storage bytes from /proc/PID/io: at both ends for every process, every interval in scope
        self.io_read, self.io_write = Series(), Series()
        self.sched_first: tuple[float, tuple[int, int, int]] | None = None  # main thread's schedstat
        self.sched_last: tuple[float, tuple[int, int, int]] | None = None
        self.extra: dict = {}  # expensive reads: libraries, env, numa pages, classification
        self.idle_samples = 0  # consecutive reads without CPU time used
        self.last_stat = b""  # the raw stat of the last observe_fields: an identical read changed nothing
        self.cpu_ticks_seen = 0  # cpu_ticks_delta(), kept up to date by observe_fields

    @property
    def exited(self) -> bool:
        """Gone from /proc, or a zombie now (exited, not yet reaped by its parent) that was not one before."""
        return self.gone or (self.state == "Z" and self.first_state != "Z")

    @property
    def first_t(self) -> float:
        return self.times[0]

    @property
    def last_t(self) -> float:
        return self.times[-1]

    def cpu_ticks_delta(self) -> int:
        return self.utime[-1] + self.stime[-1] - self.utime[0] - self.stime[0] if self.times else 0

    def series(self, name: str) -> Series:
        """One counter as a Series: utime, stime, cpu (utime + stime) or majflt."""
        s = Series()
        values = ([u + k for u, k in zip(self.utime, self.stime)] if name == "cpu" else getattr(self, name))
        s.times, s.values = self.times, values  # read-only use: no copy
        return s

    def observe_fields(self, t: float, f: list[str], node_of: dict[int, int]) -> None:
        """observe_stat on the split fields of /proc/PID/stat after the command name (f[0] = state),
        without building a Stat: this runs for every process every interval."""
        utime, stime = int(f[11]), int(f[12])
        processor = int(f[36])
        if self.times:
            delta = utime + stime - self.utime[-1] - self.stime[-1]
            self.idle_samples = 0 if delta else self.idle_samples + 1
            if delta:
                self.cpu_ticks_seen = utime + stime - self.utime[0] - self.stime[0]
            node = node_of.get(processor)
            if node is not None and delta > 0:
                self.node_ticks[node] = self.node_ticks.get(node, 0) + delta
        self.times.append(t)
        self.utime.append(utime)
        self.stime.append(stime)
        self.majflt.append(int(f[9]))
        self.state, self.rss_pages, self.num_threads = f[0], int(f[21]), int(f[17])
        self.cpus.add(processor)

    def observe_unchanged(self, t: float) -> None:
        """observe_fields for a stat identical to the last one: the same counters at a new time
        (most processes of a host sleep, so this is most reads of a sample)."""
        self.times.append(t)
        self.utime.append(self.utime[-1])
        self.stime.append(self.stime[-1])
        self.majflt.append(self.majflt[-1])
        self.idle_samples += 1

    def observe_io(self, t: float, io: dict[str, int]) -> None:
        self.io_read.add(t, io.get("read_bytes", 0))
        self.io_write.add(t, io.get("write_bytes", 0))

    def observe_stat(self, t: float, st: Stat, node: int | None) -> None:
        if node is not None and self.times:
            delta = st.utime + st.stime - self.utime[-1] - self.stime[-1]
            if delta > 0:
                self.node_ticks[node] = self.node_ticks.get(node, 0) + delta
        self.times.append(t)
        self.utime.append(st.utime)
        self.stime.append(st.stime)
        self.majflt.append(st.majflt)
        self.state, self.rss_pages, self.num_threads = st.state, st.rss, st.num_threads
        self.cpus.add(st.processor)


def list_pids(proc: str) -> list[int]:
    try:
        return [int(n) for n in os.listdir(proc) if n.isdigit()]
    except OSError:
        return []


def list_tids(proc: str, pid: int) -> list[int]:
    try:
        return [int(n) for n in os.listdir(f"{proc}/{pid}/task") if n.isdigit()]
    except OSError:
        return []


def read_stat(path: str) -> Stat | None:
    text = read_text(path, small=True)
    return parse_stat(text) if text else None


def read_status(path: str) -> dict[str, str] | None:
    text = read_text(path, small=True)
    return parse_status(text) if text else None


def read_io(proc: str, pid: int) -> dict[str, int] | None:
    text = read_text(f"{proc}/{pid}/io", small=True)
    return parse_kv_numbers(text) if text else None


def read_schedstat(path: str) -> tuple[int, int, int] | None:
    text = read_text(path, small=True)
    return parse_schedstat(text) if text else None
