"""Small output helpers shared by the subcommands: JSON to stdout, aligned text tables, writing
a file without overwriting what the user has unless asked (--force), and never over an input."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.text import valid_text


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines) + "\n"


def add_output_arguments(parser, what: str = "the result") -> None:
    """-o/--output and --force, the same on every command that writes a file."""
    parser.add_argument("-o", "--output", metavar="FILE", help=f"write {what} to FILE (default stdout; '-' = stdout)")
    parser.add_argument("--force", action="store_true", help="overwrite FILE if it exists")


def check_output(path: str | None, force: bool = False, inputs: tuple[str | None, ...] = ()) -> None:
    """Refuse, before any work is done, an output that would lose something: a directory, a missing
    directory, an existing file without --force, or one of the command's own input files."""
    if path in (None, "-"):
        return
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{target}: is a directory; give a file name")
    if not target.parent.exists():
        raise InputError(f"{target.parent}: no such directory")
    for given in inputs:
        if given and target.exists() and Path(given).exists() and target.samefile(given):
            raise InputError(f"{target}: is also an input of this command; write the output to another file")
    if target.exists() and not force:
        raise InputError(f"{target}: exists; choose another name or pass --force to overwrite it")


def write_output(text: str, path: str | None, force: bool = False, inputs: tuple[str | None, ...] = ()) -> None:
    """Write to PATH (after check_output), or stdout for None or '-'."""
    check_output(path, force, inputs)
    text = valid_text(text)  # a lone surrogate read from an input is written as U+FFFD, not a crash
    if path in (None, "-"):
        sys.stdout.write(text)
        return
    Path(path).write_text(text, encoding="utf-8")
