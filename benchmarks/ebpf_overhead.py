"""Cost of the eBPF collector: loading its program, and what its probes add to each futex call.

Measured in one run, root only:

1. `prepare()` (find bcc and the headers, compile with clang or take the kept image, load and
   attach): wall and CPU time and the peak RSS it adds to this process the first time, when it
   compiles (into a cache folder of its own, empty at first); then the median of --loads later
   windows of the same process (the image kept in memory) and of --loads new processes (the image
   read from the folder), each as a ratio to the compile; the memory kept once those rounds are
   over (anonymous: the heap; file-backed: libbcc's code, shared and evictable) and the kernel
   memory of maps still open (memlock: none, nothing stays loaded between windows);
2. the probes' cost per futex call: a child process calls FUTEX_WAIT on a word that does not hold
   the expected value, which returns EAGAIN at once, so each call is one enter and one exit
   probe and nothing else (the worst case: no real wait to hide behind). Calls per second with
   and without the program attached (per second of the child's own CPU time), alternating --rounds
   times so that both see the same load; the difference per call is the probes' cost, and the
   kernel's own accounting (kernel.bpf_stats_enabled, on only for those runs) gives the time spent
   inside each probe exactly;
3. the same for getppid, a syscall the program does not trace: what every other syscall of the
   host pays while the program is attached;
4. a contended lock (4 Python threads on one threading.Lock): lock hand-overs per CPU second with
   and without the program attached, the same alternation, as the figure a real workload sees.

Usage: python3 benchmarks/ebpf_overhead.py [--loads 3] [--rounds 5] [--seconds 2]
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
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from witty_profiler.collectors.base import Context  # noqa: E402
from witty_profiler.collectors.ebpf import EbpfCollector  # noqa: E402
from witty_profiler.collectors.lib.bpfcache import IMAGES  # noqa: E402
from witty_profiler.collectors.lib.bpfload import settle  # noqa: E402

from timing import machine  # noqa: E402

# Each child counts its calls for `seconds` and prints calls per second of its own CPU time: on a
# VM whose host steals time, a rate per wall second would measure the neighbours as much as us.
FUTEX_EAGAIN = """
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
word = ctypes.c_uint32(0)
addr, seconds, n = ctypes.addressof(word), float(sys.argv[1]), 0
end, cpu = time.perf_counter() + seconds, time.process_time()
while time.perf_counter() < end:
    for _ in range(1000):
        libc.syscall(202, addr, 128, 1, None, None, 0)  # SYS_futex, FUTEX_WAIT_PRIVATE, val 1 != 0: EAGAIN
    n += 1000
print(n / (time.process_time() - cpu))
"""
# the same loop on getppid: syscall tracepoints put every task's syscalls on the kernel's traced
# path while any is attached, so a syscall the program ignores pays something too
GETPPID = FUTEX_EAGAIN.replace("libc.syscall(202, addr, 128, 1, None, None, 0)", "libc.syscall(110)")
CONTENDED = """
import sys, threading, time
lock, count, seconds = threading.Lock(), [0, 0, 0, 0], float(sys.argv[1])
def work(i):
    while True:
        with lock:
            count[i] += 1
            sum(range(2000))
cpu = time.process_time()
for i in range(4):
    threading.Thread(target=work, args=(i,), daemon=True).start()
time.sleep(seconds)
print(sum(count) / (time.process_time() - cpu))
"""


def rate(code: str, seconds: float) -> float:
    out = subprocess.run([sys.executable, "-c", code, str(seconds)], capture_output=True, text=True, check=True)
    return float(out.stdout)


def load() -> tuple[EbpfCollector, float, float]:
    c = EbpfCollector(Context())
    wall, cpu = time.perf_counter(), time.process_time()
    c.prepare()
    if c.bpf is None:
        sys.exit(f"ebpf_overhead: the collector cannot load here: {c.problem}")
    c.start()
    return c, time.perf_counter() - wall, time.process_time() - cpu


def program_ns(c: EbpfCollector) -> dict[str, float]:
    """Mean time inside each probe that ran, from the kernel's own accounting (kernel.bpf_stats_enabled):
    exact where the rates below are at the mercy of the VM's neighbours."""
    out = {}
    for name, fd in c.bpf.prog_fds.items():
        info = dict(line.split(":\t") for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines()
                    if ":\t" in line)
        if int(info.get("run_cnt", 0)):
            out[name.removeprefix("tracepoint__syscalls__")] = round(
                int(info["run_time_ns"]) / int(info["run_cnt"]), 1)
    return out


