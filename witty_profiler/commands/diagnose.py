"""`witty-profiler diagnose [GRAPH]`: the seven-layer diagnosis of a graph file, or of a live
window collected first when no GRAPH is given."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from witty_profiler.options import thresholds as read_thresholds
from witty_profiler.output import add_output_arguments, check_output, write_output
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.layers import LAYER_NUMBERS

if TYPE_CHECKING:
    from witty_profiler.topology import Graph


def graph_from_args(args: argparse.Namespace) -> Graph:
    """Load GRAPH, or collect a live window (--duration, --interval, --pid) when none is given."""
    if args.graph:
        from witty_profiler.topology import load_graph
        return load_graph(args.graph)
    from witty_profiler.collectors.engine import run_window  # here: loading a file must not need the collectors
    from witty_profiler.options import window_progress
    quiet = getattr(args, "quiet", False)
    return run_window(duration_s=args.duration, interval_s=args.interval, pids=args.pid or None,
                      progress=None if quiet else window_progress(sys.stderr))


def check_options(args: argparse.Namespace) -> tuple[int | None, Any]:
    """Validate --layer and --thresholds before anything is collected."""
    from witty_profiler.diagnosis.matcher import layer_number
    layer = layer_number(args.layer)
    if getattr(args, "host", None) and args.graph is None:
        raise InputError("--host picks one host of a merged GRAPH: give the graph file (witty-profiler merge "
                         "writes one)")
    thresholds = read_thresholds(args.thresholds)
    if args.graph is None:
        from witty_profiler.collectors.window import validate_window
        validate_window(args.duration, args.interval)
    return layer, thresholds


def run(args: argparse.Namespace) -> int:
    from witty_profiler.app.reports import report
    from witty_profiler.diagnosis.matcher import diagnose
    layer, thresholds = check_options(args)
    check_output(args.output, args.force, (args.graph,))  # before a live window is spent
    graph = graph_from_args(args)
    if args.host:
        from witty_profiler.topology.hosts import host_part
        graph = host_part(graph, args.host)
    result = diagnose(graph, pids=args.pid or None, layer=layer, thresholds=thresholds)
    write_output(report(result, graph, args.format), args.output, args.force, (args.graph,))
    return 0


def add_source_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", nargs="?", metavar="GRAPH",
                   help="graph file (native v1 or legacy witty-profiler JSON); without it, collect a live window first")
    p.add_argument("--duration", type=float, default=10.0, metavar="S", help="live window length (default 10 s)")
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="live sampling interval (default 1 s)")
    p.add_argument("--pid", type=int, nargs="+", action="extend", metavar="PID",
                   help="the workload: these processes and their descendants (default: recognised AI processes)")
    p.add_argument("--thresholds", metavar="FILE", help="TOML file overriding pattern thresholds (see "
                   "witty-profiler patterns --thresholds-markdown)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diagnose", help="seven-layer bottleneck diagnosis of a graph (or of a live window)",
                       description="Evaluates every pattern of the catalog: each ends as a finding (P0/P1/P2, with "
                                   "evidence and recommendations), clear, or not evaluated with the reason.")
    add_source_options(p)
    p.add_argument("--layer", metavar="NAME", help=f"only this layer: {', '.join(LAYER_NUMBERS)} (or 1-7)")
    p.add_argument("--host", metavar="NAME", help="only this host of a merged GRAPH (witty-profiler merge), without "
                   "the cross-host patterns")
    p.add_argument("--format", choices=["md", "json", "html"], default="md",
                   help="Markdown report (default), JSON, or a self-contained HTML page with the topology drawn")
    add_output_arguments(p, "the report")
    p.add_argument("-q", "--quiet", action="store_true", help="no collection progress on stderr")
    p.set_defaults(handler=run)
