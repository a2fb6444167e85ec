"""What the HTML report costs next to the diagnosis it shows, on large graphs.

For each size, a synthetic GPU training host (benchmarks/synthetic.py: 8 NUMA nodes x 32 CPUs,
8 GPUs, a torchrun job with loaders, a crowd of other processes with threads) is diagnosed, then
written as the Markdown report and as the HTML page (`witty_profiler.app.htmlreport.render_html`).
Each figure is the median wall clock of `--repeat` runs, each on a graph built afresh (a graph keeps
its diagnosis and query indexes), with the page's size in KiB and the page's time as a multiple of
the diagnosis's (the baseline, measured in the same run). The diagnosis runs first, as it does in
`diagnose --format html`, so the page finds the graph's query indexes built.

    python3 benchmarks/html_report.py [--sizes 10000,100000,300000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.synthetic import synthetic_graph  # noqa: E402
from witty_profiler.diagnosis import diagnose  # noqa: E402
from witty_profiler.diagnosis.report import report  # noqa: E402
from witty_profiler.app.htmlreport import render_html  # noqa: E402


def _timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    result = fn()
    return time.perf_counter() - t, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,300000")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{platform.machine()}, Python {platform.python_version()}, {args.repeat} runs each")
    print("| entities | processes | diagnose (baseline) | Markdown report | HTML page | page size |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        runs = []
        for _ in range(args.repeat):
            graph = synthetic_graph(size)  # a fresh graph each run: nothing cached from the last one
            diagnosis_s, diagnosis = _timed(lambda: diagnose(graph))
            markdown_s, _ = _timed(lambda: report(diagnosis, graph, "md"))
            html_s, page = _timed(lambda: render_html(graph, diagnosis))
            runs.append((diagnosis_s, markdown_s, html_s))
        diagnosis_s, markdown_s, html_s = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"| {graph.entity_count():,} | {len(graph.entities('process')):,} | {diagnosis_s * 1000:,.0f} ms "
              f"| {markdown_s * 1000:,.1f} ms, {markdown_s / diagnosis_s:.3f}x | {html_s * 1000:,.0f} ms, "
              f"{html_s / diagnosis_s:.2f}x | {len(page.encode()) / 1024:,.0f} KiB |")

if __name__ == "__main__":
    main()
