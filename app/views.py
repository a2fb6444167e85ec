"""A view of a graph for a language model: the diagnosis a view shows joined to the converters that draw
it. The converters never judge anything themselves, so `convert` diagnoses the graph first (with the
workload and thresholds the caller gives) unless it is handed the diagnosis."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from witty_profiler.converters import View, render_view
from witty_profiler.converters.hints import Hints
from witty_profiler.converters.render import MIN_TOKENS
from witty_profiler.converters.view import check_request
from witty_profiler.diagnosis import Diagnosis, diagnose
from witty_profiler.topology import Graph
from witty_profiler.topology.layers import VIEWS

__all__ = ["MIN_TOKENS", "VIEWS", "convert"]  # MIN_TOKENS: the least budget a view takes


def convert(graph: Graph, layer: str = "summary", max_tokens: int | None = None, *,
            pids: Iterable[int] | None = None, thresholds: Any = None, ref: str = "GRAPH",
            hints: Hints | None = None, diagnosis: Diagnosis | None = None) -> View:
    """A compact text view of one layer of `graph` (or `summary`, or `all`) within `max_tokens`,
    showing the findings of the diagnosis made for `pids` (default: the AI workload) with
    `thresholds` (overrides, as `app.thresholds.overrides` returns them), or of the `diagnosis` given.
    What the view leaves out it names as `witty-profiler` commands on the file `ref`, or as MCP tool
    calls with `hints=McpHints(graph_id)`."""
    if diagnosis is None:
        check_request(layer, max_tokens)  # a bad request fails before the diagnosis is paid for
        diagnosis = diagnose(graph, pids=pids, thresholds=thresholds)
    return render_view(graph, layer, max_tokens, ref=ref, hints=hints, diagnosis=diagnosis)
