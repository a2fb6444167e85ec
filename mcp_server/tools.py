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
import threading
import tomllib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel

import witty_profiler as wp
from witty_profiler.converters import McpHints
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
                 workdir: Path | None = None, report_dir: Path | None = None) -> None:
        self.store = store or GraphStore()
        self.thresholds_path = thresholds_path
        self.workdir = (workdir or Path.cwd()).resolve()
        self.reports = ReportDir(report_dir or self.store.root / "reports")
        self.report_dir = self.reports.path
        self._diagnoses: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._queries: OrderedDict[str, Rows] = OrderedDict()  # last queries' rows, for their next pages
        self._lock = threading.Lock()

    # -- graphs in ------------------------------------------------------------------------
    def collect(self, inp: s.CollectInput, progress: Progress | None = None,
                stop: threading.Event | None = None) -> tuple[s.GraphSummary, str]:
        if inp.duration_s > s.MAX_DURATION_S:
            raise InputError(f"duration_s={inp.duration_s:g} is longer than this server's cap of "
                             f"{s.MAX_DURATION_S:g} s: collect at most {s.MAX_DURATION_S:g} s per call (several "
                             f"windows can be compared with compare_graphs), or run `witty-profiler collect "
                             f"--duration {inp.duration_s:g}` in a shell and load_graph the file")
        if inp.interval_s > inp.duration_s:
            raise InputError(f"interval_s={inp.interval_s:g} is longer than duration_s={inp.duration_s:g}: "
                             f"use an interval shorter than the window, e.g. interval_s=1")
        graph = wp.collect(duration_s=inp.duration_s, interval_s=inp.interval_s, pids=inp.pids,
                        collectors=inp.collectors, progress=progress, stop=stop)
        if stop is not None and stop.is_set():  # the client cancelled: nobody is waiting for this graph
            raise InputError("collect was cancelled; the window was not saved")
        record = self.store.add_live(graph)
        return self._summary(record, graph, 8000)

    def load_graph(self, inp: s.LoadGraphInput) -> tuple[s.GraphSummary, str]:
        path = Path(inp.path).expanduser()
        if not path.is_absolute():
            path = self.workdir / path
        record, graph = self.store.load_file(path)
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

    def convert_layer(self, inp: s.ConvertLayerInput) -> tuple[s.LayerView, str]:
        graph = self.store.get(inp.graph_id)
        # the view's "… N more" lines, legend and next steps name these tools, not shell commands
        view = wp.convert(graph, layer=inp.layer, max_tokens=inp.max_tokens - 60,  # room for the note
                          hints=McpHints(inp.graph_id), diagnosis=self.diagnosis(inp.graph_id, inp.pids, None,
                                                                                 inp.thresholds))
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
                  thresholds: str | None = None) -> Any:
        table = self.thresholds(thresholds)
        key = (graph_id, tuple(pids or ()), layer, compact_json(table))
        with self._lock:
            if key in self._diagnoses:
                self._diagnoses.move_to_end(key)
                return self._diagnoses[key]
        graph = self.store.get(graph_id)
        result = wp.diagnose(graph, pids=pids, layer=layer, thresholds=table)
        with self._lock:
            self._diagnoses[key] = result
            while len(self._diagnoses) > 16:
                self._diagnoses.popitem(last=False)
        return result

    def match_patterns(self, inp: s.MatchPatternsInput) -> tuple[s.PatternMatches, str]:
        result = self.diagnosis(inp.graph_id, inp.pids, inp.layer, inp.thresholds)
        data = _plain(result)
        out = s.PatternMatches(graph_id=inp.graph_id, layer=inp.layer, findings=data.get("findings", []),
                               coverage=data.get("coverage", []), summary=data.get("summary", {}))
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
            c.reason = c.reason.split(" (")[0][:100]
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
