"""Cross-host judgement on host digests (diagnosis.digest): a rank slower than its peers, a host
unlike its peers.

Outlier rule (named in the catalog): a rank is compared with the *other* ranks of its job (leave one
out, so that three ranks are enough), on each signal in the direction in which it is worse:
  - relative deviation from the peers' median, (x - median) / max(|median|, floor), is a threshold
    (NVRx-style relative score: how far this rank is from its peers);
  - the robust z-score 0.6745 (x - median) / MAD of the peers (Iglewicz and Hoaglin's modified z)
    must exceed `robust_z`, so that a rank within the peers' own spread is not singled out;
  - the difference must exceed the signal's floor (10 points of CPU, 1 ms of wait...).
A host fact (a link speed, a device count, a collector's status) is odd when at least two thirds of
the hosts that report it agree on another value; an error rate is odd when it is above zero while
the peers' median is zero.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from witty_profiler.diagnosis.catalog import Levels

Digest = dict[str, Any]


# statistics.median and statistics.mean, written out for numbers: statistics (with fractions, decimal and random)
# costs every `convert` and `diagnose` 2-3 ms to import; it is imported where these would raise StatisticsError
def median(values: Iterable[Any]) -> Any:
    """statistics.median: the middle value, or the mean of the two middle ones."""
    data = sorted(values)
    n = len(data)
    if n == 0:
        import statistics
        return statistics.median(data)  # StatisticsError
    if n % 2 == 1:
        return data[n // 2]
    return (data[n // 2 - 1] + data[n // 2]) / 2


def mean(values: Iterable[Any]) -> Any:
    """statistics.mean of ints and floats: the exact sum over the count, rounded once (an int where the ints'
    sum divides by their count); of anything else, or of nothing, statistics.mean itself."""
    data = list(values)
    n = len(data)
    if n == 0 or any(type(v) not in (int, float, bool) for v in data):
        import statistics
        return statistics.mean(data)
    if not any(type(v) is float for v in data):
        total = sum(data)
        return total // n if total % n == 0 else total / n
    if not all(math.isfinite(v) for v in data):
        special = 0
        for v in data:  # infinities and NaNs: what statistics sums, the finite values left out
            if not math.isfinite(v):
                special += v
        return special / n
    ratios = [v.as_integer_ratio() for v in data]  # the denominators are powers of two
    common = max(d for _, d in ratios)
    return sum(p * (common // d) for p, d in ratios) / (common * n)  # int / int: correctly rounded


class _LeaveOneOut:
    """statistics.median of a list with one item left out, for every item, after one sort: the peers of
    item i in sorted order are the stable sort of the whole list less i's place in it, so each median is
    read off in O(1) and is the very number median(list without i) gives (the leave-one-out medians of
    n ranks cost n log n, not n^2 log n: 8,000 ranks of one job)."""

    def __init__(self, values: list[Any]) -> None:
        order = sorted(range(len(values)), key=values.__getitem__)
        self.sorted = [values[k] for k in order]
        self.place = [0] * len(values)
        for place, k in enumerate(order):
            self.place[k] = place

    def median(self, i: int) -> Any:
        s, skip, n = self.sorted, self.place[i], len(self.sorted) - 1
        if n < 1:
            return median([])  # StatisticsError, as for no peers
        half = n // 2
        upper = s[half] if half < skip else s[half + 1]
        if n % 2:
            return upper
        lower = s[half - 1] if half - 1 < skip else s[half]
        return (lower + upper) / 2


class _PeerStatistics:
    """Per item of one signal's values: the median of the other items and their MAD around it. The
    medians take a handful of distinct values, so the absolute deviations are sorted once per median."""

    def __init__(self, values: list[Any]) -> None:
        self.values = values
        self.medians = _LeaveOneOut(values)
        self._deviations: dict[tuple[type, Any], _LeaveOneOut] = {}

    def median(self, i: int) -> Any:
        return self.medians.median(i)

    def mad(self, i: int, centre: Any) -> Any:
        """median(|v - centre| for v in the other values): their median absolute deviation."""
        if len(self.values) < 2:
            return 0.0
        key = (type(centre), centre)
        if key not in self._deviations:
            self._deviations[key] = _LeaveOneOut([abs(v - centre) for v in self.values])
        return self._deviations[key].median(i)


def rank_outliers(digests: list[Digest], signals: list[tuple[str, str, str, float]], deviation: Levels,
                  robust_z: float, min_peers: int) -> tuple[list[dict[str, Any]], list[tuple[str, int, int]]]:
    """Ranks that differ from their peers. Returns (outliers, groups): each outlier says its host, rank,
    job, signal, value, the peers' median and MAD, its deviation, z and severity; groups lists
    (job, ranks, hosts) of every job compared."""
    jobs: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for d in digests:
        for rank in d.get("ranks", []):
            jobs[(rank.get("job") or "?") + "|" + str(rank.get("role"))].append((d["host"], rank))
    outliers, groups = [], []
    for key in sorted(jobs):
        members = jobs[key]
        hosts = {h for h, _ in members}
        if len(members) < min_peers or len(hosts) < 2:
            continue
        groups.append((key.split("|")[0], len(members), len(hosts)))
        for name, unit, worse, floor in signals:
            measured = [(h, r, r["metrics"][name]) for h, r in members if r["metrics"].get(name) is not None]
            if len(measured) < min_peers:
                continue
            peers = _PeerStatistics([v for _, _, v in measured])
            for i, (host, rank, value) in enumerate(measured):
                centre = peers.median(i)
                diff = (value - centre) if worse == "higher" else (centre - value)
                if diff <= floor:
                    continue
                relative = diff / max(abs(centre), floor) * 100
                severity = deviation.severity(relative)
                if severity is None:
                    continue
                mad = peers.mad(i, centre)
                z = round(0.6745 * diff / mad, 6) if mad else float("inf")  # rounded: a bound is exact
                if z <= robust_z:
                    continue
                outliers.append({"host": host, "rank": rank, "job": key.split("|")[0], "signal": name, "unit": unit,
                                 "worse": worse, "value": value, "median": centre, "mad": mad, "deviation_pct": relative,
                                 "z": z, "severity": severity, "peers": len(measured) - 1})
    return outliers, groups


# facts that are rates of things that should not happen (errors, retransmissions, pause frames): odd when
# above zero where the peers' median is zero, and not missed where a host reports none
RATE_FACTS = ("errors_per_s", "retrans_per_s", "pfc_rx_per_s")


def odd_facts(digests: list[Digest], agree_share: float, min_hosts: int) -> list[dict[str, Any]]:
    """Host facts that differ from what most peers report, and collectors that failed where peers' ran."""
    values: dict[str, dict[str, Any]] = defaultdict(dict)
    for d in digests:
        for what, value in d.get("facts", {}).items():
            values[what][d["host"]] = value
        for name, status in d.get("collectors", {}).items():
            values[f"collector {name}"][d["host"]] = status
    odd = []
    for what in sorted(values):
        by_host = values[what]
        if len(by_host) < min_hosts:
            continue
        if what.endswith(RATE_FACTS):
            hosts = list(by_host)
            medians = _LeaveOneOut([by_host[h] for h in hosts])
            for i, host in sorted(enumerate(hosts), key=lambda item: item[1]):
                value = by_host[host]
                if value > 0 and medians.median(i) == 0:
                    peers = [v for h, v in by_host.items() if h != host]
                    odd.append({"host": host, "what": what, "value": value, "usual": 0, "agree": sum(
                        1 for v in peers if v == 0), "of": len(peers), "kind": "errors"})
            continue
        usual, agree = Counter(map(_key, by_host.values())).most_common(1)[0]
        if agree < agree_share * len(by_host) or agree == len(by_host):
            continue
        for host, value in sorted(by_host.items()):
            if _key(value) != usual:
                odd.append({"host": host, "what": what, "value": value, "usual": usual, "agree": agree,
                            "of": len(by_host) - 1, "kind": "collector" if what.startswith("collector ") else "fact"})
    # a fact most hosts report and this host lacks (a NIC, an RDMA port that is not there)
    reported = Counter(what for d in digests for what in d.get("facts", {}))
    for d in digests:
        for what, count in sorted(reported.items()):
            if what not in d.get("facts", {}) and not what.endswith(RATE_FACTS) and count >= min_hosts \
                    and count >= agree_share * len(digests):
                odd.append({"host": d["host"], "what": what, "value": None, "usual": "present", "agree": count,
                            "of": len(digests) - 1, "kind": "fact"})
    return odd


def _key(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


def windows_apart(digests: list[Digest]) -> list[str]:
    """Hosts whose window does not overlap the window most hosts share, as 'host (start, duration s)'."""
    from datetime import datetime, timedelta
    spans = {}
    for d in digests:
        w = d.get("window") or {}
        try:
            start = datetime.fromisoformat(str(w.get("started_at")).replace("Z", "+00:00"))
            spans[d["host"]] = (start, start + timedelta(seconds=float(w.get("duration_s") or 0)))
        except (TypeError, ValueError):
            continue
    if len(spans) < 2:
        return []
    # the instant covered by the most windows: a start (the latest start before most ends); the windows
    # covering t are those started by t less those ended before it (sorted once: n log n, not n^2)
    from bisect import bisect_left, bisect_right
    starts = sorted(s for s, e in spans.values() if s <= e)
    ends = sorted(e for s, e in spans.values() if s <= e)
    best = max((start for start, _ in spans.values()), key=lambda t: bisect_right(starts, t) - bisect_left(ends, t))
    return [f"{h} ({s.isoformat().replace('+00:00', 'Z')}, {(e - s).total_seconds():g} s)"
            for h, (s, e) in sorted(spans.items()) if not s <= best <= e]
