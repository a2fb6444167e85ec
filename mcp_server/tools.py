"""What each tool does, without MCP: thin calls into `witty_profiler` that fit a token budget.

Every method takes its input model and returns ``(output model, text)``: the model is the
structured answer, the text is what a model reads (compact JSON, or the view / report itself).
Bad input raises `topology.errors.InputError` with one sentence that says what to do instead;
`mcp_server.server` turns it into an ``isError`` result.
"""

from __future__ import annotations

import difflib
import heapq
import json
import re
import threading
import tomllib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel

import witty_profiler as wp
from witty_profiler.converters import McpHints
from witty_profiler.converters.tokens import fewer_than
from witty_profiler.mcp_server import schemas as s
from witty_profiler.mcp_server.budget import compact_json, count_tokens, make_cursor, query_key, read_cursor, take_page
from witty_profiler.mcp_server.reports import ReportDir
from witty_profiler.mcp_server.store import GraphRecord, GraphStore
from witty_profiler.topology import Edge, Entity, Graph
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.io import item_json
from witty_profiler.topology.vocabulary import ENTITY_TYPES, metric_info

Progress = Callable[[float, float, str], None]


class Rows(NamedTuple):
    rows: list[Entity | Edge]
    total_entities: int
    total_edges: int
    kind: Literal["find", "top", "around", "edges"]


def suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def cut_text(text: str, max_tokens: int) -> tuple[str, int, bool]:
    """The longest prefix of whole lines within `max_tokens`: (text, tokens, truncated)."""
    total = count_tokens(text)
    if total <= max_tokens:
        return text, total, False
    lines, kept, used = text.splitlines(keepends=True), [], 0
    for line in lines:
        cost = count_tokens(line)
        if used + cost > max_tokens:
            break
        kept.append(line)
        used += cost
    return "".join(kept), used, True


