"""Timing shared by the collector benchmarks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def cpu_ms(fn: Callable[[], Any], runs: int) -> float:
    """Median CPU time of one call, in ms (process CPU time: what the collector costs the host)."""
    times = []
    for _ in range(runs):
        t = time.process_time()
        fn()
        times.append((time.process_time() - t) * 1000)
    return statistics.median(times)


def machine() -> str:
    """One line naming when and where a benchmark ran: UTC time, CPUs and their model, kernel, Python, load.

    The figures of a shared or different machine move; printing this beside them says which one it was."""
    import os
    import platform

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs ({model}), "
            f"kernel {platform.release()}, Python {platform.python_version()}, load average {load()}")


def load() -> str:
    """The 1-, 5- and 15-minute load averages, as /proc/loadavg gives them ('?' where it cannot be read)."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int, clock: Callable[[], float] = time.perf_counter,
                warmup: int = 1, setup: Callable[[], Any] | None = None) -> dict[str, list[float]]:
    """Each callable timed once per round, in turn, for `rounds` rounds: {name: seconds per round}.

    The order is reversed every other round, so that a drift of the machine's speed (other work starting
    or stopping) falls on every callable alike; `warmup` untimed rounds come first. `clock` is
    time.perf_counter for wall time, time.process_time for the process's CPU time. `setup`, where given,
    runs untimed before each timed call (to drop what the last call left cached, for instance)."""
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            if setup is not None:
                setup()
            start = clock()
            fns[name]()
            times[name].append(clock() - start)
    return times


def spread(values: list[float]) -> tuple[float, float, float]:
    """Median, minimum and maximum."""
    return statistics.median(values), min(values), max(values)


class Ratio:
    """A call's time against a baseline's, measured in the same rounds: one ratio per round."""

    def __init__(self, times: list[float], base: list[float]) -> None:
        self.times, self.base = times, base
        # a round whose baseline read zero (below the clock's resolution) gives no ratio
        self.ratios = [t / b for t, b in zip(times, base) if b] or [float("nan")]

    def text(self, rounds: bool = True) -> str:
        """'1.37x (1.30-1.45, 7 rounds)': the median of the per-round ratios and their range (a decimal
        more below 0.1, two more below 0.01); without the count of rounds where a table's header says it."""
        med, lo, hi = spread(self.ratios)
        d = 2 + (med < 0.1) + (med < 0.01)
        return f"{med:.{d}f}x ({lo:.{d}f}-{hi:.{d}f}" + (f", {len(self.ratios)} rounds)" if rounds else ")")

    def base_text(self, scale: float = 1000, unit: str = "ms", digits: int = 1) -> str:
        """The baseline's own time, median and range: '35.1 ms (33.0-37.2)'."""
        med, lo, hi = spread(self.base)
        return f"{med * scale:.{digits}f} {unit} ({lo * scale:.{digits}f}-{hi * scale:.{digits}f})"

    def time_text(self, scale: float = 1000, unit: str = "ms", digits: int = 1) -> str:
        """The call's own time, median and range, in the same form as base_text."""
        med, lo, hi = spread(self.times)
        return f"{med * scale:.{digits}f} {unit} ({lo * scale:.{digits}f}-{hi * scale:.{digits}f})"


def ratio(fn: Callable[[], Any], baseline: Callable[[], Any], rounds: int,
          clock: Callable[[], float] = time.perf_counter, warmup: int = 1,
          setup: Callable[[], Any] | None = None) -> Ratio:
    """fn's time against baseline's over `rounds` interleaved rounds (see interleaved)."""
    times = interleaved({"fn": fn, "baseline": baseline}, rounds, clock, warmup, setup)
    return Ratio(times["fn"], times["baseline"])


def ratios(fns: dict[str, Callable[[], Any]], baseline: Callable[[], Any], rounds: int,
           clock: Callable[[], float] = time.perf_counter, warmup: int = 1,
           setup: Callable[[], Any] | None = None) -> dict[str, Ratio]:
    """Several calls against one baseline, all interleaved in the same rounds: {name: Ratio}."""
    times = interleaved({"\0baseline": baseline, **fns}, rounds, clock, warmup, setup)
    base = times.pop("\0baseline")
    return {name: Ratio(t, base) for name, t in times.items()}
