"""Tokens per representation of the same graph, and how long the conversion takes.

For each graph (the real legacy sample, a live window of this host, the generated 100k-entity
graph): cl100k_base tokens of the raw legacy JSON (where there is one), of the native v1 JSON,
and of every view unbounded, with its share of the v1 JSON (or of the raw file) and the time to
render it; then the time to render each view under 1k/4k/16k budgets.

    python3 benchmarks/compact_tokens.py [--sample PATH] [--live-seconds 3] [--entities 100000]

Prints Markdown tables (paste them into BENCHMARKS.md with the date and the machine).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from witty_profiler.converters import LAYER_VIEWS, count_tokens, render_view  # noqa: E402
from witty_profiler.diagnosis import diagnose  # noqa: E402
from witty_profiler.topology import dumps_graph, load_graph  # noqa: E402

from benchmarks.synthetic import synthetic_graph  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "witty-profiler-vllm-8npu.json"


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def measure(name: str, graph, raw_text: str | None) -> list[str]:
    v1, _ = _timed(lambda: dumps_graph(graph))
    v1_tokens = count_tokens(v1)
    raw_tokens = count_tokens(raw_text) if raw_text is not None else None
    base = raw_tokens or v1_tokens
    base_name = "raw" if raw_tokens else "v1"
    rows = [f"### {name}: {graph.entity_count()} entities, {graph.edge_count()} edges", "",
            f"| representation | tokens | % of {base_name} JSON | render s |", "|---|---:|---:|---:|"]
    if raw_tokens:
        rows.append(f"| raw legacy JSON | {raw_tokens:,} | 100.0 | - |")
    rows.append(f"| v1 JSON (lossless, normalised) | {v1_tokens:,} | {100 * v1_tokens / base:.1f} | - |")
    diagnosis = diagnose(graph)  # once, outside the timings, as the CLI and the MCP server reuse it
    for layer in LAYER_VIEWS:
        view, seconds = _timed(lambda: render_view(graph, layer, diagnosis=diagnosis))
        rows.append(f"| view `{layer}` | {view.tokens:,} | {100 * view.tokens / base:.2f} | {seconds:.2f} |")
    rows += ["", "| view | 1k budget: tokens / s | 4k | 16k |", "|---|---|---|---|"]
    for layer in LAYER_VIEWS:
        cells = []
        for budget in (1000, 4000, 16000):
            view, seconds = _timed(lambda: render_view(graph, layer, budget, diagnosis=diagnosis))
            cells.append(f"{view.tokens} / {seconds:.2f}")
        rows.append(f"| `{layer}` | " + " | ".join(cells) + " |")
    return rows + [""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sample", type=Path, default=SAMPLE, help="legacy witty-profiler graph JSON")
    parser.add_argument("--live-seconds", type=float, default=3.0, help="0 skips the live window")
    parser.add_argument("--entities", type=int, default=100_000, help="size of the generated graph")
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · {platform.node()} · {platform.machine()} · "
          f"Python {platform.python_version()}\n")
    if args.sample.exists():
        (graph, seconds) = _timed(lambda: load_graph(args.sample))
        print("\n".join(measure(f"real legacy sample ({args.sample.name}, loaded in {seconds:.2f} s)", graph,
                                args.sample.read_text())))
    if args.live_seconds > 0:
        from witty_profiler.collectors.engine import run_window
        graph = run_window(duration_s=args.live_seconds, interval_s=1.0)
        print("\n".join(measure(f"live window of this host ({args.live_seconds:g} s)", graph, None)))
    (graph, seconds) = _timed(lambda: synthetic_graph(args.entities))
    print("\n".join(measure(f"generated graph (built in {seconds:.1f} s)", graph, None)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
