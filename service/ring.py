"""The windows on disk: a ring of the latest ones, and the kept ones beside it.

    STATE/ring/<id>.json          the graph (native format v1)
    STATE/ring/<id>.window.json   its record: times, counts, size, the findings that fired
    STATE/kept/...                the same for windows kept by a trigger, out of the ring's reach

Each folder has a count cap and a size cap. After a window is added the oldest ones go until both
hold again, so disk use never exceeds the caps by more than the window just written; a window larger
than a cap on its own is not kept at all (the record says so in the service's status). Keeping a window
moves its files from ring/ to kept/ (one rename on the same file system).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel

from witty_profiler.app.graphs import GraphRecord
from witty_profiler.topology import Graph, dumps_graph, load_graph
from witty_profiler.topology.errors import InputError

log = logging.getLogger("witty-profiler.service")
MIB = 1024 * 1024
ID = re.compile(r"^w-\d{8}T\d{6}Z(-\d+)?$")


class FindingBrief(BaseModel):
    pattern: str
    priority: str
    title: str


class WindowRecord(BaseModel):
    """What the service knows about a window without loading its graph."""

    window_id: str
    started_at: str | None
    duration_s: float | None
    interval_s: float | None
    hosts: list[str]
    entity_count: int
    edge_count: int
    bytes: int
    findings: list[FindingBrief]
    kept: bool = False
    kept_reason: str | None = None
    kept_at: str | None = None


class UnknownWindow(InputError):
    pass


class NoWindowYet(InputError):
    """Asked for the latest window before any has finished."""


class Shelf:
    """One folder of windows with its caps; the caller holds the Ring's lock."""

    def __init__(self, folder: Path, max_windows: int, max_bytes: int) -> None:
        self.folder, self.max_windows, self.max_bytes = folder, max_windows, max_bytes
        self.records: OrderedDict[str, WindowRecord] = OrderedDict()  # oldest first
        folder.mkdir(parents=True, exist_ok=True)
        for leftover in folder.glob(".*.tmp*"):  # written by a process that died before its rename
            leftover.unlink(missing_ok=True)
        found = []
        for path in folder.glob("*.window.json"):
            try:
                record = WindowRecord.model_validate_json(path.read_bytes())
            except (OSError, ValueError):
                continue  # half-written by a crash: dropped by the next clean-up
            if (folder / f"{record.window_id}.json").exists():
                found.append(record)
        for record in sorted(found, key=lambda r: (r.started_at or "", r.window_id)):
            self.records[record.window_id] = record
        self.evict()

    def bytes(self) -> int:
        return sum(r.bytes for r in self.records.values())

    def paths(self, window_id: str) -> tuple[Path, Path]:
        return self.folder / f"{window_id}.json", self.folder / f"{window_id}.window.json"

    def evict(self) -> list[str]:
        """Drop the oldest windows until both caps hold; their ids."""
        gone = []
        while self.records and (len(self.records) > self.max_windows or self.bytes() > self.max_bytes):
            window_id, _ = self.records.popitem(last=False)
            self.remove_files(window_id)
            gone.append(window_id)
        return gone

    def remove_files(self, window_id: str) -> None:
        for path in self.paths(window_id):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def usage(self) -> dict[str, int]:
        return {"windows": len(self.records), "bytes": self.bytes(), "max_windows": self.max_windows,
                "max_bytes": self.max_bytes}


