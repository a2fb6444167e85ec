"""`witty-profiler info GRAPH`: what a graph file holds, at a glance."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from witty_profiler.output import print_json, table

if TYPE_CHECKING:
    from witty_profiler.topology import Graph


def file_info(path: str) -> dict[str, Any]:
    """What a graph file holds. A native file is read as a stream (counts by type without building the
    graph, in memory that does not grow with the file); a legacy file is converted first."""
    from witty_profiler.topology.files import open_text
    from witty_profiler.topology.scan import scan_native
    from witty_profiler.topology.text import visible_meta
    from witty_profiler.topology.validate import meta_of
    try:
        with open_text(path) as handle:  # a regular file of bounded size, or one line saying what it is
            found = scan_native(handle, path)
    except UnicodeDecodeError:
        found = None  # load_graph says where in one line
    if found is None:
        from witty_profiler.topology import load_graph
        return graph_info(load_graph(path))
    return _info(visible_meta(meta_of(found.meta, path)), _visible_counts(found.entities), _visible_counts(found.edges))


def _visible_counts(counts: dict[str, int]) -> dict[str, int]:
    from witty_profiler.topology.text import visible
    out: dict[str, int] = {}
    for kind, n in counts.items():
        out[visible(kind)] = out.get(visible(kind), 0) + n
    return dict(sorted(out.items()))


def graph_info(graph: Graph) -> dict[str, Any]:
    entities, edges = graph.counts_by_type()
    return _info(graph.meta, entities, edges)


def _info(meta: Any, entities: dict[str, int], edges: dict[str, int]) -> dict[str, Any]:
    return {
        "hosts": meta.hosts,
        "source": meta.source,
        "started_at": meta.started_at,
        "duration_s": meta.duration_s,
        "interval_s": meta.interval_s,
        "collectors": {name: c.to_dict() for name, c in sorted(meta.collectors.items())},
        "entities": entities,
        "edges": edges,
        "entity_count": sum(entities.values()),
        "edge_count": sum(edges.values()),
    }


def render_info(info: dict[str, Any]) -> str:
    window = (f"{info['started_at'] or 'unknown start'}, {info['duration_s']} s" if info["duration_s"] is not None
              else "no capture window (a snapshot without time base)")
    lines = [f"hosts: {', '.join(info['hosts']) or 'unknown'}", f"source: {info['source'] or 'unknown'}",
             f"window: {window}", f"entities: {info['entity_count']}  edges: {info['edge_count']}", ""]
    out = "\n".join(lines) + "\n"
    if info["collectors"]:
        out += table([[n, c["status"], c.get("reason", "")] for n, c in info["collectors"].items()],
                     ["collector", "status", "reason"]) + "\n"
    out += table([[t, n] for t, n in info["entities"].items()], ["entity type", "count"]) + "\n"
    out += table([[t, n] for t, n in info["edges"].items()], ["edge type", "count"])
    return out


def run(args: argparse.Namespace) -> int:
    info = file_info(args.graph)
    if args.json:
        print_json(info)
    else:
        print(render_info(info), end="")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="hosts, window, collector statuses and counts of a graph file")
    p.add_argument("graph", help="graph file (native v1 or legacy witty-profiler JSON)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(handler=run)
