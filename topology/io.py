"""Reading and writing graphs: native format v1 (validated, deterministic) and legacy files.

`load_graph` sniffs the file: a native document (``"format": "witty-graph"``) is checked field
by field (topology.validate); a bare ``{nodes, edges}`` or an ``{env, content}`` envelope goes through
`topology.legacy`. Anything else is a `GraphFormatError` with one line that says what was found.

Output is deterministic: entities and edges sorted by id, keys sorted, one item per line, so the
same graph always gives the same bytes and files diff well.
"""

from __future__ import annotations

import datetime
import json
import math
import os
from pathlib import Path
from typing import Any

from witty_profiler.topology.errors import GraphFormatError
from witty_profiler.topology.files import read_bytes
from witty_profiler.topology.gcpause import gc_paused
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.models import FORMAT_NAME, SCHEMA_VERSION, Edge, Entity
from witty_profiler.topology.text import json_may_hide


def _jsonable(value: Any) -> Any:
    """Values JSON has no type for, as found in attrs: sets and tuples as lists, times as ISO 8601."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    raise TypeError(f"{type(value).__name__} is not a value a graph can hold")


# One encoder for every line: json.dumps with options builds a new encoder per call. NaN and
# Infinity are not JSON: a metric that came out non-finite is written as null (no value) rather
# than as a token that other readers reject.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_jsonable,
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


def item_json(item: Entity | Edge) -> str:
    """One entity or edge as the compact JSON line the file holds."""
    return _encode(item.to_dict())


def dumps_graph(graph: Graph) -> str:
    with gc_paused():
        return _dumps_graph(graph)


def _dumps_graph(graph: Graph) -> str:
    meta = _encode(graph.meta.to_dict())
    entities = ",\n".join(item_json(e) for e in graph.entities())
    edges = ",\n".join(item_json(e) for e in graph.edges())
    extra = "".join(f",\n{json.dumps(k)}:{_encode(v)}" for k, v in sorted(graph.extra.items()))
    return (f'{{"format":"{FORMAT_NAME}","schema_version":{SCHEMA_VERSION},\n"meta":{meta},\n'
            f'"entities":[\n{entities}\n],\n"edges":[\n{edges}\n]{extra}}}\n')


def dump_graph(graph: Graph, path: str | os.PathLike[str]) -> None:
    """Write atomically: a reader never sees half a file, a crash never leaves one."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    tmp.write_text(dumps_graph(graph), encoding="utf-8")
    os.replace(tmp, target)


def _check_version(data: dict[str, Any], name: str) -> None:
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise GraphFormatError(
            f"{name}: schema_version {version!r} is not supported by this version of witty-profiler "
            f"(it reads schema_version {SCHEMA_VERSION}); upgrade witty-profiler or re-export the graph")


def loads_graph(text: str | bytes, name: str = "<input>") -> Graph:
    with gc_paused():
        return _graph(_parsed(_decoded(text, name), name), name)


# Each step below takes the text as an argument and drops it on return: the bytes and the text of a file
# (35 MB each for 100,000 entities) are gone by the time its graph is built.
def _decoded(text: str | bytes, name: str) -> str:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GraphFormatError(f"{name}: not UTF-8 text (byte {exc.start}); expected a JSON graph file") from None
    if not text or text.isspace():  # not text.strip(), which copies the text
        raise GraphFormatError(f"{name}: the file is empty; expected a JSON graph file")
    return text


def _parsed(text: str, name: str) -> tuple[Any, bool, bool]:
    """(the document, every number finite, no string that topology.text.visible would change)."""
    spelt: list[str] = []  # NaN, Infinity or -Infinity: only then are the numbers checked one by one
    try:
        data = json.loads(text, parse_constant=lambda word: spelt.append(word) or float(word))
    except json.JSONDecodeError as exc:
        raise GraphFormatError(f"{name}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise GraphFormatError(f"{name}: JSON nested too deeply to be a graph file") from None
    except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise GraphFormatError(f"{name}: a number in the file is too long to read ({exc})") from None
    return data, not spelt, not json_may_hide(text)


def _graph(parsed: tuple[Any, bool, bool], name: str) -> Graph:
    try:
        return graph_from_data(parsed[0], name, finite=parsed[1], visible=parsed[2])
    except RecursionError:  # attributes nested deeper than the readers' recursion goes
        raise GraphFormatError(f"{name}: JSON nested too deeply to be a graph file") from None


def graph_from_data(data: Any, name: str = "<input>", finite: bool = False, visible: bool = False) -> Graph:
    """The graph of a parsed document, native or legacy (`finite`: see topology.validate.graph_of;
    `visible`: the caller knows that no string holds a character topology.text.visible would change)."""
    if isinstance(data, dict) and "env" in data and isinstance(data.get("content"), dict) \
            and data["content"].get("format") == FORMAT_NAME:
        data = data["content"]  # the service's {env, content} envelope around a native graph
    if isinstance(data, dict) and data.get("format") == FORMAT_NAME:
        _check_version(data, name)
        from witty_profiler.topology.validate import graph_of  # not for writing: `collect` never reads a graph
        graph = graph_of(data, name, finite)
        if not visible:
            graph.make_visible()
        return graph
    from witty_profiler.topology import legacy
    if legacy.is_legacy(data):
        graph = legacy.from_legacy(data, name)
        graph.make_visible()
        return graph
    found = type(data).__name__ if not isinstance(data, dict) else "an object with keys " + ", ".join(sorted(data)[:6])
    raise GraphFormatError(
        f"{name}: not a witty graph: expected a native graph (format 'witty-graph') or a legacy "
        f"witty-profiler graph ({{nodes, edges}} or {{env, content}}), found {found}")


def load_graph(path: str | os.PathLike[str]) -> Graph:
    """A graph file, native or legacy: a regular file of at most topology.files.MAX_GRAPH_BYTES."""
    name = str(Path(path))
    with gc_paused():  # the bytes read are an argument, not a name held here: see _decoded
        return _graph(_parsed(_decoded(read_bytes(path, "graph file"), name), name), name)
