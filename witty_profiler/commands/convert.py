"""`witty-profiler convert GRAPH --layer L [--max-tokens N]`: a compact text view for an assistant."""

from __future__ import annotations

import argparse
import gc
from typing import Any

from witty_profiler.converters.layers import LAYER_VIEWS
from witty_profiler.options import thresholds as read_thresholds
from witty_profiler.topology.errors import InputError
from witty_profiler.output import add_output_arguments, write_output


def run(args: argparse.Namespace) -> int:
    from witty_profiler.topology import load_graph
    from witty_profiler.topology.gcpause import gc_paused
    thresholds = read_thresholds(args.thresholds)
    # the graph's objects (a million for 100k entities, none in a cycle) live as long as the view is made, and
    # the lists of 100,000 threads the views make point at them: the collector, which walks what they point
    # at, stays paused until the view is written (20-30 ms of collections that find a few hundred objects)
    with gc_paused():
        try:
            return _render(args, load_graph(args.graph), thresholds)
        finally:
            # then what was made meanwhile goes to the oldest generation (frozen, then unfrozen) rather than be
            # walked as young objects by the first collection once the collector is back (70 ms)
            gc.freeze()
            gc.unfreeze()


def _render(args: argparse.Namespace, graph: Any, thresholds: Any) -> int:
    from witty_profiler.app.views import convert
    if args.host:
        from witty_profiler.topology.hosts import host_part
        graph = host_part(graph, args.host)
    if args.format == "mermaid":
        if args.layer != "flow":
            raise InputError("--format mermaid draws the flow view: give --layer flow")
        from witty_profiler.converters.context import context_for
        from witty_profiler.converters.hints import CliHints
        from witty_profiler.converters.views.flow import mermaid
        from witty_profiler.diagnosis import diagnose
        diagnosis = diagnose(graph, pids=args.pid or None, thresholds=thresholds)
        write_output(mermaid(context_for(graph, CliHints(args.graph), diagnosis)), args.output, args.force,
                     (args.graph,))
        return 0
    view = convert(graph, args.layer, args.max_tokens, pids=args.pid or None, thresholds=thresholds,
                   ref=args.graph)
    write_output(view.text, args.output, args.force, (args.graph,))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="compact per-layer text view of a graph, under a token budget",
                       description="Render a graph (native or legacy) as compact text for a language model, with "
                                   "the findings of its diagnosis. The token count (cl100k_base) is in each view's "
                                   "header line; with --max-tokens the view always fits, and says what it left out "
                                   "and how to list it.")
    p.add_argument("graph", metavar="GRAPH")
    p.add_argument("--layer", default="summary", choices=LAYER_VIEWS, help="view to render (default: summary)")
    p.add_argument("--max-tokens", type=int, metavar="N", help="token budget (at least 200; default: no limit, "
                                                                "the summary stays under 500)")
    p.add_argument("--pid", type=int, nargs="+", action="extend", metavar="PID",
                   help="the workload, as for diagnose: these processes and their descendants "
                        "(default: recognised AI processes)")
    p.add_argument("--format", choices=("text", "mermaid"), default="text",
                   help="text (default), or mermaid: the flow view as a Mermaid flowchart for a report "
                        "(with --layer flow)")
    p.add_argument("--thresholds", metavar="FILE", help="TOML file overriding pattern thresholds, as for diagnose")
    p.add_argument("--host", metavar="NAME", help="only this host of a merged graph (witty-profiler merge)")
    add_output_arguments(p, "the view")
    p.set_defaults(handler=run)
