"""Reading and writing graphs: native format v1 (validated, deterministic) and legacy files.

`load_graph` sniffs the file: a native document (``"format": "witty-graph"``) is validated
against the v1 models; a bare ``{nodes, edges}`` or an ``{env, content}`` envelope goes through
`topology.legacy`. Anything else is a `GraphFormatError` with one line that says what was found.

Output is deterministic: entities and edges sorted by id, keys sorted, one item per line, so the
same graph always gives the same bytes and files diff well.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from witty_profiler.topology.errors import GraphFormatError
from witty_profiler.topology.gcpause import gc_paused
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.models import FORMAT_NAME, SCHEMA_VERSION, Edge, Entity, GraphDocument


# One encoder for every line: json.dumps with options builds a new encoder per call. Values that
# JSON has no type for (tuples, sets, datetimes in attrs) are converted as pydantic's mode="json" does.
# NaN and Infinity are not JSON: a metric that came out non-finite is written as null (no value)
# rather than as a token that other readers reject.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=to_jsonable_python,
                            allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _encode(data: Any) -> str:
    try:
        return _ENCODER.encode(data)
    except ValueError:  # the rare non-finite number: only then is the item walked
        return _ENCODER.encode(_finite(data))


def _item_line(item: Entity | Edge) -> str:
    # the same document as item.model_dump(mode="json"), without pydantic's per-item serializer cost
    data: dict[str, Any] = {"id": item.id, "type": item.type, "attrs": item.attrs, "metrics": item.metrics}
    if isinstance(item, Edge):
        data["source"] = item.source
        data["target"] = item.target
    if item.__pydantic_extra__:
        data.update(item.__pydantic_extra__)
    return _encode(data)


def dumps_graph(graph: Graph) -> str:
    with gc_paused():
        return _dumps_graph(graph)


def _dumps_graph(graph: Graph) -> str:
    meta = _encode(graph.meta.model_dump(mode="json", exclude_none=True))
    entities = ",\n".join(_item_line(e) for e in graph.entities())
    edges = ",\n".join(_item_line(e) for e in graph.edges())
    extra = "".join(f",\n{json.dumps(k)}:{_encode(v)}" for k, v in sorted(graph.extra.items()))
    return (f'{{"format":"{FORMAT_NAME}","schema_version":{SCHEMA_VERSION},\n"meta":{meta},\n'
            f'"entities":[\n{entities}\n],\n"edges":[\n{edges}\n]{extra}}}\n')


def dump_graph(graph: Graph, path: str | os.PathLike[str]) -> None:
    """Write atomically: a reader never sees half a file, a crash never leaves one."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    tmp.write_text(dumps_graph(graph), encoding="utf-8")
    os.replace(tmp, target)


def graph_from_document(doc: GraphDocument, name: str = "<input>") -> Graph:
    """The graph of a validated document. A file is one round's result, not fragments to merge:
    an id given twice, an edge to an entity the file lacks or a number JSON cannot carry (NaN,
    Infinity) is an error there, where merging would hide it."""
    graph = Graph(doc.meta)
    for i, entity in enumerate(doc.entities):
        if entity.id in graph:
            raise GraphFormatError(f"{name}: entities[{i}]: id {entity.id!r} is given twice")
        _check_finite(entity, f"{name}: entities[{i}]")
        graph.add_entity(entity)
    for i, edge in enumerate(doc.edges):
        if graph.edge(edge.id) is not None:
            raise GraphFormatError(f"{name}: edges[{i}]: id {edge.id!r} is given twice")
        for end in (edge.source, edge.target):
            if end not in graph:
                raise GraphFormatError(f"{name}: edges[{i}] ({edge.id}): {end!r} is not an entity of the file")
        _check_finite(edge, f"{name}: edges[{i}]")
        graph.add_edge(edge)
    graph.extra = dict(doc.model_extra or {})
    return graph


def _check_finite(item: Entity | Edge, where: str) -> None:
    for metric, value in item.metrics.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise GraphFormatError(f"{where} ({item.id}): metric {metric} is {value}, not a number JSON can carry")


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "document"
    return f"{where}: {err.get('msg', 'invalid')}"


def _check_version(data: dict[str, Any], name: str) -> None:
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise GraphFormatError(
            f"{name}: schema_version {version!r} is not supported by this version of witty-profiler "
            f"(it reads schema_version {SCHEMA_VERSION}); upgrade witty-profiler or re-export the graph")


def loads_graph(text: str | bytes, name: str = "<input>") -> Graph:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GraphFormatError(f"{name}: not UTF-8 text (byte {exc.start}); expected a JSON graph file") from None
    if not text.strip():
        raise GraphFormatError(f"{name}: the file is empty; expected a JSON graph file")
    with gc_paused():
        return _loads_text(text, name)


def _loads_text(text: str, name: str) -> Graph:
    head = text[:256]
    if f'"format":"{FORMAT_NAME}","schema_version":{SCHEMA_VERSION},' in head.replace(" ", ""):
        try:  # fast path: our own writer's output, parsed and validated in one pass
            doc = GraphDocument.model_validate_json(text)
        except ValidationError:
            pass  # fall through for a precise message
        else:
            return graph_from_document(doc, name)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GraphFormatError(f"{name}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise GraphFormatError(f"{name}: JSON nested too deeply to be a graph file") from None
    return graph_from_data(data, name)


def graph_from_data(data: Any, name: str = "<input>") -> Graph:
    if isinstance(data, dict) and data.get("format") == FORMAT_NAME:
        _check_version(data, name)
        try:
            doc = GraphDocument.model_validate(data)
        except ValidationError as exc:
            raise GraphFormatError(f"{name}: invalid witty graph: {_first_error(exc)}") from None
        return graph_from_document(doc, name)
    from witty_profiler.topology import legacy
    if legacy.is_legacy(data):
        return legacy.from_legacy(data, name)
    found = type(data).__name__ if not isinstance(data, dict) else "an object with keys " + ", ".join(sorted(data)[:6])
    raise GraphFormatError(
        f"{name}: not a witty graph: expected a native graph (format 'witty-graph') or a legacy "
        f"witty-profiler graph ({{nodes, edges}} or {{env, content}}), found {found}")


def load_graph(path: str | os.PathLike[str]) -> Graph:
    p = Path(path)
    if p.is_dir():
        raise GraphFormatError(f"{p}: is a directory; give the path of a graph JSON file")
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise GraphFormatError(f"{p}: no such file") from None
    except OSError as exc:
        raise GraphFormatError(f"{p}: cannot read ({exc.strerror})") from None
    return loads_graph(raw, str(p))
