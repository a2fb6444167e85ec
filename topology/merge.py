"""Merge rules: what happens when the same entity, edge or window is seen twice.

- metrics ending in ``_total`` are counters over the window: they add up;
- metrics ending in ``_max`` keep the larger value; ``_min`` the smaller;
- every other metric is a gauge or a rate: the incoming (later) value wins, unless it is None;
- attrs: the incoming value wins, except that dict values merge key by key (incoming wins) and
  list values become the ordered union of both;
- meta: hosts are united, the window widens to cover both (earliest start, latest end);
  collector statuses of the same host(s) (the fragments of one round) are kept by name, the
  incoming one winning; when graphs of different hosts merge, each status is kept under its
  host-qualified name (``process@node1``), so that one host's failure does not hide another's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from witty_profiler.topology.models import Meta

if TYPE_CHECKING:
    from datetime import datetime


def merge_metrics(into: dict[str, Any], incoming: dict[str, Any]) -> None:
    for name, value in incoming.items():
        if value is None:
            into.setdefault(name, None)
            continue
        old = into.get(name)
        if old is None:
            into[name] = value
        elif name.endswith("_total"):
            into[name] = old + value
        elif name.endswith("_max"):
            into[name] = max(old, value)
        elif name.endswith("_min"):
            into[name] = min(old, value)
        else:
            into[name] = value


def merge_attrs(into: dict[str, Any], incoming: dict[str, Any]) -> None:
    for key, value in incoming.items():
        old = into.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            into[key] = {**old, **value}
        elif isinstance(old, list) and isinstance(value, list):
            into[key] = old + [v for v in value if v not in old]
        else:
            into[key] = value


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    from datetime import datetime  # here: a graph that is only read never merges
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def merge_meta(into: Meta, incoming: Meta) -> Meta:
    hosts = into.hosts + [h for h in incoming.hosts if h not in into.hosts]
    start_a, start_b = _parse_time(into.started_at), _parse_time(incoming.started_at)
    started_at, duration = into.started_at, into.duration_s
    if start_a and start_b and into.duration_s is not None and incoming.duration_s is not None:
        from datetime import timedelta
        start = min(start_a, start_b)
        end = max(start_a + timedelta(seconds=into.duration_s), start_b + timedelta(seconds=incoming.duration_s))
        started_at = start.isoformat().replace("+00:00", "Z")
        duration = round((end - start).total_seconds(), 6)
    elif start_b and not start_a:
        started_at, duration = incoming.started_at, incoming.duration_s
    return Meta(
        hosts=hosts,
        tool_version=incoming.tool_version or into.tool_version,
        started_at=started_at,
        duration_s=duration,
        interval_s=into.interval_s if into.interval_s is not None else incoming.interval_s,
        host_info={**into.host_info, **incoming.host_info},
        collectors=_merge_collectors(into, incoming),
        source=into.source if into.source == incoming.source or not incoming.source else
        (incoming.source if not into.source else "merged"),
        extra={**into.extra, **incoming.extra},
    )


def _merge_collectors(into: Meta, incoming: Meta) -> dict[str, Any]:
    if not into.hosts or not incoming.hosts or set(into.hosts) & set(incoming.hosts):
        return {**into.collectors, **incoming.collectors}
    return {**_host_qualified(into), **_host_qualified(incoming)}


def _host_qualified(meta: Meta) -> dict[str, Any]:
    if len(meta.hosts) != 1:  # a merge already: its names carry their host
        return dict(meta.collectors)
    host = meta.hosts[0]
    return {name if "@" in name else f"{name}@{host}": status for name, status in meta.collectors.items()}
