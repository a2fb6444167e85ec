"""A native graph document (parsed JSON) checked field by field and turned into a Graph.

One pass, in plain Python: every field the format defines must have its type (topology.models,
the published JSON Schema in topology.schema says the same), a metric is a finite number or null,
an id is given once, an edge joins entities of the file. The first problem is a GraphFormatError
naming the field: `g.json: invalid witty graph: entities[12].metrics.cpu_util_pct: expected a
number or null, found a string`. Fields this version does not know are kept.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from witty_profiler.topology.bulkcheck import (
    EDGE_FIELDS as _EDGE_FIELDS,
    ENTITY_FIELDS as _ENTITY_FIELDS,
    MAX_MAGNITUDE,
    NUMBER_TYPES as _NUMBER_TYPES,
    PARTS as _PARTS,
    STR as _STR,
    bulk_records,
    in_range,
    plain_attr,
)
from witty_profiler.topology.errors import GraphFormatError
from witty_profiler.topology.models import ATTR_TYPES, CPU_LIST, STATUSES, CollectorStatus, Edge, Entity, Meta

if TYPE_CHECKING:
    from witty_profiler.topology.graph import Graph

_TOP_FIELDS = frozenset(("format", "schema_version", "meta", "entities", "edges"))


class _Invalid(Exception):
    """A field of the document that is not what the format says: where, and what was found."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")


