"""The in-memory graph: entities and edges by id, merge, and the queries everyone runs.

Entities and edges live in dicts keyed by id (the source of truth); the index of edges by their
ends is built on first use by a neighbourhood or path query and kept up to date as edges are added,
so that building and merging large graphs stays cheap. Only the search for paths uses networkx,
imported when it runs.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from itertools import groupby
from operator import attrgetter, itemgetter
from typing import Any, Literal, TypeVar

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.ids import edge_id
from witty_profiler.topology.merge import merge_attrs, merge_meta, merge_metrics
from witty_profiler.topology.models import Edge, Entity, Meta
from witty_profiler.topology.predicates import Predicate, compile_where
from witty_profiler.topology.text import visible, visible_meta, visible_value

Direction = Literal["out", "in", "both"]
_T = TypeVar("_T")
_R = TypeVar("_R", Entity, Edge)
_TYPE = attrgetter("type")
_ID = attrgetter("id")  # a sort key without a Python frame per item
_FIRST = itemgetter(0)


class Graph:
    def __init__(self, meta: Meta | None = None) -> None:
        self.meta = meta or Meta()
        self._entities: dict[str, Entity] = {}
        self._edges: dict[str, Edge] = {}
        self._ends: dict[str, tuple[list[str], list[str]]] | None = None  # entity -> (edges out, edges in)
        self._by_type: dict[str, list[Entity]] | None = None
        self._edges_by_type: dict[str, list[Edge]] | None = None
        self._derived: dict[str, Any] = {}  # what readers compute from the graph (see `derived`)
        self.extra: dict[str, Any] = {}  # unknown top-level fields of the file, kept for the round trip

    @classmethod
    def of_records(cls, meta: Meta, entities: dict[str, Entity], edges: dict[str, Edge],
                   extra: dict[str, Any] | None = None) -> Graph:
        """A graph made of records already checked (topology.validate): ids unique, every edge between
        entities of `entities`. The dicts become the graph's own."""
        graph = cls(meta)
        graph._entities, graph._edges = entities, edges
        graph.extra = extra or {}
        return graph

    def make_visible(self) -> None:
        """Every string of the graph through topology.text.visible (ids, types, attributes, meta): where
        a graph is made from what the host or a file says, nothing in it can act on its readers."""
        entities: dict[str, Entity] = {}
        for entity in self._entities.values():
            _visible_record(entity)
            if entity.id in entities:  # two ids that differed only in invisible characters: one entity
                merge_attrs(entities[entity.id].attrs, entity.attrs)
                merge_metrics(entities[entity.id].metrics, entity.metrics)
            else:
                entities[entity.id] = entity
        edges: dict[str, Edge] = {}
        for edge in self._edges.values():
            _visible_record(edge)
            edge.source, edge.target = visible(edge.source), visible(edge.target)
            edges.setdefault(edge.id, edge)
        self._entities, self._edges = entities, edges
        self._by_type = self._edges_by_type = self._ends = None
        self._derived.clear()
        self.meta = visible_meta(self.meta)
        self.extra = visible_value(self.extra)

    # -- building -------------------------------------------------------------------------
    def add_entity(self, entity: Entity) -> Entity:
        """Add an entity, or merge it into the one with the same id (see topology.merge)."""
        old = self._entities.get(entity.id)
        self._derived.clear()
        if old is None:
            self._entities[entity.id] = entity
            self._by_type = None
            return entity
        merge_attrs(old.attrs, entity.attrs)
        merge_metrics(old.metrics, entity.metrics)
        old.extra.update(entity.extra)
        return old

    def entity_of(self, kind: str, eid: str, attrs: dict[str, Any] | None = None,
                  metrics: dict[str, Any] | None = None) -> Entity:
        """Shorthand for add_entity(Entity(...))."""
        return self.add_entity(Entity(id=eid, type=kind, attrs=attrs or {}, metrics=metrics or {}))

    def add_edge(self, edge: Edge) -> Edge:
        """Add an edge, or merge it into the one with the same id. Endpoints may be added later."""
        old = self._edges.get(edge.id)
        self._derived.clear()
        if old is None:
            self._edges[edge.id] = edge
            self._edges_by_type = None
            if self._ends is not None:
                self._ends.setdefault(edge.source, ([], []))[0].append(edge.id)
                self._ends.setdefault(edge.target, ([], []))[1].append(edge.id)
            return edge
        merge_attrs(old.attrs, edge.attrs)
        merge_metrics(old.metrics, edge.metrics)
        old.extra.update(edge.extra)
        return old

    def edge_of(self, kind: str, source: str, target: str, attrs: dict[str, Any] | None = None,
                metrics: dict[str, Any] | None = None, qualifier: str | None = None) -> Edge:
        return self.add_edge(Edge(id=edge_id(kind, source, target, qualifier), type=kind, source=source,
                                  target=target, attrs=attrs or {}, metrics=metrics or {}))

    def merge(self, other: "Graph") -> "Graph":
        """Merge another graph (or collector fragment) into this one, in place; returns self."""
        self.meta = merge_meta(self.meta, other.meta)
        self.extra = {**self.extra, **other.extra}
        for entity in other._entities.values():
            self.add_entity(entity.copy())
        for edge in other._edges.values():
            self.add_edge(edge.copy())
        return self

    # -- access ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._entities)

    def __contains__(self, eid: object) -> bool:
        return eid in self._entities

    def entity(self, eid: str) -> Entity | None:
        return self._entities.get(eid)

    def edge(self, eid: str) -> Edge | None:
        return self._edges.get(eid)

    def entities(self, kind: str | None = None) -> list[Entity]:
        """Entities in id order, optionally of one type."""
        if kind is None:
            return [self._entities[k] for k in sorted(self._entities)]
        return list(self._type_index().get(kind, ()))

    def edges(self, kind: str | None = None) -> list[Edge]:
        """Edges in id order, optionally of one type."""
        if kind is None:
            return sorted(self._edges.values(), key=_ID)
        return list(self._edge_type_index().get(kind, ()))

    def derived(self, key: str, build: Callable[[], _T]) -> _T:
        """What a reader computes from the whole graph (an index, a diagnosis), built on first use and
        kept until the graph changes."""
        if key not in self._derived:
            self._derived[key] = build()
        return self._derived[key]

    def entity_count(self) -> int:
        return len(self._entities)

    def edge_count(self) -> int:
        return len(self._edges)

    def counts_by_type(self) -> tuple[dict[str, int], dict[str, int]]:
        """(entities, edges) of each type, in type order: the lengths of the type indexes, which a reader
        that counts goes on to list (rather than one more pass over 100,000 threads)."""
        return ({kind: len(found) for kind, found in self._type_index().items()},
                {kind: len(found) for kind, found in self._edge_type_index().items()})

    def dangling_edges(self) -> list[Edge]:
        return [e for e in self.edges() if e.source not in self._entities or e.target not in self._entities]

    def _type_index(self) -> dict[str, list[Entity]]:
        """type -> its entities in id order; an entity added resets it, one merged into keeps its object."""
        if self._by_type is None:
            self._by_type = _by_type(self._entities.values())
        return self._by_type

    def _edge_type_index(self) -> dict[str, list[Edge]]:
        if self._edges_by_type is None:
            self._edges_by_type = _by_type(self._edges.values())
        return self._edges_by_type

    def _edge_ends(self) -> dict[str, tuple[list[str], list[str]]]:
        """entity id -> (ids of the edges leaving it, ids of the edges reaching it)."""
        if self._ends is None:
            ends: dict[str, tuple[list[str], list[str]]] = {}
            for edge in self._edges.values():
                ends.setdefault(edge.source, ([], []))[0].append(edge.id)
                ends.setdefault(edge.target, ([], []))[1].append(edge.id)
            self._ends = ends
        return self._ends

    # -- queries --------------------------------------------------------------------------
    def find(self, kind: str | None = None, where: str | Iterable[str] | Predicate | None = None) -> list[Entity]:
        """Entities of a type matching a predicate: a callable or 'metrics.cpu_util_pct>50' strings."""
        pred = where if callable(where) else compile_where(where)
        return [e for e in self.entities(kind) if pred(e)]

    def neighbours(self, eid: str, direction: Direction = "both", edge_type: str | None = None
                   ) -> list[tuple[Edge, Entity | None]]:
        """(edge, other end) pairs around an entity, in edge id order."""
        self._require(eid)
        out, into = self._edge_ends().get(eid, ((), ()))
        found: list[Edge] = []
        if direction in ("out", "both"):
            found += [self._edges[k] for k in out]
        if direction in ("in", "both"):
            found += [self._edges[k] for k in into]
        if edge_type is not None:
            found = [e for e in found if e.type == edge_type]
        found = sorted({e.id: e for e in found}.values(), key=lambda e: e.id)
        return [(e, self._entities.get(e.target if e.source == eid else e.source)) for e in found]

    def subgraph(self, eid: str, depth: int = 1, edge_type: str | None = None) -> "Graph":
        """The k-hop neighbourhood of an entity (edges followed in both directions)."""
        self._require(eid)
        seen = {eid}
        frontier = [eid]
        edges: dict[str, Edge] = {}
        for _ in range(max(depth, 0)):
            nxt = []
            for node in frontier:
                for edge, other in self.neighbours(node, "both", edge_type):
                    edges[edge.id] = edge
                    other_id = edge.target if edge.source == node else edge.source
                    if other_id not in seen:
                        seen.add(other_id)
                        nxt.append(other_id)
            frontier = nxt
        sub = Graph(self.meta.copy())
        for node in sorted(seen):
            if node in self._entities:
                sub.add_entity(self._entities[node])
        for edge in edges.values():
            sub.add_edge(edge)
        return sub

    def find_edges(self, kind: str | None = None, where: str | Iterable[str] | Predicate | None = None) -> list[Edge]:
        """Edges of a type matching a predicate (the same conditions as `find`), in id order."""
        pred = where if callable(where) else compile_where(where)
        return [e for e in self.edges(kind) if pred(e)]

    def top(self, metric: str, n: int = 10, kind: str | None = None, ascending: bool = False,
            where: str | Iterable[str] | Predicate | None = None) -> list[Entity]:
        """The n entities with the highest (or lowest) value of a metric among those matching `where`;
        ties broken by id."""
        pool = self.find(kind, where) if where is not None else self.entities(kind)
        scored = [e for e in pool if isinstance(e.metrics.get(metric), (int, float))]
        if ascending:
            return heapq.nsmallest(n, scored, key=lambda e: (e.metrics[metric], e.id))
        return heapq.nsmallest(n, scored, key=lambda e: (-e.metrics[metric], e.id))

    def paths(self, source: str, target: str, max_hops: int = 4, limit: int = 10) -> list[list[str]]:
        """Simple paths (as entity-id lists) between two entities, ignoring edge direction, shortest first
        (equal lengths in id order)."""
        self._require(source)
        self._require(target)
        # a path of at most max_hops edges only visits nodes v with hops(source, v) + hops(v, target)
        # <= max_hops: search that region instead of copying the whole graph (seconds at 100k entities)
        from_source = self._hops(source, max_hops)
        if target not in from_source:
            return []
        from_target = self._hops(target, max_hops)
        region = {n for n, d in from_source.items() if d + from_target.get(n, max_hops + 1) <= max_hops}
        import networkx as nx  # only here: the rest of the tool never pays for its import
        undirected = nx.Graph()  # nodes and edges in id order: the same paths on every run
        undirected.add_nodes_from(sorted(region))
        undirected.add_edges_from(sorted((e.source, e.target) for n in region
                                         for k in self._edge_ends().get(n, ((), ()))[0]
                                         if (e := self._edges[k]).target in region))
        found: list[list[str]] = []
        try:
            for path in nx.shortest_simple_paths(undirected, source, target):
                if len(path) - 1 > max_hops or len(found) >= limit:
                    break
                found.append(path)
        except nx.NetworkXNoPath:
            pass
        return sorted(found, key=lambda p: (len(p), p))

    def _hops(self, start: str, limit: int) -> dict[str, int]:
        """Hop distance (edges in either direction) of every entity within `limit` hops of `start`."""
        ends = self._edge_ends()
        seen = {start: 0}
        frontier = [start]
        for depth in range(1, limit + 1):
            nxt = []
            for node in frontier:
                out, into = ends.get(node, ((), ()))
                for other in (*(self._edges[k].target for k in out), *(self._edges[k].source for k in into)):
                    if other not in seen:
                        seen[other] = depth
                        nxt.append(other)
            frontier = nxt
        return seen

    def edges_between(self, a: str, b: str) -> list[Edge]:
        """Edges from a to b and from b to a, in id order."""
        out, into = self._edge_ends().get(a, ((), ()))
        found = [self._edges[k] for k in out if self._edges[k].target == b]
        found += [self._edges[k] for k in into if self._edges[k].source == b and k not in out]
        return sorted(found, key=lambda e: e.id)

    def _require(self, eid: str) -> None:
        if eid not in self._entities:
            raise InputError(f"no entity with id {eid!r} in this graph")

    def __iter__(self) -> Iterator[Entity]:
        return iter(self.entities())


def _by_type(records: Iterable[_R]) -> dict[str, list[_R]]:
    """type -> its records in id order, the types in order: sorted and grouped at C speed rather than in a
    loop over 100,000 threads. Ids begin with their type, so that in id order each type's records are
    together, and the sort by type (10 ms: the types are 100,000 strings spread over the heap) is needed only
    where a type comes in two runs."""
    ordered = sorted(records, key=_ID)
    runs = [(kind, list(group)) for kind, group in groupby(ordered, _TYPE)]
    if len({kind for kind, _ in runs}) < len(runs):
        ordered.sort(key=_TYPE)  # stable: in id order within each type
        runs = [(kind, list(group)) for kind, group in groupby(ordered, _TYPE)]
    return dict(sorted(runs, key=_FIRST))


def _visible_record(item: Entity | Edge) -> None:
    item.id, item.type = visible(item.id), visible(item.type)
    item.attrs = visible_value(item.attrs)
    if item.extra:
        item.extra = visible_value(item.extra)
