"""What each MCP tool does, without MCP: one method per tool over the application layer (`app.Workspace`),
registered once with `@tool` (its name, title, description, input and output models, whether it only
reads and how it runs); `mcp_server.server` publishes the registry as it is.

Every method takes its input model and returns an `Answer`: the structured answer (`structuredContent`)
and the text block. Answers meant for reading carry their text in the structured answer as well, with
a few typed fields beside it, so a client that hands the model either form hands it the same facts once.
Bad input raises `topology.errors.InputError` with one sentence that says what to do instead.
"""

from __future__ import annotations

import difflib
import heapq
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel

from witty_profiler.app.cache import BoundedCache
from witty_profiler.app.graphs import GraphRecord, GraphStore
from witty_profiler.app.workspace import Workspace
from witty_profiler.mcp_server import schemas as s
from witty_profiler.mcp_server.budget import compact_json, count_tokens, make_cursor, query_key, read_cursor, take_page
from witty_profiler.mcp_server.reports import ReportDir
from witty_profiler.topology import Edge, Entity, Graph
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.io import item_json
from witty_profiler.topology.vocabulary import ENTITY_TYPES, metric_info

Progress = Callable[[float, float, str], None]
QUERIES_IN_MEMORY = 8
SUMMARY_BUDGET = "the id and the summary view, under 600 tokens"


class Answer(NamedTuple):
    data: BaseModel  # structuredContent
    text: str  # the text block


def data_answer(out: BaseModel) -> Answer:
    """An answer that is data (a page of rows, a list): the text block is its compact JSON."""
    return Answer(out, compact_json(out.model_dump(mode="json", exclude_none=True)))


def text_answer(out: BaseModel) -> Answer:
    """An answer meant for reading: its text is the text block and the structured answer's `text`."""
    return Answer(out, out.text)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    input: type[BaseModel]
    output: type[BaseModel]
    method: str  # of WittyTools
    read_only: bool = True
    idempotent: bool = True
    destructive: bool = False
    runs: Literal["worker", "inline", "window"] = "worker"  # window: collect, with progress and a deadline
    budget: str = ""  # what bounds an answer of a tool without max_tokens, for docs/mcp-tools.md


TOOLS: dict[str, ToolSpec] = {}  # in the order tools/list shows them


def tool(name: str, title: str, description: str, input: type[BaseModel], output: type[BaseModel],
         **how: Any) -> Callable[[Callable[..., Answer]], Callable[..., Answer]]:
    """Register a WittyTools method as the MCP tool `name`: the one place a tool is declared."""
    def register(method: Callable[..., Answer]) -> Callable[..., Answer]:
        TOOLS[name] = ToolSpec(name, title, description, input, output, method.__name__, **how)
        return method
    return register


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


def fitted(text: str, max_tokens: int, whole: str) -> tuple[str, int, bool]:
    """`text` within `max_tokens`, a last line saying what was cut and where `whole` is to be had."""
    kept, tokens, cut = cut_text(text, max_tokens - 40)
    if not cut:
        return kept, tokens, False
    note = f"[cut at {tokens} of {count_tokens(text)} tokens: {whole}, or raise max_tokens]\n"
    return kept + note, tokens + count_tokens(note), True


