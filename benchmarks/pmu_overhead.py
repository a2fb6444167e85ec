"""Cost of the PMU collector: opening, reading and closing its counter groups, and what counting
adds to the processes it counts.

A host without a hardware PMU (a guest without a virtual PMU) cannot open cycles or instructions,
so each hardware event is swapped for a software event the kernel counts in the same place (on the
task's context switches): the groups keep their shape (4 events in the core group, 3 in the stall
group, one of each per thread, with inherit) and the collector code that runs is the real one. A
PMU's own cost (reprogramming counters at each context switch, a few MSR writes) is not in these
figures; the per-syscall and per-group costs are.

Measured in one run:

1. the collector's `start()` (one perf_event_open per event, 7 per thread) and `finish()` (one read
   per group, then close) for N processes of T threads each: CPU time, and per group;
2. the workload's cost: two processes ping-ponging a byte over pipes (every round trip is two
   context switches, the worst case for per-task counters), round trips per second of their own CPU
   time with and without the collector's groups on them, alternating --rounds times so that both
   see the same load; and a compute loop the same way.

Usage: python3 benchmarks/pmu_overhead.py [--processes 1,16,64] [--threads 4] [--rounds 5] [--seconds 1]
Prints one JSON object; BENCHMARKS.md records the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from witty_profiler.collectors.base import Context  # noqa: E402
from witty_profiler.collectors.lib.perf_event import SoftwareStandIn  # noqa: E402
from witty_profiler.collectors.pmu import PmuCollector  # noqa: E402

SLEEPER = """
import sys, threading
for _ in range(int(sys.argv[1]) - 1):
    threading.Thread(target=threading.Event().wait, daemon=True).start()
sys.stdin.read()
"""
# one side of a pipe ping-pong: prints round trips per second of this process's CPU time
PING = """
import os, sys, time
r, w, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
n, end, cpu = 0, time.perf_counter() + seconds, time.process_time()
while time.perf_counter() < end:
    for _ in range(200):
        os.write(w, b"x"); os.read(r, 1)
    n += 200
os.write(w, b"q")
print(n / (time.process_time() - cpu))
"""
PONG = """
import os, sys
r, w = int(sys.argv[1]), int(sys.argv[2])
while os.read(r, 1) == b"x":
    os.write(w, b"x")
"""
SPIN = """
import sys, time
seconds, n = float(sys.argv[1]), 0
end, cpu = time.perf_counter() + seconds, time.process_time()
while time.perf_counter() < end:
    for i in range(10000):
        n += i
print(n / (time.process_time() - cpu))
"""


def collector_for(pids: list[int], stalls: bool = True) -> PmuCollector:
    ctx = Context(host="bench")
    ctx.cache["scope_pids"] = pids
    c = PmuCollector(ctx, perf=SoftwareStandIn())
    if not stalls:  # a CPU without stall events (most Intel cores): the core group alone
        c.stalls = False
    return c


def open_read_close(processes: int, threads: int) -> dict:
    children = [subprocess.Popen([sys.executable, "-c", SLEEPER, str(threads)], stdin=subprocess.PIPE)
                for _ in range(processes)]
    try:
        deadline = time.monotonic() + 30
        while any(len(os.listdir(f"/proc/{p.pid}/task")) < threads for p in children):  # every thread started
            assert time.monotonic() < deadline, "the sleepers did not start their threads"
            time.sleep(0.05)
        c = collector_for([p.pid for p in children])
        t = time.thread_time()
        c.start()
        opened = time.thread_time() - t
        groups = sum(len(g) for g in c.groups.values())
        fds = sum(len(grp.fds) for g in c.groups.values() for _, grp in g)
        t = time.thread_time()
        c.finish()
        finished = time.thread_time() - t
        assert c.status.status == "ok", c.status
    finally:
        for p in children:
            p.kill()
            p.wait()
    return {"processes": processes, "threads": processes * threads, "groups": groups, "fds": fds,
            "start_ms": round(opened * 1e3, 2), "finish_ms": round(finished * 1e3, 2),
            "us_per_group": round((opened + finished) * 1e6 / groups, 1)}


def ping_pong(seconds: float, counted: bool, stalls: bool = True) -> float:
    a_r, b_w = os.pipe()
    b_r, a_w = os.pipe()
    pong = subprocess.Popen([sys.executable, "-c", PONG, str(b_r), str(b_w)], pass_fds=(b_r, b_w))
    ping = subprocess.Popen([sys.executable, "-c", PING, str(a_r), str(a_w), str(seconds)], pass_fds=(a_r, a_w),
                            stdout=subprocess.PIPE, text=True)
    for fd in (a_r, b_w, b_r, a_w):
        os.close(fd)
    c = collector_for([ping.pid, pong.pid], stalls) if counted else None
    if c:
        c.start()
    out, _ = ping.communicate()
    pong.wait()
    if c:
        c.finish()
    return float(out)


def spin(seconds: float, counted: bool) -> float:
    child = subprocess.Popen([sys.executable, "-c", SPIN, str(seconds)], stdout=subprocess.PIPE, text=True)
    c = collector_for([child.pid]) if counted else None
    if c:
        c.start()
    out, _ = child.communicate()
    if c:
        c.finish()
    return float(out)


def alternate(fn, rounds: int, seconds: float) -> dict:
    without, with_ = [], []
    for _ in range(rounds):
        without.append(fn(seconds, False))
        with_.append(fn(seconds, True))
    base, counted = statistics.median(without), statistics.median(with_)
    return {"without_per_cpu_s": round(base), "with_per_cpu_s": round(counted), "ratio": round(counted / base, 3),
            "extra_cpu_us_per_op": round((1 / counted - 1 / base) * 1e6, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", default="1,16,64")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 64 processes x 4 threads x 7 events
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="minutes"),
        "machine": f"{os.cpu_count()}-CPU {platform.machine()}, kernel {platform.release()}, "
                   f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}",
        "open_read_close": [open_read_close(int(n), args.threads) for n in args.processes.split(",")],
        "pipe_ping_pong": alternate(ping_pong, args.rounds, args.seconds),
        "pipe_ping_pong_core_group_only": alternate(lambda s, c: ping_pong(s, c, stalls=False), args.rounds,
                                                    args.seconds),
        "compute_loop": alternate(spin, args.rounds, args.seconds),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
