"""Graphs of several hosts: merging host graphs into one (each host once, each host's window kept),
and one host's part of a merged graph (for drill-down).

A merged graph records every host's own window in `meta.windows` ({host: {started_at, duration_s}}),
since the merged window spans them all; hosts whose windows do not overlap are reported, not hidden.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.models import Meta
from witty_profiler.topology.vocabulary import T


def host_windows(graph: Graph) -> dict[str, dict[str, Any]]:
    """host -> its own window: from meta.windows where a merge kept them, else the graph's window."""
    kept = graph.meta.extra.get("windows")
    if isinstance(kept, dict) and kept:
        return {h: dict(w) for h, w in kept.items() if isinstance(w, dict)}
    return {h: {"started_at": graph.meta.started_at, "duration_s": graph.meta.duration_s} for h in graph.meta.hosts}


def merge_hosts(graphs: Iterable[tuple[str, Graph]]) -> Graph:
    """Merge graphs of different hosts (name, graph pairs; the name is for messages). A host given twice
    is refused: two windows of one host merged would mix their rates."""
    merged: Graph | None = None
    owner: dict[str, str] = {}
    windows: dict[str, dict[str, Any]] = {}
    for name, graph in graphs:
        if not graph.meta.hosts:
            raise InputError(f"{name}: names no host (meta.hosts is empty); collect it with --host NAME")
        for host in graph.meta.hosts:
            if host in owner:
                raise InputError(f"host {host} is in both {owner[host]} and {name}: give each host's graph once "
                                 "(two windows of one host cannot be merged)")
            owner[host] = name
        windows.update(host_windows(graph))
        merged = graph if merged is None else merged.merge(graph)
    if merged is None:
        raise InputError("no graph to merge")
    merged.meta.extra["windows"] = dict(sorted(windows.items()))
    return merged


def host_part(graph: Graph, host: str) -> Graph:
    """The entities and edges of one host of a merged graph, with the jobs its ranks belong to."""
    if host not in graph.meta.hosts:
        raise InputError(f"no host {host!r} in this graph; it has {', '.join(graph.meta.hosts[:20]) or 'none'}"
                         + (" …" if len(graph.meta.hosts) > 20 else ""))
    meta = graph.meta.copy()
    window = host_windows(graph).get(host, {})
    part = Graph(Meta(hosts=[host], tool_version=meta.tool_version, started_at=window.get("started_at"),
                      duration_s=window.get("duration_s"), interval_s=meta.interval_s,
                      host_info={h: i for h, i in meta.host_info.items() if h == host},
                      collectors={name.partition("@")[0]: status for name, status in meta.collectors.items()
                                  if name.partition("@")[2] in ("", host)},
                      source=meta.source))
    keep = {e.id for e in graph.entities() if host_of(e.id) == host and e.type != T.JOB}
    for edge in graph.edges():
        if edge.source in keep and edge.target not in keep and graph.entity(edge.target) is not None \
                and graph.entity(edge.target).type == T.JOB:
            keep.add(edge.target)
    for eid in sorted(keep):
        part.add_entity(graph.entity(eid).copy())
    for edge in graph.edges():
        if edge.source in keep and edge.target in keep:
            part.add_edge(edge.copy())
    return part
