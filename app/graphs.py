"""Graphs by id: kept in memory while in use, saved under the state directory for later sessions.

Every front-end names a graph by its id: the MCP tools, the REST routes (a service's windows are
graphs whose ids are their window ids, listed and read through a `Shelf`), and scripts. The graphs in
memory are one `BoundedCache`, by count and by the bytes of their JSON.

The state directory is ``$WITTY_STATE_DIR`` if set, else ``$XDG_STATE_HOME/witty-profiler``, else
``~/.local/state/witty-profiler``. Each graph is saved there as ``graphs/<id>.json`` (native format
v1, whatever it was loaded from) with a small ``graphs/<id>.record.json`` beside it, so a restarted
server lists its graphs without parsing them and loads one only when it is asked for.

Ids are readable and stable: a loaded file gets ``<file stem>-<8 hex of its content hash>`` (the
same file loaded twice is one graph), a live capture ``live-<host>-<UTC start>``.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel

from witty_profiler.app.cache import BoundedCache
from witty_profiler.topology import Graph, dump_graph, load_graph, loads_graph
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.files import read_bytes
from witty_profiler.topology.models import FORMAT_NAME
from witty_profiler.topology.text import valid_text

GRAPHS_IN_MEMORY = 8
GRAPH_BYTES_IN_MEMORY = 256 << 20  # of JSON: parsed, a graph takes several times its file's size


def state_dir() -> Path:
    if os.environ.get("WITTY_STATE_DIR"):
        return Path(os.environ["WITTY_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "witty-profiler"


class GraphRecord(BaseModel):
    """What the server remembers about a graph without loading it."""

    graph_id: str
    origin: Literal["collect", "load"]
    loaded_from: str | None = None
    created_at: str
    source: str | None = None
    hosts: list[str] = []
    started_at: str | None = None
    duration_s: float | None = None
    entity_count: int
    edge_count: int


class UnknownGraph(InputError):
    pass


class Shelf(Protocol):
    """Graphs kept elsewhere under ids of their own (the service's windows): listed and read, never added."""

    def graph_record(self, graph_id: str) -> GraphRecord | None: ...
    def graph_records(self) -> list[GraphRecord]: ...
    def read_graph(self, graph_id: str) -> tuple[Graph, int]: ...  # the graph and its size in bytes


def slug(text: str, limit: int = 40) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return (s[:limit].rstrip("-") or "graph")


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class GraphStore:
    """Thread-safe: tools run graph work on worker threads."""

    def __init__(self, root: Path | None = None, keep_in_memory: int = GRAPHS_IN_MEMORY,
                 bytes_in_memory: int = GRAPH_BYTES_IN_MEMORY, shelves: list[Shelf] | None = None) -> None:
        self.root = root or state_dir()
        self.dir = self.root / "graphs"
        self.graphs: BoundedCache[Graph] = BoundedCache(keep_in_memory, bytes_in_memory)
        self.shelves = list(shelves or [])
        self._records: dict[str, GraphRecord] = {}
        self._sizes: dict[str, int] = {}  # bytes of each graph's JSON, as it was read or saved
        self._lock = threading.RLock()
        self._scan()

    def _scan(self) -> None:
        if not self.dir.is_dir():
            return
        for path in self.dir.glob("*.record.json"):
            try:
                record = GraphRecord.model_validate_json(path.read_bytes())
            except (OSError, ValueError):
                continue  # a half-written or foreign file: not ours to fail on
            if (self.dir / f"{record.graph_id}.json").exists():
                self._records[record.graph_id] = record

    # -- adding ---------------------------------------------------------------------------
    def load_file(self, path: str | os.PathLike[str]) -> tuple[GraphRecord, Graph]:
        p = Path(path).expanduser()
        raw = read_bytes(p, "graph file")  # a regular file of bounded size, or one sentence saying why not
        graph = loads_graph(raw, str(p))
        graph_id = f"{slug(p.stem)}-{hashlib.sha256(raw).hexdigest()[:8]}"
        with self._lock:
            if graph_id in self._records:
                self.graphs.put(graph_id, graph, len(raw))
                return self._records[graph_id], graph
        # a native file is saved as it is: re-serialising a large graph costs seconds
        native = f'"format":"{FORMAT_NAME}"'.encode() in raw[:256].replace(b" ", b"")
        return self.add(graph, "load", graph_id, loaded_from=str(p.resolve()), raw=raw if native else None), graph

    def add_live(self, graph: Graph, kind: str = "live") -> GraphRecord:
        """A collected window, named by how it was collected, its (first) host and its start."""
        host = graph.meta.hosts[0] if graph.meta.hosts else "host"
        stamp = (graph.meta.started_at or _now()).replace("-", "").replace(":", "")
        base = f"{kind}-{slug(host, 30)}-{slug(stamp, 20)}"
        graph_id, n = base, 1
        with self._lock:  # the id is taken at once; the file is written after, without the lock
            while graph_id in self._records:
                n += 1
                graph_id = f"{base}-{n}"
            record = self._register(graph, "collect", graph_id, None)
        self._save(record, graph, None)
        return record

    def add(self, graph: Graph, origin: Literal["collect", "load"], graph_id: str,
            loaded_from: str | None = None, raw: bytes | None = None) -> GraphRecord:
        with self._lock:
            record = self._register(graph, origin, graph_id, loaded_from)
        self._save(record, graph, raw)  # not under the lock: a slow disk must not hold up list_graphs
        return record

    def _register(self, graph: Graph, origin: Literal["collect", "load"], graph_id: str,
                  loaded_from: str | None) -> GraphRecord:
        """Record and keep the graph; the caller holds the lock."""
        meta = graph.meta
        # as JSON, on disk and in answers: strings the file or the host gave us, made valid UTF-8
        record = GraphRecord(graph_id=graph_id, origin=origin, loaded_from=valid_text(loaded_from), created_at=_now(),
                             source=valid_text(meta.source), hosts=valid_text(list(meta.hosts)),
                             started_at=valid_text(meta.started_at), duration_s=meta.duration_s,
                             entity_count=graph.entity_count(), edge_count=graph.edge_count())
        self._records[graph_id] = record
        guess = graph.entity_count() * 400 + graph.edge_count() * 200  # bytes of JSON, until the file is written
        self.graphs.put(graph_id, graph, self._sizes.get(graph_id, guess))
        return record

    def _save(self, record: GraphRecord, graph: Graph, raw: bytes | None) -> None:
        # A graph that cannot be saved still works for this session; say so on stderr only.
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            if raw is None:
                dump_graph(graph, self.dir / f"{record.graph_id}.json")
                self._sizes[record.graph_id] = (self.dir / f"{record.graph_id}.json").stat().st_size
            else:
                self._sizes[record.graph_id] = len(raw)
                tmp = self.dir / f".{record.graph_id}.json.tmp{os.getpid()}"
                tmp.write_bytes(raw)
                os.replace(tmp, self.dir / f"{record.graph_id}.json")
            tmp = self.dir / f".{record.graph_id}.record.tmp{os.getpid()}"
            tmp.write_text(record.model_dump_json(indent=1), encoding="utf-8")
            os.replace(tmp, self.dir / f"{record.graph_id}.record.json")
        except OSError as exc:
            import logging
            logging.getLogger(__name__).warning("cannot save graph %s under %s: %s", record.graph_id, self.dir, exc)

    # -- reading --------------------------------------------------------------------------
    def record(self, graph_id: str) -> GraphRecord:
        for shelf in self.shelves:
            if (found := shelf.graph_record(graph_id)) is not None:
                return found
        with self._lock:
            if graph_id in self._records:
                return self._records[graph_id]
        known = ", ".join(sorted(self._records)[:5]) or "none yet"
        raise UnknownGraph(f"unknown graph id {graph_id!r} (known: {known}); call list_graphs for the ids, "
                           f"or load_graph / collect to make a graph")

    def get(self, graph_id: str) -> Graph:
        found = self.graphs.get(graph_id)
        if found is not None:
            return found
        for shelf in self.shelves:
            if shelf.graph_record(graph_id) is not None:
                graph, size = shelf.read_graph(graph_id)
                return self.graphs.put(graph_id, graph, size)
        self.record(graph_id)  # an unknown id: one sentence naming the known ones
        path = self.dir / f"{graph_id}.json"
        try:
            graph = load_graph(path)
        except InputError as exc:
            raise UnknownGraph(f"graph {graph_id!r} is listed but its saved copy cannot be read ({exc}); "
                               f"load or collect it again") from None
        return self.graphs.put(graph_id, graph, path.stat().st_size)

    def in_memory(self, graph_id: str) -> bool:
        return graph_id in self.graphs

    def records(self) -> list[GraphRecord]:
        """Newest first, the shelves' graphs among them by the start of their window."""
        with self._lock:
            own = list(self._records.values())
        every = own + [r for shelf in self.shelves for r in shelf.graph_records()]
        if not self.shelves:
            return sorted(every, key=lambda r: (r.created_at, r.graph_id), reverse=True)
        return sorted(every, key=lambda r: (r.started_at or r.created_at, r.graph_id), reverse=True)
