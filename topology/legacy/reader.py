"""The state of one legacy file being read: the graph so far and what the derivation needs.

Legacy edges embed full copies of their endpoint nodes, so every embedded copy goes through the
same entity readers as the top-level ``nodes`` list; the graph's merge-by-id makes the copies
one entity. What cannot be decided while reading (the NUMA node order of a process's per-node
vectors, a device's node when only its CPUs are known) is recorded here and resolved in
`topology.legacy.derive` once every node has been seen.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from witty_profiler.topology.graph import Graph
from witty_profiler.topology.ids import edge_id, entity_id
from witty_profiler.topology.legacy.values import LegacyValueError
from witty_profiler.topology.models import Edge, Entity
from witty_profiler.topology.privacy import redact_record, redact_text

DEFAULT_HOST = "local"


@dataclass
class PlacementVectors:
    """A process's per-node CPU run-time shares and dirty anonymous pages, indexed by node order."""

    process: str
    cpu: list[float]
    pages: list[int]
    where: str


@dataclass
class Reader:
    graph: Graph = field(default_factory=Graph)
    hosts: set[str] = field(default_factory=set)
    raw_cmdlines: dict[str, str] = field(default_factory=dict)  # process id -> unredacted, for classification only
    numa_sets: dict[str, list[int]] = field(default_factory=dict)  # numa_set id -> its nodes
    placement: list[PlacementVectors] = field(default_factory=list)
    legacy_types: dict[str, int] = field(default_factory=dict)  # entity/edge type counts, for meta
    flow_window_ns: list[int] = field(default_factory=list)  # [start, end] of traced socket flows
    seen_cache_misses: bool = False

    # -- entities ---------------------------------------------------------------------------
    def entity(self, node: Any, where: str) -> str:
        """Map one legacy node (top-level or embedded) to an entity; returns its id."""
        from witty_profiler.topology.legacy.entities import READERS, read_opaque
        if not isinstance(node, dict):
            raise LegacyValueError(where, f"expected a node object, found {type(node).__name__}")
        kind = node.get("entity_type")
        reader = READERS.get(kind) if isinstance(kind, str) else None
        return (reader or read_opaque)(self, node, where)

    def host_of(self, node: dict[str, Any]) -> str:
        host = node.get("entity_namespace")
        host = redact_text(str(host).strip()).replace(":", "_") if host not in (None, "") else DEFAULT_HOST
        self.hosts.add(host)
        return host

    def add(self, kind: str, host: str, keys: list[object], attrs: dict[str, Any],
            metrics: dict[str, Any] | None = None, details: Any = None) -> str:
        # everything kept from the file passes through the same redaction: key fields, attributes, details
        eid = entity_id(kind, host, *(redact_text(k) if isinstance(k, str) else k for k in keys))
        attrs = redact_values({k: v for k, v in attrs.items() if v is not None})
        if isinstance(details, dict) and details:
            attrs["details"] = redact_values(details)
        self.graph.add_entity(Entity(id=eid, type=kind, attrs=attrs, metrics=metrics or {}))
        return eid

    # -- edges ------------------------------------------------------------------------------
    def link(self, kind: str, source: str, target: str, attrs: dict[str, Any] | None = None,
             metrics: dict[str, Any] | None = None, qualifier: str | None = None) -> str:
        eid = edge_id(kind, source, target, qualifier)
        attrs = redact_values({k: v for k, v in (attrs or {}).items() if v is not None})
        old = self.graph.edge(eid)
        if old is not None:
            # the same relation twice in one file is one observation: a flow's bytes must not double
            old.attrs.update({k: v for k, v in attrs.items() if k not in old.attrs})
            old.metrics.update({k: v for k, v in (metrics or {}).items() if k not in old.metrics})
            return eid
        self.graph.add_edge(Edge(id=eid, type=kind, source=source, target=target, attrs=attrs,
                                 metrics=metrics or {}))
        return eid

    def count(self, legacy_type: str) -> None:
        self.legacy_types[legacy_type] = self.legacy_types.get(legacy_type, 0) + 1


def kind_of(eid: str) -> str:
    return eid.split(":", 1)[0]


def digest(data: Any) -> str:
    """A short, stable key for a record that has no identity of its own."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def redact_values(data: Any) -> Any:
    """A raw record kept as is, redacted as the collectors redact what they keep (`privacy.redact_record`):
    strings as command lines, lists of strings as argument vectors, every value under a secret key, an
    environment down to its allowlisted keys."""
    return redact_record(data)
