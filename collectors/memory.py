"""Host memory and swap (/proc/meminfo at the end), and the rates of major faults, swapping and
NUMA allocation counters over the window (/proc/vmstat, read every interval)."""

from __future__ import annotations

import time

from witty_profiler.collectors.base import CounterCollector, register
from witty_profiler.collectors.lib.procfs import parse_kv_numbers, parse_meminfo, read_text
from witty_profiler.collectors.lib.sampling import Series
from witty_profiler.topology import Graph
from witty_profiler.topology.vocabulary import M

_VMSTAT_RATES = {"pgmajfault": M.MAJOR_FAULTS_PER_S, "pswpin": M.SWAP_IN_PAGES_PER_S,
                 "pswpout": M.SWAP_OUT_PAGES_PER_S, "numa_hit": M.NUMA_HIT_PER_S, "numa_miss": M.NUMA_MISS_PER_S,
                 "numa_foreign": M.NUMA_FOREIGN_PER_S, "numa_local": M.NUMA_LOCAL_PER_S,
                 "numa_other": M.NUMA_OTHER_PER_S}


def remote_alloc_pct(local_series: Series | None, other_series: Series | None) -> float | None:
    """Share of the window's allocations that landed on a node other than the running CPU's."""
    local = local_series.delta() if local_series is not None else None
    other = other_series.delta() if other_series is not None else None
    if local is None or other is None or local + other <= 0:
        return None
    return round(other / (local + other) * 100.0, 3)


@register
class MemoryCollector(CounterCollector):
    name = "memory"
    reads = "/proc/meminfo, /proc/vmstat"
    needs = "any user"

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
        if not info and not self.series:
            return self.unavailable(f"{self.ctx.proc}/meminfo and {self.ctx.proc}/vmstat are not readable")
        if "MemTotal" in info:
            metrics[M.MEM_TOTAL_BYTES] = info["MemTotal"]
            if "MemAvailable" in info:
                metrics[M.MEM_AVAILABLE_BYTES] = info["MemAvailable"]
                metrics[M.MEM_USED_PCT] = round((1 - info["MemAvailable"] / info["MemTotal"]) * 100, 2)
        if "SwapTotal" in info:
            metrics[M.SWAP_TOTAL_BYTES] = info["SwapTotal"]
            metrics[M.SWAP_USED_BYTES] = info["SwapTotal"] - info.get("SwapFree", 0)
        metrics.update(self.series.rates(_VMSTAT_RATES, digits=2))
        pct = remote_alloc_pct(self.series.get("numa_local"), self.series.get("numa_other"))
        if pct is not None:
            metrics[M.NUMA_REMOTE_ALLOC_PCT] = pct
        g = self.fragment()
        self.add_host(g, metrics)
        return g