class WittyTools:
    """The server's state (the workspace: graphs, diagnoses, default thresholds, the folder relative paths
    are read from; the report directory; how cluster hosts, services and Prometheus are reached) and one
    method per tool."""

    def __init__(self, store: GraphStore | None = None, thresholds_path: str | None = None,
                 workdir: Path | None = None, report_dir: Path | None = None, launch: Any = None,
                 prometheus: str | None = None, prometheus_auth_file: str | None = None,
                 prometheus_match: str | None = None, workspace: Workspace | None = None,
                 services_file: str | None = None, services_token_file: str | None = None) -> None:
        self.ws = workspace or Workspace(store, thresholds_path, workdir)
        self.store = self.ws.store
        self.thresholds_path = thresholds_path
        self.reports = ReportDir(report_dir or self.store.root / "reports")
        self.report_dir = self.reports.path
        # how cluster hosts are reached (ssh config and options, the remote command, kubectl): the server's
        # operator decides, not the client (a ProxyCommand or a remote command would run anything)
        from witty_profiler.cluster.collect import Launch
        self.launch: Launch = launch or Launch()
        # the Prometheus of past windows, its credentials and series: the operator's too
        self.prometheus, self.prometheus_auth_file, self.prometheus_match = prometheus, prometheus_auth_file, \
            prometheus_match
        # the running services whose windows collect pulls, and their token: the operator's list, never URLs
        # from the client (the server would fetch, and send its token, wherever it was told)
        self.services_file, self.services_token_file = services_file, services_token_file
        self._queries: BoundedCache[Rows] = BoundedCache(QUERIES_IN_MEMORY, 64 << 20)  # rows for next pages
        self._lock = threading.Lock()

    # -- graphs in ------------------------------------------------------------------------
    @tool("collect", "Collect a live window", "This host's processes, scheduling, memory, NUMA, PCIe, GPUs/NPUs, "
          "network, storage and IPC over a window, with progress: a new graph_id and its summary. Or cluster hosts "
          "or services into output_dir, or a past window.", s.CollectInput, s.CollectResult,
          read_only=False, idempotent=False, runs="window", budget=SUMMARY_BUDGET)
    def collect(self, inp: s.CollectInput, progress: Progress | None = None,
                stop: threading.Event | None = None) -> Answer:
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
            if inp.stacks:
                raise InputError("stacks samples this host's workload: drop it for a cluster")
            return self._collect_cluster(inp, progress, stop)
        record, graph = self.ws.collect(inp.duration_s, inp.interval_s, pids=inp.pids, collectors=inp.collectors,
                                        progress=progress, stop=stop, stacks=inp.stacks)
        return self._graph_answer(record, graph, s.CollectResult)

    def _collect_past(self, inp: s.CollectInput) -> Answer:
        """A past window (START[..END], END default now) of the hosts this server's Prometheus monitors
        (witty-mcp --prometheus URL [--prometheus-match SELECTOR]): the operator names the server, its
        credentials and its series, the client only the window."""
        if self.prometheus is None:
            raise InputError("past reads a window from Prometheus, and this server has none: start witty-mcp with "
                             "--prometheus URL (credentials in --prometheus-auth-file or WITTY_PROMETHEUS_TOKEN)")
        if inp.cluster() or inp.pids or inp.collectors or inp.output_dir or inp.diagnose or inp.stacks:
            raise InputError("past reads Prometheus: drop pids, collectors, stacks and the cluster arguments")
        since, _, until = (inp.past or "").partition("..")
        record, graph = self.ws.collect_past(self.prometheus, since.strip(), until.strip() or "now",
                                             match=self.prometheus_match, auth_file=self.prometheus_auth_file)
        return self._graph_answer(record, graph, s.CollectResult)

    def cluster_target(self, inp: s.CollectInput) -> Any:
        """The hosts collect names, checked before anything runs."""
        from witty_profiler.cluster.collect import Target
        if not inp.cluster():
            raise InputError("output_dir, namespace and diagnose are for a cluster: also give hosts, slurm_job, "
                             "slurm_nodes, kubectl_selector or services, or drop them to collect this host")
        if inp.services is not None and self.services_file is None:
            raise InputError("services pulls windows from the services this server was given, and it has none: "
                             "start witty-mcp with --services-file FILE (one URL per line)")
        target = Target(hosts=list(inp.hosts or []), slurm_job=inp.slurm_job, slurm_nodes=inp.slurm_nodes,
                        kubectl_selector=inp.kubectl_selector, namespace=inp.namespace or "witty-profiler",
                        services_file=self.services_file if inp.services is not None else None)
        try:
            way = target.way()
        except InputError:
            raise InputError("name the hosts one way: hosts, slurm_job, slurm_nodes, kubectl_selector or services, "
                             "not several") from None
        if way == "services":
            from witty_profiler.cluster.services import Pick
            if inp.collectors:
                raise InputError("collectors: a service collects its own windows; drop it for services")
            target.pick = Pick.of(inp.services or "")
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

    def _collect_cluster(self, inp: s.CollectInput, progress: Progress | None,
                         stop: threading.Event | None = None) -> Answer:
        """The hosts into a new folder. `stop` set (the call cancelled or past its deadline) ends srun (which
        cancels its step on the nodes), ssh and kubectl exec."""
        from witty_profiler.cluster.collect import collect_cluster
        from witty_profiler.cluster.fanout import HostResult
        target = self.cluster_target(inp)
        launch = self.launch
        if target.services_file:
            from witty_profiler.cluster.services import read_token
            launch = replace(launch, service_token=read_token(self.services_token_file, "--services-token-file"))
        directory = self.reports.new_folder(inp.output_dir or "")

        def told(result: HostResult, done: int, total: int) -> None:
            if progress:
                reason = f": {result.reason}" if result.reason and result.status != "ok" else ""
                progress(done, total, f"{result.host} {result.status}{reason}"[:200])

        collectors = ",".join(inp.collectors) if inp.collectors else None
        manifest = collect_cluster(target, directory, inp.duration_s, inp.interval_s, None, collectors, launch,
                                   progress=told, stop=stop)
        if manifest.cancelled:  # given up: nobody is waiting for this answer
            ended = "the transfers were given up" if target.services_file else "srun, ssh and kubectl exec were ended"
            raise InputError(f"collect was cancelled: {ended}; {manifest.ok()} graphs are in {directory}")
        results = sorted(manifest.results, key=lambda r: (r.status == "ok", r.host))  # failures first
        ok = manifest.ok()
        every = [s.HostStatus(host=r.host, status=r.status, reason=r.reason or None) for r in results]
        failed = [h for h in every if h.status != "ok"]
        lines = [f"cluster folder {directory}: " + (f"{ok} of {len(results)} hosts gave a graph" if ok else
                                                    f"no host gave a graph ({len(results)} tried)")]
        lines += [f"  {h.host}: {h.status}{': ' + h.reason if h.reason else ''}" for h in failed[:50]]
        if len(failed) > 50:
            lines.append(f"  … {len(failed) - 50} more without a graph: list_hosts directory=… pages all")
        if inp.diagnose:
            lines.append(self._cluster_text(self.ws.diagnose_directory(directory, manifest.failed()), directory))
        elif ok:
            lines.append(f"next: match_patterns directory={directory} for the findings across hosts")
        else:
            lines.append("next: fix what each host's reason says (the tool missing there, the connection, the node's "
                         "state), then collect again into a new output_dir")
        text = "\n".join(lines) + "\n"
        return text_answer(s.CollectResult(directory=str(directory), ok=ok, failed=len(results) - ok,
                                           hosts=sorted(r.host for r in results),
                                           # every host's outcome, failures first; of many, those without a graph
                                           host_status=(every if len(every) <= 50 else failed[:50]) or None, text=text))

    @tool("load_graph", "Load a graph file", "A graph file (native or legacy; same file, same graph_id): its "
          "graph_id and summary.", s.LoadGraphInput, s.GraphAnswer, read_only=False, budget=SUMMARY_BUDGET)
    def load_graph(self, inp: s.LoadGraphInput) -> Answer:
        record, graph = self.ws.load(inp.path)
        return self._graph_answer(record, graph, s.GraphAnswer)

    @tool("import_trace", "Import training traces", "Kineto or msprof-analyze traces as a graph of ranks and "
          "collectives, joined to into_graph_id if given: a graph_id and its summary.",
          s.ImportTraceInput, s.GraphAnswer, read_only=False, budget=SUMMARY_BUDGET)
    def import_trace(self, inp: s.ImportTraceInput) -> Answer:
        record, graph = self.ws.import_traces(inp.paths, inp.job, inp.into_graph_id)
        return self._graph_answer(record, graph, s.GraphAnswer)

    def _graph_answer(self, record: GraphRecord, graph: Graph, model: type[BaseModel]) -> Answer:
        """A new graph: its id once, then the summary view (hosts, window, counts, the unhealthy layers, the
        workload, collectors), which says what to open next."""
        where = f" from {record.loaded_from}" if record.loaded_from else ""
        view = self.ws.view(record.graph_id, "summary")
        text = f"graph_id {record.graph_id} ({record.origin}{where})\n{view.text}"
        return text_answer(model(graph_id=record.graph_id, hosts=record.hosts, entity_count=record.entity_count,
                                 edge_count=record.edge_count, text=text))

    # -- looking at graphs ----------------------------------------------------------------
    @tool("list_graphs", "List graphs", "Known graphs, newest first, from earlier sessions too.", s.ListGraphsInput,
          s.GraphList, runs="inline",
          budget="a page of limit graphs")
    def list_graphs(self, inp: s.ListGraphsInput) -> Answer:
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
        return data_answer(out)

    @tool("graph_summary", "Describe a graph", "Hosts, window, counts by type and every collector's status with "
          "its reason; convert_layer layer=summary gives the summary view.", s.GraphSummaryInput, s.GraphAnswer)
    def graph_summary(self, inp: s.GraphSummaryInput) -> Answer:
        record, graph = self.store.record(inp.graph_id), self.ws.graph(inp.graph_id)
        entities, edges = graph.counts_by_type()
        meta = graph.meta
        window = f"{meta.duration_s:g} s from {meta.started_at or '?'}" if meta.duration_s is not None else "none"
        where = f" from {record.loaded_from}" if record.loaded_from else ""
        lines = [f"graph_id {record.graph_id} ({record.origin}{where})",
                 f"hosts: {', '.join(meta.hosts) or 'unknown'}; source: {meta.source or 'unknown'}; window: {window}",
                 f"entities: {graph.entity_count()} ({', '.join(f'{k} {v}' for k, v in entities.items())})",
                 f"edges: {graph.edge_count()} ({', '.join(f'{k} {v}' for k, v in edges.items())})"]
        lines += [f"collector {n}: {c.status}{' - ' + c.reason if c.reason else ''}"
                  for n, c in sorted(meta.collectors.items())]
        text, tokens, cut = fitted("\n".join(lines) + "\n", inp.max_tokens, "query_graph lists the entities")
        return text_answer(s.GraphAnswer(graph_id=record.graph_id, hosts=record.hosts, entity_count=record.entity_count,
                                         edge_count=record.edge_count, truncated=cut, text=text))

    @tool("query_graph", "Query a graph", "A page of entities (type, where), a neighbourhood (around, depth), a "
          "ranking (top_by_metric) or edges (edge_type alone). Next page: same arguments, cursor=next_cursor.",
          s.QueryGraphInput, s.QueryPage)
    def query_graph(self, inp: s.QueryGraphInput) -> Answer:
        graph = self.ws.graph(inp.graph_id)
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
        return data_answer(out)

    def _rows(self, graph: Graph, inp: s.QueryGraphInput, key: str, need: int) -> Rows:
        """All rows of a query (for top_by_metric: at least the first `need`), kept for the next pages:
        following a cursor must not scan the graph again."""
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
        return self._queries.put(key, result, 200 * len(result.rows))

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

    @tool("list_hosts", "List hosts", "Hosts of a graph or a cluster folder: window, entities, collectors not ok, "
          "or why no graph.", s.ListHostsInput, s.HostList, budget="a page of limit hosts")
    def list_hosts(self, inp: s.ListHostsInput) -> Answer:
        if (inp.graph_id is None) == (inp.directory is None):
            raise InputError("give graph_id (the hosts of a graph) or directory (a cluster folder), one of them")
        if inp.graph_id is not None:
            rows = self._graph_hosts(self.ws.graph(inp.graph_id))
        else:
            from witty_profiler.cluster.directory import host_rows
            rows = []
            for r in host_rows(self.ws.path(inp.directory or "")):
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
        return data_answer(out)

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

    @tool("convert_layer", "View one layer", "Compact text view of one layer, the summary or all, with the "
          "layer's findings and the rows of their evidence.", s.ConvertLayerInput, s.LayerView)
    def convert_layer(self, inp: s.ConvertLayerInput) -> Answer:
        # the view's "… N more" lines, legend and next steps name these tools, not shell commands. max_tokens
        # bounds the view, the same text the CLI and the REST route give for this budget; the structured form
        # adds its few fields and the JSON string's escapes (tens of tokens, BENCHMARKS.md)
        view = self.ws.view(inp.graph_id, inp.layer, inp.max_tokens, pids=inp.pids, thresholds=inp.thresholds,
                            host=inp.host)
        return text_answer(s.LayerView(graph_id=inp.graph_id, layer=inp.layer, truncated=bool(view.truncated),
                                       text=view.text))

    # -- diagnosis ------------------------------------------------------------------------
    @tool("match_patterns", "Match bottleneck patterns", "Deterministic seven-layer matcher: a line per finding "
          "(P0-P2; evidence in its layer's convert_layer) and each pattern's coverage grouped by why; for a cluster "
          "folder, across hosts, with evidence.", s.MatchPatternsInput,
          s.PatternMatches)
    def match_patterns(self, inp: s.MatchPatternsInput) -> Answer:
        if (inp.graph_id is None) == (inp.directory is None):
            raise InputError("give graph_id (a graph) or directory (a cluster folder), one of them")
        if inp.directory is not None:
            return self._match_cluster(inp)
        from witty_profiler.converters.tokens import fewer_than
        from witty_profiler.diagnosis.brief import brief
        d = self.ws.diagnosis(inp.graph_id, inp.pids, inp.layer, inp.thresholds, inp.host)
        title = f"diagnosis of {inp.graph_id}" + (f" host {inp.host}" if inp.host else "") + \
            (f" layer {inp.layer}" if inp.layer else "")
        text = brief(d, title, fits=fewer_than(inp.max_tokens))
        return self._matches(d, text, graph_id=inp.graph_id, host=inp.host, layer=inp.layer)

    @staticmethod
    def _matches(d: Any, text: str, **fields: Any) -> Answer:
        return text_answer(s.PatternMatches(**fields, counts=d.counts(), findings=[f"{f.priority} {f.pattern}"
                                                                                  for f in d.findings], text=text))

    def _match_cluster(self, inp: s.MatchPatternsInput) -> Answer:
        """A cluster folder: every host diagnosed on its own, then the cross-host patterns; or with host, that
        host's graph loaded and matched, for drill-down with the other tools."""
        from witty_profiler.cluster.directory import failed_hosts, graph_files, host_file
        directory = self.ws.path(inp.directory or "")
        if inp.host is not None:
            record, _ = self.store.load_file(host_file(directory, inp.host))
            answer = self.match_patterns(inp.model_copy(update={"graph_id": record.graph_id, "directory": None,
                                                                "host": None}))
            text = f"host {inp.host} of {inp.directory} is graph_id {record.graph_id}\n{answer.text}"
            out = answer.data.model_copy(update={"directory": inp.directory, "host": inp.host, "text": text,
                                                 "hosts_ok": len(graph_files(directory)),
                                                 "hosts_failed": len(failed_hosts(directory))})
            return text_answer(out)
        if inp.pids or inp.layer:
            raise InputError("pids and layer are for one host: add host=NAME (list_hosts directory=... names them), "
                             "or drop them for the cross-host diagnosis")
        result = self.ws.diagnose_directory(directory, thresholds=inp.thresholds)
        text, _, cut = fitted(self._cluster_text(result, inp.directory or ""), inp.max_tokens,
                              "generate_report is not for folders; `witty-profiler cluster diagnose DIR` has all")
        out = self._matches(result.cross, text, directory=inp.directory, hosts_ok=len(result.hosts),
                            hosts_failed=len(result.failed))
        out.data.truncated = cut  # type: ignore[attr-defined]
        return out

    @staticmethod
    def _cluster_text(result: Any, directory: Any) -> str:
        """The cross-host summary (bounded for any number of hosts), then the evidence of its P0/P1 findings:
        a folder has no layer view to show them."""
        from witty_profiler.converters.tokens import fewer_than
        from witty_profiler.diagnosis.brief import evidence_lines
        from witty_profiler.diagnosis.cluster_report import SUMMARY_TOKENS
        from witty_profiler.diagnosis.cluster_report import summary as cluster_summary
        text = cluster_summary(result, str(directory), drill="match_patterns with this directory and host=NAME "
                               "shows one", fits=fewer_than(SUMMARY_TOKENS))
        urgent = [f for f in result.cross.findings if f.priority in ("P0", "P1")]
        lines = [line for f in urgent for line in [f"evidence of {f.pattern}:", *evidence_lines(f)]]
        return text + ("\n".join(lines) + "\n" if lines else "")

    @tool("generate_report", "Write the report", "The diagnosis report (md or json); output_path also writes it "
          "to a file in the server's report directory, overwrite=true to replace one.", s.GenerateReportInput,
          s.Report, read_only=False, destructive=True)
    def generate_report(self, inp: s.GenerateReportInput) -> Answer:
        path = inp.output_path
        names = self.reports.check(path, inp.overwrite) if path else None  # a bad path fails before the work
        full = self.ws.report(inp.graph_id, inp.format, pids=inp.pids, thresholds=inp.thresholds)
        target = self.reports.write(path, names, full, inp.overwrite) if path and names else None
        whole = f"the whole report is in {target}" if target else "pass output_path to write the whole report"
        text, tokens, cut = fitted(full, inp.max_tokens, whole)
        return text_answer(s.Report(graph_id=inp.graph_id, format=inp.format, truncated=cut,
                                    written_to=str(target) if target else None, text=text))

    @tool("compare_graphs", "Compare two graphs", "Before/after diff of two graphs (e.g. around a fix): findings "
          "appeared, resolved or changed; metrics moved.", s.CompareGraphsInput, s.Comparison)
    def compare_graphs(self, inp: s.CompareGraphsInput) -> Answer:
        result = self.ws.compare(inp.before_id, inp.after_id, thresholds=inp.thresholds)
        full = result.to_json() if inp.format == "json" else result.markdown()
        text, tokens, cut = fitted(full, inp.max_tokens, "`witty-profiler compare` has all of it")
        return text_answer(s.Comparison(before_id=inp.before_id, after_id=inp.after_id,
                                        truncated=cut, text=text))


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


