"""CPU performance counters over the window: IPC, last-level cache misses and, where the CPU offers
them, stalled cycles, per workload process and per CPU (the host is the sum of its CPUs).

Counting only, no sampling: one group of events per thread of each process in scope (perf_event_open
counts one thread; `inherit` adds the threads it starts later) and one per online CPU, opened as the
window starts and read once at its end. The core group is cycles, instructions, cache-references and
cache-misses; stalled-cycles-frontend/-backend go in a second group with cycles, so that a CPU that
lacks them (most Intel cores) or a PMU short of counters costs the core group nothing. Counts are
scaled by time_enabled / time_running; `pmu_running_pct` says which share of the window a subject's
groups were on the PMU (under 100: multiplexed with other users of the counters).

Without root, kernel.perf_event_paranoid decides: up to 2 a user may count its own processes (user
space only at 2), whole CPUs only at 0 or -1.
"""

from __future__ import annotations

import errno
import os
import resource

from witty_profiler.collectors.base import Collector, Context, register
from witty_profiler.collectors.lib.perf_event import (
    ATTR_EXCLUDE_HV,
    ATTR_EXCLUDE_KERNEL,
    ATTR_INHERIT,
    CACHE_MISSES,
    CACHE_REFERENCES,
    CYCLES,
    INSTRUCTIONS,
    STALLED_BACKEND,
    STALLED_FRONTEND,
    Group,
    PerfEvents,
    PerfOpenError,
    Syscalls,
    open_group,
    paranoid_level,
    refusal_reason,
)
from witty_profiler.collectors.lib.procfs import cpu_flags, read_text
from witty_profiler.collectors.lib.tasks import list_tids
from witty_profiler.topology import Graph
from witty_profiler.topology.cpulist import parse_cpulist
from witty_profiler.topology.ids import cpu_id, host_id, process_id
from witty_profiler.topology.models import Fields
from witty_profiler.topology.vocabulary import M, T
from witty_profiler.topology.wording import counted

CORE = [CYCLES, INSTRUCTIONS, CACHE_REFERENCES, CACHE_MISSES]
STALLS = [CYCLES, STALLED_FRONTEND, STALLED_BACKEND]
STALL_NAMES = frozenset(e.name for e in STALLS[1:])
FDS_KEPT_FREE = 64  # descriptors left for the other collectors of the round


class Counts(Fields):
    """Scaled counts of one subject, summed over its threads' (or CPUs') groups by kind ('core', 'stalls':
    a ratio takes both its counts from groups of one kind), and the times the groups ran."""

    _FIELDS = ("values", "enabled_ns", "running_ns")

    def __init__(self, values: dict[str, float] | None = None, enabled_ns: int = 0, running_ns: int = 0) -> None:
        self.values = {} if values is None else values
        self.enabled_ns = enabled_ns
        self.running_ns = running_ns

    def add(self, kind: str, group: Group) -> None:
        r = group.read()
        self.enabled_ns += r.enabled_ns
        self.running_ns += r.running_ns
        for name in r.counts:
            value = r.scaled(name)
            if value is not None:
                self.values[f"{kind}/{name}"] = self.values.get(f"{kind}/{name}", 0.0) + value

    def merge(self, other: Counts) -> None:
        for key, value in other.values.items():
            self.values[key] = self.values.get(key, 0.0) + value
        self.enabled_ns += other.enabled_ns
        self.running_ns += other.running_ns

    def metrics(self) -> dict[str, float]:
        v, out = self.values, {}
        if v.get("core/cycles") and "core/instructions" in v:
            out[M.IPC] = round(v["core/instructions"] / v["core/cycles"], 3)
        if v.get("core/cache-references") and "core/cache-misses" in v:
            out[M.LLC_MISS_PCT] = round(min(100.0, 100.0 * v["core/cache-misses"] / v["core/cache-references"]), 2)
        for name, metric in (("stalled-cycles-frontend", M.STALLED_CYCLES_FRONTEND_PCT),
                             ("stalled-cycles-backend", M.STALLED_CYCLES_BACKEND_PCT)):
            if v.get("stalls/cycles") and f"stalls/{name}" in v:
                out[metric] = round(100.0 * v[f"stalls/{name}"] / v["stalls/cycles"], 2)
        if self.enabled_ns:
            out[M.PMU_RUNNING_PCT] = round(100.0 * self.running_ns / self.enabled_ns, 1)
        return out


