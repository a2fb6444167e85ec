"""`witty-profiler patterns`: the pattern catalog, as a table, JSON or the generated references."""

from __future__ import annotations

import argparse
import sys

from witty_profiler.output import print_json, table


def run(args: argparse.Namespace) -> int:
    from witty_profiler.diagnosis.catalog import catalog
    from witty_profiler.diagnosis.docs import catalog_dict, patterns_markdown, thresholds_markdown
    if args.markdown:
        sys.stdout.write(patterns_markdown())
    elif args.thresholds_markdown:
        sys.stdout.write(thresholds_markdown())
    elif args.json:
        print_json(catalog_dict())
    else:
        rows = [[p.id, p.layer, p.title, "; ".join(f"{t.name} {t.describe()}" for t in p.thresholds)]
                for p in catalog().values()]
        sys.stdout.write(table(rows, ["id", "layer", "title", "thresholds"]))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("patterns", help="list the bottleneck patterns and their thresholds")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--markdown", action="store_true", help="print references/patterns.md (generated)")
    group.add_argument("--thresholds-markdown", action="store_true", help="print references/thresholds.md (generated)")
    group.add_argument("--json", action="store_true", help="the catalog as JSON")
    p.set_defaults(handler=run)
