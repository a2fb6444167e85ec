"""Counters sampled over a window -> a rate over the window plus p95 and max of the intervals.

A cumulative counter (CPU ticks, bytes, faults...) is meaningless without its time base. A
`Series` keeps (time, value) pairs of one counter; `window_metrics` turns it into
``{name: rate, name_p95: ..., name_max: ...}`` where the rate covers the whole span the counter
was seen and p95/max are taken over the per-interval rates (present only when there were at
least two intervals). A counter that went backwards (reset, pid reuse) yields no rate.
"""

from __future__ import annotations

from collections.abc import Callable

from witty_profiler.topology.windowstats import p95


class Series:
    """(time, value) samples of one cumulative counter."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.values: list[float] = []

    def add(self, t: float, value: float) -> None:
        self.times.append(t)
        self.values.append(value)

    def __len__(self) -> int:
        return len(self.values)

    def delta(self) -> float | None:
        if len(self.values) < 2 or self.values[-1] < self.values[0]:
            return None
        return self.values[-1] - self.values[0]

    def span(self) -> float:
        return self.times[-1] - self.times[0] if len(self.times) >= 2 else 0.0

    def rate(self) -> float | None:
        """Increase per second over the whole span."""
        d, span = self.delta(), self.span()
        if d is None or span <= 0:
            return None
        return d / span

    def interval_rates(self) -> list[float]:
        t, v = self.times, self.values
        return [(v1 - v0) / (t1 - t0) for t0, t1, v0, v1 in zip(t, t[1:], v, v[1:]) if t1 > t0 and v1 >= v0]


def window_stats(name: str, overall: float | None, per_interval: list[float], digits: int = 3) -> dict[str, float]:
    """{name, name_p95, name_max}; p95/max only when two or more intervals were sampled."""
    out: dict[str, float] = {}
    if overall is None:
        return out
    out[name] = round(overall, digits)
    if len(per_interval) >= 2:
        out[f"{name}_p95"] = round(p95(per_interval), digits)  # type: ignore[arg-type]
        out[f"{name}_max"] = round(max(per_interval), digits)
    return out


def window_metrics(name: str, series: Series, scale: float = 1.0, digits: int = 3) -> dict[str, float]:
    """Rate of one counter over the window, scaled (e.g. ticks/s -> % of one core)."""
    values = series.values
    if len(values) >= 3 and values[0] == values[-1] and series.span() > 0:
        return {name: 0.0, f"{name}_p95": 0.0, f"{name}_max": 0.0}  # an idle counter: most are
    rate = series.rate()
    return window_stats(name, None if rate is None else rate * scale,
                        [r * scale for r in series.interval_rates()], digits)


def ratio_metrics(name: str, num: Series, den: Series, scale: float = 100.0, digits: int = 3,
                  den_extra: Series | None = None) -> dict[str, float]:
    """Δnum / Δden (e.g. busy ticks / all ticks -> %), over the window and per interval.

    With `den_extra`, the denominator is Δden + Δden_extra (e.g. run + wait time)."""
    def _ratio(dn: float, dd: float) -> float | None:
        return dn / dd * scale if dd > 0 else None

    dn, dd = num.delta(), den.delta()
    if dn is None or dd is None:
        return {}
    if den_extra is not None:
        de = den_extra.delta()
        if de is None:
            return {}
        dd += de
    per: list[float] = []
    for i in range(1, min(len(num), len(den))):
        step_d = den.values[i] - den.values[i - 1]
        if den_extra is not None:
            step_d += den_extra.values[i] - den_extra.values[i - 1]
        r = _ratio(num.values[i] - num.values[i - 1], step_d)
        if r is not None and r >= 0:
            per.append(r)
    return window_stats(name, _ratio(dn, dd), per, digits)


def longest_busy_run(series: Series) -> float:
    """Seconds of the longest run of consecutive intervals in which the counter grew (e.g. a
    process kept writing: a checkpoint burst)."""
    best = run = 0.0
    t, v = series.times, series.values
    for t0, t1, v0, v1 in zip(t, t[1:], v, v[1:]):
        run = run + (t1 - t0) if v1 > v0 else 0.0
        best = max(best, run)
    return best


class SeriesTable:
    """Many named series, created on first use: table[key].add(t, v)."""

    def __init__(self) -> None:
        self._series: dict[object, Series] = {}

    def __getitem__(self, key: object) -> Series:
        s = self._series.get(key)
        if s is None:
            s = self._series[key] = Series()
        return s

    def get(self, key: object) -> Series | None:
        return self._series.get(key)

    def __len__(self) -> int:
        return len(self._series)

    def prefixes(self) -> list:
        """The first parts of the (prefix, counter) keys, sorted: the devices, CPUs... seen."""
        return sorted({key[0] for key in self._series})

    def rates(self, names: dict, scale: float = 1.0, digits: int = 3) -> dict[str, float]:
        """`window_metrics` of each counter in `names` (key -> metric name) that was read."""
        out: dict[str, float] = {}
        for key, name in names.items():
            series = self._series.get(key)
            if series is not None:
                out.update(window_metrics(name, series, scale=scale, digits=digits))
        return out

    def add_many(self, prefix: object, t: float, values: dict[str, float],
                 keep: Callable[[str], bool] | None = None) -> None:
        for k, v in values.items():
            if keep is None or keep(k):
                self[(prefix, k)].add(t, v)
