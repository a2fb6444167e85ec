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
   per group, then close) for N processes of T threads each, against its baseline: the same
   perf_event_open, read and close syscalls replayed bare (as the collector made them, recorded), in
   --rounds interleaved rounds of CPU time; the ratio's median and range, the baseline's own time;
2. the workload's cost: two processes ping-ponging a byte over pipes (every round trip is two
   context switches, the worst case for per-task counters), round trips per second of their own CPU
   time with and without the collector's groups on them, alternating --rounds times so that both
   see the same load; and a compute loop the same way. The ratio (with / without) is taken per round,
   its median and range given, with the uncounted rate (the baseline) beside it.

Usage: python3 benchmarks/pmu_overhead.py [--processes 1,16,64] [--threads 4] [--rounds 5] [--seconds 1]
Prints one JSON object; BENCHMARKS.md records the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from witty_profiler.collectors.base import Context  # noqa: E402
from witty_profiler.collectors.lib.perf_event import SoftwareStandIn  # noqa: E402
from witty_profiler.collectors.pmu import PmuCollector  # noqa: E402

from benchmarks.timing import interleaved, load, machine, spread  # noqa: E402

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


class Recorder(SoftwareStandIn):
    """The stand-in's syscalls, each call noted, so that the same calls can be replayed bare."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def open(self, event, pid, cpu, group_fd, flags):  # noqa: ANN001, ANN201 - the protocol's signature
        fd = super().open(event, pid, cpu, group_fd, flags)
        self.calls.append(("open", fd, event, pid, cpu, group_fd, flags))
        return fd

    def read(self, fd, size):  # noqa: ANN001, ANN201
        self.calls.append(("read", fd, size))
        return super().read(fd, size)

    def close(self, fd):  # noqa: ANN001, ANN201
        self.calls.append(("close", fd))
        super().close(fd)


def replay(perf: SoftwareStandIn, calls: list[tuple]) -> None:
    """The recorded syscalls again, through the same stand-in, with nothing around them."""
    fds: dict[int, int] = {-1: -1}
    for call in calls:
        if call[0] == "open":
            _, old, event, pid, cpu, group_fd, flags = call
            fds[old] = perf.open(event, pid, cpu, fds[group_fd], flags)
        elif call[0] == "read":
            perf.read(fds[call[1]], call[2])
        else:
            perf.close(fds.pop(call[1]))


def collector_for(pids: list[int], stalls: bool = True, perf: SoftwareStandIn | None = None) -> PmuCollector:
    ctx = Context(host="bench")
    ctx.cache["scope_pids"] = pids
    c = PmuCollector(ctx, perf=perf or SoftwareStandIn())
    if not stalls:  # a CPU without stall events (most Intel cores): the core group alone
        c.stalls = False
    return c


def open_read_close(processes: int, threads: int, rounds: int) -> dict:
    children = [subprocess.Popen([sys.executable, "-c", SLEEPER, str(threads)], stdin=subprocess.PIPE)
                for _ in range(processes)]
    try:
        deadline = time.monotonic() + 30
        while any(len(os.listdir(f"/proc/{p.pid}/task")) < threads for p in children):  # every thread started
            assert time.monotonic() < deadline, "the sleepers did not start their threads"
            time.sleep(0.05)
        recorder = Recorder()
        c = collector_for([p.pid for p in children], perf=recorder)
        c.start()
        groups = sum(len(g) for g in c.groups.values())
        fds = sum(len(grp.fds) for g in c.groups.values() for _, grp in g)
        c.finish()
        assert c.status.status == "ok", c.status
        bare, calls = SoftwareStandIn(), recorder.calls
        opened: list[float] = []

        def collector() -> None:
            c = collector_for([p.pid for p in children])
            t = time.thread_time()
            c.start()
            opened.append(time.thread_time() - t)
            c.finish()
        times = interleaved({"collector": collector, "bare": lambda: replay(bare, calls)}, rounds,
                            clock=time.thread_time)
    finally:
        for p in children:
            p.kill()
            p.wait()
    ratios = [t / b for t, b in zip(times["collector"], times["bare"])]
    med, lo, hi = spread(ratios)
    base = spread(times["bare"])
    start_share = statistics.median(o / t for o, t in zip(opened[-rounds:], times["collector"]))
    return {"processes": processes, "threads": processes * threads, "groups": groups, "fds": fds,
            "syscalls": len(calls), "bare_syscalls_ms": [round(x * 1e3, 2) for x in base],
            "collector_over_bare": [round(med, 2), round(lo, 2), round(hi, 2)],
            "start_share_of_collector": round(start_share, 2)}


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
    med, lo, hi = spread([w / b for w, b in zip(with_, without)])
    return {"without_per_cpu_s": [round(x) for x in spread(without)], "ratio": [round(med, 3), round(lo, 3), round(hi, 3)],
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
        "machine": machine(),
        "open_read_close": [open_read_close(int(n), args.threads, args.rounds) for n in args.processes.split(",")],
        "pipe_ping_pong": alternate(ping_pong, args.rounds, args.seconds),
        "pipe_ping_pong_core_group_only": alternate(lambda s, c: ping_pong(s, c, stalls=False), args.rounds,
                                                    args.seconds),
        "compute_loop": alternate(spin, args.rounds, args.seconds),
        "load_at_the_end": load(),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