def alternate(code: str, rounds: int, seconds: float) -> dict:
    """Rates without and with the program, alternating so that both see the same load."""
    off, on, inside = [], [], []
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    for _ in range(rounds):
        off.append(rate(code, seconds))
        c, _, _ = load()
        stats.write_text("1")
        try:
            on.append(rate(code, seconds))
            inside.append(program_ns(c))
        finally:
            stats.write_text("0")
        c.finish()
    base, traced = statistics.median(off), statistics.median(on)
    probes = {name: statistics.median(run.get(name, 0.0) for run in inside) for name in inside[-1]}
    return {"per_cpu_s_without": round(base), "per_cpu_s_with": round(traced), "ratio": round(traced / base, 3),
            "added_cpu_ns_per_call": round((1 / traced - 1 / base) * 1e9, 1),
            "spread_without": [round(min(off)), round(max(off))], "spread_with": [round(min(on)), round(max(on))],
            "program_ns_per_run": probes}


NEW_PROCESS = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from witty_profiler.collectors.base import Context
from witty_profiler.collectors.ebpf import EbpfCollector
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
c = EbpfCollector(Context())
wall, cpu = time.perf_counter(), time.process_time()
c.prepare()
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
print(json.dumps([wall, cpu, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024,
                  c.status.extra.get("program")]))
"""


def new_process_prepare() -> tuple[float, float, float, str]:
    """A new process's prepare(): (wall s, CPU s, peak RSS added MiB, where its program came from)."""
    out = subprocess.run([sys.executable, "-c", NEW_PROCESS, str(Path(__file__).resolve().parents[1])],
                         capture_output=True, text=True, check=True)
    return tuple(json.loads(out.stdout))


def maps_memlock_mib() -> float:
    """Kernel memory charged to the maps this process holds open (their fdinfo's memlock)."""
    total = 0
    for info in Path("/proc/self/fdinfo").iterdir():
        try:
            text = info.read_text()
        except OSError:
            continue
        if "map_type:" in text:
            total += int(next(line.split()[1] for line in text.splitlines() if line.startswith("memlock:")))
    return round(total / 2**20, 1)


def rss_mib() -> dict[str, float]:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) / 1024 for k in ("RssAnon", "RssFile")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("ebpf_overhead: needs root")
    os.environ["WITTY_BPF_CACHE"] = tempfile.mkdtemp(prefix="witty-bpf-")  # empty: the first window compiles
    IMAGES.forget()
    rss0, kept0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, rss_mib()
    c, first_wall, first_cpu = load()
    c.finish()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    loads = []
    for _ in range(args.loads):  # later windows of this process: the image kept in memory
        c, wall, cpu = load()
        loads.append((wall, cpu))
        c.finish()
    settle()
    kept = rss_mib()
    others = [new_process_prepare() for _ in range(args.loads)]  # new processes: the image read from disk
    assert {o[3] for o in others} == {"cached on disk"}, others
    print(json.dumps({
        "machine": machine(),
        "first_prepare_wall_s": round(first_wall, 3), "first_prepare_cpu_s": round(first_cpu, 3),
        "first_prepare_peak_rss_added_mib": round((rss - rss0) / 1024, 1),
        "later_prepare_wall_s": round(statistics.median(w for w, _ in loads), 4),
        "later_prepare_cpu_s": round(statistics.median(c for _, c in loads), 4),
        "later_prepare_cpu_ratio_to_compile": round(statistics.median(c for _, c in loads) / first_cpu, 4),
        "new_process_prepare_wall_s": [round(o[0], 4) for o in others],
        "new_process_prepare_cpu_s": [round(o[1], 4) for o in others],
        "new_process_prepare_cpu_ratio_to_compile": round(statistics.median(o[1] for o in others) / first_cpu, 4),
        "new_process_prepare_peak_rss_added_mib": round(statistics.median(o[2] for o in others), 1),
        "peak_rss_added_by_later_windows_mib": round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024, 1),
        "kept_after_rounds_mib": {k: round(kept[k] - kept0[k], 1) for k in kept},
        "maps_memlock_mib_between_windows": maps_memlock_mib(),
        "headers": c.note,
        "futex_eagain": alternate(FUTEX_EAGAIN, args.rounds, args.seconds),
        "getppid": alternate(GETPPID, args.rounds, args.seconds),
        "contended_lock": alternate(CONTENDED, args.rounds, args.seconds),
    }, indent=1))


if __name__ == "__main__":
    main()
