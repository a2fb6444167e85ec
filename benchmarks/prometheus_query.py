"""What reading a past window from Prometheus costs: requests, bytes, time and peak memory.

Starts the test stack (tests/prometheus_stack.py: three node_exporters in network namespaces and a
Prometheus scraping them every second; needs root), lets it record, then reads windows of a few
sizes at a 1 s step, each in a fresh process so that its peak RSS is its own. Or, with --url, reads
an existing Prometheus (then --match should select node_exporter jobs).

Many hosts (500 x 1 h at 15 s, a real Prometheus backfilled with generated series) are measured by
benchmarks/prometheus_scale.py.
Usage: python benchmarks/prometheus_query.py [--windows 10,30,60] [--url URL --match SEL]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = """
import json, resource, sys, time
from witty_profiler.sources.prometheus import collect_window
url, start, end, step, match = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
began = time.perf_counter()
w = collect_window(url, start, end, step=step, match=match or None)
g = w.graph
kinds = {k: len(g.entities(k)) for k in ("host", "cpu", "nic", "block_device")}
print(json.dumps({"requests": w.requests, "bytes": w.bytes, "http_s": w.seconds, "series": w.series,
                  "points": w.points, "wall_s": round(time.perf_counter() - began, 3), "entities": kinds,
                  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
"""


def measure(url: str, windows: list[int], step: float, match: str) -> list[dict]:
    rows = []
    end = float(int(time.time()) - 2)
    for size in windows:
        done = subprocess.run([sys.executable, "-c", CHILD, url, str(end - size), str(end), str(step), match],
                              capture_output=True, text=True, check=True, cwd=ROOT)
        rows.append({"window_s": size, "step_s": step, **json.loads(done.stdout)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", default="10,30,60")
    parser.add_argument("--step", type=float, default=1.0)
    parser.add_argument("--url")
    parser.add_argument("--match", default='{job="node"}')
    args = parser.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    print(f"# {platform.node()} {platform.machine()} Python {platform.python_version()}", file=sys.stderr)
    if args.url:
        rows = measure(args.url, windows, args.step, args.match)
    else:
        from tests.prometheus_stack import PrometheusStack, missing
        why = missing()
        if why:
            sys.exit(f"cannot start the stack: {why}")
        stack = PrometheusStack(Path(tempfile.mkdtemp(prefix="prom-bench-")))
        try:
            stack.start()
            time.sleep(max(windows) + 4)
            rows = measure(stack.url, windows, args.step, args.match)
        finally:
            stack.stop()
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
