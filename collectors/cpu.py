"""Host and per-CPU utilisation, iowait and steal from /proc/stat; context switches; load.

/proc/stat is one small file, so it is read every interval and p95/max of the intervals are
kept. busy = user + nice + system + irq + softirq (guest time is inside user); iowait and steal
are reported on their own, as shares of all the ticks of the window.
"""

from __future__ import annotations

import time

from witty_profiler.collectors.base import CounterCollector, register
from witty_profiler.collectors.lib.procfs import parse_proc_stat_cpus, read_text
from witty_profiler.collectors.lib.sampling import ratio_metrics, window_metrics
from witty_profiler.topology import Graph
from witty_profiler.topology.ids import cpu_id
from witty_profiler.topology.vocabulary import M, T


@register
class CpuCollector(CounterCollector):
    name = "cpu"
    reads = "/proc/stat, /proc/loadavg"
    needs = "any user"

    def _read(self) -> None:
        text = read_text(f"{self.ctx.proc}/stat")
        if text is None:
            return
        t = time.monotonic()
        s = self.series
        for key, v in parse_proc_stat_cpus(text).items():
            if key == "ctxt":
                s[("ctxt",)].add(t, v[0])
                continue
            user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
            s[(key, "total")].add(t, sum(v[:8]))
            s[(key, "busy")].add(t, user + nice + system + irq + softirq)
            s[(key, "user")].add(t, user + nice)
            s[(key, "system")].add(t, system + irq + softirq)
            s[(key, "softirq")].add(t, softirq)
            s[(key, "iowait")].add(t, iowait)
            s[(key, "steal")].add(t, steal)

    def _utilisation(self, key: str) -> dict[str, float]:
        s = self.series
        total = s[(key, "total")]
        out: dict[str, float] = {}
        for metric, part in ((M.CPU_UTIL_PCT, "busy"), (M.CPU_USER_PCT, "user"), (M.CPU_SYSTEM_PCT, "system"),
                             (M.CPU_SOFTIRQ_PCT, "softirq"), (M.CPU_IOWAIT_PCT, "iowait"), (M.CPU_STEAL_PCT, "steal")):
            out.update(ratio_metrics(metric, s[(key, part)], total, digits=2))
        return out

    def finish(self) -> Graph:
        self._read()
        if self.series.get(("cpu", "total")) is None:
            return self.unavailable(f"{self.ctx.proc}/stat is not readable")
        g = self.fragment()
        host = self.ctx.host
        metrics = self._utilisation("cpu")
        metrics.update(window_metrics(M.CONTEXT_SWITCHES_PER_S, self.series[("ctxt",)], digits=1))
        load = read_text(f"{self.ctx.proc}/loadavg")
        if load:
            metrics[M.LOAD1] = float(load.split()[0])
        self.add_host(g, metrics)
        for key in (k for k in self.series.prefixes() if k.startswith("cpu") and k != "cpu"):
            n = int(key[3:])
            g.entity_of(T.CPU, cpu_id(host, n), {"cpu": n}, self._utilisation(key))
        if len(self.series[("cpu", "total")]) < 2:
            self.partial("/proc/stat was read once only; no utilisation over the window")
        return g
