"""Small output helpers shared by the subcommands: JSON to stdout, aligned text tables, writing
a file without overwriting what the user has unless asked."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from topology.errors import InputError


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines) + "\n"


def write_output(text: str, path: str | None, force: bool = True) -> None:
    """Write to PATH, or stdout for None or '-'. Refuses a directory; with force=False refuses to
    overwrite an existing file."""
    if path in (None, "-"):
        sys.stdout.write(text)
        return
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{target}: is a directory; give a file name")
    if target.exists() and not force:
        raise InputError(f"{target}: exists; choose another name or pass --force to overwrite it")
    if not target.parent.exists():
        raise InputError(f"{target.parent}: no such directory")
    target.write_text(text, encoding="utf-8")
