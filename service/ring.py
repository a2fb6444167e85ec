"""The windows on disk: a ring of the latest ones, and the kept ones beside it.

    STATE/ring/<id>.json          the graph (native format v1)
    STATE/ring/<id>.window.json   its record: times, counts, size, the findings that fired
    STATE/kept/...                the same for windows kept by a trigger, out of the ring's reach

Each folder has a count cap and a size cap. After a window is added the oldest ones go until both
hold again, so disk use never exceeds the caps by more than the window just written; a window larger
than a cap on its own is not kept at all (the record says so in the service's status). Keeping a window
moves its files from ring/ to kept/ (one rename on the same file system).

Both folders are the service's own (statedir.py): 0700, their files 0600, every name opened relative to
the opened folder without following a symbolic link. A window id is checked against `ID` (the ids
`_new_id` makes) before a file name is made from it, and a record must be named after its own id: a
record with another id, or whose graph is a link or not a regular file, is skipped with a warning: never
listed, served, or deleted through.
"""

from __future__ import annotations

import logging
import re
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel

from witty_profiler.app.graphs import GraphRecord
from witty_profiler.service.statedir import Folder, NotRegular, UnsafeState, check_owner, kind, read_fd
from witty_profiler.topology import Graph, dumps_graph, loads_graph
from witty_profiler.topology.windows import WINDOW_ID, is_window_id
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.files import MAX_GRAPH_BYTES, MAX_SMALL_BYTES
from witty_profiler.topology.text import visible

log = logging.getLogger("witty-profiler.service")
MIB = 1024 * 1024
ID = WINDOW_ID  # whole ids only: ID.fullmatch
RECORD = ".window.json"


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


def is_id(text: object) -> bool:
    """A window id as the ring makes them: the only names from which a file name is built."""
    return is_window_id(text)


class Shelf:
    """One folder of windows with its caps; the caller holds the Ring's lock.

    On opening, every name in the folder is looked at without following it: a temporary file a crash left
    is removed; a symbolic link or anything else that is not a regular file is skipped with a warning; a
    regular file another user owns, or that others may write, stops the start (statedir.UnsafeState)."""

    def __init__(self, folder: Folder, max_windows: int, max_bytes: int) -> None:
        self.dir, self.folder = folder, folder.path
        self.max_windows, self.max_bytes = max_windows, max_bytes
        self.records: OrderedDict[str, WindowRecord] = OrderedDict()  # oldest first
        regular: set[str] = set()
        for name in folder.names():
            info = folder.lstat(name)
            if info is None:
                continue
            if name.startswith(".") and ".tmp" in name[1:]:  # written by a process that died before its rename
                try:
                    folder.unlink(name)  # a link is removed itself, never what it points to
                except OSError as exc:
                    log.warning("%s: cannot remove a leftover temporary file (%s)", self._shown(name), exc.strerror)
                continue
            if not stat.S_ISREG(info.st_mode):
                log.warning("%s: %s, not a regular file: skipped (never read, served or deleted)",
                            self._shown(name), kind(info.st_mode))
                continue
            check_owner(info, folder.path / name)
            regular.add(name)
        found = [record for name in sorted(regular) if name.endswith(RECORD)
                 and (record := self._found(name, regular)) is not None]
        for record in sorted(found, key=lambda r: (r.started_at or "", r.window_id)):
            self.records[record.window_id] = record
        self.evict()

    def _shown(self, name: str) -> str:
        return visible(str(self.folder / name))

    def _found(self, name: str, regular: set[str]) -> WindowRecord | None:
        """The record in `name` if it is one of a window on disk; None (with a warning if it is not what the
        ring writes) otherwise."""
        window_id = name[:-len(RECORD)]
        if not is_id(window_id):
            log.warning("%s: not named after a window id: ignored", self._shown(name))
            return None
        try:
            raw = self.dir.read(name, MAX_SMALL_BYTES)
            record = WindowRecord.model_validate_json(raw)
        except UnsafeState:
            raise
        except NotRegular as exc:  # replaced since it was listed
            log.warning("%s: %s, not a regular file: skipped", self._shown(name), exc.strerror)
            return None
        except (OSError, ValueError):
            return None  # half-written by a crash: dropped by the next clean-up
        if not is_id(record.window_id):
            log.warning("%s: window_id %s is not a window id: ignored", self._shown(name),
                        visible(repr(record.window_id)))
            return None
        if record.window_id != window_id:
            log.warning("%s: names window %s, not its own: ignored", self._shown(name), record.window_id)
            return None
        graph = f"{window_id}.json"
        if graph not in regular:  # gone, or a link (skipped above)
            return None
        graph_info = self.dir.lstat(graph)
        if graph_info is None:
            return None
        record.bytes = graph_info.st_size + len(raw)  # what is on disk, not what the record says
        return record

    def bytes(self) -> int:
        return sum(r.bytes for r in self.records.values())

    @staticmethod
    def names(window_id: str) -> tuple[str, str]:
        """The file names of a window: only ever made from an id the ring would make."""
        if not is_id(window_id):
            raise UnknownWindow(f"{window_id!r} is not a window id")
        return f"{window_id}.json", f"{window_id}{RECORD}"

    def evict(self) -> list[str]:
        """Drop the oldest windows until both caps hold; their ids."""
        gone = []
        while self.records and (len(self.records) > self.max_windows or self.bytes() > self.max_bytes):
            window_id, _ = self.records.popitem(last=False)
            self.remove_files(window_id)
            gone.append(window_id)
        return gone

    def remove_files(self, window_id: str) -> None:
        for name in self.names(window_id):
            self.dir.unlink(name)

    def usage(self) -> dict[str, int]:
        return {"windows": len(self.records), "bytes": self.bytes(), "max_windows": self.max_windows,
                "max_bytes": self.max_bytes}


