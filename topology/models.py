"""The records of graph format v1: entities, edges, and what a graph says about its round (meta).

Plain classes with ``__slots__``: a graph of 100,000 entities is built and read in about the time
JSON takes to parse it, in a fraction of the memory validating models take. What comes from a file
is checked once, field by field, by topology.validate; the JSON Schema of the format is generated
from topology.schema. Every record keeps the fields this version does not know (``extra``), so a
file written by a newer version of the tool, or annotated by hand, round-trips without loss.
"""

from __future__ import annotations

from typing import Any, Literal

FORMAT_NAME = "witty-graph"
SCHEMA_VERSION = 1

Number = float | int
Status = Literal["ok", "partial", "unavailable", "error"]
STATUSES = ("ok", "partial", "unavailable", "error")

# The types of the attributes that readers of a graph rely on (any entity type; null is always
# allowed: a value that is not known). A file whose attribute has another type is refused, naming it.
CPU_LIST = (str, list, int)  # '0-3,8' as the kernel writes it, a list of numbers, or one number
ATTR_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("name", "cmdline", "role", "framework", "state", "comm", "path", "pci_address", "uuid",
                     "version", "futex_addr", "futex_mapping", "link_type", "class", "driver_version", "job",
                     "job_id", "scheduler", "master_addr", "op", "group", "link", "hostname", "hot_function",
                     "stacks_from"), (str,)),
    **dict.fromkeys(("pid", "ppid", "tid", "node", "index", "numa_node"), (int,)),
    **dict.fromkeys(("ai", "in_scope", "started_in_window", "exited_in_window"), (bool,)),
    **dict.fromkeys(("env", "numa_pages", "numa_runtime_ns", "distances"), (dict,)),
    **dict.fromkeys(("cpus", "cpus_allowed", "mems_allowed", "ran_on_cpus", "local_cpus", "cpu_affinity"), CPU_LIST),
    **dict.fromkeys(("rank", "local_rank", "world_size"), (int, str)),  # a number, or what the environment said
}


def copy_value(value: Any) -> Any:
    """A deep copy of JSON-like data (dicts, lists, scalars), several times faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: copy_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_value(v) for v in value]
    if isinstance(value, (str, int, float, bool, type(None), tuple, frozenset)):
        return value
    import copy
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

    def __getattr__(self, name: str) -> Any:  # only for a slot never set: `extra`, left out by made_entity, made_edge
        if name != "extra":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.extra = {}
        return self.extra


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


def made_entity(id: str, type: str, attrs: dict[str, Any] | None, metrics: dict[str, Number | None] | None) -> Entity:
    """Entity(id, type, attrs, metrics) as the bulk check (topology.bulkcheck) makes 100,000 of them: without
    the keyword dict that __init__ takes for the extra fields, which these have none of (an empty `extra` is
    made where it is first read: 64 bytes a record otherwise)."""
    entity = _new(Entity)
    entity.id = id
    entity.type = type
    entity.attrs = {} if attrs is None else attrs
    entity.metrics = {} if metrics is None else metrics
    return entity


def made_edge(id: str, type: str, source: str, target: str, attrs: dict[str, Any] | None,
              metrics: dict[str, Number | None] | None) -> Edge:
    """Edge(...) as made_entity makes an Entity."""
    edge = _new(Edge)
    edge.id = id
    edge.type = type
    edge.source = source
    edge.target = target
    edge.attrs = {} if attrs is None else attrs
    edge.metrics = {} if metrics is None else metrics
    return edge


_new = object.__new__


class Fields:
    """What a dataclass would give a record (keyword or positional fields with defaults, ==, repr), written
    out: importing dataclasses costs every command about 10 ms, a third of `witty-profiler info`'s own. The
    collectors' records stand on it too, for the same reason: a `collect` imports every collector."""

    _FIELDS: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._FIELDS)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self._FIELDS)})"

    def replace(self, **changes: Any) -> Any:
        """A copy with `changes` (dataclasses.replace)."""
        return type(self)(**{name: changes.pop(name, getattr(self, name)) for name in self._FIELDS}, **changes)


class CollectorStatus(Fields):
    """What one collector managed to do in one round, and why not where it did not."""

    _FIELDS = ("status", "reason", "privileges", "duration_s", "extra")

    def __init__(self, status: Status, reason: str | None = None, privileges: str | None = None,
                 duration_s: float | None = None, extra: dict[str, Any] | None = None) -> None:
        self.status = status
        self.reason = reason  # one line a person can act on
        self.privileges = privileges  # privileges the collector had or lacked
        self.duration_s = duration_s
        self.extra = {} if extra is None else extra

    def to_dict(self) -> dict[str, Any]:
        return _without_none(self)


class Meta(Fields):
    """The round: hosts, the capture window, and every collector's status."""

    _FIELDS = ("hosts", "tool_version", "started_at", "duration_s", "interval_s", "host_info", "collectors",
               "source", "extra")

    def __init__(self, hosts: list[str] | None = None, tool_version: str | None = None, started_at: str | None = None,
                 duration_s: float | None = None, interval_s: float | None = None,
                 host_info: dict[str, dict[str, Any]] | None = None, collectors: dict[str, CollectorStatus] | None = None,
                 source: str | None = None, extra: dict[str, Any] | None = None) -> None:
        self.hosts = [] if hosts is None else hosts
        self.tool_version = tool_version
        self.started_at = started_at  # ISO 8601 UTC start of the window
        self.duration_s = duration_s
        self.interval_s = interval_s
        self.host_info = {} if host_info is None else host_info
        self.collectors = {} if collectors is None else collectors
        self.source = source  # live | legacy | merged | synthetic | ...
        self.extra = {} if extra is None else extra

    def to_dict(self) -> dict[str, Any]:
        data = _without_none(self)
        data["collectors"] = {name: status.to_dict() for name, status in self.collectors.items()}
        return data

    def copy(self) -> Meta:
        return Meta(**{name: copy_value(getattr(self, name)) for name in self._FIELDS if name != "collectors"},
                    collectors={k: CollectorStatus(**{name: copy_value(getattr(v, name)) for name in v._FIELDS})
                                for k, v in self.collectors.items()})


def _without_none(record: Any) -> dict[str, Any]:
    """A record as the file holds it: fields that are None left out, extra fields merged in."""
    data = {name: getattr(record, name) for name in record._FIELDS if name != "extra"}
    data = {k: v for k, v in data.items() if v is not None}
    data.update(record.extra)
    return data