def kind_of(value: Any) -> str:
    """How JSON would name what was found."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _expect(value: Any, types: type | tuple[type, ...], what: str, where: str, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise _Invalid(where, f"expected {what}, found a boolean")
    if not isinstance(value, types):
        raise _Invalid(where, f"expected {what}{' or null' if optional else ''}, found {kind_of(value)}")
    return value


def _number(value: Any, where: str) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid(where, f"expected a number or null, found {kind_of(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Invalid(where, f"{value} is not a number JSON can carry")
    if not -MAX_MAGNITUDE <= value <= MAX_MAGNITUDE:
        raise _Invalid(where, f"{value:.3g} is out of range (no metric of a host reaches {MAX_MAGNITUDE:.0e})")
    return value


def _metrics(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    _expect(value, dict, "an object of metrics", where)
    for name, v in value.items():
        _number(v, f"{where}.{name}")
    return value


def _attrs(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    _expect(value, dict, "an object of attributes", where)
    for name, v in value.items():
        allowed = ATTR_TYPES.get(name)
        if allowed is None or v is None:
            continue
        if type(v) not in allowed:  # bool is not an int here, nor an int a float
            kinds = " or ".join(_TYPE_NAMES[t] for t in allowed)
            raise _Invalid(f"{where}.{name}", f"expected {kinds} or null, found {kind_of(v)}")
        if allowed is CPU_LIST and type(v) is list and not all(type(c) is int and 0 <= c for c in v):
            raise _Invalid(f"{where}.{name}", "expected a list of CPU (or node) numbers")
    return value


_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean", dict: "an object", list: "a list"}


def _entity(item: Any, where: str) -> Entity:
    _expect(item, dict, "an entity object", where)
    try:
        eid, kind = item["id"], item["type"]
    except KeyError as missing:
        raise _Invalid(f"{where}.{missing.args[0]}", "missing") from None
    _expect(eid, str, "a string", f"{where}.id")
    _expect(kind, str, "a string", f"{where}.type")
    return Entity(eid, kind, _attrs(item.get("attrs"), f"{where}.attrs"),
                  _metrics(item.get("metrics"), f"{where}.metrics"), **_extra(item, _ENTITY_FIELDS))


def _edge(item: Any, where: str) -> Edge:
    _expect(item, dict, "an edge object", where)
    try:
        eid, kind, source, target = item["id"], item["type"], item["source"], item["target"]
    except KeyError as missing:
        raise _Invalid(f"{where}.{missing.args[0]}", "missing") from None
    for field, value in (("id", eid), ("type", kind), ("source", source), ("target", target)):
        _expect(value, str, "a string", f"{where}.{field}")
    return Edge(eid, kind, source, target, _attrs(item.get("attrs"), f"{where}.attrs"),
                _metrics(item.get("metrics"), f"{where}.metrics"), **_extra(item, _EDGE_FIELDS))


def _extra(item: dict[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """The fields of an item this version does not know."""
    return {} if item.keys() <= known else {k: v for k, v in item.items() if k not in known}


def _status(value: Any, where: str) -> CollectorStatus:
    _expect(value, dict, "an object", where)
    status = value.get("status")
    if status not in STATUSES:
        raise _Invalid(f"{where}.status", f"expected one of {', '.join(STATUSES)}, found {status!r}")
    for field in ("reason", "privileges"):
        _expect(value.get(field), str, "a string", f"{where}.{field}", optional=True)
    known = ("status", "reason", "privileges", "duration_s")
    return CollectorStatus(status=status, reason=value.get("reason"), privileges=value.get("privileges"),
                           duration_s=_number(value.get("duration_s"), f"{where}.duration_s"),
                           extra={k: v for k, v in value.items() if k not in known})


def meta_of(value: Any, name: str = "<input>") -> Meta:
    """The meta of a document, checked."""
    try:
        return _meta(value)
    except _Invalid as exc:
        raise GraphFormatError(f"{name}: invalid witty graph: {exc}") from None


def _meta(value: Any, where: str = "meta") -> Meta:
    if value is None:
        return Meta()
    _expect(value, dict, "an object", where)
    hosts = _expect(value.get("hosts", []), list, "a list of host names", f"{where}.hosts")
    for i, host in enumerate(hosts):
        _expect(host, str, "a string", f"{where}.hosts[{i}]")
    for field in ("tool_version", "started_at", "source"):
        _expect(value.get(field), str, "a string", f"{where}.{field}", optional=True)
    host_info = _expect(value.get("host_info", {}), dict, "an object", f"{where}.host_info")
    for host, info in host_info.items():
        _expect(info, dict, "an object", f"{where}.host_info.{host}")
    collectors = _expect(value.get("collectors", {}), dict, "an object", f"{where}.collectors")
    known = ("hosts", "tool_version", "started_at", "duration_s", "interval_s", "host_info", "collectors", "source")
    return Meta(hosts=list(hosts), tool_version=value.get("tool_version"), started_at=value.get("started_at"),
                duration_s=_number(value.get("duration_s"), f"{where}.duration_s"),
                interval_s=_number(value.get("interval_s"), f"{where}.interval_s"), host_info=dict(host_info),
                collectors={name: _status(s, f"{where}.collectors.{name}") for name, s in collectors.items()},
                source=value.get("source"), extra={k: v for k, v in value.items() if k not in known})


def graph_of(data: dict[str, Any], name: str = "<input>", finite: bool = False) -> Graph:
    """The graph of a native document (format and schema_version already checked). A file is one
    round's result, not fragments to merge: an id given twice, or an edge to an entity the file
    lacks, is an error there, where merging would hide it. `finite`: the caller knows that every
    number is finite (JSON text without NaN or Infinity), so they need not be checked one by one."""
    try:
        return _graph_of(data, finite)
    except _Invalid as exc:
        raise GraphFormatError(f"{name}: invalid witty graph: {exc}") from None


def _graph_of(data: dict[str, Any], finite: bool) -> Graph:
    meta = _meta(data.get("meta"))
    items = _expect(data.get("entities", []), list, "a list", "entities")
    links = _expect(data.get("edges", []), list, "a list", "edges")
    try:
        graph = _records(items, links, finite)
    except TypeError:  # an id that cannot be a key (a list, an object): the full check names it
        graph = None
    if graph is None:
        _check_each(items, links)
        raise AssertionError("a document the full check accepts was refused by the fast one")
    graph.meta = meta
    graph.extra = {k: v for k, v in data.items() if k not in _TOP_FIELDS}
    return graph


def _check_each(items: list[Any], links: list[Any]) -> None:
    """Every item checked field by field: raises _Invalid at the first wrong one."""
    for i, item in enumerate(items):
        _entity(item, f"entities[{i}]")
    for i, item in enumerate(links):
        _edge(item, f"edges[{i}]")


def _records(items: list[Any], links: list[Any], finite: bool) -> Graph | None:
    """The graph of the items, or None where an item is not an object or an id cannot be a key. Checked
    in bulk (topology.bulkcheck) where every number is finite, else, or where that finds anything not
    plainly right, one item at a time."""
    from witty_profiler.topology.graph import Graph  # here: `info` checks a file as a stream, builds no graph
    found = bulk_records(items, links) if finite else None
    if found is None:
        found = _one_by_one(items, links, finite)
    return None if found is None else Graph.of_records(Meta(), *found)


def _one_by_one(items: list[Any], links: list[Any], finite: bool) -> tuple[dict[str, Entity], dict[str, Edge]] | None:
    """(entities by id, edges by id), or None where an item is not an object; the first problem raised as
    _Invalid. The loops note the types they meet and compare them with the format's once, at the end;
    where a type needs a closer look (a list of CPUs) or a number may not be finite or in range, every
    item is checked field by field."""
    met = _Types()
    entities: dict[str, Entity] = {}
    for i, item in enumerate(items):
        if type(item) is not dict:
            return None
        eid, kind, attrs, metrics = item.get("id"), item.get("type"), item.get("attrs"), item.get("metrics")
        met.ids.add(type(eid))
        met.ids.add(type(kind))
        met.note(attrs, metrics)
        if eid in entities:
            raise _Invalid(f"entities[{i}]", f"id {eid!r} is given twice")
        entities[eid] = Entity(eid, kind, attrs, metrics) if item.keys() <= _ENTITY_FIELDS else \
            Entity(eid, kind, attrs, metrics, **_extra(item, _ENTITY_FIELDS))
    edges: dict[str, Edge] = {}
    for i, item in enumerate(links):
        if type(item) is not dict:
            return None
        eid, kind, source, target = item.get("id"), item.get("type"), item.get("source"), item.get("target")
        attrs, metrics = item.get("attrs"), item.get("metrics")
        met.ids.add(type(eid))
        met.ids.add(type(kind))
        met.note(attrs, metrics)
        if eid in edges:
            raise _Invalid(f"edges[{i}]", f"id {eid!r} is given twice")
        if source not in entities or target not in entities:
            _check_each(items, links[:i + 1])  # a wrong type is the better message, if there is one
            end = source if source not in entities else target
            raise _Invalid(f"edges[{i}] ({eid})", f"{end!r} is not an entity of the file")
        edges[eid] = Edge(eid, kind, source, target, attrs, metrics) if item.keys() <= _EDGE_FIELDS else \
            Edge(eid, kind, source, target, attrs, metrics, **_extra(item, _EDGE_FIELDS))
    if not met.plain() or not finite or not met.in_range():
        _check_each(items, links)  # raises at the first wrong field (type, number not finite or out of range)
    return entities, edges


class _Types:
    """The types met in items (ids, attrs and their known attributes, metrics and their values), noted
    in C-speed set updates and compared with the format's once."""

    def __init__(self) -> None:
        self.ids: set[type] = set()  # of ids, types, sources and targets
        self.parts: set[type] = set()  # of attrs and metrics
        self.values: set[type] = set()  # of metric values
        self.named: set[tuple[str, type]] = set()  # (attribute, type of its value)
        self.numbers: list[Any] = []  # every metric value, for their range

    def note(self, attrs: Any, metrics: Any) -> None:
        self.parts.add(type(attrs))
        self.parts.add(type(metrics))
        if type(metrics) is dict:
            self.values.update(map(type, metrics.values()))
            self.numbers.extend(metrics.values())
        if type(attrs) is dict:
            self.named.update(zip(attrs, map(type, attrs.values())))

    def plain(self) -> bool:
        """Every type is the format's (a list of CPUs needs a look at its items: not plain)."""
        return (self.ids <= _STR and self.parts <= _PARTS and self.values <= _NUMBER_TYPES
                and all(map(plain_attr, self.named)))

    def in_range(self) -> bool:
        return in_range(self.numbers)


