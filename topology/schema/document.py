"""Graph format v1 as pydantic models: what the published JSON Schema is generated from
(`python -m witty_profiler.topology.schema`).

The records the tool works with are the plain classes of topology.models, checked by
topology.validate; tests keep the three in step (the same fields, the same verdict on a file).
Every model allows extra fields: a file written by a newer version of the tool, or annotated by
hand, is valid.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from witty_profiler.topology.models import FORMAT_NAME, SCHEMA_VERSION, Number, Status


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Entity(_Open):
    """A thing on a host: host, cpu, numa_node, process, thread, gpu, npu, nic, ..."""

    id: str = Field(description="'<type>:<host>:<key>...', stable across rounds and hosts")
    type: str
    attrs: dict[str, Any] = Field(default_factory=dict, description="identity and configuration")
    metrics: dict[str, Number | None] = Field(
        default_factory=dict, description="measured values; the name carries the unit (see topology.vocabulary)")


class Edge(_Open):
    """A directed relation between two entities (by id)."""

    id: str
    type: str
    source: str
    target: str
    attrs: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, Number | None] = Field(default_factory=dict)


class CollectorStatus(_Open):
    """What one collector managed to do in one round, and why not where it did not."""

    status: Status
    reason: str | None = Field(default=None, description="one line a person can act on")
    privileges: str | None = Field(default=None, description="privileges the collector had or lacked")
    duration_s: float | None = None


class HostWindow(_Open):
    started_at: str | None = None
    duration_s: float | None = None


class Meta(_Open):
    hosts: list[str] = Field(default_factory=list)
    tool_version: str | None = None
    started_at: str | None = Field(default=None, description="ISO 8601 UTC start of the window")
    duration_s: float | None = None
    interval_s: float | None = None
    host_info: dict[str, dict[str, Any]] = Field(default_factory=dict)
    collectors: dict[str, CollectorStatus] = Field(default_factory=dict)
    source: str | None = Field(default=None, description="live | legacy | merged | synthetic | ...")
    windows: dict[str, HostWindow] | None = Field(default=None, description="a merged graph: each host's own "
                                                  "window (started_at, duration_s), by host")
    scope: dict[str, Any] | None = Field(default=None, description="what the window was scoped to: {job: ID} for "
                                         "collect --job (the diagnosis' workload is then that job's processes)")
    exporter_findings: list[dict[str, Any]] | None = Field(
        default=None, description="a window read from Prometheus: the findings each host's `witty-profiler export` "
        "reported (witty_finding), recorded as facts, not judged again: host, pattern, priority, layer, first_seen, "
        "last_seen (ISO 8601), reported_s (seconds of the window it reported them in), source")
    scrape_interval_s: float | None = Field(default=None, description="a window read from Prometheus: the scrape "
                                            "interval of its node_exporter series, told from their sample spacing "
                                            "(the default step, interval_s)")


class GraphDocument(_Open):
    """The whole file."""

    format: Literal["witty-graph"] = FORMAT_NAME
    schema_version: int = SCHEMA_VERSION
    meta: Meta = Field(default_factory=Meta)
    entities: list[Entity] = Field(default_factory=list)
    edges: list[Edge] = Field(default_factory=list)
