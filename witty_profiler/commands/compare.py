"""`witty-profiler compare BEFORE AFTER`: which findings a change resolved, which are new, which
persist, and how the metrics behind them moved."""

from __future__ import annotations

import argparse

from witty_profiler.options import thresholds as read_thresholds
from witty_profiler.output import add_output_arguments, write_output


def run(args: argparse.Namespace) -> int:
    from witty_profiler.diagnosis.compare import compare
    from witty_profiler.topology import load_graph
    thresholds = read_thresholds(args.thresholds)
    before, after = load_graph(args.before), load_graph(args.after)
    result = compare(before, after, thresholds=thresholds, pids=args.pid or None)
    write_output(result.to_json() if args.format == "json" else result.markdown(), args.output, args.force,
                 (args.before, args.after))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare the diagnoses of two graphs (before/after a change)")
    p.add_argument("before", metavar="BEFORE", help="graph file captured before the change")
    p.add_argument("after", metavar="AFTER", help="graph file captured after the change")
    p.add_argument("--format", choices=["md", "json"], default="md")
    p.add_argument("--pid", type=int, nargs="+", action="extend", metavar="PID",
                   help="the workload in both graphs (default: recognised AI processes)")
    p.add_argument("--thresholds", metavar="FILE", help="TOML file overriding pattern thresholds")
    add_output_arguments(p, "the comparison")
    p.set_defaults(handler=run)
