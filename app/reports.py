"""The report of a diagnosis, in the forms every front-end offers: Markdown and JSON (the diagnosis'
own reports) and the HTML page that draws the graph (`app.htmlreport`)."""

from __future__ import annotations

from witty_profiler.diagnosis import Diagnosis
from witty_profiler.topology import Graph
from witty_profiler.topology.errors import InputError

# format -> media type, for the routes that serve them
REPORT_FORMATS = {"md": "text/markdown", "json": "application/json", "html": "text/html"}


def report(diagnosis: Diagnosis, graph: Graph | None = None, format: str = "md") -> str:
    """The report of `diagnosis`: `md` (Markdown), `json`, or `html` (a self-contained page with the
    topology of `graph` drawn, which it needs)."""
    if format not in (*REPORT_FORMATS, "markdown"):
        raise InputError(f"unknown report format {format!r}; use md, json or html")
    if format != "html":
        from witty_profiler.diagnosis.report import report as text_report
        return text_report(diagnosis, graph, format)
    if graph is None:
        raise InputError("the HTML report draws the graph: give the graph that was diagnosed")
    from witty_profiler.app.htmlreport import render_html
    return render_html(graph, diagnosis)
