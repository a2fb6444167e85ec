"""What the HTML report costs next to the diagnosis it shows, on large graphs.

For each size, a synthetic GPU training host (benchmarks/synthetic.py: 8 NUMA nodes x 32 CPUs,
8 GPUs, a torchrun job with loaders, a crowd of other processes with threads) is diagnosed, then
written as the Markdown report and as the HTML page (`witty_profiler.app.htmlreport.render_html`).
Each round builds a graph afresh (a graph keeps its diagnosis and query indexes) and times the
diagnosis (the baseline), the Markdown report and the page on it, one after the other; the report's and
the page's times are given as the median of their per-round ratios to that round's diagnosis, with the
range over the rounds, and the diagnosis's own wall clock (median and range) beside them. The
diagnosis runs first, as it does in `diagnose --format html`, so the page finds the graph's query
indexes built.

    python3 benchmarks/html_report.py [--sizes 10000,100000,300000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.synthetic import synthetic_graph  # noqa: E402
from benchmarks.timing import Ratio, load, machine  # noqa: E402
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
    print(f"{machine()}; {args.repeat} rounds each, wall clock")
    print("| entities | processes | diagnose (baseline) | Markdown report / diagnose | HTML page / diagnose | page size |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        runs = []
        for _ in range(args.repeat):
            graph = synthetic_graph(size)  # a fresh graph each run: nothing cached from the last one
            diagnosis_s, diagnosis = _timed(lambda: diagnose(graph))
            markdown_s, _ = _timed(lambda: report(diagnosis, graph, "md"))
            html_s, page = _timed(lambda: render_html(graph, diagnosis))
            runs.append((diagnosis_s, markdown_s, html_s))
        base = [r[0] for r in runs]
        markdown, html = Ratio([r[1] for r in runs], base), Ratio([r[2] for r in runs], base)
        print(f"| {graph.entity_count():,} | {len(graph.entities('process')):,} | {markdown.base_text(digits=0)} "
              f"| {markdown.text()} | {html.text()} | {len(page.encode()) / 1024:,.0f} KiB |")
    print(f"load average at the end: {load()}")


if __name__ == "__main__":
    main()
