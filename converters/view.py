"""`render_view`: the one entry point of the converters (the CLI, the MCP server and scripts call it)."""

from __future__ import annotations

from typing import Any

from witty_profiler.converters.context import GraphContext, context_for
from witty_profiler.converters.hints import CliHints, Hints
from witty_profiler.converters.render import MIN_TOKENS, Lines, fit
from witty_profiler.converters.views import LAYER_VIEWS, module, view_blocks
from witty_profiler.converters.views.common import LEGEND_START, NOT_EVALUATED
from witty_profiler.topology import Graph
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.models import Fields, copy_value
from witty_profiler.topology.layers import view_title


class View(Fields):  # not a dataclass: `convert` imports this module
    _FIELDS = ("layer", "text", "tokens", "truncated", "omitted")

    def __init__(self, layer: str, text: str, tokens: int, truncated: bool,
                 omitted: dict[str, int] | None = None) -> None:
        self.layer = layer
        self.text = text
        self.tokens = tokens  # cl100k_base tokens of text, header included
        self.truncated = truncated  # something was left out to fit the budget
        self.omitted = {} if omitted is None else omitted  # rows left out, by what they are

    def to_dict(self) -> dict[str, Any]:
        return {name: copy_value(getattr(self, name)) for name in self._FIELDS}


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
    if layer in ("summary", "flow"):
        return module(layer).render(ctx, max_tokens)
    return render_layer(ctx, layer, max_tokens)


def render_layer(ctx: GraphContext, layer: str, max_tokens: int | None, common_legend: bool = True) -> View:
    """One layer view. Inside `all` the legend line shared by every layer is said once, on top,
    and the collector coverage once, in the summary."""
    limit = f" of {max_tokens}" if max_tokens is not None else ""
    blocks = view_blocks(ctx, layer)
    if not common_legend:  # inside `all`: the summary already says what each collector could not do
        blocks = [_in_all(ctx, layer, b) for b in blocks
                  if not (isinstance(b, Lines) and b.lines and b.lines[0].startswith("not measured:"))]
    fitted = fit(blocks, lambda n: f"## {view_title(layer)} · {n} tokens{limit}", max_tokens)
    return View(layer=layer, text=fitted.text, tokens=fitted.tokens, truncated=fitted.truncated,
                omitted=fitted.omitted)


def _in_all(ctx: GraphContext, layer: str, block: Any) -> Any:
    """A block of a layer view as `all` shows it: without the legend line all layers share (said once on
    top), and the patterns not evaluated named on one line, their reasons one request away."""
    if not isinstance(block, Lines) or not block.lines:
        return block
    if block.lines[0].startswith(LEGEND_START):
        return Lines(block.lines[1:], block.essential)
    if block.lines[0].startswith(NOT_EVALUATED):
        names = [line[len(NOT_EVALUATED):].split(" (", 1)[0].split(".", 1)[-1] for line in block.lines]
        return Lines([f"{NOT_EVALUATED}{', '.join(names)} (why: {ctx.hints.diagnose(layer)})"], block.essential)
    return block
