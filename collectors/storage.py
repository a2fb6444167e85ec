"""Block devices: utilisation, IOPS, throughput and await over the window, from /proc/diskstats.

One small file read every interval. Whole disks are always reported; partitions (their I/O is
already in their disk's), loop and RAM disks only when they did I/O in the window, so that an
idle host's snap loops do not bury the disks. Sizes and sectors in diskstats are always in
512-byte units, whatever the device's block size. Busy time (utilisation) is counted by the kernel
in whole jiffies, so requests that start and end within one tick add nothing to it: a fast disk
can show IOPS with 0 % utilisation.
"""

from __future__ import annotations

import time
from pathlib import Path

from witty_profiler.collectors.base import CounterCollector, register
from witty_profiler.collectors.lib.procfs import read_text
from witty_profiler.collectors.lib.sampling import SeriesTable, ratio_metrics, window_metrics
from witty_profiler.topology import Graph
from witty_profiler.topology.ids import entity_id
from witty_profiler.topology.vocabulary import M, T

SECTOR = 512
# diskstats columns after major, minor, name (Documentation/admin-guide/iostats.rst)
FIELDS = ("reads", "reads_merged", "read_sectors", "read_ms", "writes", "writes_merged", "write_sectors", "write_ms",
          "in_flight", "io_ms", "weighted_ms")
QUIET_UNLESS_USED = ("loop", "ram", "zram")


def parse_diskstats(text: str) -> dict[str, dict[str, int]]:
    """/proc/diskstats -> {device: {reads, read_sectors, read_ms, writes, ..., io_ms, ios, io_wait_ms}}.

    `ios` and `io_wait_ms` add up reads and writes, the way iostat's await does."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 + len(FIELDS):
            continue
        row = {k: int(v) for k, v in zip(FIELDS, parts[3:])}
        row["ios"] = row["reads"] + row["writes"]
        row["io_wait_ms"] = row["read_ms"] + row["write_ms"]
        out[parts[2]] = row
    return out


def block_attrs(sys_root: Path, name: str) -> dict:
    """Whole disk or partition (with its disk), rotational, model, scheduler and size, from sysfs."""
    sysname = name.replace("/", "!")  # cciss/c0d0 is cciss!c0d0 in sysfs
    attrs: dict = {"name": name}
    disk = sys_root / "block" / sysname
    if not disk.exists():
        entry = sys_root / "class" / "block" / sysname
        attrs["partition"] = (entry / "partition").exists()
        if attrs["partition"]:
            attrs["parent"] = entry.resolve().parent.name.replace("!", "/")
        disk = entry
    else:
        attrs["partition"] = False
    queue = sys_root / "block" / (attrs.get("parent") or name).replace("/", "!") / "queue"
    rotational = read_text(str(queue / "rotational"))
    if rotational is not None:
        attrs["rotational"] = rotational.strip() == "1"
    scheduler = read_text(str(queue / "scheduler"))
    if scheduler and "[" in scheduler:
        attrs["scheduler"] = scheduler[scheduler.index("[") + 1:scheduler.index("]")]
    model = read_text(str(disk / "device" / "model"))
    if model and model.strip():
        attrs["model"] = model.strip()
    size = read_text(str(disk / "size"))
    if size and size.strip().isdigit():
        attrs["size_bytes"] = int(size) * SECTOR
    return attrs


def device_metrics(series: SeriesTable, name: str) -> dict[str, float]:
    def s(counter: str):
        return series[(name, counter)]

    return {
        **window_metrics(M.DISK_UTIL_PCT, s("io_ms"), scale=0.1),  # ms busy per s -> % of the window
        **window_metrics(M.READ_IOPS, s("reads")),
        **window_metrics(M.WRITE_IOPS, s("writes")),
        **window_metrics(M.READ_BYTES_PER_S, s("read_sectors"), scale=SECTOR),
        **window_metrics(M.WRITE_BYTES_PER_S, s("write_sectors"), scale=SECTOR),
        **ratio_metrics(M.AWAIT_MS, s("io_wait_ms"), s("ios"), scale=1.0),
    }


@register
class StorageCollector(CounterCollector):
    name = "storage"
    reads = "/proc/diskstats, /sys/block"
    needs = "any user"

    def _read(self) -> None:
        text = read_text(f"{self.ctx.proc}/diskstats")
        t = time.monotonic()
        for name, row in parse_diskstats(text or "").items():
            self.series.add_many(name, t, row)

    def finish(self) -> Graph:
        self._read()
        names = self.series.prefixes()
        if not names:
            return self.unavailable(f"{self.ctx.proc}/diskstats is not readable")
        graph = self.fragment()
        for name in names:
            ios = self.series[(name, "ios")].delta()
            attrs = block_attrs(self.ctx.sys, name)
            quiet = attrs["partition"] or name.startswith(QUIET_UNLESS_USED)
            if quiet and not ios:
                continue
            graph.entity_of(T.BLOCK_DEVICE, entity_id(T.BLOCK_DEVICE, self.ctx.host, name), attrs,
                            device_metrics(self.series, name))
        return graph
