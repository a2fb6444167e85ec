"""Statistics of the samples of a window, computed the same way by every producer of a graph (the
live collectors, the Prometheus source, the trace readers): `<name>_p95` is the nearest-rank 95th
percentile (no interpolation: a value that was observed) and `<name>_max` the largest sample."""

from __future__ import annotations

import math


def p95(values: list[float]) -> float | None:
    """Nearest-rank 95th percentile; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def gauge(name: str, samples: list[float | None], digits: int = 2) -> dict[str, float]:
    """Mean of a sampled gauge over the window, with p95 and max when two or more samples exist."""
    values = [v for v in samples if v is not None]
    if not values:
        return {}
    out = {name: round(sum(values) / len(values), digits)}
    if len(values) >= 2:
        out[f"{name}_p95"] = round(p95(values), digits)  # type: ignore[arg-type]
        out[f"{name}_max"] = round(max(values), digits)
    return out