class Ring:
    """Thread-safe: the collecting thread adds, HTTP and MCP handlers read and keep."""

    def __init__(self, root: Path | Folder, ring_windows: int, ring_max_bytes: int, kept_windows: int,
                 kept_max_bytes: int) -> None:
        """`root`: the state directory, or the service's opened one (statedir.Folder.open_root)."""
        self._lock = threading.RLock()
        self.home = root if isinstance(root, Folder) else Folder.open_root(root)
        self.ring = Shelf(self.home.subfolder("ring"), ring_windows, ring_max_bytes)
        self.kept = Shelf(self.home.subfolder("kept"), kept_windows, kept_max_bytes)
        self.evicted = 0
        self.on_evict: list[Callable[[str], None]] = []  # told of each window that leaves the disk

    def add(self, graph: Graph, findings: list[FindingBrief]) -> WindowRecord:
        text = dumps_graph(graph).encode("utf-8")
        meta = graph.meta
        with self._lock:
            window_id = self._new_id(meta.started_at)
            graph_name, record_name = self.ring.names(window_id)
            record = WindowRecord(window_id=window_id, started_at=meta.started_at, duration_s=meta.duration_s,
                                  interval_s=meta.interval_s, hosts=list(meta.hosts),
                                  entity_count=graph.entity_count(), edge_count=graph.edge_count(),
                                  bytes=len(text), findings=findings)
            self.ring.dir.write(graph_name, text)
            sidecar = record.model_dump_json().encode()
            self.ring.dir.write(record_name, sidecar)
            record.bytes += len(sidecar)
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
        if started_at and re.fullmatch(r"[0-9]{8}T[0-9]{6}", given := re.sub(r"[-:]", "", started_at)[:15]):
            stamp = given + "Z"
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
            if window_id not in self.ring.records:
                raise self._unknown(window_id)
            # the kept record is made, serialized and written before the window moves: if any of that fails
            # (a reason that is no UTF-8, a full disk), the window stays in the ring, listed and served
            record = self.ring.records[window_id].model_copy(update={
                "kept": True, "kept_reason": reason,
                "kept_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
            sidecar = record.model_dump_json().encode()
            graph_name, record_name = self.ring.names(window_id)
            self.kept.dir.write(record_name, sidecar)  # alone (no graph beside it) it is skipped at start-up
            try:
                self.ring.dir.move(graph_name, self.kept.dir)
            except BaseException:
                self.kept.dir.unlink(record_name)
                raise
            del self.ring.records[window_id]
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

    def read_bytes(self, window_id: str) -> bytes:
        """A window's graph file as it is on disk: opened without following a link, a regular file of the
        service's user only (anything else is refused with a warning, as at start-up)."""
        with self._lock:  # opened under the lock: neither evicted nor moved to kept/ in between
            shelf = self.kept if self.record(window_id).kept else self.ring
            name = shelf.names(window_id)[0]
            try:
                fd, info = shelf.dir.open_regular(name)
            except (NotRegular, UnsafeState) as exc:
                reason = exc.strerror if isinstance(exc, NotRegular) else str(exc)
                log.warning("%s: %s: not served", shelf._shown(name), reason)
                raise UnknownWindow(f"window {window_id!r} is not served: its file is refused ({reason})") from None
            except OSError as exc:
                raise UnknownWindow(f"window {window_id!r} is no longer on disk ({exc.strerror})") from None
        try:
            return read_fd(fd, info, MAX_GRAPH_BYTES, shelf.folder / name)
        except (InputError, OSError) as exc:
            raise UnknownWindow(f"window {window_id!r} cannot be read ({exc})") from None

    # -- the windows as graphs of the workspace (app.graphs.Shelf) ------------------------------------
    def graph_record(self, graph_id: str) -> GraphRecord | None:
        if not is_id(graph_id):
            return None
        with self._lock:
            window = self.ring.records.get(graph_id) or self.kept.records.get(graph_id)
        return None if window is None else _as_graph(window)

    def graph_records(self) -> list[GraphRecord]:
        return [_as_graph(w) for w in self.records()]

    def read_graph(self, graph_id: str) -> tuple[Graph, int]:
        raw = self.read_bytes(graph_id)
        try:
            return loads_graph(raw, f"window {graph_id}"), len(raw)
        except InputError as exc:
            raise UnknownWindow(f"window {graph_id!r} cannot be read ({exc})") from None

    def usage(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {"ring": self.ring.usage(), "kept": self.kept.usage()}

    def _unknown(self, window_id: str) -> UnknownWindow:
        if not is_id(window_id):
            return UnknownWindow(f"{window_id!r} is not a window id (they look like w-20261203T184500Z)")
        return UnknownWindow(f"unknown window {window_id!r}: it left the ring, or never was; "
                             f"GET /api/v1/graphs lists the windows on disk")


def _as_graph(w: WindowRecord) -> GraphRecord:
    return GraphRecord(graph_id=w.window_id, origin="collect", created_at=w.kept_at or w.started_at or "",
                       source="live", hosts=w.hosts, started_at=w.started_at, duration_s=w.duration_s,
                       entity_count=w.entity_count, edge_count=w.edge_count)
