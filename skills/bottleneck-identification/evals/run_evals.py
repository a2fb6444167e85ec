#!/usr/bin/env python3
"""Run the skill's evals: build each case's input (the real legacy sample, or a live scenario
collected for real), produce the report with the installed witty-profiler, and check the
value-level assertions of evals.json against the report (JSON and Markdown).

    python3 evals/run_evals.py                 # every case, reports made by the tool itself
    python3 evals/run_evals.py --case 1 --case 7 --keep out/
    python3 evals/run_evals.py --reports out/  # check saved reports (e.g. written by an assistant)
    witty-profiler skill eval --case 3      # the same, from the installed package

A report directory holds one folder per case name with report.json and/or report.md (and, for
live cases, context.json with the pids by role, which --keep writes next to graph.json).
Exit status: 0 when every checked case passes, 1 when one fails, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EVALS = HERE / "evals.json"


def _scenarios():
    spec = importlib.util.spec_from_file_location("witty_eval_scenarios", HERE / "eval_scenarios.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- inputs ------------------------------------------------------------------------------------
def resolve_input(path: str, inputs: str | None) -> Path | None:
    """evals.json "inputs" explains the order: --inputs DIR (or WITTY_EVAL_INPUTS), then the
    repository root above this folder, then the skill folder."""
    bases = [Path(b) for b in (inputs, os.environ.get("WITTY_EVAL_INPUTS")) if b]
    candidates = [b / path for b in bases] + [b / Path(path).name for b in bases]
    repo = next((p for p in HERE.parents if (p / "pyproject.toml").is_file()), None)
    candidates += [p / path for p in (repo, HERE.parent) if p is not None]
    return next((c.resolve() for c in candidates if c.is_file()), None)


def expand(value: Any, roles: dict[str, list[int]], host: str) -> list[str]:
    """'{role}' -> the role's process ids; '{role.pid}' -> a regex for each pid; '{host}' inside a
    string -> the graph's host (a live graph's ids carry it: 'host:{host}'); else [value]."""
    if isinstance(value, str) and "{host}" in value:
        return [value.replace("{host}", host)]
    m = re.fullmatch(r"\{(\w+)(\.pid)?\}", value) if isinstance(value, str) else None
    if not m:
        return [value]
    pids = roles.get(m.group(1), [])
    return [rf"\b{pid}\b" for pid in pids] if m.group(2) else [f"process:{host}:{pid}" for pid in pids]


def _expand_all(values: list[Any], roles: dict[str, list[int]], host: str) -> list[str]:
    return [x for v in values for x in expand(v, roles, host)]


# -- checks ------------------------------------------------------------------------------------
def _mentioned(finding: dict[str, Any]) -> set[str]:
    """Every id a finding names: subjects, evidence ids, and the endpoints inside edge ids."""
    ids = set(finding.get("subjects", []))
    for ev in finding.get("evidence", []):
        for i in ev.get("ids", []):
            ids.add(i)
            ids.update(i.split("|")[1:3])
    return ids


def _findings(report: dict[str, Any], pattern: str | None = None, priority: str | None = None) -> list[dict]:
    return [f for f in report.get("findings", [])
            if (pattern is None or f["pattern"] == pattern) and (priority is None or f["priority"] == priority)]


def _md_matches(a, report, md, ctx):
    missing = [r for r in _expand_all(a["all"], ctx["roles"], ctx["host"]) if not re.search(r, md, re.I | re.M)]
    return not missing, f"missing {missing}" if missing else "all found"


def _md_not_matches(a, report, md, ctx):
    found = [r for r in a["none"] if re.search(r, md, re.I | re.M)]
    return not found, f"found {found}" if found else "none found"


def _md_layer_sections(a, report, md, ctx):
    wanted = [f"Layer {n}: {t}" for n, _, t in ctx["layers"] if not a.get("layer") or n == a["layer"]]
    missing = [w for w in wanted if w not in md]
    return not missing, f"missing sections {missing}" if missing else f"{len(wanted)} sections"


def _view_tokens_at_most(a, view):
    return view["tokens"] <= a["value"], f"{view['tokens']} tokens (at most {a['value']})"


def _view_matches(a, view):
    missing = [r for r in a["all"] if not re.search(r, view["text"], re.I | re.M)]
    return not missing, f"missing {missing}" if missing else "all found"


def _path_tokens_at_most(a, path):
    worst = max(path["text"], path["structured"])
    return worst <= a["value"], (f"{path['text']} tokens as text blocks, {path['structured']} as structuredContent "
                                 f"(at most {a['value']})")


def _path_complete(a, path):
    lost = path["missing"]["text"] + path["missing"]["structured"]
    return not lost, (f"{path['facts']} P0/P1 facts and reasons reached the model in both forms" if not lost
                      else f"not reached: {lost[:5]}")


def _finding(a, report, md, ctx):
    found = _findings(report, a["pattern"], a.get("priority"))
    if not found:
        got = sorted({f["priority"] for f in _findings(report, a["pattern"])})
        return False, f"no {a.get('priority', '')} finding {a['pattern']} (found priorities {got})"
    names = set().union(*(_mentioned(f) for f in found))
    missing = [i for i in _expand_all(a.get("mentions_all", []), ctx["roles"], ctx["host"]) if i not in names]
    anyof = _expand_all(a.get("mentions_any", []), ctx["roles"], ctx["host"])
    if missing:
        return False, f"{a['pattern']} does not name {missing}"
    if anyof and not names & set(anyof):
        return False, f"{a['pattern']} names none of {anyof}"
    return True, f"{len(found)} finding{'' if len(found) == 1 else 's'}, {a['pattern']} {found[0]['priority']}"


def _finding_evidence(a, report, md, ctx):
    subject = set(_expand_all([a["subject"]], ctx["roles"], ctx["host"]))
    found = [f for f in _findings(report, a["pattern"]) if _mentioned(f) & subject]
    if not found:
        return False, f"no {a['pattern']} finding names {sorted(subject)}"
    text = json.dumps(found, sort_keys=True)
    missing = [r for r in a["all"] if not re.search(r, text, re.I)]
    return not missing, f"evidence lacks {missing}" if missing else "evidence has all"


def _evidence_value(a, report, md, ctx):
    """The pattern's findings carry an evidence item for `metric` (on one of `ids_any`, if given)
    whose number lies within [at_least, at_most]: the finding rests on the measured value, not
    only on its name."""
    ids = set(_expand_all(a.get("ids_any", []), ctx["roles"], ctx["host"]))
    items = [ev for f in _findings(report, a["pattern"]) for ev in f.get("evidence", [])
             if ev.get("metric") == a["metric"] and (not ids or ids & set(ev.get("ids", [])))]
    values = [ev["value"] for ev in items if isinstance(ev.get("value"), (int, float))
              and not isinstance(ev["value"], bool)]
    low, high = a.get("at_least", float("-inf")), a.get("at_most", float("inf"))
    if not values:
        where = f" on {sorted(ids)}" if ids else ""
        return False, f"no {a['pattern']} evidence gives {a['metric']}{where}"
    inside = [v for v in values if low <= v <= high]
    return bool(inside), f"{a['metric']} {values} (expected within [{low}, {high}])"


def _no_finding(a, report, md, ctx):
    anyof = set(_expand_all(a.get("mentions_any", []), ctx["roles"], ctx["host"]))
    bad = [f["pattern"] for f in _findings(report, a.get("pattern"), a.get("priority"))
           if not anyof or _mentioned(f) & anyof]
    return not bad, f"unexpected {bad}" if bad else "none"


def _coverage(a, report, md, ctx):
    rows = [r for r in report.get("coverage", []) if r["pattern"] == a["pattern"]]
    if len(rows) != 1:
        return False, f"{len(rows)} coverage rows for {a['pattern']}"
    row, wanted = rows[0], a["status"] if isinstance(a["status"], list) else [a["status"]]
    if row["status"] not in wanted:
        return False, f"{a['pattern']} is {row['status']} ({row['reason']}), expected {wanted}"
    if a.get("reason_matches") and not re.search(a["reason_matches"], row["reason"] or "", re.I):
        return False, f"reason {row['reason']!r} does not match /{a['reason_matches']}/"
    return True, f"{row['status']}: {row['reason']}"


def _coverage_complete(a, report, md, ctx):
    expected = {p for p, layer in ctx["catalog"].items() if not ctx.get("layer") or layer == ctx["layer"]}
    rows = [r["pattern"] for r in report.get("coverage", [])]
    dupes = sorted({p for p in rows if rows.count(p) > 1})
    missing = sorted(expected - set(rows))
    wrong = sorted(r["pattern"] for r in report.get("coverage", [])
                   if (r["status"] == "finding") != bool(_findings(report, r["pattern"])))
    ok = not (dupes or missing or wrong)
    return ok, "every pattern has one row" if ok else f"missing {missing}, twice {dupes}, status mismatch {wrong}"


def _findings_in_layer(a, report, md, ctx):
    other = sorted({f["pattern"] for f in report.get("findings", []) if f["layer"] != a["layer"]})
    return not other, f"findings outside layer {a['layer']}: {other}" if other else "all in layer"


def _compare_change(a, report, md, ctx):
    """A comparison report: {resolved|new|persisting: [{pattern, deltas: [{metric, before, after}]}]}."""
    change = next((c for c in report.get(a["list"], []) if c["pattern"] == a["pattern"]), None)
    if change is None:
        listed = [c["pattern"] for c in report.get(a["list"], [])]
        return False, f"{a['pattern']} is not in {a['list']} ({listed})"
    for metric, limit in a.get("after_at_most", {}).items():
        after = next((d["after"] for d in change.get("deltas", []) if d["metric"] == metric), None)
        if after is None or after > limit:
            return False, f"{metric} after the fix is {after}, expected <= {limit}"
    return True, f"{a['pattern']} {a['list']}"


MD_CHECKS = {"md_matches": _md_matches, "md_not_matches": _md_not_matches, "md_layer_sections": _md_layer_sections}
VIEW_CHECKS = {"view_tokens_at_most": _view_tokens_at_most, "view_matches": _view_matches}
JSON_CHECKS = {"finding": _finding, "finding_evidence": _finding_evidence, "evidence_value": _evidence_value,
               "no_finding": _no_finding, "coverage": _coverage, "coverage_complete": _coverage_complete,
               "findings_in_layer": _findings_in_layer, "compare_change": _compare_change}
PATH_CHECKS = {"path_tokens_at_most": _path_tokens_at_most, "path_complete": _path_complete}
ASSERTION_TYPES = {*MD_CHECKS, *VIEW_CHECKS, *JSON_CHECKS, *PATH_CHECKS}


def check(a: dict[str, Any], report: dict[str, Any] | None, md: str | None, ctx: dict[str, Any]) -> tuple[bool, str]:
    """One assertion against the report (JSON), its Markdown or the view; returns (passed, detail)."""
    ctx = {"roles": {}, "host": "local", **ctx}
    kind = a["type"]
    if kind in MD_CHECKS:
        return MD_CHECKS[kind](a, report, md, ctx) if md is not None else (False, "no Markdown report")
    if kind in VIEW_CHECKS:
        return VIEW_CHECKS[kind](a, ctx["view"]) if ctx.get("view") else (False, "no view")
    if kind in PATH_CHECKS:
        return PATH_CHECKS[kind](a, ctx["path"]) if ctx.get("path") else (False, "no assistant path was walked")
    if kind in JSON_CHECKS:
        return JSON_CHECKS[kind](a, report, md, ctx) if report is not None else (False, "no JSON report")
    raise ValueError(f"unknown assertion type {kind!r}")


# -- producing the reports with the tool -------------------------------------------------------
def _tool_context() -> dict[str, Any]:
    from witty_profiler.diagnosis.catalog import catalog
    from witty_profiler.diagnosis.models import LAYERS
    return {"catalog": {pid: p.layer for pid, p in catalog().items()}, "layers": LAYERS}


def produce(case: dict[str, Any], inputs: str | None, keep: Path | None) -> tuple[dict, str, dict]:
    """Build the case's input and let the tool write its report: (report JSON, Markdown, context)."""
    import witty_profiler as wp
    ctx: dict[str, Any] = {"roles": {}, **_tool_context()}
    source = case["input"]
    if "graph" in source:
        path = resolve_input(source["graph"], inputs)
        if path is None:
            raise FileNotFoundError(f"input {source['graph']} not found (see evals.json 'inputs'; use --inputs DIR)")
        graph = wp.load(path)
    elif "traces" in source:  # training traces (Kineto, msprof-analyze) imported into a graph of their own
        paths = [resolve_input(t, inputs) for t in source["traces"]]
        if None in paths:
            missing = [t for t, found in zip(source["traces"], paths) if found is None]
            raise FileNotFoundError(f"inputs {missing} not found (see evals.json 'inputs'; use --inputs DIR)")
        graph = wp.import_traces(paths)
    else:
        scenarios = _scenarios()
        with scenarios.run(source["scenario"]) as roles:
            ctx["roles"] = roles
            scope = [pid for role in source.get("scope", roles) for pid in roles[role]]
            window = {"duration_s": source.get("duration_s", 4.0), "interval_s": source.get("interval_s", 0.5)}
            if source.get("stacks"):  # on-CPU stack sampling (collect --stacks)
                window["stacks"] = True
            if "hosts" in source:  # {host: role}: each role collected as the host it stands for, then merged
                from witty_profiler.topology.hosts import merge_hosts
                graph = merge_hosts((host, wp.collect(pids=roles[role], host=host, **window))
                                    for host, role in source["hosts"].items())
            else:
                graph = wp.collect(pids=scope, **window)
            if "fix" in source:  # before/after: apply the fix to the running workload, collect again
                for pid in roles[source["fix"]["role"]]:
                    scenarios.FIXES[source["fix"]["action"]](pid)
                before, graph = graph, wp.collect(pids=scope, **window)
    ctx["host"] = (graph.meta.hosts or ["local"])[0]
    run = case.get("run", {})
    pids = [pid for role in run.get("pids", []) for pid in ctx["roles"].get(role, [])] or None
    ctx["layer"] = next((n for n, name, _ in ctx["layers"] if name == run.get("layer")), None)
    if "fix" in source:
        comparison = wp.compare(before, graph, pids=pids)
        report_json, report_md = comparison.to_dict(), comparison.markdown()
    else:
        diagnosis = wp.diagnose(graph, pids=pids, layer=run.get("layer"))
        report_json = json.loads(wp.report(diagnosis, graph, format="json"))
        report_md = wp.report(diagnosis, graph, format="md")
    if "view" in run:
        view = wp.convert(graph, layer=run["view"]["layer"], max_tokens=run["view"].get("max_tokens"), pids=pids)
        ctx["view"] = {"text": view.text, "tokens": view.tokens}
    if run.get("path") == "mcp":
        ctx["path"] = walk_mcp_path(graph, report_json, pids)
    if keep:
        folder = keep / case["name"]
        folder.mkdir(parents=True, exist_ok=True)
        wp.dump_graph(graph, folder / ("after.json" if "fix" in source else "graph.json"))
        if "fix" in source:
            wp.dump_graph(before, folder / "before.json")
        (folder / "report.json").write_text(json.dumps(report_json, indent=2, sort_keys=True) + "\n")
        (folder / "report.md").write_text(report_md)
        (folder / "context.json").write_text(json.dumps({k: ctx[k] for k in ("roles", "host", "layer")}, indent=2) + "\n")
        if "view" in ctx:
            (folder / "view.txt").write_text(ctx["view"]["text"])
        if "path" in ctx:
            (folder / "path.json").write_text(json.dumps(ctx["path"], indent=2) + "\n")
    return report_json, report_md, ctx


