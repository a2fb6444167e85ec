"""`witty-profiler import-trace FILE... -o GRAPH [--into GRAPH] [--job KEY]`: training traces into a graph."""

from __future__ import annotations

import argparse
import sys

from witty_profiler.output import check_output, write_output


def run(args: argparse.Namespace) -> int:
    from witty_profiler.topology import dumps_graph, load_graph
    from witty_profiler.topology.vocabulary import E, T
    from witty_profiler.traces.importer import import_traces
    check_output(args.output, args.force, (args.into, *args.traces))
    into = load_graph(args.into) if args.into else None
    graph = import_traces(args.traces, job=args.job, into=into)
    write_output(dumps_graph(graph), args.output, args.force, (args.into, *args.traces))
    if args.output not in (None, "-"):
        ranks, collectives = len(graph.entities(T.RANK)), len(graph.entities(T.COLLECTIVE))
        joined = f", {len(graph.edges(E.TRACE_OF))} joined to processes" if into is not None else ""
        print(f"wrote {args.output}: {ranks} ranks{joined}, {collectives} collectives", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import-trace", help="import training traces (Kineto, msprof-analyze) into a graph",
                       description="Reads msprof-analyze cluster outputs (a directory holding "
                                   "cluster_step_trace_time.csv and/or cluster_communication.json, or those files) "
                                   "and PyTorch profiler (Kineto) traces into rank and collective entities. With "
                                   "--into, the ranks join that host graph (a rank whose trace names a pid and "
                                   "hostname of its processes gets a trace_of edge) and the result goes to -o, never "
                                   "over the --into file. Diagnose the result for control.slow_rank and "
                                   "network.slow_link.")
    p.add_argument("traces", nargs="+", metavar="FILE", help="trace files or msprof-analyze output directories")
    p.add_argument("-o", "--output", metavar="GRAPH", required=True, help="the graph to write ('-' = stdout)")
    p.add_argument("--into", metavar="GRAPH", help="a host graph to join the ranks to (read, not changed)")
    p.add_argument("--job", metavar="KEY", help="the job key of the ranks' ids (e.g. slurm:1234); default: the one "
                   "job of --into, else trace:default")
    p.add_argument("--force", action="store_true", help="overwrite GRAPH if it exists")
    p.set_defaults(handler=run)
