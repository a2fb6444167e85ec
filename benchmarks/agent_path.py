"""What the assistant's path costs, as clients hand the answers to the model, and whether every P0/P1 fact
reached it.

    python3 benchmarks/agent_path.py [--case NAME ...] [--json] [--show DIR]

The path is SKILL.md's, followed over real stdio with the real `mcp` client against an installed `witty-mcp`:
load the graph (or collect, or import the traces), read the summary that comes back, `convert_layer` each
layer with a P0/P1 finding at the skill's budget of 2,000 tokens, then `match_patterns` with its defaults.
A cluster folder is read progressively: `list_hosts`, `match_patterns(directory)`, then the odd host's
findings (`match_patterns(directory, host)`) and, on its graph, the layer of the cross-host finding. Each answer is counted in cl100k tokens in the
forms clients hand it to the model:

- text: the text blocks (Claude.ai, ChatGPT);
- structured: `structuredContent` as compact JSON (`JSON.stringify`: no spaces, non-ASCII kept) where the
  answer has it, else the text (Claude Code, Codex, OpenCode, Copilot CLI);
- both: the two together (Copilot in IntelliJ), reported without a goal.

The check, per form: against `witty-profiler diagnose --format json` of the same graph (for a folder, the
cross-host findings of `cluster diagnose --format json`, and the odd host's own in the layers opened, with all
its coverage reasons), every evidence item of
every P0/P1 finding reached the model: the pattern id, each entity id it names (an edge id by its two ends;
a thread by its process, which is the row that shows it) and its value (a number in one of the roundings a
view or a line prints, each entry of a mapping, each item of a list, a string as it is; a relation's text
label, such as the device a process uses, is its two ends); and every
not-evaluated coverage row's reason (what was missing, as `diagnosis.brief.split_reason` cuts it). A fact
that did not arrive is listed.

Cases: the real vLLM sample (../shared/fixtures), a live window with a planted problem (busy processes
crowding two CPUs), the 3,000-entity synthetic graph, a 3-host cluster folder with a straggler, the real
msprof-analyze 8-rank job, and a before/after compare. The tool definitions (tools/list) are counted too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from witty_profiler.mcp_server.path import FORMS, VIEW_BUDGET, Route, check, step, urgent_layers, walk_graph  # noqa: E402

SHARED = REPO.parent / "shared" / "fixtures"
SAMPLE = SHARED / "witty-profiler-vllm-8npu.json"
MSPROF = SHARED / "traces" / "msprof"
GOALS = {"sample": 4000, "synthetic": 9000, "cluster": 5000, "msprof": 3000, "definitions": 3000}


# -- the cases -----------------------------------------------------------------------------------
def cli_json(*argv: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "witty_profiler", *argv], capture_output=True, text=True,
                          timeout=600, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"witty-profiler {' '.join(argv)}: {done.stderr.strip()}")
    return json.loads(done.stdout)


async def graph_path(client: Any, name: str, bring: dict[str, Any], graph_file: Path) -> Route:
    """SKILL.md on one graph, checked against the CLI's diagnosis of the same file."""
    return await walk_graph(client, name, bring, cli_json("diagnose", str(graph_file), "--format", "json"))


async def cluster_path(client: Any, folder: str, work: Path) -> Route:
    """A folder, progressively: the hosts, the cross-host findings, the odd host's findings, its layers."""
    path = Route("cluster")
    await step(client, path, "list_hosts", directory=folder)
    await step(client, path, "match_patterns", directory=folder)
    cross = cli_json("cluster", "diagnose", str(work / folder), "--format", "json")
    odd = sorted({i.split(":")[1] for f in cross["findings"] for ev in f["evidence"] for i in ev.get("ids") or []
                  if i.startswith("host:")})
    diagnoses = [cross]
    for host in odd:
        one = await step(client, path, "match_patterns", directory=folder, host=host)
        d = cli_json("diagnose", str(work / folder / f"{host}.json"), "--format", "json")
        layers = urgent_layers(cross)  # the layer the cross-host finding is about, on the odd host
        for layer in layers:
            await step(client, path, "convert_layer", graph_id=one["graph_id"], layer=layer, max_tokens=VIEW_BUDGET)
        # what the path promises of the host: its P0/P1 findings in those layers, and every reason
        d["findings"] = [f for f in d["findings"] if f["layer_name"] in layers]
        diagnoses.append(d)
    check(path, diagnoses)
    return path


def write_cluster(folder: Path) -> None:
    """Three hosts of one job, each a 1,000-entity host graph with its rank: the rank on n2 runs at a third
    of the others' CPU (a straggler)."""
    from cluster_graphs import rank

    from benchmarks.synthetic import synthetic_graph
    from witty_profiler.topology import dump_graph
    folder.mkdir(parents=True)
    for i, (host, cpu) in enumerate((("n1", 96.0), ("n2", 31.0), ("n3", 95.0))):
        g = synthetic_graph(1000, seed=11 + i, host=host)
        rank(g, host, 90000 + i, i, world=3, cpu_util_pct=cpu)
        dump_graph(g, folder / f"{host}.json")


def planted(work: Path) -> subprocess.Popen:
    """A trainer whose six busy workers crowd this host's CPUs: run-queue waits and a saturated CPU."""
    code = ("import multiprocessing as m, time\n"
            "def spin():\n    while True: pass\n"
            "if __name__ == '__main__':\n"
            "    ps = [m.Process(target=spin) for _ in range(6)]\n    [p.start() for p in ps]\n    time.sleep(600)\n")
    (work / "train.py").write_text(code)
    proc = subprocess.Popen([sys.executable, str(work / "train.py")])
    time.sleep(1.5)
    return proc


