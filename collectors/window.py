"""The bounds of a capture window, checked before anything is collected (and before the collectors
are imported: the CLI checks its options first)."""

from __future__ import annotations

from witty_profiler.topology.errors import InputError

MAX_DURATION_S = 3600.0


def validate_window(duration_s: float, interval_s: float) -> None:
    if not duration_s > 0 or duration_s > MAX_DURATION_S:
        raise InputError(f"duration must be > 0 and <= {MAX_DURATION_S:g} seconds, got {duration_s:g}")
    if not interval_s > 0 or interval_s > duration_s:
        raise InputError(f"interval must be > 0 and <= the duration ({duration_s:g} s), got {interval_s:g}")
