"""One module per view. Each layer view module has LAYER, NUMBER, TITLE and `blocks(ctx)`; `blocks`
here builds a view's blocks once per context and pins the rows its findings cite."""

from __future__ import annotations

import importlib
from operator import attrgetter
from types import ModuleType
from typing import Any

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.layers import LAYER_NUMBERS, LAYER_VIEWS, LAYERS
from witty_profiler.converters.render import Column, Table, own_id, unordered
from witty_profiler.converters.views.common import ID, NAME
from witty_profiler.topology import Entity

__all__ = ["LAYERS", "LAYER_VIEWS", "module", "view_blocks"]


def module(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")


def view_blocks(ctx: GraphContext, layer: str) -> list[Any]:
    """The blocks of a view, built once per context (ranking 100k threads is not free). Cited ids
    that no table of the view can show get a row of their own, with what the findings cite of them,
    in a table before the others."""
    if layer not in ctx.blocks:
        found = module(layer).blocks(ctx)
        cited = ctx.cited(layer) if layer in LAYER_NUMBERS else set()
        shown: set[str] = set()  # cited ids already shown by a pinned row of an earlier table
        missing = {i for i in cited if "|" not in i}  # cited entities no table shows
        for block in found:
            if isinstance(block, Table) and cited:
                _pin_once(block, cited, shown)
                _shown_by(block, missing)
        missing = sorted(missing)
        if missing:  # first of the tables: cited rows go first
            at = next((k for k, b in enumerate(found) if isinstance(b, Table)), len(found))
            found.insert(at, _cited_table(ctx, layer, missing))
        ctx.blocks[layer] = found
    return ctx.blocks[layer]


def _shown_by(table: Table, missing: set[str]) -> None:
    """Take out of `missing` the ids the rows of `table` show; the cited rows come first, so the look
    stops early where every cited id is found (a table of 100,000 threads is not walked for nothing)."""
    if not missing:
        return
    if table.covers is own_id:
        missing.difference_update(map(_ID, unordered(table.items)))
        return
    for item in unordered(table.items):
        missing.difference_update(table.covers(item))
        if not missing:
            return


_ID = attrgetter("id")


def _cited_table(ctx: GraphContext, layer: str, ids: list[str]) -> Table:
    """A row per cited id that no table of the layer shows: its name and the values the findings
    cite of it."""
    values = ctx.cited_by_entity(layer)
    rows = [ctx.graph.entity(i) or Entity(id=i, type=i.split(":", 1)[0]) for i in ids]
    return Table("cited, shown in no table above", [
        ID, NAME,
        Column("cited", lambda e: "; ".join(dict.fromkeys(values.get(e.id, []))), left=True),
    ], rows, "cited entities", ctx.hints.around(), pinned=len(rows))


def _pin_once(table: Table, cited: set[str], shown: set[str]) -> None:
    """Pin the rows of `table` that show a cited id no earlier table pinned; the rest of the
    cited rows keep their place at the top of the ranking, unpinned."""
    head = list(table.items[: table.pinned])
    keep, free = [], []
    for item in head:
        ids = set(table.covers(item)) & cited
        (keep if ids - shown else free).append(item)
        if ids - shown:
            shown.update(ids)
    if len(keep) != len(head):
        if hasattr(table.items, "first"):  # a Ranked sequence: the cited rows are its `first`
            table.items.first = keep + free + table.items.first[table.pinned:]
        else:
            table.items = keep + free + list(table.items[table.pinned:])
        table.pinned = len(keep)
