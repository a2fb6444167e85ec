"""cgroups v1 and v2: CPU quota and throttling, CPU use, memory usage, limit, limit hits, major
faults and pressure.

Both layouts exist in the wild, often together (a hybrid host mounts v1 controllers under
/sys/fs/cgroup/<controller> and an empty v2 tree at /sys/fs/cgroup/unified). The mount points
come from /proc/self/mounts, the cgroups of interest from /proc/PID/cgroup of the processes;
the counters (cpu.stat, cpuacct.usage, memory.stat, memory.failcnt or memory.events, *.pressure)
are read every interval, usage, limits and quota at the end. The fragment holds the cgroups of the
processes in scope (the process collector's scope, else the given pids, else every process)
with their in_cgroup edges.
"""

from __future__ import annotations

import time

from witty_profiler.collectors.base import CounterCollector, register
from witty_profiler.collectors.lib.procfs import parse_cgroup, parse_kv_numbers, parse_psi, read_text
from witty_profiler.collectors.lib.sampling import ratio_metrics, window_metrics
from witty_profiler.collectors.lib.tasks import list_pids
from witty_profiler.topology import Graph
from witty_profiler.topology.ids import entity_id, process_id
from witty_profiler.topology.vocabulary import E, M, T

UNLIMITED = 1 << 62  # v1 writes "no limit" as a page-rounded LONG_MAX


def cgroup_mounts(mounts_text: str) -> dict[str, str]:
    """{controller: mount point} from /proc/self/mounts; '' is the v2 unified hierarchy."""
    found: dict[str, str] = {}
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        if parts[2] == "cgroup2":
            found.setdefault("", parts[1])
        elif parts[2] == "cgroup":
            for opt in parts[3].split(","):
                if opt in ("cpu", "cpuacct", "memory", "cpuset", "blkio", "pids") or opt.startswith("name="):
                    found.setdefault(opt, parts[1])
    return found


def quota_cores(quota_text: str | None, period_text: str | None = None) -> float | None:
    """v1 cfs_quota_us + cfs_period_us, or v2 cpu.max ('max 100000' / '50000 100000'); None = no quota."""
    if quota_text is None:
        return None
    parts = quota_text.split()
    if period_text is not None:  # v1
        quota, period = int(parts[0]), int(period_text.split()[0])
        return round(quota / period, 3) if quota > 0 and period > 0 else None
    if len(parts) == 2 and parts[0] != "max" and int(parts[1]) > 0:
        return round(int(parts[0]) / int(parts[1]), 3)
    return None


