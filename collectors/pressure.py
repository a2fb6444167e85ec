"""Pressure stall information (PSI): the share of the window tasks stalled on CPU, I/O and memory.

Computed from the cumulative ``total=`` microsecond counters of /proc/pressure/*, not from the
kernel's avg10/avg60 (those are decaying averages over fixed periods, not over our window).
"""

from __future__ import annotations

import time

from witty_profiler.collectors.base import CounterCollector, register
from witty_profiler.collectors.lib.procfs import parse_psi, read_text
from witty_profiler.topology import Graph
from witty_profiler.topology.vocabulary import M

# (resource, line) -> metric; PSI 'full' for cpu exists on newer kernels but has no defined meaning for hosts
_METRICS = {("cpu", "some"): M.PSI_CPU_SOME_PCT, ("io", "some"): M.PSI_IO_SOME_PCT, ("io", "full"): M.PSI_IO_FULL_PCT,
            ("memory", "some"): M.PSI_MEMORY_SOME_PCT, ("memory", "full"): M.PSI_MEMORY_FULL_PCT}


@register
class PressureCollector(CounterCollector):
    name = "pressure"
    reads = "/proc/pressure/{cpu,io,memory}"
    needs = "a kernel with PSI; any user"

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
        if not self.series:
            return self.unavailable(f"{self.ctx.proc}/pressure is not readable: kernel without PSI "
                                    "(CONFIG_PSI=y and boot option psi=1 enable it)")
        g = self.fragment()
        self.add_host(g, self.series.rates(_METRICS, scale=1e-4, digits=3))  # us/s -> % of the window
        return g
