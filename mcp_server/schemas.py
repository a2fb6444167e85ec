"""The tools' inputs and outputs as pydantic models: these become the published JSON Schemas.

Inputs describe each field in a few words for the assistant that fills them in (graph_id and
max_tokens, in nearly every tool, are explained once, in the server's instructions); outputs are
what `structuredContent` carries. Output models allow extra fields, so a library that grows a field
does not break a server that does not know it yet. `published_schema` writes the schemas that
tools/list publishes: every tool definition is in every conversation's context, so they say only
what a client needs.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from witty_profiler.topology.layers import LAYER_NUMBERS, VIEWS

MAX_DURATION_S = 300.0
Layer = Literal[VIEWS]  # type: ignore[valid-type]
DiagnosisLayer = Literal[tuple(LAYER_NUMBERS)]  # type: ignore[valid-type]

# graph_id and max_tokens are in nearly every tool: the server's instructions explain them once,
# and the fields carry no description of their own.
MAX_ID = 96
MAX_TOKENS = 200_000


def _bounded_id(value: str | None) -> str | None:
    if value is not None and not 0 < len(value) <= MAX_ID:
        raise ValueError(f"a graph id has 1 to {MAX_ID} characters")
    return value


def _bounded_budget(value: int) -> int:
    if value > MAX_TOKENS:
        raise ValueError(f"at most {MAX_TOKENS}")
    return value


# checked by the server, and left out of the published schemas: they cost every conversation tokens and
# tell an assistant nothing it needs (ids come from the server; budgets are a few thousand)
Id = Annotated[str, AfterValidator(_bounded_id)]
OptionalId = Annotated[str | None, AfterValidator(_bounded_id)]
Budget = Annotated[int, AfterValidator(_bounded_budget)]
GraphId = Field()
_AS_MATCH = "as for match_patterns"
_AS_REPORT = "as for generate_report"


def _max_tokens(least: int = 200) -> Any:
    return Field(default=8000, ge=least)


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


# -- inputs ---------------------------------------------------------------------------------
class CollectInput(_In):
    duration_s: float = Field(default=10.0, gt=0, json_schema_extra={"maximum": MAX_DURATION_S},
                              description="window, seconds")
    interval_s: float = Field(default=1.0, ge=0.1, le=60.0, description="sampling period")
    pids: list[int] | None = Field(default=None, description="and descendants; default: AI workloads")
    collectors: list[str] | None = Field(default=None, description="'-name' skips one; default: all")
    # a cluster: the hosts named one way, each collected into output_dir/<host>.json
    hosts: list[str] | None = Field(default=None, max_length=4096, description="ssh targets")
    slurm_job: str | None = Field(default=None, description="its nodes")
    slurm_nodes: str | None = Field(default=None, description="e.g. n[1-8]")
    kubectl_selector: str | None = Field(default=None, description="pods' labels")
    namespace: str | None = Field(default=None, description="default witty-profiler")
    output_dir: str | None = Field(default=None, description="new folder in reports")
    diagnose: bool = Field(default=False, description="and its summary")
    stacks: bool = Field(default=False, description="on-CPU")  # collect --stacks: the workload's on-CPU stacks
    # a past window of many hosts, read from the Prometheus this server was started with
    past: str | None = Field(default=None, description="START[..END] from Prometheus")
    # a window of each service in the list this server was started with
    services: str | None = Field(default=None, description="latest, TIME or START..END of the server's services")

    def cluster(self) -> bool:
        return any((self.hosts, self.slurm_job, self.slurm_nodes, self.kubectl_selector, self.services is not None))


class LoadGraphInput(_In):
    path: str = Field(min_length=1, description="witty-graph or original witty-profiler JSON, relative to the "
                      "server's cwd")


class ImportTraceInput(_In):
    paths: list[str] = Field(min_length=1, max_length=1024, description="Kineto traces (.json[.gz]) or "
                             "msprof-analyze outputs (files or folder), relative to the server's cwd")
    job: str | None = Field(default=None, description="job key of the ranks, e.g. slurm:1234")
    into_graph_id: OptionalId = Field(default=None, description="a host graph to join the ranks to "
                                      "(copied, not changed)")


class ListGraphsInput(_In):
    limit: int = Field(default=20, ge=1, le=200, description="graphs per page")
    cursor: str | None = Field(default=None, description="next_cursor of the previous page")


class GraphSummaryInput(_In):
    graph_id: Id = GraphId
    max_tokens: Budget = _max_tokens(1000)


class QueryGraphInput(_In):
    graph_id: Id = GraphId
    type: str | None = Field(default=None, description="entity type: process, thread, gpu, nic, ...")
    where: list[str] | None = Field(default=None, description="all must hold, each FIELD OP VALUE: OP = != > >= "
                                    "< <= ~(contains); FIELD attrs.X, metrics.X, id, type or bare name; e.g. "
                                    "cpu_util_pct>50")
    around: str | None = Field(default=None, description="entity id: its neighbourhood")
    depth: int = Field(default=1, ge=1, le=4, description="hops for around")
    edge_type: str | None = Field(default=None, description="with around: follow only these; alone: list them")
    top_by_metric: str | None = Field(default=None, description="rank by this metric, highest first")
    ascending: bool = Field(default=False, description="with top_by_metric: lowest first")
    limit: int = Field(default=20, ge=1, le=200, description="rows per page")
    cursor: str | None = Field(default=None, description="next_cursor of the previous page")
    max_tokens: Budget = _max_tokens()


class ConvertLayerInput(_In):
    graph_id: Id = GraphId
    layer: Layer = Field(default="summary", description="which view")
    host: str | None = Field(default=None, description=_AS_MATCH)
    pids: list[int] | None = Field(default=None, description=_AS_MATCH)
    thresholds: str | None = Field(default=None, description=_AS_MATCH)
    max_tokens: Budget = _max_tokens()


class MatchPatternsInput(_In):
    graph_id: OptionalId = None
    directory: str | None = Field(default=None, min_length=1, description="or a cluster folder")
    host: str | None = Field(default=None, description="one host of the graph or folder")
    layer: DiagnosisLayer | None = Field(default=None, description="only this layer; default all")
    pids: list[int] | None = Field(default=None, description="workload; default: AI workloads found")
    thresholds: str | None = Field(default=None, description="TOML text or file path; default: witty://thresholds")
    max_tokens: Budget = _max_tokens(1500)


class GenerateReportInput(_In):
    graph_id: Id = GraphId
    format: Literal["md", "json"] = Field(default="md", description="md for people, json for programs")
    pids: list[int] | None = Field(default=None, description=_AS_MATCH)
    thresholds: str | None = Field(default=None, description=_AS_MATCH)
    output_path: str | None = Field(default=None, description="a file in the report directory for the "
                                    "whole report")
    overwrite: bool = Field(default=False, description="replace an existing output_path")
    max_tokens: Budget = _max_tokens()


class CompareGraphsInput(_In):
    before_id: Id = GraphId
    after_id: Id = GraphId
    format: Literal["md", "json"] = Field(default="md", description=_AS_REPORT)
    thresholds: str | None = Field(default=None, description=_AS_MATCH)
    max_tokens: Budget = _max_tokens()


class ListHostsInput(_In):
    graph_id: OptionalId = None
    directory: str | None = Field(default=None, min_length=1, description="or a cluster folder")
    limit: int = Field(default=50, ge=1, le=500, description="hosts per page")
    cursor: str | None = Field(default=None, description="next_cursor of the previous page")


# -- outputs --------------------------------------------------------------------------------
# Clients such as Claude Code, Codex and OpenCode hand the model `structuredContent` instead of the text
# block, so an answer meant for reading carries its text here too, beside a few typed fields (ids, counts,
# priorities) and nothing that repeats the text; the full typed diagnosis is the JSON report
# (generate_report format=json, the resource witty://graphs/{id}/diagnosis, the CLI, REST).
class _Text(_Out):
    truncated: bool = False
    text: str


class GraphAnswer(_Text):
    graph_id: str
    hosts: list[str]
    entity_count: int
    edge_count: int


class HostStatus(_Out):
    host: str
    status: str
    reason: str | None = None


# collect: one host, the graph's fields; a cluster, the folder, the count of hosts with a graph or not, and each
# host's outcome (the failures first). (A docstring would be published as the schema's description.)
class CollectResult(_Text):
    graph_id: str | None = None
    hosts: list[str] = []
    entity_count: int | None = None
    edge_count: int | None = None
    directory: str | None = None
    ok: int | None = None
    failed: int | None = None
    host_status: list[HostStatus] | None = None


class HostRow(_Out):
    host: str
    status: str
    started_at: str | None = None
    duration_s: float | None = None
    entities: int | None = None
    collectors_not_ok: list[str] = []


class HostList(_Out):
    graph_id: str | None = None
    directory: str | None = None
    hosts: list[HostRow]
    total: int
    next_cursor: str | None = None
    note: str | None = None


class GraphListing(_Out):
    graph_id: str
    origin: str
    loaded_from: str | None = None
    source: str | None = None
    hosts: list[str]
    created_at: str
    started_at: str | None = None
    entity_count: int
    edge_count: int


class GraphList(_Out):
    graphs: list[GraphListing]
    total: int
    next_cursor: str | None = None
    note: str | None = None


class EntityRow(_Out):
    id: str
    type: str
    attrs: dict[str, Any] = {}
    metrics: dict[str, Any] = {}


class EdgeRow(_Out):
    id: str
    type: str
    source: str
    target: str
    attrs: dict[str, Any] = {}
    metrics: dict[str, Any] = {}


class QueryPage(_Out):
    graph_id: str
    kind: Literal["find", "top", "around", "edges"]
    total_entities: int
    total_edges: int = 0
    offset: int
    entities: list[EntityRow]
    edges: list[EdgeRow] = []
    next_cursor: str | None = None
    note: str | None = None


class LayerView(_Text):
    graph_id: str
    layer: str


class PatternMatches(_Text):
    graph_id: str | None = None  # a folder's host: its graph, loaded
    directory: str | None = None
    host: str | None = None
    layer: str | None = None
    counts: dict[str, int]  # findings by priority
    findings: list[str]  # "P0 interconnect.device_numa_mismatch", most urgent first
    hosts_ok: int | None = None
    hosts_failed: int | None = None


class Report(_Text):
    graph_id: str
    format: str
    written_to: str | None = None


class Comparison(_Text):
    before_id: str
    after_id: str


# -- the published schemas --------------------------------------------------------------------
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "not")
_NULL = {"type": "null"}


def published_schema(model: type[BaseModel], *, output: bool = False) -> dict[str, Any]:
    """The JSON Schema of `model` as tools/list publishes it: what pydantic generates, less what costs
    every conversation tokens and tells a client nothing it needs. No `title`s; `$ref`s inlined (no
    model here is recursive, and each is used once per tool). An optional field, in or out, is a field
    that is not required, of its own type: no `anyOf` with null, no null default (answers leave out the
    fields they have no value for). Outputs name every field, nested ones too, with its JSON type; they
    leave out defaults, `required` and `additionalProperties` (an object's values are not typed). Whole
    floats are written as integers."""
    schema = model.model_json_schema()
    return _clean(schema, schema.get("$defs", {}), output)


def _clean(node: dict[str, Any], defs: dict[str, Any], output: bool) -> dict[str, Any]:
    if "$ref" in node:
        node = {**defs[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs") or (output and key in ("default", "required", "additionalProperties")):
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 300, not 300.0: the same number in JSON
        if key == "properties":
            value = {name: _clean(sub, defs, output) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS:
            value = [_clean(sub, defs, output) for sub in value]
        elif key in _SCHEMA_VALUES and isinstance(value, dict):
            value = _clean(value, defs, output)
        out[key] = value
    alternatives = out.get("anyOf", [])
    if _NULL in alternatives and len(alternatives) == 2:
        (real,) = [a for a in alternatives if a != _NULL]
        del out["anyOf"]
        out = {**real, **out}
        if "default" in out and out["default"] is None:
            del out["default"]
    return {"type": out.pop("type"), **out} if "type" in out else out  # the type first, for a reader
