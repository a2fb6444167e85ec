"""DRAM bandwidth per NUMA node and for the host, and its share of the platform's peak.

Where the bytes come from, the first that the host offers:

- resctrl memory bandwidth monitoring (Intel RDT MBM, AMD PQoS): mon_data/mon_L3_XX/mbm_total_bytes
  of each control group, per L3 domain, read every interval (a file read each). resctrl is mounted
  for the window when it is not and the kernel and CPU support it (root only), and unmounted after.
  MBM counts the traffic that leaves the L3 towards memory, reads and writes together.
- uncore memory-controller PMUs through perf_event_open, one counter per controller and direction,
  with the kernel's scale and unit: Intel uncore_imc_N cas_count_read/cas_count_write (or the
  free-running data_read/data_write), HiSilicon Kunpeng hisi_scclN_ddrcM flux_rd/flux_wr (32 bytes a
  count). AMD's amd_df names no DRAM events in sysfs, so it is not read.

The peak is WITTY_DRAM_PEAK_GBS (GB/s for the host) when set, else the SMBIOS memory devices (see
collectors.smbios); a node's peak is the host's in proportion to the memory it holds.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import time
from collections.abc import Callable
from typing import NamedTuple

from witty_profiler.collectors.base import Collector, Context, register
from witty_profiler.collectors.lib.perf_event import (
    Event,
    Group,
    PerfEvents,
    PerfOpenError,
    Syscalls,
    open_group,
    paranoid_level,
    refusal_reason,
)
from witty_profiler.collectors.lib.procfs import cpu_flags, parse_meminfo, read_text
from witty_profiler.collectors.lib.sampling import SeriesTable
from witty_profiler.collectors.lib.smbios import memory_devices, peak_bytes_per_s
from witty_profiler.collectors.numa import cpu_to_node, numa_topology
from witty_profiler.topology import Graph
from witty_profiler.topology.cpulist import parse_cpulist
from witty_profiler.topology.ids import numa_id
from witty_profiler.topology.vocabulary import M, T

PEAK_ENV = "WITTY_DRAM_PEAK_GBS"
UNITS = {"": 1, "B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3, "KB": 1e3, "MB": 1e6, "GB": 1e9}
# PMU name pattern -> (read event, write event) names to try in order, and bytes per count without a .scale
UNCORE = (("uncore_imc", re.compile(r"uncore_imc(_free_running)?_\d+$"),
           (("cas_count_read", "cas_count_write"), ("data_read", "data_write")), 1.0),
          ("hisi ddrc", re.compile(r"hisi_sccl\d+_ddrc\d*(_\d+)?$"), (("flux_rd", "flux_wr"),), 32.0))


# -- resctrl ----------------------------------------------------------------------------------
def resctrl_plan(ctx: Context) -> tuple[str | None, bool]:
    """(the resctrl root to read, whether it must be mounted first); raises _NotHere with the
    reason it cannot be used."""
    root = f"{ctx.sys}/fs/resctrl"
    if os.path.isdir(f"{root}/mon_data"):
        return root, False
    if not os.path.isdir(root):
        raise _NotHere(f"{root} absent (kernel without resctrl)")
    if "resctrl" not in (read_text(f"{ctx.proc}/filesystems") or ""):
        raise _NotHere(f"resctrl not in {ctx.proc}/filesystems")
    flags = cpu_flags(ctx.proc)
    if "cqm_mbm_total" not in flags:
        raise _NotHere("the CPU has no memory bandwidth monitoring (no cqm_mbm_total in the cpuinfo flags)")
    if not ctx.is_root:
        raise _NotHere(f"{root} is not mounted and mounting it needs root")
    return root, True


def mount_resctrl(root: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"resctrl", root.encode(), b"resctrl", ctypes.c_ulong(0), None) != 0:
        code = ctypes.get_errno()
        raise _NotHere(f"mount -t resctrl resctrl {root} gave {errno.errorcode.get(code, code)}")


def unmount_resctrl(root: str) -> None:
    ctypes.CDLL(None, use_errno=True).umount2(root.encode(), 0)


def control_groups(root: str) -> list[str]:
    """The root group and every CTRL_MON group: each one's mon_data counts its tasks and those of
    its MON groups, so together they count every task once."""
    groups = [root]
    for name in sorted(os.listdir(root)):
        path = f"{root}/{name}"
        if name not in ("info", "mon_groups", "mon_data") and os.path.isdir(f"{path}/mon_data"):
            groups.append(path)
    return groups


def l3_domains(ctx: Context) -> dict[int, int]:
    """L3 cache id -> NUMA node, from each CPU's cache/indexN (level 3)."""
    base = f"{ctx.sys}/devices/system/cpu"
    node_of = cpu_to_node(ctx)
    out: dict[int, int] = {}
    for cpu in parse_cpulist(read_text(f"{base}/online")):
        for index in range(4):
            cache = f"{base}/cpu{cpu}/cache/index{index}"
            if (read_text(f"{cache}/level") or "").strip() == "3":
                cache_id = (read_text(f"{cache}/id") or "").strip()
                if cache_id.isdigit():
                    out.setdefault(int(cache_id), node_of.get(cpu, 0))
    return out


