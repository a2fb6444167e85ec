"""`witty-profiler merge G... -o FILE`: host graphs into one graph of several hosts."""

from __future__ import annotations

import argparse
import sys

from witty_profiler.output import check_output, write_output


def run(args: argparse.Namespace) -> int:
    from witty_profiler.diagnosis.crosshost import windows_apart
    from witty_profiler.topology import dumps_graph, load_graph
    from witty_profiler.topology.hosts import host_windows, merge_hosts
    check_output(args.output, args.force, tuple(args.graphs))
    merged = merge_hosts((path, load_graph(path)) for path in args.graphs)
    apart = windows_apart([{"host": h, "window": w} for h, w in host_windows(merged).items()])
    write_output(dumps_graph(merged), args.output, args.force, tuple(args.graphs))
    if apart:
        print(f"witty-profiler: warning: {len(apart)} hosts' windows do not overlap the window most hosts share: "
              + ", ".join(apart[:10]) + (" …" if len(apart) > 10 else ""), file=sys.stderr)
    if args.output not in (None, "-"):
        print(f"wrote {args.output}: {len(merged.meta.hosts)} hosts, {merged.entity_count()} entities, "
              f"{merged.edge_count()} edges", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="merge host graphs into one graph of several hosts",
                       description="Each host once (a host in two files is refused); each host keeps its own window "
                                   "in meta.windows, and hosts whose windows do not overlap are reported. Every "
                                   "command that takes a GRAPH works on the result; diagnose adds the cross-host "
                                   "patterns, and convert/diagnose --host show one host.")
    p.add_argument("graphs", nargs="+", metavar="GRAPH", help="host graph files (native v1 or legacy)")
    p.add_argument("-o", "--output", metavar="FILE", required=True, help="the merged graph ('-' = stdout)")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    p.set_defaults(handler=run)
