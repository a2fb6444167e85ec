"""DRAM bandwidth: resctrl MBM and uncore memory-controller PMU trees laid out as the kernel lays
them out (on tmpfs), SMBIOS type 17 structures built per DSP0134, memory.bandwidth_wall judged on
what the collector gives, and this host live."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from graph_checks import assert_known_names
from perf_replay import Recorded, ReplayedPerf
from sysfs_tree import write

import witty_profiler.collectors.membw as membw
from witty_profiler.collectors.base import Context
from witty_profiler.collectors.engine import run_window
from witty_profiler.collectors.lib.smbios import memory_devices, parse_memory_device, peak_bytes_per_s
from witty_profiler.collectors.membw import MemoryBandwidthCollector, event_config, uncore_counters
from witty_profiler.diagnosis import diagnose
from witty_profiler.topology.models import Meta

CPUINFO_MBM = "processor\t: 0\nflags\t\t: fpu tsc msr rdt_a cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local\n"


# -- SMBIOS -----------------------------------------------------------------------------------------
def type17(handle: int, locator: str, bank: str, size_mb: int, speed: int, configured: int, *,
           width: int = 64, memory_type: int = 0x1A, part: str = "M393A4K40DB2-CVF", length: int = 0x54) -> bytes:
    """A Memory Device structure as firmware writes it (DSP0134 3.2: 84 bytes; 3.3: 92 with the
    extended speeds), followed by its strings; an empty slot has size 0 and no strings but its locators."""
    raw = bytearray(length)
    struct.pack_into("<BBH", raw, 0, 17, length, handle)
    struct.pack_into("<HHHH", raw, 0x04, 0x0031, 0xFFFE, width + 8 if size_mb else 0xFFFF, width if size_mb else 0xFFFF)
    if size_mb >= 32 * 1024:  # 32 GB and more: 0x7FFF and the extended size (0x8000 would mean KB)
        struct.pack_into("<H", raw, 0x0C, 0x7FFF)
        struct.pack_into("<I", raw, 0x1C, size_mb)
    else:
        struct.pack_into("<H", raw, 0x0C, size_mb)
    strings = [locator, bank]
    raw[0x0E], raw[0x10], raw[0x11], raw[0x12] = 0x09, 1, 2, memory_type  # DIMM
    if size_mb:
        struct.pack_into("<HH", raw, 0x13, 0x2080, speed)  # Synchronous Registered (Buffered)
        strings += ["Samsung", "440FEB5D", "Not Specified", part]
        raw[0x17], raw[0x18], raw[0x19], raw[0x1A], raw[0x1B] = 3, 4, 5, 6, 2
        struct.pack_into("<H", raw, 0x20, configured)
        struct.pack_into("<HHH", raw, 0x22, 1200, 1200, 1200)
        raw[0x28] = 0x03  # DRAM
    else:
        struct.pack_into("<H", raw, 0x13, 0x0002)  # Unknown
    return bytes(raw) + b"".join(s.encode() + b"\0" for s in strings) + b"\0"


def epyc_dimms(sys_root: Path, configured: int = 2933) -> None:
    """One socket, eight channels (P0 CHANNEL A-H), DIMM 1 of each with a 32 GB RDIMM, DIMM 2 empty."""
    handle = 0x0039
    for i, channel in enumerate("ABCDEFGH"):
        for slot, size in ((1, 32 * 1024), (2, 0)):
            d = sys_root / "firmware" / "dmi" / "entries" / f"17-{2 * i + slot - 1}"
            d.mkdir(parents=True)
            (d / "raw").write_bytes(type17(handle, f"DIMM {slot}", f"P0 CHANNEL {channel}", size, 3200, configured))
            handle += 1


def test_a_memory_device_is_read_per_dsp0134():
    d = parse_memory_device(type17(0x39, "DIMM 1", "P0 CHANNEL A", 32 * 1024, 3200, 2933))
    assert (d.locator, d.bank, d.size_mb, d.data_width_bits, d.speed_mts) == ("DIMM 1", "P0 CHANNEL A", 32768, 64, 2933)
    small = parse_memory_device(type17(0x40, "CPU0_DIMM_A1", "NODE 0", 16 * 1024, 2666, 0))
    assert small.size_mb == 16384 and small.speed_mts == 2666  # no configured speed: the rated one
    empty = parse_memory_device(type17(0x41, "DIMM 2", "P0 CHANNEL A", 0, 0, 0))
    assert empty.size_mb == 0 and empty.data_width_bits == 0
    assert parse_memory_device(b"\x10\x17" + bytes(0x15) + b"\0\0") is None  # type 16, not a device


def test_extended_speeds_of_smbios_3_3():
    raw = bytearray(type17(0x39, "DIMMA1", "CPU0", 64 * 1024, 0xFFFF, 0xFFFF, length=0x5C, memory_type=0x22))
    struct.pack_into("<II", raw, 0x54, 70000, 68000)
    assert parse_memory_device(bytes(raw)).speed_mts == 68000


def test_the_peak_counts_each_populated_channel_once(tmp_path):
    epyc_dimms(tmp_path)
    devices = memory_devices(str(tmp_path))
    assert len(devices) == 16 and sum(1 for d in devices if d.size_mb) == 8
    assert peak_bytes_per_s(devices) == 8 * 2933e6 * 8
    # two DIMMs on one named channel share it; without a channel name each device is one
    two_per_channel = [parse_memory_device(type17(1, f"DIMM {s}", "P0 CHANNEL A", 32768, 3200, 3200)) for s in (1, 2)]
    assert peak_bytes_per_s(two_per_channel) == 3200e6 * 8
    unnamed = [parse_memory_device(type17(1, f"A{s}", "Not Specified", 32768, 3200, 3200)) for s in (1, 2)]
    assert peak_bytes_per_s(unnamed) == 2 * 3200e6 * 8


# -- host trees ---------------------------------------------------------------------------------
def two_nodes(root: Path, cpuinfo: str = CPUINFO_MBM, node_gib: tuple[int, int] = (128, 128)) -> Context:
    """Two NUMA nodes of two CPUs each; CPUs 0-1 share L3 0, CPUs 2-3 L3 1."""
    proc, sys_root = root / "proc", root / "sys"
    write(proc / "cpuinfo", cpuinfo)
    write(proc / "filesystems", "nodev\tsysfs\nnodev\ttmpfs\nnodev\tresctrl\n\text4")
    write(proc / "sys" / "kernel" / "perf_event_paranoid", "2")
    cpu = sys_root / "devices" / "system" / "cpu"
    write(cpu / "online", "0-3")
    for n in range(4):
        for index, level in ((0, 1), (1, 1), (2, 2), (3, 3)):
            write(cpu / f"cpu{n}" / "cache" / f"index{index}" / "level", str(level))
            write(cpu / f"cpu{n}" / "cache" / f"index{index}" / "id", str(n // 2 if level == 3 else n))
    for node, gib in enumerate(node_gib):
        d = sys_root / "devices" / "system" / "node" / f"node{node}"
        write(d / "cpulist", f"{2 * node}-{2 * node + 1}")
        write(d / "distance", "10 32" if node == 0 else "32 10")
        write(d / "meminfo", f"Node {node} MemTotal:       {gib * 1024 * 1024} kB\nNode {node} MemFree:        1024 kB")
    return Context(host="n1", proc=proc, sys=sys_root)


def resctrl_tree(sys_root: Path, groups: dict[str, tuple[int, int]]) -> Path:
    """A mounted resctrl: info/L3_MON, the root group's and each control group's mon_data per L3
    domain (bytes so far on domains 0 and 1), and a MON group inside one (counted by its parent)."""
    root = sys_root / "fs" / "resctrl"
    write(root / "info" / "L3_MON" / "mon_features", "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes")
    write(root / "info" / "L3_MON" / "num_rmids", "224")
    for group, domains in groups.items():
        d = root if group == "." else root / group
        write(d / "tasks", "1")
        write(d / "schemata", "L3:0=7ff;1=7ff\nMB:0=100;1=100")
        for domain, value in enumerate(domains):
            write(d / "mon_data" / f"mon_L3_{domain:02d}" / "mbm_total_bytes", str(value))
            write(d / "mon_data" / f"mon_L3_{domain:02d}" / "llc_occupancy", "1048576")
    write(root / "train" / "mon_groups" / "loader" / "mon_data" / "mon_L3_00" / "mbm_total_bytes", "999999999999")
    return root


def advance(root: Path, groups: dict[str, tuple[int, int]]) -> None:
    for group, domains in groups.items():
        d = root if group == "." else root / group
        for domain, value in enumerate(domains):
            write(d / "mon_data" / f"mon_L3_{domain:02d}" / "mbm_total_bytes", str(value))


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_resctrl_bytes_per_node_against_the_smbios_peak(tmp_path):
    ctx = two_nodes(tmp_path)
    root = resctrl_tree(ctx.sys, {".": (1_000, 2_000), "train": (5_000, 0)})
    epyc_dimms(ctx.sys)
    clock = Clock()
    c = MemoryBandwidthCollector(ctx, clock=clock)
    c.start()
    clock.t += 1.0
    # node 0: 80 GB/s from the root group and 60 from "train"; node 1: 20 GB/s
    advance(root, {".": (1_000 + 80 * 10 ** 9, 2_000 + 20 * 10 ** 9), "train": (5_000 + 60 * 10 ** 9, 0)})
    c.sample()
    clock.t += 1.0
    advance(root, {".": (1_000 + 160 * 10 ** 9, 2_000 + 40 * 10 ** 9), "train": (5_000 + 120 * 10 ** 9, 0)})
    g = c.finish()
    assert c.status.status == "ok", c.status
    assert_known_names(g)
    n0, n1 = g.entity("numa_node:n1:0").metrics, g.entity("numa_node:n1:1").metrics
    assert n0["mem_bytes_per_s"] == 140e9 and n1["mem_bytes_per_s"] == 20e9
    peak = 8 * 2933e6 * 8
    assert n0["dram_bw_peak_bytes_per_s"] == round(peak / 2, 1)  # half the memory, half the peak
    assert n0["dram_bw_util_pct"] == round(100 * 140e9 / (peak / 2), 2)
    host = g.entity("host:n1").metrics
    assert host["mem_bytes_per_s"] == 160e9 and host["dram_bw_util_pct"] == round(100 * 160e9 / peak, 2)
    assert c.status.extra["source"] == "resctrl"
    assert c.status.extra["peak"] == "SMBIOS: 8 populated memory devices on 8 channels at 2933 MT/s x 64 bits"


def test_an_unavailable_rmid_read_leaves_the_node_out_of_that_read(tmp_path, monkeypatch):
    monkeypatch.setenv("WITTY_DRAM_PEAK_GBS", "400")
    ctx = two_nodes(tmp_path)
    root = resctrl_tree(ctx.sys, {".": (0, 0), "train": (0, 0)})
    clock = Clock()
    c = MemoryBandwidthCollector(ctx, clock=clock)
    c.start()
    clock.t += 1.0
    advance(root, {".": (10 * 10 ** 9, 10 ** 9)})
    write(root / "train" / "mon_data" / "mon_L3_00" / "mbm_total_bytes", "Unavailable")
    c.sample()
    clock.t += 1.0
    advance(root, {".": (20 * 10 ** 9, 2 * 10 ** 9), "train": (20 * 10 ** 9, 0)})
    g = c.finish()
    n0 = g.entity("numa_node:n1:0").metrics
    # node 0 read at the two ends only: 40 GB over 2 s, one interval (no p95/max), no false jump
    assert n0["mem_bytes_per_s"] == 20e9 and "mem_bytes_per_s_max" not in n0
    n1 = g.entity("numa_node:n1:1").metrics
    assert n1["mem_bytes_per_s"] == 1e9 and n1["mem_bytes_per_s_max"] == 1e9


def test_resctrl_is_mounted_for_the_window_and_unmounted_after(tmp_path, monkeypatch):
    ctx = two_nodes(tmp_path)
    (ctx.sys / "fs" / "resctrl").mkdir(parents=True)
    calls = []

    def mount(root):
        calls.append(("mount", root))
        resctrl_tree(ctx.sys, {".": (0, 0)})

    monkeypatch.setattr(membw, "mount_resctrl", mount)
    monkeypatch.setattr(membw, "unmount_resctrl", lambda root: calls.append(("umount", root)))
    monkeypatch.setattr(Context, "is_root", property(lambda self: True))
    monkeypatch.setenv("WITTY_DRAM_PEAK_GBS", "200")
    clock = Clock()
    c = MemoryBandwidthCollector(ctx, clock=clock)
    c.start()
    clock.t += 1.0
    g = c.finish()
    root = str(ctx.sys / "fs" / "resctrl")
    assert calls == [("mount", root), ("umount", root)]
    assert g.entity("host:n1").metrics["dram_bw_peak_bytes_per_s"] == 200e9


def test_a_failure_after_the_mount_unmounts(tmp_path, monkeypatch):
    ctx = two_nodes(tmp_path)
    (ctx.sys / "fs" / "resctrl").mkdir(parents=True)
    calls = []
    monkeypatch.setattr(membw, "mount_resctrl", lambda root: (calls.append("mount"), resctrl_tree(ctx.sys, {".": (0, 0)})))
    monkeypatch.setattr(membw, "unmount_resctrl", lambda root: calls.append("umount"))
    monkeypatch.setattr(membw, "l3_domains", lambda ctx: 1 / 0)
    monkeypatch.setattr(Context, "is_root", property(lambda self: True))
    with pytest.raises(ZeroDivisionError):
        MemoryBandwidthCollector(ctx).start()  # the engine records the error and calls nothing more
    assert calls == ["mount", "umount"]


@pytest.mark.parametrize("cpuinfo, root_user, reason", [
    ("flags\t\t: fpu tsc rdt_a cqm_llc\n", True,
     "resctrl: the CPU has no memory bandwidth monitoring (no cqm_mbm_total in the cpuinfo flags)"),
    (CPUINFO_MBM, False, "resctrl: {root} is not mounted and mounting it needs root"),
])
def test_resctrl_says_why_it_cannot_be_used(tmp_path, monkeypatch, cpuinfo, root_user, reason):
    ctx = two_nodes(tmp_path, cpuinfo=cpuinfo)
    (ctx.sys / "fs" / "resctrl").mkdir(parents=True)
    monkeypatch.setattr(Context, "is_root", property(lambda self: root_user))
    c = MemoryBandwidthCollector(ctx)
    c.start()
    c.finish()
    assert c.status.status == "unavailable"
    assert c.status.reason == ("no DRAM bandwidth counters: " + reason.format(root=ctx.sys / "fs" / "resctrl")
                               + "; uncore: no uncore_imc, hisi ddrc PMU in /sys/bus/event_source/devices")


# -- uncore PMUs --------------------------------------------------------------------------------
def imc_tree(sys_root: Path, units: int = 2) -> None:
    """Skylake-SP uncore_imc_N PMUs (type numbers are the kernel's, dynamic): one per controller,
    counting on the first CPU of each socket."""
    for n in range(units):
        d = sys_root / "bus" / "event_source" / "devices" / f"uncore_imc_{n}"
        write(d / "type", str(14 + n))
        write(d / "cpumask", "0,2")
        write(d / "format" / "event", "config:0-7")
        write(d / "format" / "umask", "config:8-15")
        write(d / "format" / "edge", "config:18")
        write(d / "format" / "thresh", "config:24-31")
        write(d / "events" / "clockticks", "event=0x00,umask=0x00")
        for name, umask in (("cas_count_read", "0x03"), ("cas_count_write", "0x0c")):
            write(d / "events" / name, f"event=0x04,umask={umask}")
            write(d / "events" / f"{name}.scale", "6.103515625e-5")
            write(d / "events" / f"{name}.unit", "MiB")


def hisi_tree(sys_root: Path) -> None:
    """Kunpeng 920: a DDRC PMU per controller of each SCCL (super CPU cluster), 'config=0x1' events."""
    for sccl, cpu in ((1, 0), (3, 2)):
        for ddrc in range(2):
            d = sys_root / "bus" / "event_source" / "devices" / f"hisi_sccl{sccl}_ddrc{ddrc}"
            write(d / "type", str(30 + 2 * sccl + ddrc))
            write(d / "cpumask", str(cpu))
            write(d / "format" / "event", "config:0-4")
            for name, code in (("flux_wr", "0x0"), ("flux_rd", "0x1"), ("flux_wcmd", "0x2"), ("flux_rcmd", "0x3")):
                write(d / "events" / name, f"config={code}")


def test_event_terms_are_placed_by_the_pmus_format():
    assert event_config("event=0x04,umask=0x03", {"event": "config:0-7", "umask": "config:8-15"}) == 0x0304
    assert event_config("config=0x1", {"event": "config:0-4"}) == 1
    assert event_config("event=0x3,edge", {"event": "config:0-7", "edge": "config:18"}) == 0x3 | 1 << 18
    assert event_config("event=0x1,filter=0x5", {"event": "config:0-7", "filter": "config1:0-7"}) is None


def test_intel_imc_reads_and_writes_per_socket(tmp_path, monkeypatch):
    ctx = two_nodes(tmp_path)
    imc_tree(ctx.sys)
    counters = uncore_counters(ctx)
    assert [(c.event.name, c.event.type, c.event.config, c.cpu) for c in counters[:4]] == [
        ("uncore_imc_0/cas_count_read", 14, 0x0304, 0), ("uncore_imc_0/cas_count_read", 14, 0x0304, 2),
        ("uncore_imc_0/cas_count_write", 14, 0x0c04, 0), ("uncore_imc_0/cas_count_write", 14, 0x0c04, 2)]
    assert counters[0].bytes_per_count == 64.0  # 6.103515625e-5 MiB: one cache line per CAS
    lines = 10 ** 9 // 64  # a GB of cache lines
    recorded = {(-1, 0): [Recorded({c.event.name: [0, 30 * lines]}, 10 ** 9) for c in counters if c.cpu == 0],
                (-1, 2): [Recorded({c.event.name: [0, 5 * lines]}, 10 ** 9) for c in counters if c.cpu == 2]}
    perf = ReplayedPerf(recorded)
    monkeypatch.setenv("WITTY_DRAM_PEAK_GBS", "400")
    clock = Clock()
    c = MemoryBandwidthCollector(ctx, perf=perf, clock=clock)
    c.start()
    clock.t += 1.0
    g = c.finish()
    assert c.status.status == "ok" and c.status.extra["source"] == "uncore_imc"
    n0 = g.entity("numa_node:n1:0").metrics
    # two controllers, each 30 GB/s read and 30 GB/s written (within a cache line per count)
    assert n0["mem_read_bytes_per_s"] == pytest.approx(60e9, rel=1e-6)
    assert n0["mem_bytes_per_s"] == pytest.approx(120e9, rel=1e-6)
    assert n0["dram_bw_util_pct"] == pytest.approx(60.0, rel=1e-4)  # 120 GB/s of half of 400 GB/s
    assert perf.all_closed


def test_kunpeng_ddrc_flux_counts_32_bytes(tmp_path, monkeypatch):
    ctx = two_nodes(tmp_path)
    hisi_tree(ctx.sys)
    counters = uncore_counters(ctx)
    assert {(c.pmu, c.direction, c.event.config, c.cpu) for c in counters if c.pmu == "hisi_sccl3_ddrc1"} == {
        ("hisi_sccl3_ddrc1", "read", 1, 2), ("hisi_sccl3_ddrc1", "write", 0, 2)}
    recorded = {(-1, cpu): [Recorded({c.event.name: [0, 10 ** 9 // 32]}, 10 ** 9) for c in counters if c.cpu == cpu]
                for cpu in (0, 2)}
    monkeypatch.setenv("WITTY_DRAM_PEAK_GBS", "40")
    clock = Clock()
    c = MemoryBandwidthCollector(ctx, perf=ReplayedPerf(recorded), clock=clock)
    c.start()
    clock.t += 2.0
    g = c.finish()
    n1 = g.entity("numa_node:n1:1").metrics
    assert n1["mem_read_bytes_per_s"] == pytest.approx(1e9, rel=1e-6)  # 2 controllers x 1 GB over 2 s
    assert n1["mem_bytes_per_s"] == pytest.approx(2e9, rel=1e-6) and c.status.extra["source"] == "hisi ddrc"


def test_uncore_refused_to_a_user_names_the_sysctl(tmp_path, monkeypatch):
    import errno
    ctx = two_nodes(tmp_path)
    imc_tree(ctx.sys, units=1)
    monkeypatch.setattr(Context, "is_root", property(lambda self: False))
    c = MemoryBandwidthCollector(ctx, perf=ReplayedPerf({}, refused={(-1, 0): errno.EACCES, (-1, 2): errno.EACCES}))
    c.start()
    c.finish()
    assert c.status.status == "unavailable"
    assert c.status.reason.endswith("uncore: perf_event_open(uncore_imc_0/cas_count_read) gave EACCES: "
                                    "kernel.perf_event_paranoid = 2 does not allow counting whole CPUs without "
                                    "root; it needs -1 or 0 (or CAP_PERFMON)")


def test_amd_data_fabric_is_named_as_not_read(tmp_path):
    ctx = two_nodes(tmp_path)
    write(ctx.sys / "bus" / "event_source" / "devices" / "amd_df" / "type", "11")
    c = MemoryBandwidthCollector(ctx)
    c.start()
    c.finish()
    assert c.status.reason.endswith("uncore: amd_df names no DRAM events in sysfs")


def test_without_a_peak_the_bytes_are_kept_and_the_reason_given(tmp_path, monkeypatch):
    monkeypatch.delenv("WITTY_DRAM_PEAK_GBS", raising=False)
    ctx = two_nodes(tmp_path)
    resctrl_tree(ctx.sys, {".": (0, 0)})
    c = MemoryBandwidthCollector(ctx, clock=Clock())
    c.start()
    g = c.finish()
    assert c.status.status == "partial"
    assert c.status.reason.startswith("no DRAM peak bandwidth, so no utilisation: SMBIOS memory devices unreadable "
                                      "(No such file or directory: ")
    assert "WITTY_DRAM_PEAK_GBS" in c.status.reason and "dram_bw_util_pct" not in g.entity("host:n1").metrics


# -- the pattern ----------------------------------------------------------------------------------
def test_the_bandwidth_wall_names_the_node_its_bytes_and_peak(tmp_path):
    ctx = two_nodes(tmp_path)
    root = resctrl_tree(ctx.sys, {".": (0, 0)})
    epyc_dimms(ctx.sys)
    clock = Clock()
    c = MemoryBandwidthCollector(ctx, clock=clock)
    c.start()
    clock.t += 1.0
    advance(root, {".": (85 * 10 ** 9, 10 * 10 ** 9)})  # node 0: 85 GB/s of its 93.9 GB/s (half of 8 channels)
    g = c.finish()
    g.meta = Meta(hosts=["n1"], duration_s=1.0, source="live", collectors={"membw": c.status})
    f = diagnose(g).finding("memory.bandwidth_wall")
    assert f.severity == "critical" and f.subjects == ["numa_node:n1:0"]
    assert "numa node 0 at 90.6 % (threshold > 90 %)" in f.description, f.description
    first = f.evidence[0]
    assert first.ids == ["numa_node:n1:0"] and first.metric == "dram_bw_util_pct" and first.threshold == "> 90"
    assert first.value == round(100 * 85e9 / (8 * 2933e6 * 4), 2)
    assert any(e.metric == "dram_bw_peak_bytes_per_s" and e.value == 8 * 2933e6 * 4 for e in f.evidence)


def test_without_counters_the_pattern_gives_the_collectors_reason(tmp_path):
    ctx = two_nodes(tmp_path)
    c = MemoryBandwidthCollector(ctx)
    c.start()
    g = c.finish()
    g.meta = Meta(hosts=["n1"], duration_s=1.0, source="live", collectors={"membw": c.status})
    row = next(r for r in diagnose(g).coverage if r.pattern == "memory.bandwidth_wall")
    assert row.status == "not_evaluated"
    assert row.reason == ("no dram_bw_util_pct of a host or NUMA node from DRAM bandwidth counters (collector membw: "
                          f"unavailable ({c.status.reason}))")


@pytest.mark.live
def test_this_host_live():
    """Where resctrl or an uncore memory-controller PMU exists, bytes per node; where none does
    (this CI's guest), the exact reason."""
    g = run_window(duration_s=1.0, interval_s=0.5, collectors=["membw"])
    status = g.meta.collectors["membw"]
    devices = Path("/sys/bus/event_source/devices")
    uncore = [p.name for p in devices.iterdir() if p.name.startswith(("uncore_imc", "hisi_sccl"))] if devices.is_dir() else []
    if not Path("/sys/fs/resctrl").is_dir() and not uncore:
        tail = ("amd_df names no DRAM events in sysfs" if (devices / "amd_df").is_dir()
                else "no uncore_imc, hisi ddrc PMU in /sys/bus/event_source/devices")
        assert (status.status, status.reason) == ("unavailable", "no DRAM bandwidth counters: resctrl: /sys/fs/resctrl "
                                                  f"absent (kernel without resctrl); uncore: {tail}")
        return
    if status.status == "unavailable":
        assert status.reason.startswith("no DRAM bandwidth counters: resctrl: ")
        return
    assert g.entity(f"host:{g.meta.hosts[0]}").metrics["mem_bytes_per_s"] >= 0