def walk_mcp_path(graph: Any, diagnosis: dict[str, Any], pids: list[int] | None) -> dict[str, Any]:
    """SKILL.md's MCP path on the graph (load_graph, the views of the P0/P1 layers, match_patterns) against an
    in-memory witty-mcp: what it cost in each form clients hand the model, and which P0/P1 facts and
    not-evaluated reasons of `diagnosis` did not reach it."""
    import asyncio
    import tempfile

    import mcp

    import witty_profiler as wp
    from witty_profiler.app.graphs import GraphStore
    from witty_profiler.mcp_server.path import walk_graph
    from witty_profiler.mcp_server.server import build_server
    from witty_profiler.mcp_server.tools import WittyTools

    async def walk(folder: Path) -> Any:
        wp.dump_graph(graph, folder / "graph.json")
        server = build_server(WittyTools(GraphStore(folder / "state"), workdir=folder))
        async with mcp.Client(server) as client:
            return await walk_graph(client, "eval", {"tool": "load_graph", "path": "graph.json"}, diagnosis,
                                    **({"pids": pids} if pids else {}))
    with tempfile.TemporaryDirectory() as tmp:
        route = asyncio.run(walk(Path(tmp)))
    return {"text": route.total("text"), "structured": route.total("structured"), "missing": route.missing,
            "facts": route.facts, "steps": [s.call for s in route.steps]}