class WittyTools:
    """The server's state (graphs, default thresholds, the working directory that relative graph and
    thresholds files are read from, the report directory) and one method per tool."""

    def __init__(self, store: GraphStore | None = None, thresholds_path: str | None = None,
                 workdir: Path | None = None, report_dir: Path | None = None, launch: Any = None,
                 prometheus: str | None = None, prometheus_auth_file: str | None = None,
                 prometheus_match: str | None = None) -> None:
        self.store = store or GraphStore()
        self.thresholds_path = thresholds_path
        self.workdir = (workdir or Path.cwd()).resolve()
        self.reports = ReportDir(report_dir or self.store.root / "reports")
        self.report_dir = self.reports.path
        # how cluster hosts are reached (ssh config and options, the remote command, kubectl): the server's
        # operator decides, not the client (a ProxyCommand or a remote command would run anything)
        from witty_profiler.cluster.collect import Launch
        self.launch: Launch = launch or Launch()
        # the Prometheus of past windows, its credentials and series: the operator's too
        self.prometheus, self.prometheus_auth_file, self.prometheus_match = prometheus, prometheus_auth_file, \
            prometheus_match
        self._diagnoses: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._parts: OrderedDict[tuple[str, str], Graph] = OrderedDict()  # one host of a merged graph
        self._queries: OrderedDict[str, Rows] = OrderedDict()  # last queries' rows, for their next pages
        self._lock = threading.Lock()

    # -- graphs in ------------------------------------------------------------------------
    def collect(self, inp: s.CollectInput, progress: Progress | None = None,
                stop: threading.Event | None = None) -> tuple[Any, str]:
        if inp.duration_s > s.MAX_DURATION_S:
            raise InputError(f"duration_s={inp.duration_s:g} is longer than this server's cap of "
                             f"{s.MAX_DURATION_S:g} s: collect at most {s.MAX_DURATION_S:g} s per call (several "
                             f"windows can be compared with compare_graphs), or run `witty-profiler collect "
                             f"--duration {inp.duration_s:g}` in a shell and load_graph the file")
        if inp.interval_s > inp.duration_s:
            raise InputError(f"interval_s={inp.interval_s:g} is longer than duration_s={inp.duration_s:g}: "
                             f"use an interval shorter than the window, e.g. interval_s=1")
        if inp.past is not None:
            return self._collect_past(inp)
        if inp.cluster() or inp.output_dir is not None or inp.namespace is not None or inp.diagnose:
            return self._collect_cluster(inp, progress)
        graph = wp.collect(duration_s=inp.duration_s, interval_s=inp.interval_s, pids=inp.pids,
                        collectors=inp.collectors, progress=progress, stop=stop)
        if stop is not None and stop.is_set():  # the client cancelled: nobody is waiting for this graph
            raise InputError("collect was cancelled; the window was not saved")
        record = self.store.add_live(graph)
        summary, text = self._summary(record, graph, 8000)
        return s.CollectResult(**summary.model_dump()), text

    def _collect_past(self, inp: s.CollectInput) -> tuple[Any, str]:
        """A past window (START[..END], END default now) of the hosts this server's Prometheus monitors
        (witty-mcp --prometheus URL [--prometheus-match SELECTOR]): the operator names the server, its
        credentials and its series, the client only the window."""
        from witty_profiler.sources.promapi import parse_time, read_auth
        from witty_profiler.sources.prometheus import collect_window
        if self.prometheus is None:
            raise InputError("past reads a window from Prometheus, and this server has none: start witty-mcp with "
                             "--prometheus URL (credentials in --prometheus-auth-file or WITTY_PROMETHEUS_TOKEN)")
        if inp.cluster() or inp.pids or inp.collectors or inp.output_dir or inp.diagnose:
            raise InputError("past reads Prometheus: drop pids, collectors and the cluster arguments")
        since, _, until = inp.past.partition("..")
        start, end = parse_time(since.strip()), parse_time(until.strip() or "now")
        window = collect_window(self.prometheus, start, end, match=self.prometheus_match,
                                auth=read_auth(self.prometheus_auth_file))
        record = self.store.add_live(window.graph, kind="prometheus")
        summary, text = self._summary(record, window.graph, 8000)
        return s.CollectResult(**summary.model_dump()), text

    def cluster_target(self, inp: s.CollectInput) -> Any:
        """The hosts collect names, checked before anything runs."""
        from witty_profiler.cluster.collect import Target
        if not inp.cluster():
            raise InputError("output_dir, namespace and diagnose are for a cluster: also give hosts, slurm_job, "
                             "slurm_nodes or kubectl_selector, or drop them to collect this host")
        target = Target(hosts=list(inp.hosts or []), slurm_job=inp.slurm_job, slurm_nodes=inp.slurm_nodes,
                        kubectl_selector=inp.kubectl_selector, namespace=inp.namespace or "witty-profiler")
        try:
            target.way()
        except InputError:
            raise InputError("name the hosts one way: hosts, slurm_job, slurm_nodes or kubectl_selector, not "
                             "several") from None
        target.check()
        if inp.namespace is not None and not inp.kubectl_selector:
            raise InputError("namespace is for kubectl_selector: drop it, or name the pods with kubectl_selector")
        if inp.pids:
            raise InputError("pids are this host's processes: drop them for a cluster (each host collects its AI "
                             "workloads)")
        if not inp.output_dir:
            raise InputError("a cluster needs output_dir, a new or empty folder in the report directory for the "
                             "hosts' graphs, e.g. output_dir='cluster-1'")
        return target

    def cluster_deadline(self, inp: s.CollectInput) -> float:
        from witty_profiler.cluster.collect import deadline
        return deadline(self.cluster_target(inp), inp.duration_s, self.launch)

    def _collect_cluster(self, inp: s.CollectInput, progress: Progress | None) -> tuple[Any, str]:
        from witty_profiler.cluster.collect import collect_cluster
        from witty_profiler.cluster.fanout import HostResult
        target = self.cluster_target(inp)
        directory = self.reports.new_folder(inp.output_dir or "")

        def told(result: HostResult, done: int, total: int) -> None:
            if progress:
                reason = f": {result.reason}" if result.reason and result.status != "ok" else ""
                progress(done, total, f"{result.host} {result.status}{reason}"[:200])

        collectors = ",".join(inp.collectors) if inp.collectors else None
        manifest = collect_cluster(target, directory, inp.duration_s, inp.interval_s, None, collectors, self.launch,
                                   progress=told)
        results = sorted(manifest.results, key=lambda r: (r.status == "ok", r.host))  # failures first
        ok = sum(1 for r in results if r.status == "ok")
        out = s.CollectResult(directory=str(directory), ok=ok, failed=len(results) - ok,
                              hosts=sorted(r.host for r in results),
                              host_status=[s.HostStatus(host=r.host, status=r.status, reason=r.reason or None)
                                           for r in results])
        if inp.diagnose:
            from witty_profiler.cluster.directory import diagnose_directory
            from witty_profiler.diagnosis.cluster_report import SUMMARY_TOKENS
            from witty_profiler.diagnosis.cluster_report import summary as cluster_summary
            d = diagnose_directory(directory, manifest.failed(), thresholds=self.thresholds())
            out.overview = cluster_summary(d, str(directory), drill="match_patterns with this directory and "
                                                                    "host=NAME shows one",
                                           fits=fewer_than(SUMMARY_TOKENS))
            out.overview_tokens = count_tokens(out.overview)
        out.note = (f"next: match_patterns with directory={directory} for the cross-host findings and their "
                    f"evidence, list_hosts for every host's status")
        if len(results) > 50:  # the outcome of every host is in the manifest and list_hosts
            shown = [h for h in out.host_status or [] if h.status != "ok"][:50]
            out.host_status, out.truncated = shown, True
            out.note += f"; host_status lists {len(shown)} of the hosts without a graph, list_hosts pages all"
        return out, compact_json(out.model_dump(mode="json", exclude_none=True))

    def load_graph(self, inp: s.LoadGraphInput) -> tuple[s.GraphSummary, str]:
        record, graph = self.store.load_file(self.path(inp.path))
        return self._summary(record, graph, 8000)

    def import_trace(self, inp: s.ImportTraceInput) -> tuple[s.GraphSummary, str]:
        import hashlib

        from witty_profiler.mcp_server.store import slug
        paths = [self.path(p) for p in inp.paths]
        into = Graph().merge(self.store.get(inp.into_graph_id)) if inp.into_graph_id else None
        graph = wp.import_traces(paths, job=inp.job, into=into)
        key = "\n".join([*(str(p.resolve()) for p in paths), inp.job or "", inp.into_graph_id or ""])
        graph_id = f"trace-{slug(paths[0].name, 30)}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"
        record = self.store.add(graph, "load", graph_id, loaded_from=", ".join(str(p.resolve()) for p in paths))
        return self._summary(record, graph, 8000)

    # -- looking at graphs ----------------------------------------------------------------
    def list_graphs(self, inp: s.ListGraphsInput) -> tuple[s.GraphList, str]:
        records = self.store.records()
        key = query_key("list_graphs", inp.limit)
        offset = read_cursor(inp.cursor, key)
        page = records[offset:offset + inp.limit]
        rows = [s.GraphListing(**r.model_dump()) for r in page]
        more = offset + len(page) < len(records)
        out = s.GraphList(graphs=rows, total=len(records), next_cursor=make_cursor(offset + len(page), key) if more
                          else None)
        if more:
            out.note = (f"graphs {offset + 1}-{offset + len(page)} of {len(records)}; call list_graphs with "
                        f"cursor=next_cursor for the rest")
        elif not records:
            out.note = "no graphs yet: call collect to capture this host, or load_graph with a graph file"
        return out, compact_json(out.model_dump(mode="json", exclude_none=True))

    def graph_summary(self, inp: s.GraphSummaryInput) -> tuple[s.GraphSummary, str]:
        record = self.store.record(inp.graph_id)
        return self._summary(record, self.store.get(inp.graph_id), inp.max_tokens)

    def _summary(self, record: GraphRecord, graph: Graph, max_tokens: int) -> tuple[s.GraphSummary, str]:
        entities, edges = graph.counts_by_type()
        out = s.GraphSummary(
            **record.model_dump(exclude={"created_at"}), entities_by_type=entities, edges_by_type=edges,
            collectors=[s.CollectorState(name=n, status=c.status, reason=c.reason)
                        for n, c in sorted(graph.meta.collectors.items())],
            overview="", overview_tokens=0)
        used = count_tokens(compact_json(out.model_dump(mode="json")))
        view = wp.convert(graph, layer="summary", max_tokens=max(max_tokens - used - 150, 200),
                          hints=McpHints(record.graph_id), diagnosis=self.diagnosis(record.graph_id))
        out.overview, out.overview_tokens, out.truncated = view.text, view.tokens, bool(view.truncated)
        cut = ""
        if view.truncated:
            left = ", ".join(f"{n} {what}" for what, n in view.omitted.items()) or "some rows"
            cut = f"overview cut to fit max_tokens (left out: {left}; raise max_tokens to see them); "
        out.note = cut + "next: convert_layer for the layers that look unhealthy, match_patterns for the findings"
        return out, compact_json(out.model_dump(mode="json", exclude_none=True))

    def query_graph(self, inp: s.QueryGraphInput) -> tuple[s.QueryPage, str]:
        graph = self.store.get(inp.graph_id)
        if inp.type is not None and inp.type not in ENTITY_TYPES:
            raise InputError(f"unknown entity type {inp.type!r}{suggest(inp.type, list(ENTITY_TYPES))}; "
                             f"types in this graph: {', '.join(graph.counts_by_type()[0])}")
        if inp.edge_type is not None and inp.around is None and (inp.type is not None or inp.top_by_metric):
            raise InputError("edge_type alone lists edges; type and top_by_metric are for entities: drop one, "
                             "or give around=<entity id> to follow edge_type edges from an entity")
        key = query_key(inp.graph_id, inp.type, inp.where, inp.around, inp.depth, inp.edge_type,
                        inp.top_by_metric, inp.ascending)
        offset = read_cursor(inp.cursor, key)
        rows, total_entities, total_edges, kind = self._rows(graph, inp, key, offset + inp.limit)
        total_rows = total_entities + total_edges
        if offset > total_rows:
            raise InputError("cursor points past the end of the results: drop cursor to start again")
        budget = inp.max_tokens - 300
        page, used = take_page(rows, offset, inp.limit, budget, item_json)
        dumped = [json.loads(item_json(r)) for r in page]
        clipped = _clip(dumped[0], budget) if used > budget else []
        out = s.QueryPage(graph_id=inp.graph_id, kind=kind, total_entities=total_entities, total_edges=total_edges,
                          offset=offset, entities=[s.EntityRow(**d) for d in dumped if "source" not in d],
                          edges=[s.EdgeRow(**d) for d in dumped if "source" in d])
        end = offset + len(page)
        if end < total_rows:
            out.next_cursor = make_cursor(end, key)
            cut = " (page cut to fit max_tokens)" if len(page) < inp.limit else ""
            out.note = (f"rows {offset + 1}-{end} of {total_rows}{cut}; {total_rows - end} more: call query_graph "
                        f"with the same arguments and cursor=next_cursor, or narrow it with where")
        elif not total_rows:
            out.note = "nothing matched; check the names with graph_summary (entities_by_type) or loosen where"
        if clipped:
            out.note = (f"{', '.join(clipped)} of {dumped[0]['id']} left out to fit max_tokens={inp.max_tokens}; "
                        f"raise max_tokens to see them" + (f". {out.note}" if out.note else ""))
        return out, compact_json(out.model_dump(mode="json", exclude_none=True))

    def _rows(self, graph: Graph, inp: s.QueryGraphInput, key: str, need: int) -> Rows:
        """All rows of a query (for top_by_metric: at least the first `need`), kept for the next pages:
        following a cursor must not scan the graph again."""
        with self._lock:
            hit = self._queries.get(key)
        if hit is not None and (hit.kind != "top" or len(hit.rows) >= min(need, hit.total_entities)):
            return hit
        if inp.around is not None:
            if inp.around not in graph:
                raise InputError(f"no entity with id {inp.around!r} in graph {inp.graph_id!r}: find ids with "
                                 f"query_graph type=... (ids look like process:<host>:<pid>)")
            sub = graph.subgraph(inp.around, depth=inp.depth, edge_type=inp.edge_type)
            found = sub.find(inp.type, inp.where)
            centre = [e for e in found if e.id == inp.around]
            edges = sub.edges()
            result = Rows([*centre, *(e for e in found if e.id != inp.around), *edges], len(found), len(edges),
                          "around")
        elif inp.edge_type is not None:
            edges = graph.find_edges(inp.edge_type, inp.where)
            result = Rows(list(edges), 0, len(edges), "edges")
        elif inp.top_by_metric is not None:
            head, total = self._ranked(graph, inp, max(need, 200))
            result = Rows(list(head), total, 0, "top")
        elif inp.type is not None or inp.where:
            found = graph.find(inp.type, inp.where)
            result = Rows(list(found), len(found), 0, "find")
        else:
            raise InputError("say what to query: type (e.g. type='process'), where, around=<entity id>, edge_type or "
                             "top_by_metric (e.g. top_by_metric='cpu_util_pct')")
        with self._lock:
            self._queries[key] = result
            while len(self._queries) > 8:
                self._queries.popitem(last=False)
        return result

    def _ranked(self, graph: Graph, inp: s.QueryGraphInput, n: int) -> tuple[list[Entity], int]:
        """The first n entities by the metric (ties by id) and how many have it."""
        metric = inp.top_by_metric or ""
        candidates = [e for e in graph.find(inp.type, inp.where)
                      if isinstance(e.metrics.get(metric), (int, float)) and not isinstance(e.metrics[metric], bool)]
        if not candidates and metric_info(metric) is None:
            present = sorted({m for e in graph.find(inp.type, inp.where)[:5000] for m in e.metrics})
            raise InputError(f"unknown metric {metric!r}{suggest(metric, present)}; metrics on these entities: "
                             f"{', '.join(present[:25]) or 'none'}")
        sign = 1 if inp.ascending else -1
        return heapq.nsmallest(n, candidates, key=lambda e: (sign * e.metrics[metric], e.id)), len(candidates)

    def path(self, given: str) -> Path:
        """A path the client gave, relative to the server's working directory."""
        path = Path(given).expanduser()
        return path if path.is_absolute() else self.workdir / path

    def list_hosts(self, inp: s.ListHostsInput) -> tuple[s.HostList, str]:
        if (inp.graph_id is None) == (inp.directory is None):
            raise InputError("give graph_id (the hosts of a graph) or directory (a cluster folder), one of them")
        if inp.graph_id is not None:
            rows = self._graph_hosts(self.store.get(inp.graph_id))
        else:
            from witty_profiler.cluster.directory import host_rows
            rows = []
            for r in host_rows(self.path(inp.directory or "")):
                rows.append(s.HostRow(host=r["host"], status=r["status"], started_at=r.get("started_at"),
                                      duration_s=r.get("duration_s"), entities=r.get("entities")))
        key = query_key("list_hosts", inp.graph_id, inp.directory, inp.limit)
        offset = read_cursor(inp.cursor, key)
        page = rows[offset:offset + inp.limit]
        out = s.HostList(graph_id=inp.graph_id, directory=inp.directory, hosts=page, total=len(rows))
        if offset + len(page) < len(rows):
            out.next_cursor = make_cursor(offset + len(page), key)
            out.note = (f"hosts {offset + 1}-{offset + len(page)} of {len(rows)}; call list_hosts with "
                        f"cursor=next_cursor for the rest")
        return out, compact_json(out.model_dump(mode="json", exclude_none=True))

    @staticmethod
    def _graph_hosts(graph: Graph) -> list[s.HostRow]:
        """Each host of a graph: its own window, its entities and the collectors that did not run fully."""
        from witty_profiler.topology.hosts import host_windows
        from witty_profiler.topology.ids import host_of
        counts: dict[str, int] = {}
        for entity in graph.entities():
            host = host_of(entity.id)
            counts[host] = counts.get(host, 0) + 1
        windows = host_windows(graph)
        single = len(graph.meta.hosts) == 1
        rows = []
        for host in graph.meta.hosts:
            bad = sorted(name.partition("@")[0] for name, c in graph.meta.collectors.items()
                         if c.status != "ok" and (name.partition("@")[2] == host or (single and "@" not in name)))
            window = windows.get(host, {})
            rows.append(s.HostRow(host=host, status="ok", started_at=window.get("started_at"),
                                  duration_s=window.get("duration_s"), entities=counts.get(host, 0),
                                  collectors_not_ok=bad))
        return rows

    def host_graph(self, graph_id: str, host: str | None) -> Graph:
        """The graph, or with `host` that host's part of a merged graph (kept for the next calls)."""
        graph = self.store.get(graph_id)
        if host is None:
            return graph
        from witty_profiler.topology.hosts import host_part
        key = (graph_id, host)
        with self._lock:
            if key in self._parts:
                self._parts.move_to_end(key)
                return self._parts[key]
        try:
            part = host_part(graph, host)
        except InputError as exc:
            raise InputError(f"{exc}: list_hosts graph_id={graph_id} lists them") from None
        with self._lock:
            self._parts[key] = part
            while len(self._parts) > 8:
                self._parts.popitem(last=False)
        return part

    def convert_layer(self, inp: s.ConvertLayerInput) -> tuple[s.LayerView, str]:
        graph = self.host_graph(inp.graph_id, inp.host)
        # the view's "… N more" lines, legend and next steps name these tools, not shell commands
        view = wp.convert(graph, layer=inp.layer, max_tokens=inp.max_tokens - 60,  # room for the note
                          hints=McpHints(inp.graph_id), diagnosis=self.diagnosis(inp.graph_id, inp.pids, None,
                                                                                 inp.thresholds, inp.host))
        out = s.LayerView(graph_id=inp.graph_id, layer=inp.layer, text=view.text, tokens=view.tokens,
                          truncated=bool(view.truncated), omitted=dict(view.omitted))
        if view.truncated:
            out.note = (f"view cut to fit max_tokens={inp.max_tokens}; what was folded away is in omitted: raise "
                        f"max_tokens, or list those rows with query_graph")
        return out, view.text + (f"\n[{out.note}]" if out.note else "")

    # -- diagnosis ------------------------------------------------------------------------
    def thresholds(self, given: str | None = None) -> dict[str, Any] | None:
        """Validated overrides from TOML text or a TOML file path; default: the server's --thresholds file."""
        from witty_profiler.diagnosis import load_thresholds
        from witty_profiler.diagnosis.thresholds import validate
        given = given if given is not None else self.thresholds_path
        if given is None:
            return None
        if "\n" in given or "=" in given:
            try:
                return validate(tomllib.loads(given), "thresholds")
            except tomllib.TOMLDecodeError as exc:
                raise InputError(f"thresholds: not valid TOML ({exc}); resource witty://thresholds shows the "
                                 f"format") from None
        path = Path(given).expanduser()
        return load_thresholds(path if path.is_absolute() else self.workdir / path)

    def diagnosis(self, graph_id: str, pids: list[int] | None = None, layer: str | None = None,
                  thresholds: str | None = None, host: str | None = None) -> Any:
        table = self.thresholds(thresholds)
        key = (graph_id, tuple(pids or ()), layer, compact_json(table), host)
        with self._lock:
            if key in self._diagnoses:
                self._diagnoses.move_to_end(key)
                return self._diagnoses[key]
        graph = self.host_graph(graph_id, host)
        result = wp.diagnose(graph, pids=pids, layer=layer, thresholds=table)
        with self._lock:
            self._diagnoses[key] = result
            while len(self._diagnoses) > 16:
                self._diagnoses.popitem(last=False)
        return result

    def match_patterns(self, inp: s.MatchPatternsInput) -> tuple[s.PatternMatches, str]:
        if (inp.graph_id is None) == (inp.directory is None):
            raise InputError("give graph_id (a graph) or directory (a cluster folder), one of them")
        if inp.directory is not None:
            return self._match_cluster(inp)
        result = self.diagnosis(inp.graph_id, inp.pids, inp.layer, inp.thresholds, inp.host)
        data = _plain(result)
        out = s.PatternMatches(graph_id=inp.graph_id, host=inp.host, layer=inp.layer, findings=data.get("findings", []),
                               coverage=data.get("coverage", []), summary=data.get("summary", {}))
        return _fit_matches(out, inp.max_tokens)

    def _match_cluster(self, inp: s.MatchPatternsInput) -> tuple[s.PatternMatches, str]:
        """A cluster folder: every host diagnosed on its own, then the cross-host patterns; or with host, that
        host's graph loaded and matched, for drill-down with the other tools."""
        from witty_profiler.cluster.directory import failed_hosts, graph_files, host_file
        directory = self.path(inp.directory or "")
        if inp.host is not None:
            record, _ = self.store.load_file(host_file(directory, inp.host))
            out, _ = self.match_patterns(inp.model_copy(update={"graph_id": record.graph_id, "directory": None,
                                                                "host": None}))
            out.directory, out.host = inp.directory, inp.host
            out.hosts_ok, out.hosts_failed = len(graph_files(directory)), len(failed_hosts(directory))
            out.note = ((out.note + ". ") if out.note else "") + (f"graph_id {record.graph_id} is host {inp.host}'s "
                                                                  f"graph, for convert_layer and query_graph")
            return out, compact_json(out.model_dump(mode="json", exclude_none=True))
        if inp.pids or inp.layer:
            raise InputError("pids and layer are for one host: add host=NAME (list_hosts directory=... names them), "
                             "or drop them for the cross-host diagnosis")
        from witty_profiler.cluster.directory import diagnose_directory
        from witty_profiler.diagnosis.cluster_report import SUMMARY_TOKENS
        from witty_profiler.diagnosis.cluster_report import summary as cluster_summary
        result = diagnose_directory(directory, thresholds=self.thresholds(inp.thresholds))
        data = _plain(result.cross)
        out = s.PatternMatches(directory=inp.directory, findings=data.get("findings", []),
                               coverage=data.get("coverage", []), summary=data.get("summary", {}),
                               text=cluster_summary(result, inp.directory or "",
                                                    drill="match_patterns with this directory and host=NAME shows one",
                                                    fits=fewer_than(SUMMARY_TOKENS)),
                               hosts_ok=len(result.hosts), hosts_failed=len(result.failed))
        return _fit_matches(out, inp.max_tokens)

    def generate_report(self, inp: s.GenerateReportInput) -> tuple[s.Report, str]:
        path = inp.output_path
        names = self.reports.check(path, inp.overwrite) if path else None  # a bad path fails before the work
        result = self.diagnosis(inp.graph_id, inp.pids, None, inp.thresholds)
        full = wp.report(result, self.store.get(inp.graph_id), format=inp.format)
        target = self.reports.write(path, names, full, inp.overwrite) if path and names else None
        text, tokens, truncated = cut_text(full, inp.max_tokens - 100)
        out = s.Report(graph_id=inp.graph_id, format=inp.format, text=text, tokens=tokens, truncated=truncated,
                       written_to=str(target) if target else None)
        if truncated:
            where = f"the whole report is in {target}" if target else "pass output_path to write the whole report"
            out.note = (f"report cut to {tokens} of {count_tokens(full)} tokens; {where}, or raise max_tokens")
        return out, text + (f"\n[{out.note}]" if out.note else "")

    def compare_graphs(self, inp: s.CompareGraphsInput) -> tuple[s.Comparison, str]:
        before, after = self.store.get(inp.before_id), self.store.get(inp.after_id)
        result = wp.compare(before, after, thresholds=self.thresholds(inp.thresholds))
        markdown = result.markdown() if callable(getattr(result, "markdown", None)) else str(result.markdown)
        data = result.to_dict()
        text, tokens, truncated = cut_text(markdown, inp.max_tokens - 100)
        out = s.Comparison(before_id=inp.before_id, after_id=inp.after_id, text=text, tokens=tokens,
                           truncated=truncated)
        if not truncated and tokens + count_tokens(compact_json(data)) <= inp.max_tokens - 100:
            out.comparison = data
        else:
            out.note = ("comparison cut to fit max_tokens" if truncated else "structured comparison left out to fit "
                        "max_tokens") + "; raise max_tokens to see all of it"
        return out, text + (f"\n[{out.note}]" if out.note else "")


