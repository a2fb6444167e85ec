"""Reading a large Kineto trace: read_kineto against json.load of the same file, time and peak memory.

Builds a trace of about --mb MB (uncompressed JSON, written gzipped into a temporary folder) by
repeating the events of a real trace (default: ../shared/fixtures/traces/kineto/nccl_2rank_rank0.json.gz)
with their timestamps shifted past the previous copy and their ProfilerStep#N renumbered, then reads it
in a fresh process each way, --rounds times, the order reversed every other round, and reports each
round's ratio of wall time and of peak RSS (ru_maxrss) to json.load's (the baseline), median and range,
beside the baseline's own figures:

    python3 benchmarks/trace_scale.py [--source TRACE] [--mb 500] [--rounds 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import Ratio, load, machine  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO.parent / "shared" / "fixtures" / "traces" / "kineto" / "nccl_2rank_rank0.json.gz"

CHILD = r"""
import gzip, json, resource, sys, time
from pathlib import Path
how, path = sys.argv[1], Path(sys.argv[2])
began = time.perf_counter()
if how == "json":
    doc = json.load(gzip.open(path, "rt", encoding="utf-8"))
    what = f"{len(doc['traceEvents'])} events"
else:
    from witty_profiler.traces.kineto import read_kineto
    graph = read_kineto(path, "trace:bench")
    (rank,) = graph.entities("rank")
    what = f"{rank.metrics['steps']} steps, {len(graph.entities('collective'))} collectives"
took = time.perf_counter() - began
print(json.dumps({"s": took, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "what": what}))
"""


def build(source: Path, target: Path, mb: float) -> tuple[int, int, int]:
    """Write the repeated trace; returns (copies, events, uncompressed bytes)."""
    doc = json.load(gzip.open(source, "rt", encoding="utf-8"))
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    lo = min(e["ts"] for e in timed)
    span = max(e["ts"] + (e.get("dur") or 0) for e in timed) - lo + 1000.0
    steps = sorted({int(e["name"].split("#")[1]) for e in events
                    if str(e.get("name", "")).startswith("ProfilerStep#")})
    stride = (max(steps) - min(steps) + 1) if steps else 0
    one = sum(len(json.dumps(e)) + 2 for e in events)
    copies = max(1, round(mb * 1e6 / one))
    written = 0
    with gzip.open(target, "wt", encoding="utf-8", compresslevel=1) as out:
        head = json.dumps(doc)[:-1]  # the other members first, then the events
        out.write(head + ', "traceEvents": [\n')
        written += len(head) + 20
        first = True
        for k in range(copies):
            for e in events:
                if k:
                    e = dict(e)
                    if isinstance(e.get("ts"), (int, float)):
                        e["ts"] = e["ts"] + k * span
                    name = e.get("name")
                    if isinstance(name, str) and name.startswith("ProfilerStep#"):
                        e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + k * stride}"
                line = ("" if first else ",\n") + json.dumps(e)
                first = False
                out.write(line)
                written += len(line)
        out.write("\n]}\n")
    return copies, copies * len(events), written


def measure(how: str, path: Path) -> dict:
    run = subprocess.run([sys.executable, "-c", CHILD, how, str(path)], capture_output=True, text=True,
                         cwd=REPO, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT)
    parser.add_argument("--mb", type=float, default=500.0, help="uncompressed size to build, MB (1e6 bytes)")
    parser.add_argument("--keep", type=Path, help="write the trace here (default: a temporary folder, removed)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the two readers")
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        path = folder / "big_rank0.json.gz"
        copies, events, size = build(args.source, path, args.mb)
        print(f"trace: {copies} copies of {args.source.name}: {events:,} events, {size / 1e6:,.0f} MB JSON, "
              f"{path.stat().st_size / 1e6:,.0f} MB gzipped")
        runs: dict[str, list[dict]] = {"kineto": [], "json": []}
        for r in range(args.rounds):
            for how in ("kineto", "json") if r % 2 == 0 else ("json", "kineto"):
                runs[how].append(measure(how, path))
        ours, theirs = runs["kineto"], runs["json"]
        took = Ratio([o["s"] for o in ours], [t["s"] for t in theirs])
        rss = Ratio([o["rss_mib"] for o in ours], [t["rss_mib"] for t in theirs])
        print(f"read_kineto: {ours[0]['what']}; json.load: {theirs[0]['what']}")
        print(f"json.load (baseline): {took.base_text(1, 's', 2)}, peak RSS {rss.base_text(1, 'MiB', 0)}")
        print(f"read_kineto / json.load: time {took.text()}, peak RSS {rss.text()} "
              f"(read_kineto {took.time_text(1, 's', 2)}, {rss.time_text(1, 'MiB', 0)})")
        print(f"load average at the end: {load()}")

if __name__ == "__main__":
    main()
