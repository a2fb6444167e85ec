"""Tokens per representation of the same graph, and how long the conversion takes.

For each graph (the real legacy sample, a live window of this host, the generated 100k-entity
graph): cl100k_base tokens of the raw legacy JSON (where there is one), of the native v1 JSON,
and of every view unbounded, with its share of the v1 JSON (or of the raw file) and the time to
render it; then the tokens and time of each view under 1k/4k/16k budgets.

Times are CPU time against a baseline timed in the same rounds, interleaved with the views: writing
the same graph's v1 JSON (`dumps_graph`). Each is the median of the per-round ratios with their range;
the baseline's own time (median and range) heads each graph's table. Each graph's shared context (edge
indexes, diagnosis) is built by a first rendering of every view before the timed rounds.

    python3 benchmarks/compact_tokens.py [--sample PATH] [--live-seconds 3] [--entities 100000] [--rounds 5]

Prints Markdown tables (paste them into BENCHMARKS.md with the date and the machine).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from witty_profiler.converters import LAYER_VIEWS, count_tokens, render_view  # noqa: E402
from witty_profiler.diagnosis import diagnose  # noqa: E402
from witty_profiler.topology import dumps_graph, load_graph  # noqa: E402

from benchmarks.synthetic import synthetic_graph  # noqa: E402
from benchmarks.timing import load, machine, ratios  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "witty-profiler-vllm-8npu.json"


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def measure(name: str, graph, raw_text: str | None, rounds: int) -> list[str]:
    v1_tokens = count_tokens(dumps_graph(graph))
    raw_tokens = count_tokens(raw_text) if raw_text is not None else None
    base = raw_tokens or v1_tokens
    base_name = "raw" if raw_tokens else "v1"
    diagnosis = diagnose(graph)  # once, outside the timings, as the CLI and the MCP server reuse it
    budgets = (None, 1000, 4000, 16000)
    tokens, fns = {}, {}
    for layer in LAYER_VIEWS:
        for budget in budgets:
            def render(layer=layer, budget=budget):
                return render_view(graph, layer, budget, diagnosis=diagnosis)
            tokens[layer, budget] = render().tokens  # also builds the graph's shared context
            fns[layer, budget] = render
    timed = ratios(fns, lambda: dumps_graph(graph), rounds, clock=time.process_time, warmup=0)
    baseline = next(iter(timed.values())).base_text()
    rows = [f"### {name}: {graph.entity_count()} entities, {graph.edge_count()} edges", "",
            f"Baseline: `dumps_graph` of the graph, {baseline} of CPU; times are CPU time / baseline, median "
            f"(min-max) of {rounds} interleaved rounds.", "",
            f"| representation | tokens | % of {base_name} JSON | render / baseline |", "|---|---:|---:|---:|"]
    if raw_tokens:
        rows.append(f"| raw legacy JSON | {raw_tokens:,} | 100.0 | - |")
    rows.append(f"| v1 JSON (lossless, normalised) | {v1_tokens:,} | {100 * v1_tokens / base:.1f} | 1 (baseline) |")
    for layer in LAYER_VIEWS:
        rows.append(f"| view `{layer}` | {tokens[layer, None]:,} | {100 * tokens[layer, None] / base:.2f} | "
                    f"{timed[layer, None].text(rounds=False)} |")
    rows += ["", "| view | 1k budget: tokens, render / baseline | 4k | 16k |", "|---|---|---|---|"]
    for layer in LAYER_VIEWS:
        cells = [f"{tokens[layer, b]:,}, {timed[layer, b].text(rounds=False)}" for b in budgets[1:]]
        rows.append(f"| `{layer}` | " + " | ".join(cells) + " |")
    return rows + [""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sample", type=Path, default=SAMPLE, help="legacy witty-profiler graph JSON")
    parser.add_argument("--live-seconds", type=float, default=3.0, help="0 skips the live window")
    parser.add_argument("--entities", type=int, default=100_000, help="size of the generated graph")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the baseline and the views")
    args = parser.parse_args()
    print(f"{machine()}\n")
    if args.sample.exists():
        (graph, seconds) = _timed(lambda: load_graph(args.sample))
        print("\n".join(measure(f"real legacy sample ({args.sample.name})", graph, args.sample.read_text(),
                                args.rounds)))
    if args.live_seconds > 0:
        from witty_profiler.collectors.engine import run_window
        graph = run_window(duration_s=args.live_seconds, interval_s=1.0)
        print("\n".join(measure(f"live window of this host ({args.live_seconds:g} s)", graph, None, args.rounds)))
    graph = synthetic_graph(args.entities)
    print("\n".join(measure("generated graph (benchmarks/synthetic.py)", graph, None, args.rounds)))
    print(f"load average at the end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
