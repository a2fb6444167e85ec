"""What on-CPU stack sampling (collect --stacks) costs a busy workload: its throughput with and without it.

Two busy loops run the whole time, a Python one (spin_in_python, sampled by py-spy) and a C one
(spin_in_c, built with cc -fno-omit-frame-pointer; sampled by the bcc program), each printing its
iteration count every 0.1 s. Rounds alternate: a stretch of WINDOW_S with nothing attached, then a
stack window (run_window(collectors=["stacks"]) on both pids) of the same length; each loop's rate is
measured inside the stretch, between the window's opening and its end (the program's compile in
`prepare` comes before, as in a real run, and is reported apart). Needs root, bcc, cc and py-spy.

    sudo python3 benchmarks/stacks_overhead.py [--rounds 3] [--window 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

C = r"""
#include <stdio.h>
#include <stdint.h>
#include <time.h>
volatile uint64_t sink;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
__attribute__((noinline)) void spin_in_c(void) {
    uint64_t n = 0; double next = now() + 0.1;
    for (;;) {
        for (int i = 0; i < 100000; i++) sink = sink * 6364136223846793005ULL + 1;
        n += 100000;
        if (now() >= next) { printf("%.3f %llu\n", now(), (unsigned long long)n); fflush(stdout); next += 0.1; }
    }
}
int main(void) { spin_in_c(); return 0; }
"""
PY = r"""
import sys, time
def spin_in_python():
    n, nxt = 0, time.monotonic() + 0.1
    while True:
        for _ in range(10000):
            n += 1
        t = time.monotonic()
        if t >= nxt:
            print(f"{t:.3f} {n}", flush=True)
            nxt += 0.1
spin_in_python()
"""


class Loop:
    """A busy process and its (time, count) lines, read as they come."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.points: list[tuple[float, int]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            t, n = line.split()
            self.points.append((float(t), int(n)))

    def rate(self, t0: float, t1: float) -> float:
        inside = [p for p in self.points if t0 <= p[0] <= t1]
        (a, na), (b, nb) = inside[0], inside[-1]
        return (nb - na) / (b - a)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=3.0)
    args = ap.parse_args()
    from witty_profiler.collectors.engine import run_window
    tmp = Path(tempfile.mkdtemp())
    (tmp / "spin.c").write_text(C)
    subprocess.run([shutil.which("cc") or "gcc", "-O1", "-fno-omit-frame-pointer", "-o", str(tmp / "spin"),
                    str(tmp / "spin.c")], check=True)
    loops = {"c": Loop([str(tmp / "spin")]), "python": Loop([sys.executable, "-c", PY])}
    rates: dict[str, dict[str, list[float]]] = {k: {"off": [], "on": []} for k in loops}
    notes = []
    try:
        time.sleep(1.0)
        for r in range(args.rounds):
            t0 = time.monotonic()
            time.sleep(args.window)
            for k, loop in loops.items():
                rates[k]["off"].append(loop.rate(t0 + 0.2, t0 + args.window))
            opened: list[float] = []
            before = time.monotonic()
            graph = run_window(args.window, args.window, pids=[lp.proc.pid for lp in loops.values()],
                               collectors=["stacks"],
                               progress=lambda e, total, msg: opened.append(time.monotonic()) if msg == "started" else None)
            t1 = time.monotonic()
            for k, loop in loops.items():
                rates[k]["on"].append(loop.rate(opened[0] + 0.2, t1))
            status = graph.meta.collectors["stacks"]
            notes.append(f"round {r + 1}: prepare+start {opened[0] - before:.2f} s, collector CPU "
                         f"{status.extra.get('cpu_s')} s, {status.extra.get('samples')} samples, status {status.status}")
    finally:
        for loop in loops.values():
            loop.proc.kill()
    print(f"{os.cpu_count()} CPUs, {args.rounds} rounds of {args.window:g} s, 49 Hz")
    print(f"{'loop':8} {'off (it/s)':>14} {'on (it/s)':>14} {'change':>8}")
    for k, v in rates.items():
        off, on = statistics.median(v["off"]), statistics.median(v["on"])
        print(f"{k:8} {off:14.4g} {on:14.4g} {100 * (on - off) / off:+7.1f}%   "
              f"off {[f'{x:.3g}' for x in v['off']]} on {[f'{x:.3g}' for x in v['on']]}")
    for n in notes:
        print(n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
