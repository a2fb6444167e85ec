"""The functions of the public API that join two packages: a view shows the diagnosis' findings,
so `convert` diagnoses the graph first, with the workload and thresholds the caller gives, and
hands the result to the converters (which never judge anything themselves); `report` writes a
diagnosis as Markdown or JSON (the diagnosis' own reports) or as the HTML page that draws the graph
(witty_profiler.htmlreport)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from witty_profiler.converters import View, render_view
from witty_profiler.converters.hints import Hints
from witty_profiler.converters.view import check_request
from witty_profiler.diagnosis import Diagnosis, diagnose
from witty_profiler.topology import Graph
from witty_profiler.topology.errors import InputError


def convert(graph: Graph, layer: str = "summary", max_tokens: int | None = None, *,
            pids: Iterable[int] | None = None, thresholds: Any = None, ref: str = "GRAPH",
            hints: Hints | None = None, diagnosis: Diagnosis | None = None) -> View:
    """A compact text view of one layer of `graph` (or `summary`, or `all`) within `max_tokens`,
    showing the findings of the diagnosis made for `pids` (default: the AI workload) with
    `thresholds` (a TOML path or a mapping of overrides), or of the `diagnosis` given. What the
    view leaves out it names as `witty-profiler` commands on the file `ref`, or as MCP tool calls
    with `hints=McpHints(graph_id)`."""
    check_request(layer, max_tokens)  # before the diagnosis: a bad request fails fast
    if diagnosis is None:
        diagnosis = diagnose(graph, pids=pids, thresholds=thresholds)
    return render_view(graph, layer, max_tokens, ref=ref, hints=hints, diagnosis=diagnosis)


def report(diagnosis: Diagnosis, graph: Graph | None = None, format: str = "md") -> str:
    """The report of `diagnosis`: `md` (Markdown), `json`, or `html` (a self-contained page with the
    topology of `graph` drawn, which it needs)."""
    if format not in ("md", "markdown", "json", "html"):
        raise InputError(f"unknown report format {format!r}; use md, json or html")
    if format != "html":
        from witty_profiler.diagnosis.report import report as text_report
        return text_report(diagnosis, graph, format)
    if graph is None:
        raise InputError("the HTML report draws the graph: give the graph that was diagnosed")
    from witty_profiler.htmlreport import render_html
    return render_html(graph, diagnosis)
