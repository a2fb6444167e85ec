"""`witty-profiler reference NAME`: a reference page of docs/, generated from the registry it describes."""

from __future__ import annotations

import argparse
import sys


def run(args: argparse.Namespace) -> int:
    from witty_profiler.reference import PAGES
    sys.stdout.write(PAGES[args.page][1]())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from witty_profiler.reference import PAGES
    p = sub.add_parser("reference", help="print a generated reference page (collectors, mcp-tools, rest-api)",
                       description="The pages of docs/, made from the registries they describe: "
                                   + "; ".join(f"{name} -> {path}" for name, (path, _) in PAGES.items()) + ".")
    p.add_argument("page", choices=list(PAGES))
    p.set_defaults(handler=run)
