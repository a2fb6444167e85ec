"""The workspace every front-end talks to: graphs by id and what is asked of them.

The MCP tools, the REST routes of the service (and its /mcp, on the same workspace) and scripts name a
graph by its id; the workspace loads it once (`app.graphs.GraphStore`), diagnoses it once per workload,
layer, thresholds and host (one cache, bounded by count and by the bytes of the diagnoses' JSON), and
renders its views and reports from that one diagnosis. The CLI works on files, one command at a time,
with the same functions (`app.views.convert`, `app.reports.report`, `app.thresholds.overrides`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from witty_profiler.app.cache import BoundedCache
from witty_profiler.app.graphs import GraphStore
from witty_profiler.app.thresholds import Overrides, overrides
from witty_profiler.topology import Graph
from witty_profiler.topology.errors import InputError

DIAGNOSES_IN_MEMORY = 64
DIAGNOSIS_BYTES_IN_MEMORY = 64 << 20
HOST_PARTS_IN_MEMORY = 8


class Workspace:
    def __init__(self, store: GraphStore | None = None, thresholds: Any = None, workdir: Path | None = None) -> None:
        """`thresholds`: the default overrides (a TOML file name, relative to `workdir`, or a mapping);
        `workdir`: where relative paths a client gives are read from (default: the working directory)."""
        self.store = store or GraphStore()
        self.workdir = (workdir or Path.cwd()).resolve()
        self.thresholds_source = thresholds
        self._default: tuple[Any, Overrides | None] | None = None  # (what it was read from, the overrides)
        self.diagnoses: BoundedCache[Any] = BoundedCache(DIAGNOSES_IN_MEMORY, DIAGNOSIS_BYTES_IN_MEMORY)
        self.parts: BoundedCache[Graph] = BoundedCache(HOST_PARTS_IN_MEMORY, self.store.graphs.max_bytes)

    # -- what a client names ---------------------------------------------------------------------
    def path(self, given: str | os.PathLike[str]) -> Path:
        """A path a client gave, relative to the workspace's folder."""
        path = Path(given).expanduser()
        return path if path.is_absolute() else self.workdir / path

    def thresholds(self, given: Any = None) -> Overrides | None:
        """Validated overrides from what a call gives (TOML text, a file path, a mapping), else the
        workspace's default (a file read again only when it changes)."""
        if given is not None:
            return overrides(given, self.workdir)
        source = self.thresholds_source
        stamp: Any = None
        if isinstance(source, (str, os.PathLike)):
            try:
                info = self.path(source).stat()
                stamp = (info.st_mtime_ns, info.st_size)
            except OSError:
                stamp = None  # overrides() says what is wrong with it
        if self._default is None or self._default[0] != stamp or stamp is None and source is not None \
                and not isinstance(source, dict):
            self._default = (stamp, overrides(source, self.workdir))
        return self._default[1]

    def graph(self, graph_id: str, host: str | None = None) -> Graph:
        """The graph, or with `host` that host's part of a merged graph (kept for the next calls)."""
        graph = self.store.get(graph_id)
        if host is None:
            return graph
        from witty_profiler.topology.hosts import host_part

        def part() -> Graph:
            try:
                return host_part(graph, host)
            except InputError as exc:
                raise InputError(f"{exc}: list_hosts graph_id={graph_id} lists them") from None
        return self.parts.get_or_make((graph_id, host), part, lambda g: g.entity_count() * 400)

    # -- judging ---------------------------------------------------------------------------------
    def diagnosis(self, graph_id: str, pids: Iterable[int] | None = None, layer: str | None = None,
                  thresholds: Any = None, host: str | None = None) -> Any:
        table = self.thresholds(thresholds)
        key = (graph_id, tuple(pids or ()), layer, json.dumps(table, sort_keys=True), host)

        def make() -> Any:
            from witty_profiler.diagnosis import diagnose
            return diagnose(self.graph(graph_id, host), pids=list(pids) if pids else None, layer=layer,
                            thresholds=table)
        return self.diagnoses.get_or_make(key, make, lambda d: len(d.to_json()))

    def remember(self, graph_id: str, diagnosis: Any, pids: Iterable[int] | None = None) -> None:
        """A diagnosis made elsewhere of the whole graph with the default thresholds (the service's monitor
        diagnoses each window as it ends): later calls find it instead of making it again."""
        key = (graph_id, tuple(pids or ()), None, json.dumps(self.thresholds(), sort_keys=True), None)
        self.diagnoses.put(key, diagnosis, len(diagnosis.to_json()))

    def forget(self, graph_id: str) -> None:
        """Drop what is cached of a graph that is gone (a window evicted from the ring)."""
        self.store.graphs.drop(graph_id)
        self.diagnoses.drop_where(lambda key: key[0] == graph_id)
        self.parts.drop_where(lambda key: key[0] == graph_id)

    # -- showing ---------------------------------------------------------------------------------
    def view(self, graph_id: str, layer: str = "summary", max_tokens: int | None = None, *,
             pids: Iterable[int] | None = None, thresholds: Any = None, host: str | None = None,
             hints: Any = None) -> Any:
        """The compact view of one layer (or summary, or all), with the findings of the graph's diagnosis;
        its hints name MCP tool calls on this graph id unless others are given."""
        from witty_profiler.app.views import convert
        from witty_profiler.converters.hints import McpHints
        from witty_profiler.converters.view import check_request
        check_request(layer, max_tokens)
        return convert(self.graph(graph_id, host), layer, max_tokens, hints=hints or McpHints(graph_id),
                       diagnosis=self.diagnosis(graph_id, pids, None, thresholds, host))

    def report(self, graph_id: str, format: str = "md", *, pids: Iterable[int] | None = None,
               thresholds: Any = None, host: str | None = None) -> str:
        from witty_profiler.app.reports import report
        return report(self.diagnosis(graph_id, pids, None, thresholds, host), self.graph(graph_id, host), format)

    def compare(self, before_id: str, after_id: str, *, pids: Iterable[int] | None = None,
                thresholds: Any = None) -> Any:
        from witty_profiler.diagnosis.compare import compare
        return compare(self.graph(before_id), self.graph(after_id), thresholds=self.thresholds(thresholds),
                       pids=list(pids) if pids else None)

    # -- graphs in -------------------------------------------------------------------------------
    def load(self, path: str | os.PathLike[str]) -> tuple[Any, Graph]:
        """A graph file (native or legacy), relative to the workspace's folder: (record, graph); the same
        file always gets the same id."""
        return self.store.load_file(self.path(path))

    def collect(self, duration_s: float, interval_s: float = 1.0, *, pids: Iterable[int] | None = None,
                collectors: list[str] | None = None, progress: Any = None, stop: Any = None,
                stacks: bool = False) -> tuple[Any, Graph]:
        """A live window of this host, kept as a new graph: (record, graph); `stacks` adds on-CPU stack sampling."""
        from witty_profiler.collectors.engine import run_window
        graph = run_window(duration_s, interval_s, pids=list(pids) if pids else None, collectors=collectors,
                           progress=progress, stop=stop, stacks=stacks)
        if stop is not None and stop.is_set():  # given up: nobody is waiting for this graph
            raise InputError("collect was cancelled; the window was not saved")
        return self.store.add_live(graph), graph

    def collect_past(self, url: str, since: str, until: str = "now", *, match: str | None = None,
                     auth_file: str | None = None) -> tuple[Any, Graph]:
        """A past window (START..END, as Prometheus's times) of the hosts a Prometheus monitors, kept as a new
        graph: (record, graph)."""
        from witty_profiler.sources.promapi import parse_time, read_auth
        from witty_profiler.sources.prometheus import collect_window
        window = collect_window(url, parse_time(since), parse_time(until), match=match, auth=read_auth(auth_file))
        return self.store.add_live(window.graph, kind="prometheus"), window.graph

    def import_traces(self, paths: list[str], job: str | None = None,
                      into_graph_id: str | None = None) -> tuple[Any, Graph]:
        """Training traces (Kineto, msprof-analyze) into a graph of ranks and collectives, joined to a host
        graph when one is named (a copy of it: the host graph does not change): (record, graph)."""
        import hashlib

        from witty_profiler.app.graphs import slug
        from witty_profiler.traces.importer import import_traces
        files = [self.path(p) for p in paths]
        into = Graph().merge(self.graph(into_graph_id)) if into_graph_id else None
        graph = import_traces(files, job=job, into=into)
        key = "\n".join([*(str(p.resolve()) for p in files), job or "", into_graph_id or ""])
        graph_id = f"trace-{slug(files[0].name, 30)}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"
        record = self.store.add(graph, "load", graph_id, loaded_from=", ".join(str(p.resolve()) for p in files))
        return record, graph

    # -- clusters: a folder of host graphs ---------------------------------------------------------
    def diagnose_directory(self, directory: str | os.PathLike[str], failed: Any = None, thresholds: Any = None) -> Any:
        """Every host of a cluster folder diagnosed on its own, then across hosts."""
        from witty_profiler.cluster.directory import diagnose_directory
        return diagnose_directory(self.path(directory), failed, thresholds=self.thresholds(thresholds))
