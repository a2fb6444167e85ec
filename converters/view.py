"""`render_view`: the one entry point of the converters (the CLI, the MCP server and scripts call it)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from witty_profiler.converters.context import GraphContext, context_for
from witty_profiler.converters.hints import CliHints, Hints
from witty_profiler.converters.render import MIN_TOKENS, Lines, fit
from witty_profiler.converters.views import LAYER_VIEWS, module, view_blocks
from witty_profiler.converters.views.common import LEGEND_START
from witty_profiler.topology import Graph
from witty_profiler.topology.errors import InputError


class View(BaseModel):
    layer: str
    text: str
    tokens: int = Field(description="cl100k_base tokens of text, header included")
    truncated: bool = Field(description="something was left out to fit the budget")
    omitted: dict[str, int] = Field(default_factory=dict, description="rows left out, by what they are")


def check_request(layer: str, max_tokens: int | None) -> None:
    if layer not in LAYER_VIEWS:
        raise InputError(f"unknown layer {layer!r}: choose one of {', '.join(LAYER_VIEWS)}")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < MIN_TOKENS):
        raise InputError(f"max_tokens must be a whole number of at least {MIN_TOKENS}, got {max_tokens!r}")


def render_view(graph: Graph, layer: str = "summary", max_tokens: int | None = None, *,
                ref: str = "GRAPH", hints: Hints | None = None, diagnosis: Any = None) -> View:
    """A compact text view of `graph` that fits in `max_tokens` (None = no limit; the summary is
    always under 500 tokens). The view says how to get what it left out: by default as
    `witty-profiler` command lines on the graph file `ref`; `hints=McpHints(graph_id)` makes it
    name the MCP tool calls instead. The findings shown are those of `diagnosis` (made for this graph;
without it the view says that nothing was judged)."""
    check_request(layer, max_tokens)
    ctx = context_for(graph, hints or CliHints(ref), diagnosis)
    if layer == "all":
        return module("all").render(ctx, max_tokens)
    if layer == "summary":
        return module("summary").render(ctx, max_tokens)
    return render_layer(ctx, layer, max_tokens)


def render_layer(ctx: GraphContext, layer: str, max_tokens: int | None, common_legend: bool = True) -> View:
    """One layer view. Inside `all` the legend line shared by every layer is said once, on top,
    and the collector coverage once, in the summary."""
    mod = module(layer)
    limit = f" of {max_tokens}" if max_tokens is not None else ""
    blocks = view_blocks(ctx, layer)
    if not common_legend:  # inside `all`: the summary already says what each collector could not do
        blocks = [Lines(b.lines[1:], b.essential) if isinstance(b, Lines) and b.lines
                  and b.lines[0].startswith(LEGEND_START) else b for b in blocks
                  if not (isinstance(b, Lines) and b.lines and b.lines[0].startswith("not measured:"))]
    fitted = fit(blocks, lambda n: f"## {mod.TITLE} · {n} tokens{limit}", max_tokens)
    return View(layer=layer, text=fitted.text, tokens=fitted.tokens, truncated=fitted.truncated,
                omitted=fitted.omitted)
