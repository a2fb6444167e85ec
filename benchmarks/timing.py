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
