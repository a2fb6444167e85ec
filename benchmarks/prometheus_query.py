"""What reading a past window from Prometheus costs: requests, bytes, time and peak memory.

Starts the test stack (tests/prometheus_stack.py: three node_exporters in network namespaces and a
Prometheus scraping them every second; needs root), lets it record, then reads windows of a few
sizes at a 1 s step, each in a fresh process so that its peak RSS is its own. Or, with --url, reads
an existing Prometheus (then --match should select node_exporter jobs).

The baseline, in the same run: the same HTTP requests (recorded from a first, untimed reading of each
window) fetched with urllib and decoded whole by json.loads, nothing built: what getting the answers
costs at all. The source and the baseline run --rounds times each, interleaved (the order reversed every
other round), each in a fresh process; a figure is the median of the per-round ratios of wall time and
peak RSS to the baseline's, with their range, beside the baseline's own figures.

Many hosts (500 x 1 h at 15 s, a real Prometheus backfilled with generated series) are measured by
benchmarks/prometheus_scale.py.
Usage: python benchmarks/prometheus_query.py [--windows 10,30,60] [--rounds 5] [--url URL --match SEL]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.timing import Ratio, load, machine  # noqa: E402

CHILD = """
import json, resource, sys, time, urllib.request
url, start, end, step, match, how, urls = sys.argv[1:8]
start, end, step = float(start), float(end), float(step)
from witty_profiler.sources.prometheus import collect_window  # imported before the clock starts, in both
out = {}
began = time.perf_counter()
if how == "raw":  # the recorded requests, each fetched and decoded whole
    size = 0
    for u in json.load(open(urls)):
        with urllib.request.urlopen(urllib.request.Request(u, headers={"Accept": "application/json"}),
                                    timeout=60) as r:
            body = r.read()
        size += len(body)
        json.loads(body)
    out = {"bytes": size}
else:
    seen = []
    if how == "record":
        plain = urllib.request.OpenerDirector.open
        def opened(self, request, *args, **kwargs):
            seen.append(request.full_url if hasattr(request, "full_url") else request)
            return plain(self, request, *args, **kwargs)
        urllib.request.OpenerDirector.open = opened
    w = collect_window(url, start, end, step=step, match=match or None)
    if how == "record":
        json.dump(seen, open(urls, "w"))
    g = w.graph
    kinds = {k: len(g.entities(k)) for k in ("host", "cpu", "nic", "block_device")}
    out = {"requests": w.requests, "bytes": w.bytes, "http_s": w.seconds, "series": w.series,
           "points": w.points, "entities": kinds}
out.update(wall_s=time.perf_counter() - began,
           peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps(out))
"""


def child(url: str, start: float, end: float, step: float, match: str, how: str, urls: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, url, str(start), str(end), str(step), match, how, str(urls)],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout)


def measure(url: str, windows: list[int], step: float, match: str, rounds: int) -> list[dict]:
    rows = []
    end = float(int(time.time()) - 2)
    with tempfile.TemporaryDirectory() as tmp:
        for size in windows:
            urls = Path(tmp) / f"urls-{size}.json"
            first = child(url, end - size, end, step, match, "record", urls)
            runs: dict[str, list[dict]] = {"source": [], "raw": []}
            for r in range(rounds):
                for how in ("source", "raw") if r % 2 == 0 else ("raw", "source"):
                    runs[how].append(child(url, end - size, end, step, match, how, urls))
            wall = Ratio([x["wall_s"] for x in runs["source"]], [x["wall_s"] for x in runs["raw"]])
            rss = Ratio([x["peak_rss_mib"] for x in runs["source"]], [x["peak_rss_mib"] for x in runs["raw"]])
            rows.append({"window_s": size, "step_s": step, **{k: first[k] for k in ("requests", "series", "points",
                                                                                    "bytes", "entities")},
                         "raw_wall": wall.base_text(), "raw_peak_rss": rss.base_text(1, "MiB"),
                         "wall_over_raw": wall.text(), "peak_rss_over_raw": rss.text()})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", default="10,30,60")
    parser.add_argument("--step", type=float, default=1.0)
    parser.add_argument("--url")
    parser.add_argument("--match", default='{job="node"}')
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the source and the baseline")
    args = parser.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    print(machine())
    if args.url:
        rows = measure(args.url, windows, args.step, args.match, args.rounds)
    else:
        from tests.prometheus_stack import PrometheusStack, missing
        why = missing()
        if why:
            sys.exit(f"cannot start the stack: {why}")
        stack = PrometheusStack(Path(tempfile.mkdtemp(prefix="prom-bench-")))
        try:
            stack.start()
            time.sleep(max(windows) + 4)
            rows = measure(stack.url, windows, args.step, args.match, args.rounds)
        finally:
            stack.stop()
    for row in rows:
        print(json.dumps(row))
    print(f"load average at the end: {load()}")


if __name__ == "__main__":
    main()