def _clip(row: dict[str, Any], budget: int) -> list[str]:
    """Replace the largest attribute values of a row that alone exceeds the budget by a marker saying how
    much was left out, until it fits; returns the names of the fields cut."""
    cut: list[str] = []
    sizes = sorted(((len(compact_json(v)), k) for k, v in row.get("attrs", {}).items()), reverse=True)
    for size, key in sizes:
        if count_tokens(compact_json(row)) <= budget:
            break
        row["attrs"][key] = f"<{size} characters left out>"
        cut.append(f"attrs.{key}")
    return cut


def _plain(value: Any) -> Any:
    """A library result as JSON-able data."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    return str(value)


def _fit_matches(out: s.PatternMatches, max_tokens: int) -> tuple[s.PatternMatches, str]:
    """Findings within the budget. Cheapest losses first: repeated text, then detail of what is fine
    or unknown, then evidence beyond the first items, and only at the end whole findings (lowest
    priority first). Every step taken is named in the note."""
    def text() -> str:
        return compact_json(out.model_dump(mode="json", exclude_none=True))

    def finding_reasons() -> str | None:
        rows = [c for c in out.coverage if c.status == "finding" and c.reason != "see findings"]
        for c in rows:
            c.reason = "see findings"
        return None  # repeats the findings: nothing is lost

    def top_lines() -> str | None:
        out.summary.pop("top", None)
        return None  # one line per finding, repeating them: nothing is lost

    def short_reasons() -> str | None:
        rows = [c for c in out.coverage if c.status == "not_evaluated" and c.reason and len(c.reason) > 100]
        for c in rows:
            c.reason = shorten_reason(c.reason)
        return f"{len(rows)} not_evaluated reasons shortened" if rows else None

    def fold_clear() -> str | None:
        clear = [c for c in out.coverage if c.status == "clear"]
        out.coverage = [c for c in out.coverage if c.status != "clear"]
        out.summary["clear_patterns"] = sorted(c.pattern for c in clear)
        return f"{len(clear)} clear coverage rows folded into summary.clear_patterns" if clear else None

    def fold_unknown() -> str | None:
        rows = [c for c in out.coverage if c.status == "not_evaluated"]
        out.coverage = [c for c in out.coverage if c.status != "not_evaluated"]
        out.summary["not_evaluated_patterns"] = sorted(c.pattern for c in rows)
        return f"{len(rows)} not_evaluated rows folded into summary.not_evaluated_patterns" if rows else None

    def trim_ids(keep: int = 5) -> str | None:
        cut = 0
        for ev in (ev for f in out.findings for ev in f.evidence if len(ev.ids) > keep):
            cut += len(ev.ids) - keep
            ev.note = f"{(ev.note + '; ') if ev.note else ''}{len(ev.ids) - keep} more ids left out"
            ev.ids = ev.ids[:keep]
        return f"{cut} evidence ids left out" if cut else None

    def trim_evidence(keep: int) -> Callable[[], str | None]:
        def step() -> str | None:
            cut = 0
            for f in out.findings:
                if len(f.evidence) > keep:
                    cut += len(f.evidence) - keep
                    f.evidence = f.evidence[:keep]
                    f.recommendations = f.recommendations[:max(keep, 2)]
            return f"{cut} evidence items beyond the first {keep} of each finding left out" if cut else None
        return step

    def drop_findings() -> str | None:
        dropped = 0
        while len(out.findings) > 1 and count_tokens(text()) > budget:
            out.findings.pop()
            dropped += 1
        return f"{dropped} lowest-priority findings left out" if dropped else None

    budget = max_tokens - 150
    steps: list[str] = []
    for step in (finding_reasons, top_lines, short_reasons, fold_clear, trim_ids, trim_evidence(6), fold_unknown,
                 trim_evidence(3), drop_findings, trim_evidence(1)):
        if count_tokens(text()) <= budget:
            break
        if (said := step()) is not None:
            steps.append(said)
    if steps:
        out.truncated = True
        out.note = ("; ".join(steps) + ". generate_report has everything; match_patterns with layer=... or a "
                    "larger max_tokens shows more, query_graph around=<id> the entities")
    return out, text()


def shorten_reason(reason: str, limit: int = 100) -> str:
    """A not-evaluated reason cut to about `limit` characters: what is missing (the text before the
    first parenthesis) and, where the reason goes on to quote a collector, which one and its status,
    the part a reader acts on ("… (collector pmu: unavailable)"), without the collectors' own words."""
    head, _, rest = reason.partition(" (")
    quoted = re.findall(r"\bcollector ([\w.-]+): (\w+)", rest)
    tail = f" ({'; '.join(f'collector {name}: {status}' for name, status in quoted)})" if quoted else ""
    room = max(limit - len(tail), 20)
    return (head if len(head) <= room else head[:room - 1] + "…") + tail