@register
class CgroupCollector(CounterCollector):
    name = "cgroup"
    reads = ("/proc/PID/cgroup, /proc/self/mounts; cpu.stat, cpuacct.usage, memory.stat, memory.events or failcnt,"
             " *.pressure of v1 and v2 cgroups")
    needs = "any user"

    def start(self) -> None:
        self.mounts = cgroup_mounts(read_text(f"{self.ctx.proc}/self/mounts") or "")
        self.members: dict[tuple[str, str], set[int]] = {}  # (version, path) -> pids
        self.dirs: dict[tuple[str, str], dict[str, str]] = {}  # (version, path) -> {role: directory}
        unified = self.mounts.get("")
        # a hybrid host mounts an empty v2 tree next to v1: only a v2 tree with controllers has numbers
        self.v2_in_use = bool(unified and (read_text(f"{unified}/cgroup.controllers") or "").strip())
        cached = self.ctx.cache.get("proc_cgroups") or {}
        for pid in list_pids(str(self.ctx.proc)):
            groups = cached.get(pid)
            if groups is None:
                groups = parse_cgroup(read_text(f"{self.ctx.proc}/{pid}/cgroup") or "")
            self._add(pid, groups)
        super().start()

    def _add(self, pid: int, groups: dict[str, str]) -> None:
        unified = self.mounts.get("")
        for controller, role in (("cpu", "cpu"), ("cpuacct", "cpuacct"), ("memory", "memory")):
            if controller in groups and controller in self.mounts:
                key = ("v1", groups[controller])
                self.members.setdefault(key, set()).add(pid)
                self.dirs.setdefault(key, {})[role] = self.mounts[controller] + groups[controller].rstrip("/")
        if "" in groups and unified and self.v2_in_use:
            key = ("v2", groups[""])
            self.members.setdefault(key, set()).add(pid)
            self.dirs.setdefault(key, {})["v2"] = unified + groups[""].rstrip("/")

    def _read(self) -> None:
        for key, dirs in self.dirs.items():
            t = time.monotonic()
            if "cpu" in dirs or "v2" in dirs:
                text = read_text(f"{dirs.get('cpu') or dirs['v2']}/cpu.stat")
                if text:
                    self.series.add_many(key, t, parse_kv_numbers(text, sep=" "))
            if "cpuacct" in dirs:
                usage = read_text(f"{dirs['cpuacct']}/cpuacct.usage")
                if usage and usage.strip().isdigit():
                    self.series[(key, "usage_ns")].add(t, int(usage))
            mem_dir = dirs.get("memory") or dirs.get("v2")
            if mem_dir:
                self._read_memory(key, t, mem_dir, v1="memory" in dirs)
            if "v2" in dirs:
                for resource in ("cpu", "io", "memory"):
                    psi = parse_psi(read_text(f"{dirs['v2']}/{resource}.pressure") or "")
                    for line, total in psi.items():
                        self.series[(key, f"psi_{resource}_{line}")].add(t, total)

    def _read_memory(self, key: tuple[str, str], t: float, mem_dir: str, v1: bool) -> None:
        """Major faults and hits of the memory limit: v1 has no PSI, and these two say whether a
        container's limit makes its tasks wait for the disk (reclaimed page cache read again)."""
        stat = parse_kv_numbers(read_text(f"{mem_dir}/memory.stat") or "", sep=" ")
        faults = stat.get("total_pgmajfault", stat.get("pgmajfault"))  # v1 total_: with its children, as v2
        if faults is not None:
            self.series[(key, "pgmajfault")].add(t, faults)
        if v1:
            hits = read_text(f"{mem_dir}/memory.failcnt")
            hits_count = int(hits) if hits and hits.strip().isdigit() else None
        else:
            hits_count = parse_kv_numbers(read_text(f"{mem_dir}/memory.events") or "", sep=" ").get("max")
        if hits_count is not None:
            self.series[(key, "limit_hits")].add(t, hits_count)

    def finish(self) -> Graph:
        self._read()
        if not self.mounts:
            return self.unavailable("no cgroup filesystem mounted (see /proc/self/mounts)")
        scope = self.ctx.cache.get("scope_pids")
        if scope is None:
            scope = self.ctx.pids
        g = self.fragment()
        host = self.ctx.host
        for key in sorted(self.members):
            pids = self.members[key] if scope is None else self.members[key] & set(scope)
            if not pids:
                continue
            version, path = key
            cid = entity_id(T.CGROUP, host, version, path)
            g.entity_of(T.CGROUP, cid, {"version": version, "path": path, "controllers": sorted(self.dirs[key])},
                        self._metrics(key))
            for pid in sorted(pids):
                g.edge_of(E.IN_CGROUP, process_id(host, pid), cid)
        return g

    def _metrics(self, key: tuple[str, str]) -> dict:
        s, dirs = self.series, self.dirs[key]
        m: dict = {}
        periods, throttled = s.get((key, "nr_periods")), s.get((key, "nr_throttled"))
        if periods is not None and throttled is not None and (periods.delta() or 0) > 0:
            m.update(ratio_metrics(M.THROTTLED_PERIODS_PCT, throttled, periods, digits=2))
        elif periods is not None and throttled is not None and periods.delta() == 0:
            m[M.THROTTLED_PERIODS_PCT] = 0.0
        if s.get((key, "throttled_time")) is not None:  # v1, ns
            m.update(window_metrics(M.THROTTLED_MS_PER_S, s[(key, "throttled_time")], scale=1e-6, digits=2))
        elif s.get((key, "throttled_usec")) is not None:  # v2, us
            m.update(window_metrics(M.THROTTLED_MS_PER_S, s[(key, "throttled_usec")], scale=1e-3, digits=2))
        if s.get((key, "usage_ns")) is not None:
            m.update(window_metrics(M.CPU_UTIL_PCT, s[(key, "usage_ns")], scale=1e-7, digits=2))
        elif s.get((key, "usage_usec")) is not None:
            m.update(window_metrics(M.CPU_UTIL_PCT, s[(key, "usage_usec")], scale=1e-4, digits=2))
        for line in ("cpu_some", "io_some", "io_full", "memory_some", "memory_full"):
            series = s.get((key, f"psi_{line}"))
            if series is not None:
                m.update(window_metrics(f"psi_{line}_pct", series, scale=1e-4, digits=3))
        if s.get((key, "pgmajfault")) is not None:
            m.update(window_metrics(M.MAJOR_FAULTS_PER_S, s[(key, "pgmajfault")], digits=2))
        if s.get((key, "limit_hits")) is not None:
            m.update(window_metrics(M.MEMORY_LIMIT_HITS_PER_S, s[(key, "limit_hits")], digits=2))
        if "cpu" in dirs:
            cores = quota_cores(read_text(f"{dirs['cpu']}/cpu.cfs_quota_us"),
                                read_text(f"{dirs['cpu']}/cpu.cfs_period_us"))
        else:
            cores = quota_cores(read_text(f"{dirs['v2']}/cpu.max")) if "v2" in dirs else None
        if cores is not None:
            m[M.CPU_QUOTA_CORES] = cores
        mem_dir = dirs.get("memory") or dirs.get("v2")
        if mem_dir:
            v1 = "memory" in dirs
            usage = read_text(f"{mem_dir}/{'memory.usage_in_bytes' if v1 else 'memory.current'}")
            limit = read_text(f"{mem_dir}/{'memory.limit_in_bytes' if v1 else 'memory.max'}")
            if usage and usage.strip().isdigit():
                m[M.MEMORY_USAGE_BYTES] = int(usage)
            if limit and limit.strip().isdigit() and int(limit) < UNLIMITED:
                m[M.MEMORY_LIMIT_BYTES] = int(limit)
        return m