def is_virtual(ctx: Context) -> bool:
    """A guest: x86 CPUs flag it in cpuinfo; Xen guests of any architecture have /sys/hypervisor/type."""
    return "hypervisor" in cpu_flags(ctx.proc) or bool((read_text(f"{ctx.sys}/hypervisor/type") or "").strip())


@register
class PmuCollector(Collector):
    name = "pmu"
    reads = ("perf_event_open hardware counters per workload thread and per CPU (cycles, instructions, cache "
             "misses, stalls)")
    needs = "a hardware PMU; perf_event_paranoid <= 1 or root"
    order = 20  # starts after the process collector, whose scope it counts

    def __init__(self, ctx: Context, perf: PerfEvents | None = None) -> None:
        super().__init__(ctx)
        self.perf = perf
        self.problem: str | None = None  # why nothing can be counted
        self.notes: list[str] = []  # what could not be counted, the rest was
        self.groups: dict[str, list[tuple[str, Group]]] = {}  # subject id -> its groups, by kind
        self.cpu_of: dict[str, int] = {}
        self.threads: dict[int, tuple[int, int]] = {}  # pid -> (threads counted, threads seen)
        self.stalls: bool | None = None  # None until the first stall group was tried
        self.stalls_missing: dict[str, str] = {}

    # -- the window -------------------------------------------------------------------------
    def start(self) -> None:
        self.paranoid = paranoid_level(str(self.ctx.proc))
        if self.paranoid is None:
            self.problem = (f"{self.ctx.proc}/sys/kernel/perf_event_paranoid absent: the kernel has no perf events "
                            "(CONFIG_PERF_EVENTS)")
            return
        try:
            self.perf = self.perf or Syscalls()
        except OSError as exc:
            self.problem = exc.strerror or str(exc)
            return
        self.root = self.ctx.is_root
        self.virtual = is_virtual(self.ctx)
        self.budget = _fd_budget()
        # at paranoid 2 a user counts user space only; asking for the kernel too would be refused
        self.user_only = not self.root and self.paranoid >= 2
        try:
            self._open_cpus()
            self._open_processes()
        except _Stop as stop:
            self._close_all()
            self.problem = str(stop)
        except BaseException:  # the engine will not call finish(): nothing may stay open
            self._close_all()
            raise

    def _open_cpus(self) -> None:
        host = host_id(self.ctx.host)
        cpus = parse_cpulist(read_text(f"{self.ctx.sys}/devices/system/cpu/online"))
        for n in cpus:
            cid = cpu_id(self.ctx.host, n)
            if not self._open(cid, pid=-1, cpu=n, flags=0):
                return
            self.cpu_of[cid] = n
        if self.cpu_of:
            self.groups[host] = []  # the host is the sum of its CPUs' groups

    def _open_processes(self) -> None:
        pids = self.ctx.cache.get("scope_pids") or sorted(self.ctx.pids or ())
        flags = ATTR_INHERIT | (ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV if self.user_only else 0)
        for pid in pids:
            tids = list_tids(str(self.ctx.proc), pid)
            counted_tids = 0
            for tid in tids:
                if self._open(process_id(self.ctx.host, pid), pid=tid, cpu=-1, flags=flags):
                    counted_tids += 1
                elif self.budget <= 0:
                    break
            if tids:
                self.threads[pid] = (counted_tids, len(tids))

    def _open(self, subject: str, pid: int, cpu: int, flags: int) -> bool:
        """Open the core group (and the stall group where the CPU has one) of one thread or CPU;
        False when it was not counted. Raises _Stop when nothing at all can be counted."""
        if self.budget < len(CORE) + len(STALLS):
            self._note("out of file descriptors: some threads not counted (raise ulimit -n)")
            self.budget = 0
            return False
        try:
            core, _ = open_group(self.perf, CORE, pid, cpu, flags)
        except PerfOpenError as exc:
            if exc.errno == errno.ESRCH:
                return False  # the thread ended before it could be counted
            reason = refusal_reason(exc, paranoid=self.paranoid, root=self.root, cpu_wide=pid == -1,
                                    virtual=self.virtual)
            if exc.errno in (errno.ENOENT, errno.ENOSYS):  # no PMU, no perf events: nothing will open
                raise _Stop(reason) from None
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                self.budget = 0
            self._note(f"no per-CPU or host counters: {reason}" if pid == -1 else reason)
            return False
        self.budget -= len(core.fds)
        self.groups.setdefault(subject, []).append(("core", core))
        if self.stalls is not False:
            self._open_stalls(subject, pid, cpu, flags)
        return True

    def _open_stalls(self, subject: str, pid: int, cpu: int, flags: int) -> None:
        try:
            group, skipped = open_group(self.perf, STALLS, pid, cpu, flags, optional=STALL_NAMES)
        except PerfOpenError as exc:
            if exc.errno != errno.ESRCH:  # not just a thread that ended in between
                self.stalls = False
            return
        if self.stalls is None:
            self.stalls_missing = skipped
        if len(group.names) == 1:  # cycles alone: this CPU offers no stall event
            group.close()
            self.stalls = False
            return
        self.stalls = True
        self.budget -= len(group.fds)
        self.groups[subject].append(("stalls", group))

    def _note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def _close_all(self) -> None:
        for groups in self.groups.values():
            for _, g in groups:
                g.close()
        self.groups = {}

    def finish(self) -> Graph:
        if self.problem:
            return self.unavailable(self.problem)
        if not self.groups:
            return self.unavailable("nothing to count: no process in scope and no CPU counted"
                                    + (f" ({'; '.join(self.notes)})" if self.notes else ""))
        counts: dict[str, Counts] = {}
        try:
            for subject, groups in self.groups.items():
                c = counts.setdefault(subject, Counts())
                for kind, g in groups:
                    c.add(kind, g)
        finally:
            self._close_all()
        host = host_id(self.ctx.host)
        if host in counts:
            for cid in self.cpu_of:
                counts[host].merge(counts[cid])
        return self._graph(counts)

    def _graph(self, counts: dict[str, Counts]) -> Graph:
        g = self.fragment()
        for subject, c in counts.items():
            metrics = c.metrics()
            if subject.startswith(f"{T.CPU}:"):
                g.entity_of(T.CPU, subject, {"cpu": self.cpu_of[subject]}, metrics)
            elif subject.startswith(f"{T.HOST}:"):
                self.add_host(g, metrics)
            else:
                pid = int(subject.rsplit(":", 1)[1])
                done, seen = self.threads.get(pid, (0, 0))
                g.entity_of(T.PROCESS, subject, {"pid": pid, "pmu_threads_counted": done}, metrics)
        partial = [p for p, (done, seen) in self.threads.items() if done < seen]
        if partial:
            self._note(f"{counted(len(partial), 'processes')} counted on some of their threads only")
        for note in self.notes:
            self.partial(note)
        self.status.extra["counted"] = "user space" if self.user_only else "user and kernel"
        self.status.extra["events"] = [e.name for e in CORE] + (
            [e.name for e in STALLS[1:] if e.name not in self.stalls_missing] if self.stalls else [])
        if self.stalls is False or self.stalls_missing:
            self.status.extra["events_missing"] = {e.name: self.stalls_missing.get(e.name, "ENOENT")
                                                   for e in STALLS[1:]
                                                   if not self.stalls or e.name in self.stalls_missing}
        return g


class _Stop(Exception):
    """Nothing can be counted on this host; the message says why."""


def _fd_budget() -> int:
    """Descriptors the groups may take: the soft limit less those open and a reserve."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        open_now = len(os.listdir("/proc/self/fd"))
    except OSError:
        open_now = 0
    return max(0, soft - open_now - FDS_KEPT_FREE)