def saved(case: dict[str, Any], folder: Path) -> tuple[dict | None, str | None, dict]:
    """A report someone else wrote, from REPORTS/<case name>/."""
    ctx: dict[str, Any] = {"roles": {}, "host": "local", **_tool_context()}
    base = folder / case["name"]
    if (base / "context.json").is_file():
        ctx.update(json.loads((base / "context.json").read_text()))
    if (base / "view.txt").is_file():
        from witty_profiler.converters.tokens import count_tokens
        text = (base / "view.txt").read_text()
        ctx["view"] = {"text": text, "tokens": count_tokens(text)}
    if (base / "path.json").is_file():  # what an assistant's walk of the MCP path cost and missed
        ctx["path"] = json.loads((base / "path.json").read_text())
    report = json.loads((base / "report.json").read_text()) if (base / "report.json").is_file() else None
    md = (base / "report.md").read_text() if (base / "report.md").is_file() else None
    return report, md, ctx


def run_case(case: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    scenarios = _scenarios()
    try:
        report, md, ctx = saved(case, Path(args.reports)) if args.reports else produce(
            case, args.inputs, Path(args.keep) if args.keep else None)
    except scenarios.ScenarioUnavailable as exc:
        return {"id": case["id"], "name": case["name"], "status": "skipped", "reason": str(exc), "results": []}
    except FileNotFoundError as exc:
        return {"id": case["id"], "name": case["name"], "status": "skipped" if not args.strict else "failed",
                "reason": str(exc), "results": []}
    results = []
    for a in case["assertions"]:
        ok, detail = check(a, report, md, ctx)
        results.append({"assertion": a["text"], "passed": ok, "detail": detail})
    status = "passed" if all(r["passed"] for r in results) else "failed"
    return {"id": case["id"], "name": case["name"], "status": status, "results": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run_evals.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", help="case id or name (repeat); default all")
    parser.add_argument("--inputs", metavar="DIR", help="where to find input graph files (see evals.json)")
    parser.add_argument("--reports", metavar="DIR", help="check saved reports instead of producing them")
    parser.add_argument("--keep", metavar="DIR", help="save each case's graph, reports and context here")
    parser.add_argument("--strict", action="store_true", help="a missing input file fails instead of skipping")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    cases = json.loads(EVALS.read_text())["evals"]
    if args.case:
        cases = [c for c in cases if str(c["id"]) in args.case or c["name"] in args.case]
        if not cases:
            parser.error(f"no case {args.case}")
    outcomes = [run_case(c, args) for c in cases]
    if args.json:
        print(json.dumps(outcomes, indent=2))
    else:
        for o in outcomes:
            print(f"{o['status'].upper():7} {o['id']:>2} {o['name']}" + (f": {o['reason']}" if o.get("reason") else ""))
            for r in o["results"]:
                if not r["passed"] or os.environ.get("WITTY_EVAL_VERBOSE"):
                    print(f"        {'ok ' if r['passed'] else 'FAIL'} {r['assertion']}: {r['detail']}")
        counts = {s: sum(o["status"] == s for o in outcomes) for s in ("passed", "failed", "skipped")}
        print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if any(o["status"] == "failed" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
