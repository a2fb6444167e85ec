"""What several commands read the same way: --collectors, --thresholds FILE, and the progress of a live window."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from witty_profiler.topology.errors import InputError


def window_progress(stream: TextIO) -> Callable[[float, float, str], None]:
    """A one-line progress display on stderr: rewritten in place on a terminal, start/end lines otherwise."""
    tty = stream.isatty()

    def show(elapsed: float, total: float, message: str) -> None:
        if tty:
            end = "\n" if message.startswith("finished") else ""
            stream.write(f"\rcollecting: {elapsed:5.1f}/{total:g} s {message:<16}{end}")
        elif message == "started" or message.startswith("finished"):
            stream.write(f"collecting: {elapsed:.1f}/{total:g} s {message}\n")
        stream.flush()
    return show


def collector_names(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise InputError("--collectors needs at least one name, e.g. --collectors process,cpu")
    return names


def thresholds(path: str | None) -> Any:
    """The overrides of a --thresholds FILE (None: the defaults), checked by the application layer's one reader."""
    from witty_profiler.app.thresholds import overrides
    return overrides(Path(path)) if path else None