# -- uncore PMUs ----------------------------------------------------------------------------------
class UncoreCounter(NamedTuple):
    pmu: str
    family: str  # what the source is called: uncore_imc, hisi ddrc
    event: Event
    direction: str  # read | write
    bytes_per_count: float
    cpu: int


def event_config(spec: str, formats: dict[str, str]) -> int | None:
    """'event=0x04,umask=0x03' with the PMU's format fields ('config:0-7', 'config:8-15') -> config;
    None when a field lives elsewhere (config1) or is unknown."""
    config = 0
    for term in spec.strip().split(","):
        name, _, value = term.partition("=")
        value_int = int(value, 0) if value else 1
        if name == "config":
            config |= value_int
            continue
        fmt = formats.get(name)
        if fmt is None or not fmt.startswith("config:"):
            return None
        shift = 0
        for bits in fmt.split(":", 1)[1].split(","):
            lo, _, hi = bits.partition("-")
            width = int(hi or lo) - int(lo) + 1
            config |= ((value_int >> shift) & ((1 << width) - 1)) << int(lo)
            shift += width
    return config


def uncore_counters(ctx: Context) -> list[UncoreCounter]:
    base = f"{ctx.sys}/bus/event_source/devices"
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    found = []
    for pmu in names:
        for family, pattern, choices, default_scale in UNCORE:
            if not pattern.match(pmu):
                continue
            d = f"{base}/{pmu}"
            kind, cpus = (read_text(f"{d}/type") or "").strip(), parse_cpulist(read_text(f"{d}/cpumask"))
            try:
                formats = {f: (read_text(f"{d}/format/{f}") or "").strip() for f in os.listdir(f"{d}/format")}
            except OSError:
                formats = {}
            for pair in choices:
                specs = [(read_text(f"{d}/events/{e}") or "").strip() for e in pair]
                if not all(specs) or not kind.isdigit() or not cpus:
                    continue
                for name, spec, direction in zip(pair, specs, ("read", "write")):
                    config = event_config(spec, formats)
                    if config is None:
                        continue
                    scale = float((read_text(f"{d}/events/{name}.scale") or "").strip() or default_scale)
                    unit = UNITS.get((read_text(f"{d}/events/{name}.unit") or "").strip(), 1)
                    # cpumask lists one CPU per socket the PMU counts on (Intel's uncore_imc_0 is every
                    # socket's first controller): one counter on each
                    for cpu in cpus:
                        found.append(UncoreCounter(pmu, family, Event(f"{pmu}/{name}", int(kind), config),
                                                   direction, scale * unit, cpu))
                break
    return found


class _NotHere(Exception):
    """This source cannot be used here; the message says why."""


