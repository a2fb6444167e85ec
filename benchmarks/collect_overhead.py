"""Overhead of the process collector on a crowded host.

Starts 500 extra processes with 4 threads each (forked from one parent, so they share memory
copy-on-write and the benchmark stays light), then measures in the same run:

1. one `sample()` of the process collector against a minimal raw reader of the same files
   (listdir /proc, /proc/PID/stat of the processes it read, and io plus the stat + schedstat of
   each thread of the processes in scope), alternating the two so that both see the same load: once for a
   sample that reads every process, once for the steady state where idle processes are read
   every 5th sample (target: collector <= 1.5x the raw reader);
2. the CPU time (user + system, kernel reads included) of a whole window at the default
   interval (target: <= 2 % of one core over 30 s);
3. with --cli, `witty-profiler collect --duration WINDOW` as a user runs it (a new process, every
   collector): its CPU time against what its collectors report as their own, so the share spent
   outside them (start-up, imports, merging, writing the graph) shows;
4. with --versus-node-exporter ROUNDS, a one-shot `witty-profiler collect --duration WINDOW` (every
   collector, then without eBPF) against prometheus-node-exporter started for the same window and
   scraped by curl every second (no per-process data: the floor of a host agent), in interleaved
   rounds: the CPU time of each whole process tree (start-up, the window, writing), per round, and
   the ratio of each collect to the exporter's in the same round, median and range.

Usage: python3 benchmarks/collect_overhead.py [--procs 500] [--threads 4] [--window 30] [--samples 15] [--cli]
       python3 benchmarks/collect_overhead.py --procs 300 --threads 7 --versus-node-exporter 5
Prints one JSON object; BENCHMARKS.md records the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from witty_profiler.collectors.base import Context  # noqa: E402
from witty_profiler.collectors.engine import discover, run_window  # noqa: E402
from witty_profiler.collectors.process import ProcessCollector  # noqa: E402
from witty_profiler.topology.gcpause import gc_paused  # noqa: E402

from timing import Ratio, interleaved, machine  # noqa: E402


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


def raw_sample(pids: list[int], scope: list[int]) -> None:
    """The same files as one collector sample, read and thrown away: the /proc listing, the stat
    of the given processes, and for the processes in scope their io and the stat + schedstat of
    each of their threads."""
    os.listdir("/proc")
    for pid in pids:
        _read(f"/proc/{pid}/stat")
    for pid in scope:
        _read(f"/proc/{pid}/io")
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
    """Two comparisons, interleaved so that both sides see the same load: a sample that reads
    every process (as the last one of a window does) against a raw read of every process, and
    the steady-state sample (idle processes read every 5th time) against a raw read of exactly
    the processes that sample read."""
    collector = ProcessCollector(Context())
    collector.start()
    for _ in range(4):  # settle the scope (top consumers) and the idle streaks
        collector.sample()
    full, raw_full, steady, raw_steady, read_counts = [], [], [], [], []

    def scope_now() -> list[int]:
        """The processes whose threads the collector has just read (the scope grows when a
        process of the host becomes a top CPU consumer): the raw reader reads the same."""
        return [pid for pid, p in collector.procs.items() if p.in_scope and not p.gone]

    def full_sample() -> None:
        with gc_paused():
            collector._sample(everything=True)

    for _ in range(samples):
        everyone = [int(n) for n in os.listdir("/proc") if n.isdigit()]
        full.append(timed(full_sample))
        scope = scope_now()
        raw_full.append(timed(lambda: raw_sample(everyone, scope)))
        steady.append(timed(collector.sample))
        scope = scope_now()
        latest = max(p.times[-1] for p in collector.procs.values() if p.times)
        read_now = [pid for pid, p in collector.procs.items() if p.times and p.times[-1] == latest]
        read_counts.append(len(read_now))
        raw_steady.append(timed(lambda: raw_sample(read_now, scope)))
    med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
    scope = scope_now()
    tasks = sum(len(p.threads) for p in collector.procs.values() if p.in_scope)
    return {"processes": len(collector.procs), "scope_processes": len(scope), "scope_threads": tasks,
            "full_sample_cpu_ms": round(med(full, 1) * 1e3, 2), "raw_full_cpu_ms": round(med(raw_full, 1) * 1e3, 2),
            "full_ratio_cpu": round(med(full, 1) / med(raw_full, 1), 2),
            "full_ratio_wall": round(med(full, 0) / med(raw_full, 0), 2),
            "steady_sample_cpu_ms": round(med(steady, 1) * 1e3, 2),
            "steady_processes_read": int(statistics.median(read_counts)),
            "raw_steady_cpu_ms": round(med(raw_steady, 1) * 1e3, 2),
            "steady_ratio_cpu": round(med(steady, 1) / med(raw_steady, 1), 2),
            "steady_ratio_wall": round(med(steady, 0) / med(raw_steady, 0), 2)}


def _phase_timer(phases: dict[str, float]):
    """Wrap ProcessCollector's phases to split its CPU time into start, samples and finish."""
    originals = {name: getattr(ProcessCollector, name) for name in ("start", "sample", "finish")}

    def wrap(name, fn):
        def timed_phase(self):
            t = time.thread_time()
            try:
                return fn(self)
            finally:
                phases[name] = phases.get(name, 0.0) + time.thread_time() - t
        return timed_phase

    for name, fn in originals.items():
        setattr(ProcessCollector, name, wrap(name, fn))
    return lambda: [setattr(ProcessCollector, n, f) for n, f in originals.items()]


