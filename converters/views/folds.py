"""The requests a fold line names: what lists the rows a budget left out of a table.

Each is written once per table, before the budget is known, so it lists every row the table
could fold, on any graph: it names a metric to rank by or a condition only where every row has
it (the query tools drop the entities without the metric they rank by), and as many rows as the
graph has. Edges are listed around the entity they gather at, else by their type.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from operator import attrgetter
from typing import Any

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.evidence import is_number
from witty_profiler.converters.render import unordered
from witty_profiler.topology.predicates import compile_where


def fold_query(ctx: GraphContext, kind: str, rows: Iterable[Any], top: str | None = None,
               where: str | None = None) -> str:
    """The request that lists every row of a table a budget folds away: the entities of `kind`, as
    many as the graph has. The query tools rank by `top` only the entities that have it and leave
    the others out, so the request ranks only when every row has it, and narrows by `where` only
    when every row meets it: a legacy graph has no cpu_util_pct at all."""
    rows = list(unordered(rows))
    if top is not None and not _all_numbers(rows, top):
        top = None
    if where is not None and not all(map(compile_where(where), rows)):
        where = None
    return ctx.hints.query(type=kind, where=where, top=top, limit=ctx.counts_by_type[0].get(kind) or None)


def _all_numbers(rows: list[Any], metric: str) -> bool:
    """Whether every row has a number for `metric`: the types of the values gathered at C speed (100,000
    threads), each value looked at only where one is not a plain int or float."""
    try:
        if set(map(type, map(dict.get, map(_METRICS, rows), repeat(metric)))) <= _PLAIN_NUMBERS:
            return True
    except TypeError:  # metrics that are another kind of mapping
        pass
    return all(is_number(r.metrics.get(metric)) for r in rows)


_METRICS = attrgetter("metrics")
_PLAIN_NUMBERS = frozenset((int, float))


def per_type_query(ctx: GraphContext, rows: Iterable[Any], top: str | None = None) -> str:
    """The request per entity type of a table whose rows mix types (gpu, npu, nic), each ranked by
    `top` where all rows of that type have it."""
    rows = list(unordered(rows))
    kinds = sorted({r.type for r in rows})
    return " ; ".join(fold_query(ctx, kind, [r for r in rows if r.type == kind], top) for kind in kinds)


MAX_REQUESTS = 3  # more requests than this on one fold line cost more than the rows they stand for
MAX_DEPTH = 4  # query_graph's deepest `around`


def edge_query(ctx: GraphContext, edges: Iterable[Any]) -> str:
    """The requests that list every edge of a table: per edge type and connected group of edges,
    the edges of that type within a few hops around the group's most central entity, which lists
    them with their neighbourhood. Edges scattered over more groups than MAX_REQUESTS (or out of
    reach of any centre) get the listing of every edge of their types."""
    by_type: dict[str, list[Any]] = {}
    for e in unordered(edges):
        by_type.setdefault(e.type, []).append(e)
    every = " ; ".join(ctx.hints.query(edge_type=k, limit=ctx.counts_by_type[1].get(k) or len(by_type[k]))
                       for k in sorted(by_type))
    groups = [(kind, group) for kind in sorted(by_type) for group in _connected(by_type[kind])]
    if len(groups) > MAX_REQUESTS:
        return every
    requests = []
    for kind, group in groups:
        found = _centre(ctx, kind, group)
        if found is None or found[1] > MAX_DEPTH:
            return every
        centre, depth, rows = found
        requests.append(ctx.hints.query(around=centre, depth=depth, edge_type=kind, limit=rows))
    return " ; ".join(requests)


def _connected(edges: list[Any]) -> list[list[Any]]:
    """Edges grouped by the connected parts of the graph they form (ends as nodes, direction ignored)."""
    parent: dict[str, str] = {}

    def root(n: str) -> str:
        while parent.setdefault(n, n) != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for e in edges:
        parent[root(e.source)] = root(e.target)
    groups: dict[str, list[Any]] = {}
    for e in edges:
        groups.setdefault(root(e.source), []).append(e)
    return sorted(groups.values(), key=lambda g: min(e.id for e in g))


def _centre(ctx: GraphContext, kind: str, group: list[Any]) -> tuple[str, int, int] | None:
    """(entity, depth, rows): the `around` request on `entity` with `depth` hops along `kind` edges
    reaches every edge of `group`; `rows` is the most entities or edges it returns. The candidates
    are the best connected ends that are entities of the graph (a star's centre needs one hop)."""
    degree: dict[str, int] = {}
    for e in group:
        for n in (e.source, e.target):
            if ctx.graph.entity(n) is not None:
                degree[n] = degree.get(n, 0) + 1
    best: tuple[int, int, str] | None = None
    for node in sorted(degree, key=lambda n: (-degree[n], n))[:8]:
        dist = _hops(ctx, kind, node, MAX_DEPTH + 1)
        depth = max(min(dist.get(e.source, MAX_DEPTH + 1), dist.get(e.target, MAX_DEPTH + 1)) for e in group) + 1
        reached = [n for n, d in dist.items() if d <= depth]
        edges = {x.id for n, d in dist.items() if d < depth
                 for x in ctx.query.out_edges(n, kind) + ctx.query.in_edges(n, kind)}
        key = (depth, max(len(reached), len(edges)), node)
        best = key if best is None or key < best else best
    return None if best is None else (best[2], best[0], best[1])


def _hops(ctx: GraphContext, kind: str, start: str, limit: int) -> dict[str, int]:
    """Hops from `start` along edges of `kind` in either direction, up to `limit`."""
    dist, frontier = {start: 0}, [start]
    for hop in range(1, limit + 1):
        nxt = []
        for n in frontier:
            for x in ctx.query.out_edges(n, kind) + ctx.query.in_edges(n, kind):
                other = x.target if x.source == n else x.source
                if other not in dist:
                    dist[other] = hop
                    nxt.append(other)
        frontier = nxt
    return dist