class StreamCheck:
    """The same checks on a document read as a stream (topology.scan), a batch of items at a time: each
    item's fields, ids given once, edges between entities met before. Keeps the ids only."""

    def __init__(self, name: str = "<input>") -> None:
        self.name = name
        self._entities: set[str] = set()
        self._edges: set[str] = set()

    def entities(self, batch: list[Any], start: int, spelt: bool = False) -> list[str]:
        """The types of a batch of valid entities, the first of them entities[start] (`spelt`: the batch
        may hold NaN or Infinity: every number is checked)."""
        ids = self._fields(batch, start, "entities", _entity, ("id", "type"), spelt)
        self._once(ids, self._entities, start, "entities")
        return [item["type"] for item in batch]

    def edges(self, batch: list[Any], start: int, spelt: bool = False) -> list[str]:
        """The types of a batch of valid edges (as for entities)."""
        ids = self._fields(batch, start, "edges", _edge, ("id", "type", "source", "target"), spelt)
        self._once(ids, self._edges, start, "edges")
        ends = {item["source"] for item in batch} | {item["target"] for item in batch}
        if not ends <= self._entities:
            for i, item in enumerate(batch, start):
                for end in (item["source"], item["target"]):
                    if end not in self._entities:
                        self._fail(f"edges[{i}] ({item['id']})", f"{end!r} is not an entity of the file")
        return [item["type"] for item in batch]

    def _fields(self, batch: list[Any], start: int, key: str, check: Any, names: tuple[str, ...],
                spelt: bool) -> list[Any]:
        """The ids of the batch, once every item's fields are known to be right (see _Types)."""
        met = _Types()
        plain = all(type(item) is dict for item in batch)
        if plain:
            for name in names:
                met.ids.update(map(type, (item.get(name) for item in batch)))
            for item in batch:
                met.note(item.get("attrs"), item.get("metrics"))
        if spelt or not plain or not met.plain() or not met.in_range():
            for i, item in enumerate(batch, start):
                try:
                    check(item, f"{key}[{i}]")
                except _Invalid as exc:
                    raise GraphFormatError(f"{self.name}: invalid witty graph: {exc}") from None
        return [item["id"] for item in batch]

    def _once(self, ids: list[str], seen: set[str], start: int, key: str) -> None:
        fresh = set(ids)
        if len(fresh) == len(ids) and seen.isdisjoint(fresh):
            seen |= fresh
            return
        for i, eid in enumerate(ids, start):
            if eid in seen:
                self._fail(f"{key}[{i}]", f"id {eid!r} is given twice")
            seen.add(eid)

    def _fail(self, where: str, message: str) -> None:
        raise GraphFormatError(f"{self.name}: invalid witty graph: {where}: {message}")