@register
class MemoryBandwidthCollector(Collector):
    name = "membw"
    reads = "resctrl MBM, else uncore memory-controller PMUs; SMBIOS memory devices for the peak"
    needs = "root (mounts resctrl, opens uncore PMUs); a CPU with MBM or an IMC PMU"

    def __init__(self, ctx: Context, perf: PerfEvents | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(ctx)
        self.perf, self.clock = perf, clock
        self.source: str | None = None
        self.why_not: list[str] = []
        self.mounted: str | None = None
        self.resctrl: str | None = None
        self.counters: list[tuple[UncoreCounter, Group]] = []
        self.series = SeriesTable()

    def start(self) -> None:
        try:
            self._start()
        except BaseException:  # the engine will not call finish(): unmount and close now
            self._close_uncore()
            self._unmount()
            raise

    def _start(self) -> None:
        try:
            self.resctrl, must_mount = resctrl_plan(self.ctx)
            if must_mount:
                mount_resctrl(self.resctrl)
                self.mounted = self.resctrl
            features = read_text(f"{self.resctrl}/info/L3_MON/mon_features") or ""
            if "mbm_total_bytes" not in features.split():
                raise _NotHere(f"{self.resctrl}/info/L3_MON/mon_features has no mbm_total_bytes")
            self.domains = l3_domains(self.ctx)
            self.source = "resctrl"
        except _NotHere as exc:
            self.why_not.append(f"resctrl: {exc}")
            self._unmount()
            self.resctrl = None
            self._open_uncore()
        self._read()

    def _open_uncore(self) -> None:
        counters = uncore_counters(self.ctx)
        if not counters:
            amd = os.path.isdir(f"{self.ctx.sys}/bus/event_source/devices/amd_df")
            self.why_not.append("uncore: " + ("amd_df names no DRAM events in sysfs" if amd else
                                              "no uncore_imc, hisi ddrc PMU in /sys/bus/event_source/devices"))
            return
        try:
            self.perf = self.perf or Syscalls()
        except OSError as exc:
            self.why_not.append(f"uncore: {exc.strerror}")
            return
        paranoid = paranoid_level(str(self.ctx.proc))
        for counter in counters:
            try:
                group, _ = open_group(self.perf, [counter.event], -1, counter.cpu, 0)
            except PerfOpenError as exc:
                self._close_uncore()
                self.why_not.append("uncore: " + refusal_reason(exc, paranoid=paranoid, root=self.ctx.is_root,
                                                                cpu_wide=True, virtual=False))
                return
            self.counters.append((counter, group))
        self.source = ", ".join(sorted({c.family for c, _ in self.counters}))

    def sample(self) -> None:
        self._read()

    def _read(self) -> None:
        """Cumulative bytes per (node, direction) at this moment. A node with a counter that could not
        be read this time ('Unavailable' while resctrl reassigns an RMID, a group that never ran) is
        left out of this read: a sum over fewer counters would fall, then jump."""
        t = self.clock()
        totals: dict[tuple[int, str], float] = {}
        unread: set[int] = set()
        if self.resctrl:
            for group in control_groups(self.resctrl):
                for name in os.listdir(f"{group}/mon_data"):
                    if not name.startswith("mon_L3_"):
                        continue
                    node = self.domains.get(int(name[7:]), 0)
                    value = (read_text(f"{group}/mon_data/{name}/mbm_total_bytes") or "").strip()
                    if not value.isdigit():
                        unread.add(node)
                        continue
                    totals[(node, "total")] = totals.get((node, "total"), 0.0) + int(value)
        node_of = cpu_to_node(self.ctx)
        for counter, group in self.counters:
            node = node_of.get(counter.cpu, 0)
            count = group.read().scaled(counter.event.name)
            if count is None:
                unread.add(node)
                continue
            for key in ((node, counter.direction), (node, "total")):
                totals[key] = totals.get(key, 0.0) + count * counter.bytes_per_count
        for key, value in totals.items():
            if key[0] not in unread:
                self.series[key].add(t, value)

    def finish(self) -> Graph:
        try:
            if self.source:
                self._read()
        finally:
            self._close_uncore()
            self._unmount()
        if not self.source:
            return self.unavailable("no DRAM bandwidth counters: " + "; ".join(self.why_not))
        g = self.fragment()
        peak, peak_from = self._peak()
        nodes = self.series.prefixes()
        shares = self._memory_shares(nodes)
        host_bytes: dict[str, float] = {}
        for node in nodes:
            metrics = self._node_metrics(node)
            total = metrics.get(M.MEM_BYTES_PER_S)
            if total is not None:
                host_bytes[M.MEM_BYTES_PER_S] = host_bytes.get(M.MEM_BYTES_PER_S, 0.0) + total
            for m in (M.MEM_READ_BYTES_PER_S, M.MEM_WRITE_BYTES_PER_S):
                if m in metrics:
                    host_bytes[m] = host_bytes.get(m, 0.0) + metrics[m]
            if peak and total is not None:
                node_peak = peak * shares.get(node, 1.0 / len(nodes))
                metrics.update(_utilisation(metrics, node_peak))
            g.entity_of(T.NUMA_NODE, numa_id(self.ctx.host, node), {"node": node}, metrics)
        host = {k: round(v, 1) for k, v in host_bytes.items()}
        if peak and M.MEM_BYTES_PER_S in host:
            host.update(_utilisation(host, peak))
        self.add_host(g, host)
        self.status.extra["source"] = self.source
        self.status.extra["peak"] = peak_from
        if not peak:
            self.partial(f"no DRAM peak bandwidth, so no utilisation: {peak_from}")
        return g

    def _node_metrics(self, node: int) -> dict[str, float]:
        return self.series.rates({(node, "total"): M.MEM_BYTES_PER_S, (node, "read"): M.MEM_READ_BYTES_PER_S,
                                  (node, "write"): M.MEM_WRITE_BYTES_PER_S}, digits=1)

    def _peak(self) -> tuple[float | None, str]:
        configured = os.environ.get(PEAK_ENV)
        if configured:
            try:
                return float(configured) * 1e9, f"{PEAK_ENV}={configured}"
            except ValueError:
                return None, f"{PEAK_ENV}={configured!r} is not a number of GB/s"
        try:
            devices = memory_devices(str(self.ctx.sys))
        except OSError as exc:
            return None, (f"SMBIOS memory devices unreadable ({exc.strerror}: {exc.filename}); set {PEAK_ENV}")
        peak = peak_bytes_per_s(devices)
        if not peak:
            return None, f"no populated SMBIOS memory device with a speed and width; set {PEAK_ENV}"
        populated = [d for d in devices if d.size_mb]
        return peak, (f"SMBIOS: {len(populated)} populated memory devices on {len({d.channel for d in populated})} "
                      f"channels at {max(d.speed_mts for d in populated)} MT/s x "
                      f"{max(d.data_width_bits for d in populated)} bits")

    def _memory_shares(self, nodes: list[int]) -> dict[int, float]:
        sizes = {}
        for node in numa_topology(self.ctx):
            mem = parse_meminfo(read_text(f"{self.ctx.sys}/devices/system/node/node{node}/meminfo") or "")
            if mem.get("MemTotal"):
                sizes[node] = mem["MemTotal"]
        total = sum(sizes.values())
        return {n: sizes[n] / total for n in sizes} if total else {}

    def _close_uncore(self) -> None:
        for _, group in self.counters:
            group.close()
        self.counters = []

    def _unmount(self) -> None:
        if self.mounted:
            unmount_resctrl(self.mounted)
            self.mounted = None


def _utilisation(metrics: dict[str, float], peak: float) -> dict[str, float]:
    out = {M.DRAM_BW_PEAK_BYTES_PER_S: round(peak, 1)}
    for suffix in ("", "_p95", "_max"):
        value = metrics.get(M.MEM_BYTES_PER_S + suffix)
        if value is not None:
            out[M.DRAM_BW_UTIL_PCT + suffix] = round(100.0 * value / peak, 2)
    return out
