"""Overhead of the process collector on a crowded host.

Starts 500 extra processes with 4 threads each (forked from one parent, so they share memory
copy-on-write and the benchmark stays light), then measures in the same run:

1. one steady-state `sample()` of the process collector against a minimal raw reader of the same
   files (listdir /proc, every /proc/PID/stat, and stat + schedstat of each thread of the
   processes in scope), alternating the two so that both see the same load
   (target: collector <= 1.5x the raw reader);
2. the CPU time (user + system, kernel reads included) of a whole window at the default
   interval (target: <= 2 % of one core over 30 s).

Usage: python3 benchmarks/collect_overhead.py [--procs 500] [--threads 4] [--window 30] [--samples 15]
Prints one JSON object; BENCHMARKS.md records the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.base import Context  # noqa: E402
from collectors.engine import discover, run_window  # noqa: E402
from collectors.process import ProcessCollector  # noqa: E402


def start_crowd(procs: int, threads: int) -> int:
    """Fork a parent that forks `procs` children, each with `threads` threads in all; returns the parent's pid."""
    ready_r, ready_w = os.pipe()
    parent = os.fork()
    if parent:
        os.close(ready_w)
        os.read(ready_r, 1)  # the crowd is up
        os.close(ready_r)
        return parent
    os.close(ready_r)
    os.setsid()
    for _ in range(procs):
        if os.fork() == 0:
            for _ in range(threads - 1):
                threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
            time.sleep(3600)
            os._exit(0)
    os.write(ready_w, b"x")
    signal.pause()
    os._exit(0)


def stop_crowd(parent: int) -> None:
    os.killpg(parent, signal.SIGKILL)  # the crowd is its own session and process group
    os.waitpid(parent, 0)


def _read(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.read(fd, 65536)
    except OSError:
        pass
    finally:
        os.close(fd)


def raw_sample(scope: list[int]) -> None:
    """The same files as one collector sample, read and thrown away."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            _read(f"/proc/{name}/stat")
    for pid in scope:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            _read(f"/proc/{pid}/task/{tid}/stat")
            _read(f"/proc/{pid}/task/{tid}/schedstat")


def timed(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def sample_cost(samples: int) -> dict:
    collector = ProcessCollector(Context())
    collector.start()
    collector.sample()  # the first sample settles the scope (top consumers join)
    scope = [pid for pid, p in collector.procs.items() if p.in_scope]
    ours, raw = [], []
    for _ in range(samples):
        ours.append(timed(collector.sample))
        raw.append(timed(lambda: raw_sample(scope)))
    tasks = sum(len(p.threads) for p in collector.procs.values() if p.in_scope)
    med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
    return {"processes": len(collector.procs), "scope_processes": len(scope), "scope_threads": tasks,
            "collector_sample_ms": round(med(ours, 0) * 1e3, 2), "raw_sample_ms": round(med(raw, 0) * 1e3, 2),
            "collector_sample_cpu_ms": round(med(ours, 1) * 1e3, 2), "raw_sample_cpu_ms": round(med(raw, 1) * 1e3, 2),
            "ratio_wall": round(med(ours, 0) / med(raw, 0), 2), "ratio_cpu": round(med(ours, 1) / med(raw, 1), 2)}


def window_cost(seconds: float, collectors: list[str] | None) -> dict:
    discover()  # module imports are a one-off, not the window's cost
    before = os.times()
    t = time.perf_counter()
    graph = run_window(seconds, 1.0, collectors=collectors)
    wall = time.perf_counter() - t
    after = os.times()
    cpu = (after.user - before.user) + (after.system - before.system)
    own = sum(c.model_extra.get("cpu_s", 0) for c in graph.meta.collectors.values())
    return {"collectors": collectors or "all", "window_s": round(wall, 2),
            "collectors_cpu_s": round(own, 3), "collectors_cpu_pct_of_one_core": round(own / wall * 100, 2),
            "process_cpu_s": round(cpu, 3), "process_cpu_pct_of_one_core": round(cpu / wall * 100, 2),
            "entities": graph.entity_count(), "edges": graph.edge_count(),
            "per_collector_cpu_s": {n: c.model_extra.get("cpu_s") for n, c in graph.meta.collectors.items()},
            "statuses": {n: c.status for n, c in graph.meta.collectors.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--procs", type=int, default=500)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--all-collectors", action="store_true", help="also time a window of every collector")
    args = ap.parse_args()
    crowd = start_crowd(args.procs, args.threads)
    try:
        time.sleep(1.0)
        result = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "machine": {
            "cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
            "tasks_on_host": sum(1 for _ in Path("/proc").glob("[0-9]*/task/[0-9]*"))},
            "extra_processes": args.procs, "threads_each": args.threads,
            "sample": sample_cost(args.samples),
            "window": window_cost(args.window, ["process"])}
        if args.all_collectors:
            result["window_all"] = window_cost(args.window, None)
    finally:
        stop_crowd(crowd)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
