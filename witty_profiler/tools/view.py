"""`python -m witty_profiler.tools.view [GRAPH] --analyze --output report.md` and
`--layer memory --detail`: the original tool's report commands, on the new diagnosis.

Without GRAPH it reads ./witty-graph.json when that file exists (what `witty-profiler collect`
writes), else collects a live window first.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from witty_profiler.cli import OneLineErrorParser, guarded
from witty_profiler.commands.collect import DEFAULT_FILE
from witty_profiler.commands.diagnose import add_source_options, graph_from_args
from witty_profiler.diagnosis import diagnose, layer_number
from witty_profiler.diagnosis.report import layer_detail, layer_section, report
from witty_profiler.options import thresholds as read_thresholds
from witty_profiler.output import add_output_arguments, write_output
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.layers import LAYER_NUMBERS


def build_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(prog="python -m witty_profiler.tools.view", description=__doc__.split("\n\n")[0])
    add_source_options(p)
    p.add_argument("--analyze", action="store_true", help="the full seven-layer report (the default without --layer)")
    p.add_argument("--layer", metavar="NAME", help=f"one layer: {', '.join(LAYER_NUMBERS)}")
    p.add_argument("--detail", action="store_true", help="with --layer: every evidence item and the layer's coverage")
    p.add_argument("--format", choices=["md", "json"], default="md")
    add_output_arguments(p, "the report")
    p.add_argument("-q", "--quiet", action="store_true", help="no collection progress on stderr")
    return p


def render(args: argparse.Namespace) -> str:
    layer = layer_number(args.layer)
    if args.detail and layer is None:
        raise InputError("--detail needs --layer NAME (e.g. --layer memory --detail)")
    thresholds = read_thresholds(args.thresholds)
    if args.graph is None and Path(DEFAULT_FILE).is_file():
        args.graph = DEFAULT_FILE
    graph = graph_from_args(args)
    if args.format == "json" or layer is None or args.analyze:
        return report(diagnose(graph, pids=args.pid or None, layer=layer, thresholds=thresholds), graph, args.format)
    result = diagnose(graph, pids=args.pid or None, layer=layer, thresholds=thresholds)
    if args.detail:
        return layer_detail(result, layer)
    return "\n".join(layer_section(result, layer, detail=False)).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return guarded(lambda: write_output(render(args), args.output, args.force, (args.graph,)))


if __name__ == "__main__":
    sys.exit(main())
