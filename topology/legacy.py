"""Reader for the original witty-profiler's graph JSON (in progress)."""

from __future__ import annotations

from typing import Any


def is_legacy(data: Any) -> bool:
    if isinstance(data, dict) and isinstance(data.get("content"), dict):
        data = data["content"]
    return isinstance(data, dict) and isinstance(data.get("nodes"), list) and isinstance(data.get("edges"), list)