class Ring:
    """Thread-safe: the collecting thread adds, HTTP and MCP handlers read and keep."""

    def __init__(self, root: Path, ring_windows: int, ring_max_bytes: int, kept_windows: int,
                 kept_max_bytes: int) -> None:
        self._lock = threading.RLock()
        self.ring = Shelf(root / "ring", ring_windows, ring_max_bytes)
        self.kept = Shelf(root / "kept", kept_windows, kept_max_bytes)
        self.evicted = 0
        self.on_evict: list[Callable[[str], None]] = []  # told of each window that leaves the disk

    def add(self, graph: Graph, findings: list[FindingBrief]) -> WindowRecord:
        text = dumps_graph(graph).encode("utf-8")
        meta = graph.meta
        with self._lock:
            window_id = self._new_id(meta.started_at)
            graph_path, record_path = self.ring.paths(window_id)
            record = WindowRecord(window_id=window_id, started_at=meta.started_at, duration_s=meta.duration_s,
                                  interval_s=meta.interval_s, hosts=list(meta.hosts),
                                  entity_count=graph.entity_count(), edge_count=graph.edge_count(),
                                  bytes=len(text), findings=findings)
            _write(graph_path, text)
            _write(record_path, record.model_dump_json().encode())
            record.bytes += record_path.stat().st_size
            self.ring.records[window_id] = record
            gone = self.ring.evict()
            self.evicted += len(gone)
        self._evicted(gone)
        return record

    def _evicted(self, gone: list[str]) -> None:
        for window_id in gone:
            for listener in self.on_evict:
                listener(window_id)

    def _new_id(self, started_at: str | None) -> str:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        if started_at:
            stamp = re.sub(r"[-:]", "", started_at)[:15] + "Z"
        base, n = f"w-{stamp}", 1
        window_id = base
        while window_id in self.ring.records or window_id in self.kept.records:
            n += 1
            window_id = f"{base}-{n}"
        return window_id

    def keep(self, window_id: str, reason: str) -> WindowRecord:
        """Move a ring window to the kept ones (already kept: unchanged)."""
        with self._lock:
            if window_id in self.kept.records:
                return self.kept.records[window_id]
            record = self.ring.records.pop(window_id, None)
            if record is None:
                raise self._unknown(window_id)
            record.kept, record.kept_reason = True, reason
            record.kept_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            source, target = self.ring.paths(window_id), self.kept.paths(window_id)
            os.replace(source[0], target[0])
            _write(target[1], record.model_dump_json().encode())
            self.ring.remove_files(window_id)
            self.kept.records[window_id] = record
            gone = self.kept.evict()
        self._evicted(gone)
        return record

    def latest_id(self) -> str:
        latest = self.latest()
        if latest is None:
            raise NoWindowYet("no window has finished yet; GET /api/v1/status shows when one has")
        return latest.window_id

    def latest(self) -> WindowRecord | None:
        with self._lock:
            newest = [next(reversed(s.records.values())) for s in (self.ring, self.kept) if s.records]
        return max(newest, key=lambda r: (r.started_at or "", r.window_id), default=None)

    def records(self) -> list[WindowRecord]:
        """Every window, newest first."""
        with self._lock:
            every = [*self.ring.records.values(), *self.kept.records.values()]
        return sorted(every, key=lambda r: (r.started_at or "", r.window_id), reverse=True)

    def record(self, window_id: str) -> WindowRecord:
        with self._lock:
            for shelf in (self.ring, self.kept):
                if window_id in shelf.records:
                    return shelf.records[window_id]
        raise self._unknown(window_id)

    def graph_path(self, window_id: str) -> Path:
        record = self.record(window_id)
        return (self.kept if record.kept else self.ring).paths(window_id)[0]

    # -- the windows as graphs of the workspace (app.graphs.Shelf) ------------------------------------
    def graph_record(self, graph_id: str) -> GraphRecord | None:
        if not ID.match(graph_id):
            return None
        with self._lock:
            window = self.ring.records.get(graph_id) or self.kept.records.get(graph_id)
        return None if window is None else _as_graph(window)

    def graph_records(self) -> list[GraphRecord]:
        return [_as_graph(w) for w in self.records()]

    def read_graph(self, graph_id: str) -> tuple[Graph, int]:
        try:
            path = self.graph_path(graph_id)
            return load_graph(path), path.stat().st_size
        except (InputError, OSError) as exc:  # evicted between the look-up and the read
            raise UnknownWindow(f"window {graph_id!r} is no longer on disk ({exc})") from None

    def usage(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {"ring": self.ring.usage(), "kept": self.kept.usage()}

    def _unknown(self, window_id: str) -> UnknownWindow:
        if not ID.match(window_id):
            return UnknownWindow(f"{window_id!r} is not a window id (they look like w-20261203T184500Z)")
        return UnknownWindow(f"unknown window {window_id!r}: it left the ring, or never was; "
                             f"GET /api/v1/graphs lists the windows on disk")


def _as_graph(w: WindowRecord) -> GraphRecord:
    return GraphRecord(graph_id=w.window_id, origin="collect", created_at=w.kept_at or w.started_at or "",
                       source="live", hosts=w.hosts, started_at=w.started_at, duration_s=w.duration_s,
                       entity_count=w.entity_count, edge_count=w.edge_count)


def _write(path: Path, data: bytes) -> None:
    """Atomically: a reader (or a restart after a crash) never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
