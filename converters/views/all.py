"""`all`: the summary followed by every layer view, sharing one budget; the whole of it when it fits.

The summary takes up to a quarter of the budget (never more than 499 tokens). The layers share
the rest by weight: a layer with findings weighs more (a P0 more than a P2). A layer whose share
is too small to say anything useful is left out, named on one line with the command that shows
it; what the small layers do not use goes, in a second pass, to the layers that had to fold rows.
"""

from __future__ import annotations

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.hints import Slot
from witty_profiler.converters.render import may_fit_whole
from witty_profiler.converters.tokens import count_tokens
from witty_profiler.converters.views import LAYERS, module, view_blocks
from witty_profiler.converters.views.common import legend_line

_HEADER = "# witty-profiler view: all · {n} tokens{limit}"
LAYER_MIN = 80  # below this a layer view is only its header: name it on the left-out line instead
_WEIGHT = {"P0": 3, "P1": 2, "P2": 1}


def _weights(ctx: GraphContext) -> dict[str, int]:
    return {layer: 1 + min(sum(_WEIGHT.get(f.priority, 1) for f in ctx.findings(layer)), 8) for layer in LAYERS}


def _left_out_line(ctx: GraphContext, layers: list[str]) -> str:
    return f"## left out for the budget: {', '.join(layers)}; see each with {ctx.hints.convert(Slot('NAME'))}\n"


def _assemble(ctx: GraphContext, legend: str | None, summary, views: dict, limit: str) -> tuple[str, int]:
    left = [layer for layer in LAYERS if views.get(layer) is None]
    parts = ([legend + "\n"] if legend else []) + [summary.text]
    parts += [views[layer].text for layer in LAYERS if views.get(layer) is not None]
    if left:
        parts.append(_left_out_line(ctx, left))
    body = "\n".join(parts)
    n = count_tokens(body) + count_tokens(_HEADER.format(n=0, limit=limit)) + 1
    for _ in range(5):
        text = _HEADER.format(n=n, limit=limit) + "\n" + body
        real = count_tokens(text)
        if real == n:
            break
        n = real
    return text, count_tokens(text)


def _share_out(ctx: GraphContext, room: int, layers: list[str]) -> dict:
    from witty_profiler.converters.view import render_layer
    weights = _weights(ctx)
    layers = sorted(layers, key=lambda k: (-weights[k], LAYERS.index(k)))
    while layers and room * weights[layers[-1]] // sum(weights[k] for k in layers) < LAYER_MIN:
        layers.pop()  # the lightest layer cannot say anything useful in its share
    total = sum(weights[k] for k in layers) or 1
    shares = {k: room * weights[k] // total for k in layers}
    views: dict = {}
    for _ in range(3):  # hand what is unused to the views that had to fold, until it settles
        views = {k: render_layer(ctx, k, shares[k], common_legend=False) for k in layers}
        spare = sum(shares[k] - v.tokens for k, v in views.items() if not v.truncated)
        hungry = [k for k, v in views.items() if v.truncated]
        if spare < 20 or not hungry:
            break
        for k, v in views.items():
            if not v.truncated:
                shares[k] = v.tokens
        for k in hungry:
            shares[k] += spare // len(hungry)
    return views


def render(ctx: GraphContext, max_tokens: int | None):
    from witty_profiler.converters.view import View, render_layer
    legend: str | None = legend_line(ctx)
    limit = f" of {max_tokens}" if max_tokens is not None else ""
    whole = max_tokens is None or may_fit_whole(
        [b for view in ("summary", *LAYERS) for b in view_blocks(ctx, view)], max_tokens)
    if whole:  # everything, if it fits: a view that fits is returned whole
        summary = module("summary").render(ctx, None, in_all=True)
        views = {layer: render_layer(ctx, layer, None, common_legend=False) for layer in LAYERS}
        text, tokens = _assemble(ctx, legend, summary, views, limit)
        whole = max_tokens is None or tokens <= max_tokens
    if not whole:
        summary = module("summary").render(ctx, max(max_tokens // 4, 100), in_all=True)
        fixed = (count_tokens(_HEADER.format(n=max_tokens, limit=limit)) + count_tokens(legend) + 3 * len(LAYERS)
                 + count_tokens(_left_out_line(ctx, list(LAYERS))))
        views = _share_out(ctx, max_tokens - summary.tokens - fixed, list(LAYERS))
        text, tokens = _assemble(ctx, legend, summary, views, limit)
        while tokens > max_tokens:  # estimates missed: give up the lightest layer, then the legend
            kept = [k for k in LAYERS if views.get(k) is not None]
            if kept:
                weights = _weights(ctx)
                views[min(kept, key=lambda k: (weights[k], -LAYERS.index(k)))] = None
            elif legend is not None:
                legend = None
            else:
                room = max(summary.tokens - (tokens - max_tokens) - 10, 60)
                summary = module("summary").render(ctx, room, in_all=True)
            text, tokens = _assemble(ctx, legend, summary, views, limit)
    omitted: dict[str, int] = dict(summary.omitted)
    for v in views.values():
        for k, c in (v.omitted if v is not None else {}).items():
            omitted[k] = omitted.get(k, 0) + c
    truncated = summary.truncated or any(views.get(k) is None or views[k].truncated for k in LAYERS)
    return View(layer="all", text=text, tokens=tokens, truncated=truncated, omitted=omitted)
