"""What a native graph file holds, read as a stream: its meta and the count of entities and edges by
type, without building the graph: one item in memory at a time, and the ids (every item is checked as
topology.validate checks a whole document: its fields, ids given once, edges between known entities).

`witty-profiler info` uses it; a legacy file (whose types are only known once converted) is loaded.
"""

from __future__ import annotations

from collections import Counter
from typing import IO, Any

from witty_profiler.topology.errors import GraphFormatError
from witty_profiler.topology.jsonstream import JsonStream
from witty_profiler.topology.models import FORMAT_NAME, SCHEMA_VERSION
from witty_profiler.topology.validate import StreamCheck


class Scan:
    """The meta of a graph file and its counts of entities and edges by type."""

    __slots__ = ("meta", "entities", "edges")

    def __init__(self) -> None:
        self.meta: dict[str, Any] = {}
        self.entities: Counter[str] = Counter()
        self.edges: Counter[str] = Counter()


def scan_native(handle: IO[str], name: str = "<input>") -> Scan | None:
    """The meta and type counts of a native graph; None when the document is not one (a legacy file)."""
    stream = JsonStream(handle, name)
    if stream.peek() != "{":
        return None
    found = Scan()
    checks = StreamCheck(name)
    header: dict[str, Any] = {}
    for key in stream.members():
        if key in ("entities", "edges"):
            if header.get("format") != FORMAT_NAME:
                return None  # the format must come first: not a file this tool wrote
            counts, check = (found.entities, checks.entities) if key == "entities" else (found.edges, checks.edges)
            done = 0
            for batch in stream.batches():
                counts.update(check(batch, done, stream.spelt))
                done += len(batch)
        else:
            header[key] = stream.value()
            if key == "schema_version" and header.get("format") == FORMAT_NAME and header[key] != SCHEMA_VERSION:
                raise GraphFormatError(f"{name}: schema_version {header[key]!r} is not supported by this version of "
                                       f"witty-profiler (it reads schema_version {SCHEMA_VERSION})")
    if stream.peek():
        raise GraphFormatError(f"{name}: not valid JSON (data after the graph)")
    if header.get("format") != FORMAT_NAME:
        return None
    meta = header.get("meta") or {}
    if not isinstance(meta, dict):
        raise GraphFormatError(f"{name}: invalid witty graph: meta: expected an object")
    found.meta = meta
    return found
