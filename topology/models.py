"""The records of graph format v1: entities, edges, and what a graph says about its round (meta).

Plain classes with ``__slots__``: a graph of 100,000 entities is built and read in about the time
JSON takes to parse it, in a fraction of the memory validating models take. What comes from a file
is checked once, field by field, by topology.validate; the JSON Schema of the format is generated
from topology.schema. Every record keeps the fields this version does not know (``extra``), so a
file written by a newer version of the tool, or annotated by hand, round-trips without loss.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any, Literal

FORMAT_NAME = "witty-graph"
SCHEMA_VERSION = 1

Number = float | int
Status = Literal["ok", "partial", "unavailable", "error"]
STATUSES = ("ok", "partial", "unavailable", "error")


def copy_value(value: Any) -> Any:
    """A deep copy of JSON-like data (dicts, lists, scalars), several times faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: copy_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_value(v) for v in value]
    if isinstance(value, (str, int, float, bool, type(None), tuple, frozenset)):
        return value
    return copy.deepcopy(value)


class _Record:
    """What entities and edges share: attrs, metrics, the fields this version does not know."""

    __slots__ = ("id", "type", "attrs", "metrics", "extra")
    _FIELDS: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The record as the file holds it (extra fields included)."""
        data = {name: getattr(self, name) for name in self._FIELDS}
        data.update(self.extra)
        return data

    def copy(self) -> Any:
        """A copy that shares no container with this record."""
        clone = object.__new__(type(self))
        for name in self._FIELDS:
            setattr(clone, name, getattr(self, name))
        clone.attrs = copy_value(self.attrs)
        clone.metrics = dict(self.metrics)
        clone.extra = copy_value(self.extra)
        return clone

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_dict() == other.to_dict()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.to_dict().items())})"


class Entity(_Record):
    """A thing on a host: host, cpu, numa_node, process, thread, gpu, npu, nic, ...

    ``id`` is '<type>:<host>:<key>...', stable across rounds and hosts; ``attrs`` hold identity
    and configuration, ``metrics`` measured values whose names carry their unit (topology.vocabulary)."""

    __slots__ = ()
    _FIELDS = ("id", "type", "attrs", "metrics")

    def __init__(self, id: str, type: str, attrs: dict[str, Any] | None = None,
                 metrics: dict[str, Number | None] | None = None, **extra: Any) -> None:
        self.id = id
        self.type = type
        self.attrs = {} if attrs is None else attrs
        self.metrics = {} if metrics is None else metrics
        self.extra = extra  # fields this version does not know, kept for the round trip


class Edge(_Record):
    """A directed relation between two entities (by id); ``id`` is '<type>|<source>|<target>[|<qualifier>]'."""

    __slots__ = ("source", "target")
    _FIELDS = ("id", "type", "source", "target", "attrs", "metrics")

    def __init__(self, id: str, type: str, source: str, target: str, attrs: dict[str, Any] | None = None,
                 metrics: dict[str, Number | None] | None = None, **extra: Any) -> None:
        self.id = id
        self.type = type
        self.source = source
        self.target = target
        self.attrs = {} if attrs is None else attrs
        self.metrics = {} if metrics is None else metrics
        self.extra = extra


@dataclass
class CollectorStatus:
    """What one collector managed to do in one round, and why not where it did not."""

    status: Status
    reason: str | None = None  # one line a person can act on
    privileges: str | None = None  # privileges the collector had or lacked
    duration_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return _without_none(self)


@dataclass
class Meta:
    """The round: hosts, the capture window, and every collector's status."""

    hosts: list[str] = field(default_factory=list)
    tool_version: str | None = None
    started_at: str | None = None  # ISO 8601 UTC start of the window
    duration_s: float | None = None
    interval_s: float | None = None
    host_info: dict[str, dict[str, Any]] = field(default_factory=dict)
    collectors: dict[str, CollectorStatus] = field(default_factory=dict)
    source: str | None = None  # live | legacy | merged | synthetic | ...
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = _without_none(self)
        data["collectors"] = {name: status.to_dict() for name, status in self.collectors.items()}
        return data

    def copy(self) -> Meta:
        return Meta(**{f.name: copy_value(getattr(self, f.name)) for f in fields(self) if f.name != "collectors"},
                    collectors={k: CollectorStatus(**{f.name: copy_value(getattr(v, f.name)) for f in fields(v)})
                                for k, v in self.collectors.items()})


def _without_none(record: Any) -> dict[str, Any]:
    """A dataclass record as the file holds it: fields that are None left out, extra fields merged in."""
    data = {f.name: getattr(record, f.name) for f in fields(record) if f.name != "extra"}
    data = {k: v for k, v in data.items() if v is not None}
    data.update(record.extra)
    return data
