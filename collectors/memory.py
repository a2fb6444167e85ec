"""Host memory and swap (/proc/meminfo at the end), and the rates of major faults, swapping and
NUMA allocation counters over the window (/proc/vmstat, read every interval)."""

from __future__ import annotations

import time

from collectors.base import CounterCollector, register
from collectors.procfs import parse_kv_numbers, parse_meminfo, read_text
from collectors.sampling import window_metrics
from topology import Graph
from topology.ids import host_id

_VMSTAT_RATES = {"pgmajfault": "major_faults_per_s", "pswpin": "swap_in_pages_per_s",
                 "pswpout": "swap_out_pages_per_s", "numa_hit": "numa_hit_per_s", "numa_miss": "numa_miss_per_s",
                 "numa_foreign": "numa_foreign_per_s", "numa_local": "numa_local_per_s",
                 "numa_other": "numa_other_per_s"}


def remote_alloc_pct(local: float | None, other: float | None) -> float | None:
    """Share of allocations that landed on a node other than the running CPU's."""
    if local is None or other is None or local + other <= 0:
        return None
    return round(other / (local + other) * 100.0, 3)


@register
class MemoryCollector(CounterCollector):
    name = "memory"

    def _read(self) -> None:
        text = read_text(f"{self.ctx.proc}/vmstat")
        if text is None:
            return
        t = time.monotonic()
        values = parse_kv_numbers(text, sep=" ")
        for key in _VMSTAT_RATES:
            if key in values:
                self.series[key].add(t, values[key])

    def finish(self) -> Graph:
        self._read()
        metrics: dict[str, float] = {}
        info = parse_meminfo(read_text(f"{self.ctx.proc}/meminfo") or "")
        if not info and not self.series._series:
            return self.unavailable(f"{self.ctx.proc}/meminfo and {self.ctx.proc}/vmstat are not readable")
        if "MemTotal" in info:
            metrics["mem_total_bytes"] = info["MemTotal"]
            if "MemAvailable" in info:
                metrics["mem_available_bytes"] = info["MemAvailable"]
                metrics["mem_used_pct"] = round((1 - info["MemAvailable"] / info["MemTotal"]) * 100, 2)
        if "SwapTotal" in info:
            metrics["swap_total_bytes"] = info["SwapTotal"]
            metrics["swap_used_bytes"] = info["SwapTotal"] - info.get("SwapFree", 0)
        for key, name in _VMSTAT_RATES.items():
            series = self.series.get(key)
            if series is not None:
                metrics.update(window_metrics(name, series, digits=2))
        local, other = self.series.get("numa_local"), self.series.get("numa_other")
        pct = remote_alloc_pct(local and local.delta(), other and other.delta())
        if pct is not None:
            metrics["numa_remote_alloc_pct"] = pct
        g = self.fragment()
        g.entity_of("host", host_id(self.ctx.host), {"name": self.ctx.host}, metrics)
        return g