async def run(cases: list[str], show: Path | None) -> dict[str, Any]:
    import mcp
    from mcp import StdioServerParameters

    from benchmarks.mcp_definitions import definition_tokens, tools_list
    exe = shutil.which("witty-mcp", path=os.path.dirname(sys.executable)) or shutil.which("witty-mcp")
    if exe is None:
        raise SystemExit("witty-mcp is not installed: python3 -m pip install -e .")
    out: dict[str, Any] = {"definitions": definition_tokens(await tools_list())["total"], "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        params = StdioServerParameters(command=exe, args=["--state-dir", str(work / "state")], cwd=str(work))
        async with mcp.Client(params) as client:
            paths: list[Route] = []
            if "sample" in cases and SAMPLE.is_file():
                paths.append(await graph_path(client, "sample", {"tool": "load_graph", "path": str(SAMPLE)}, SAMPLE))
            if "live" in cases:
                trainer = planted(work)
                try:
                    collected = work / "live.json"
                    path = Route("live")
                    gid = (await step(client, path, "collect", duration_s=5, interval_s=1, pids=[trainer.pid]))[
                        "graph_id"]
                    shutil.copy(work / "state" / "graphs" / f"{gid}.json", collected)
                    d = cli_json("diagnose", str(collected), "--format", "json", "--pid", str(trainer.pid))
                    for layer in urgent_layers(d):
                        await step(client, path, "convert_layer", graph_id=gid, layer=layer, pids=[trainer.pid],
                                   max_tokens=VIEW_BUDGET)
                    await step(client, path, "match_patterns", graph_id=gid, pids=[trainer.pid])
                    check(path, [d])
                    paths.append(path)
                finally:
                    trainer.kill()
                    subprocess.run(["pkill", "-f", str(work / "train.py")], check=False)
            if "synthetic" in cases:
                big = work / "synthetic-3000.json"
                subprocess.run([sys.executable, "-m", "benchmarks.synthetic", "3000", "-o", str(big)], cwd=REPO,
                               check=True, stdout=subprocess.DEVNULL)
                paths.append(await graph_path(client, "synthetic", {"tool": "load_graph", "path": str(big)}, big))
            if "cluster" in cases:
                write_cluster(work / "run1")
                paths.append(await cluster_path(client, "run1", work))
            if "msprof" in cases and MSPROF.is_dir():
                job = work / "msprof.json"
                subprocess.run([sys.executable, "-m", "witty_profiler", "import-trace", str(MSPROF), "-o", str(job)],
                               check=True, cwd=REPO, stderr=subprocess.DEVNULL)
                paths.append(await graph_path(client, "msprof", {"tool": "import_trace", "paths": [str(MSPROF)]}, job))
            if "compare" in cases:
                from benchmarks.synthetic import synthetic_graph
                from witty_profiler.topology import dump_graph
                files = [work / f"run-{seed}.json" for seed in (7, 8)]  # before and after a change
                for seed, f in zip((7, 8), files):
                    dump_graph(synthetic_graph(3000, seed=seed), f)
                path = Route("compare")
                ids = [(await step(client, path, "load_graph", path=str(f)))["graph_id"] for f in files]
                await step(client, path, "compare_graphs", before_id=ids[0], after_id=ids[1])
                paths.append(path)
            for p in paths:
                out["cases"][p.name] = {"steps": [{"call": s.call, **s.tokens} for s in p.steps],
                                        "total": {f: p.total(f) for f in FORMS}, "facts": p.facts,
                                        "missing": p.missing}
                if show is not None:
                    show.mkdir(parents=True, exist_ok=True)
                    for f in FORMS:
                        (show / f"{p.name}.{f}.txt").write_text("\n\n".join(p.read[f]), encoding="utf-8")
    return out


def table(out: dict[str, Any]) -> str:
    lines = ["| case | steps | text-first | structured-first | both | goal | P0/P1 facts and reasons checked | "
             "not reached (text / structured) |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for name, c in out["cases"].items():
        steps = " · ".join(f"{s['call'].split('(')[0]} {max(s['text'], s['structured']):,}" for s in c["steps"])
        goal = GOALS.get(name)
        lost = f"{len(c['missing'].get('text', []))} / {len(c['missing'].get('structured', []))}"
        lines.append(f"| {name} | {steps} | {c['total']['text']:,} | {c['total']['structured']:,} | "
                     f"{c['total']['both']:,} | {f'≤ {goal:,}' if goal else '-'} | {c['facts']} | {lost} |")
    lines.append(f"| tool definitions (tools/list, compact) | - | {out['definitions']:,} | {out['definitions']:,} | "
                 f"{out['definitions']:,} | ≤ {GOALS['definitions']:,} | - | - |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", choices=["sample", "live", "synthetic", "cluster", "msprof",
                                                            "compare"])
    parser.add_argument("--json", action="store_true", help="print every step and every fact not reached as JSON")
    parser.add_argument("--show", type=Path, help="write what the model read, per case and form, into DIR")
    args = parser.parse_args()
    cases = args.case or ["sample", "live", "synthetic", "cluster", "msprof", "compare"]
    out = asyncio.run(run(cases, args.show))
    print(json.dumps(out, indent=1) if args.json else table(out))
    for name, c in out["cases"].items():
        for form in ("text", "structured"):
            for fact in c["missing"].get(form, [])[:10]:
                print(f"not reached ({name}, {form}): {fact}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