def window_cost(seconds: float, collectors: list[str] | None) -> dict:
    discover()  # module imports are a one-off, not the window's cost
    phases: dict[str, float] = {}
    restore = _phase_timer(phases)
    before = os.times()
    t = time.perf_counter()
    try:
        graph = run_window(seconds, 1.0, collectors=collectors)
    finally:
        restore()
    wall = time.perf_counter() - t
    after = os.times()
    cpu = (after.user - before.user) + (after.system - before.system)
    own = sum(c.extra.get("cpu_s", 0) for c in graph.meta.collectors.values())
    return {"collectors": collectors or "all", "window_s": round(wall, 2),
            "collectors_cpu_s": round(own, 3), "collectors_cpu_pct_of_one_core": round(own / wall * 100, 2),
            "process_cpu_s": round(cpu, 3), "process_cpu_pct_of_one_core": round(cpu / wall * 100, 2),
            "entities": graph.entity_count(), "edges": graph.edge_count(),
            "per_collector_cpu_s": {n: c.extra.get("cpu_s") for n, c in graph.meta.collectors.items()},
            "process_phases_cpu_s": {n: round(v, 3) for n, v in phases.items()},
            "statuses": {n: c.status for n, c in graph.meta.collectors.items()}}


def cli_cost(seconds: float) -> dict:
    """`witty-profiler collect` in a process of its own: its CPU time and its collectors' own."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "graph.json"
        before = os.times()
        subprocess.run([sys.executable, "-m", "witty_profiler", "collect", "--duration", str(seconds), "-q", "-o",
                        str(out)], check=True, cwd=tmp)
        after = os.times()
        cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
        collectors = json.loads(out.read_text())["meta"]["collectors"]
    own = sum(c.get("cpu_s", 0) for c in collectors.values())
    return {"window_s": seconds, "process_cpu_s": round(cpu, 3), "collectors_cpu_s": round(own, 3),
            "outside_collectors_pct": round(100 * (cpu - own) / cpu, 1) if cpu else None}


NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"


def children_cpu() -> float:
    """CPU seconds of the waited-for children of this process and their own waited-for children."""
    t = os.times()
    return t.children_user + t.children_system


def collect_once(seconds: float, extra: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "witty_profiler", "collect", "--duration", str(seconds), "-q", "-o",
                        str(Path(tmp) / "graph.json"), *extra], check=True, cwd=tmp)


def exporter_once(seconds: float) -> None:
    """node_exporter up for `seconds`, scraped every second by a new curl, as a 1 s scraper would."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/metrics"
    exporter = subprocess.Popen([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        start = time.monotonic()
        while subprocess.run(["curl", "-sf", "-o", "/dev/null", url]).returncode != 0:  # up yet?
            if time.monotonic() - start > 10:
                raise RuntimeError("node_exporter did not answer within 10 s")
            time.sleep(0.05)
        for i in range(1, int(seconds)):
            time.sleep(max(0.0, start + i - time.monotonic()))
            subprocess.run(["curl", "-sf", "-o", "/dev/null", url], check=True)
    finally:
        exporter.terminate()
        exporter.wait()


def versus_exporter(seconds: float, rounds: int) -> dict:
    """One-shot collects against node_exporter + a 1 s scraper: CPU of each tree, interleaved rounds.
    The package's bytecode is written first, as an install writes it: where PYTHONDONTWRITEBYTECODE
    is set and a module's bytecode is stale, every collect would compile it again."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-x", r"\.venv|\.git|tests|benchmarks",
                    str(Path(__file__).resolve().parents[1])], check=True)
    times = interleaved({"exporter": lambda: exporter_once(seconds),
                         "collect": lambda: collect_once(seconds, []),
                         "collect -ebpf": lambda: collect_once(seconds, ["--collectors=-ebpf"])},
                        rounds, clock=children_cpu, warmup=1)  # the warm-up compiles the eBPF program once
    base = times.pop("exporter")
    out = {"window_s": seconds, "rounds": rounds, "machine": machine(),
           "exporter_cpu_s": [round(t, 3) for t in base],
           "exporter_pct_of_one_core": round(statistics.median(base) / seconds * 100, 2)}
    for name, t in times.items():
        r = Ratio(t, base)
        out[name] = {"cpu_s": [round(x, 3) for x in t], "pct_of_one_core": round(statistics.median(t) / seconds * 100, 2),
                     "ratio_to_exporter": r.text()}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--procs", type=int, default=500)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--all-collectors", action="store_true", help="also time a window of every collector")
    ap.add_argument("--cli", action="store_true", help="also time `witty-profiler collect` in a process of its own")
    ap.add_argument("--versus-node-exporter", type=int, metavar="ROUNDS",
                    help="only: one-shot collects against node_exporter + curl every 1 s, this many rounds")
    args = ap.parse_args()
    crowd = start_crowd(args.procs, args.threads)
    if args.versus_node_exporter:
        try:
            time.sleep(1.0)
            result = {"extra_processes": args.procs, "threads_each": args.threads,
                      "tasks_on_host": sum(1 for _ in Path("/proc").glob("[0-9]*/task/[0-9]*")),
                      **versus_exporter(args.window, args.versus_node_exporter)}
        finally:
            stop_crowd(crowd)
        print(json.dumps(result, indent=2))
        return 0
    try:
        time.sleep(1.0)
        result = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "machine": {
            "cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
            "tasks_on_host": sum(1 for _ in Path("/proc").glob("[0-9]*/task/[0-9]*"))},
            "extra_processes": args.procs, "threads_each": args.threads,
            "sample": sample_cost(args.samples),
            "window": window_cost(args.window, ["process"])}
        # what the raw reads of the window's samples alone cost, at this run's per-sample price
        samples = int(args.window)  # default interval: 1 s
        result["window"]["raw_reads_of_its_samples_pct_of_one_core"] = round(
            samples * result["sample"]["raw_steady_cpu_ms"] / 1e3 / result["window"]["window_s"] * 100, 2)
        if args.all_collectors:
            result["window_all"] = window_cost(args.window, None)
        if args.cli:
            result["cli"] = cli_cost(args.window)
    finally:
        stop_crowd(crowd)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
