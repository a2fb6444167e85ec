"""Threshold overrides as a front-end was given them, in one place: the CLI's --thresholds FILE, an MCP
client's `thresholds` (TOML text or a file path), the service's `diagnosis.thresholds` (a file name or
a table of its config file). The format and its checks are `diagnosis.thresholds`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from witty_profiler.topology.errors import InputError

Overrides = dict[str, dict[str, Any]]


def overrides(given: str | os.PathLike[str] | Mapping[str, Any] | None,
              workdir: Path | None = None) -> Overrides | None:
    """None for the defaults; a mapping, validated; a `Path`, the TOML file it names; a string holding a
    newline or '=', TOML text; any other string, the path of a TOML file, relative to `workdir`."""
    from witty_profiler.diagnosis.thresholds import load_thresholds, validate
    if given is None:
        return None
    if isinstance(given, Mapping):
        return validate(dict(given), "thresholds")
    if isinstance(given, str) and ("\n" in given or "=" in given):
        import tomllib
        try:
            return validate(tomllib.loads(given), "thresholds")
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"thresholds: not valid TOML ({exc}); resource witty://thresholds shows the "
                             f"format") from None
    if not isinstance(given, (str, os.PathLike)):
        raise InputError(f"thresholds must be a TOML file path or a mapping, found {type(given).__name__}")
    path = Path(given).expanduser()
    return load_thresholds(path if path.is_absolute() or workdir is None else workdir / path)
