"""Pressure stall information (PSI): the share of the window tasks stalled on CPU, I/O and memory.

Computed from the cumulative ``total=`` microsecond counters of /proc/pressure/*, not from the
kernel's avg10/avg60 (those are decaying averages over fixed periods, not over our window).
"""

from __future__ import annotations

import time

from collectors.base import CounterCollector, register
from collectors.procfs import parse_psi, read_text
from collectors.sampling import window_metrics
from topology import Graph
from topology.ids import host_id

# (resource, line) -> metric; PSI 'full' for cpu exists on newer kernels but has no defined meaning for hosts
_METRICS = {("cpu", "some"): "psi_cpu_some_pct", ("io", "some"): "psi_io_some_pct", ("io", "full"): "psi_io_full_pct",
            ("memory", "some"): "psi_memory_some_pct", ("memory", "full"): "psi_memory_full_pct"}


@register
class PressureCollector(CounterCollector):
    name = "pressure"

    def _read(self) -> None:
        for resource in ("cpu", "io", "memory"):
            text = read_text(f"{self.ctx.proc}/pressure/{resource}")
            if text is None:
                continue
            t = time.monotonic()
            for line, total_us in parse_psi(text).items():
                if (resource, line) in _METRICS:
                    self.series[(resource, line)].add(t, total_us)

    def finish(self) -> Graph:
        self._read()
        if not self.series._series:
            return self.unavailable(f"{self.ctx.proc}/pressure is not readable: kernel without PSI "
                                    "(CONFIG_PSI=y and boot option psi=1 enable it)")
        metrics: dict[str, float] = {}
        for key, name in _METRICS.items():
            series = self.series.get(key)
            if series is not None:
                metrics.update(window_metrics(name, series, scale=1e-4, digits=3))  # us/s -> % of the window
        g = self.fragment()
        g.entity_of("host", host_id(self.ctx.host), {"name": self.ctx.host}, metrics)
        return g
