"""Cost of the IPC, network and storage collectors on a host with many processes and sockets.

Starts PIPELINES shell pipelines (`sleep | sleep`: 3 processes and one pipe each) and opens
SOCKETPAIRS unix socket pairs and TCP_PAIRS loopback TCP connections in this process, then measures
- the IPC snapshots of the start and of the end of the window, each against a minimal raw reader
  of the same files in the same run (readlink of every fd, lstat of the fds of pipes shared by two
  processes or more, every /proc/PID/maps at the end only, the two /proc/sysvipc files, one unix
  and one TCP sock_diag dump);
- the per-interval `sample()` of the network and storage collectors, against reading the same files
  (/proc/net/dev and /proc/net/snmp; /proc/diskstats) and nothing else;
- the network collector's end-of-window connection table (`finish()`), against one TCP sock_diag dump
  with tcp_info and a readlink of every fd (what finding the connections' owners takes at all).
Each collector call and its raw reader are timed in CPU time in the same rounds, interleaved (the order
reversed every other round); a figure is the median of the per-round ratios with their range, beside
the raw reader's own CPU time. ROUNDS rounds (default 7; 50 calls a round for the samples).
Usage: python benchmarks/ipc_network_storage_overhead.py [PIPELINES] [ROUNDS]
"""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import load, machine, ratio  # noqa: E402

from witty_profiler.collectors import ipc  # noqa: E402
from witty_profiler.collectors.base import Context  # noqa: E402
from witty_profiler.collectors.lib import fdscan, sockdiag  # noqa: E402
from witty_profiler.collectors.network import NetworkCollector  # noqa: E402
from witty_profiler.collectors.storage import StorageCollector  # noqa: E402

PIPELINES = int(sys.argv[1]) if len(sys.argv) > 1 else 150
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 7
SOCKETPAIRS, TCP_PAIRS, SAMPLES = 200, 100, 50


def raw_reader(maps: bool) -> None:
    """The same reads as one snapshot: readlink of every fd, the mode of every fd of a pipe that
    two processes or more hold (lstat of its link), every /proc/PID/maps (the end only), the two
    /proc/sysvipc files, one unix and one TCP sock_diag dump."""
    proc = "/proc"
    pipes: dict[str, set[int]] = {}
    pipe_fds: list[tuple[str, str]] = []
    for pid in fdscan.pids(Path(proc)):
        for link, target in fd_links(f"{proc}/{pid}/fd"):
            if target.startswith("pipe:"):
                pipes.setdefault(target, set()).add(pid)
                pipe_fds.append((target, link))
    for target, link in pipe_fds:
        if len(pipes[target]) >= 2:
            try:
                os.lstat(link)
            except OSError:
                pass
    if maps:
        for pid in fdscan.pids(Path(proc)):
            try:
                with open(f"{proc}/{pid}/maps", "rb") as f:
                    f.read()
            except OSError:
                pass
    for name in ("shm", "msg"):
        with open(f"{proc}/sysvipc/{name}") as f:
            f.read()
    sockdiag.unix_sockets()
    sockdiag.tcp_sockets()


def fd_links(fd_dir: str):
    """(path, target) of each descriptor in a /proc/PID/fd folder that can still be read."""
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return
    for name in names:
        try:
            yield f"{fd_dir}/{name}", os.readlink(f"{fd_dir}/{name}")
        except OSError:
            continue


def read(*paths: str) -> None:
    for path in paths:
        with open(path, "rb") as f:
            f.read()


def raw_connections() -> None:
    """One TCP sock_diag dump with tcp_info, and a readlink of every fd (to find the sockets' owners)."""
    sockdiag.tcp_sockets()
    for pid in fdscan.pids(Path("/proc")):
        for _ in fd_links(f"/proc/{pid}/fd"):
            pass


def repeated(fn, n: int):
    def run() -> None:
        for _ in range(n):
            fn()
    return run


def main() -> None:
    shells = [subprocess.Popen(["sh", "-c", "sleep 300 | sleep 300"], start_new_session=True) for _ in range(PIPELINES)]
    pairs = [socket.socketpair() for _ in range(SOCKETPAIRS)]
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(TCP_PAIRS)
    tcp = []
    for _ in range(TCP_PAIRS):
        c = socket.create_connection(srv.getsockname())
        tcp.append((c, srv.accept()[0]))
    try:
        time.sleep(1.0)  # let the pipelines start
        procs = len(fdscan.pids(Path("/proc")))
        fds = sum(len(v) for v in fdscan.scan().links.values())
        cpu = time.process_time
        print(machine())
        print(f"processes {procs}, open fds {fds}, pipelines {PIPELINES}, unix pairs {SOCKETPAIRS}, "
              f"loopback TCP {TCP_PAIRS}; {ROUNDS} interleaved rounds, CPU time")
        print("| what | collector / raw reader, median (min-max) | raw reader's CPU time |")
        print("|---|---|---|")
        snap_start = ratio(lambda: ipc.snapshot(Path("/proc"), {}, "start", maps=False),
                           lambda: raw_reader(maps=False), ROUNDS, cpu)
        print(f"| IPC snapshot, start (no maps) | {snap_start.text()} | {snap_start.base_text()} |", flush=True)
        snap = ratio(lambda: ipc.snapshot(Path("/proc"), {}, "end"), lambda: raw_reader(maps=True), ROUNDS, cpu)
        print(f"| IPC snapshot, end (with maps) | {snap.text()} | {snap.base_text()} |", flush=True)
        net = NetworkCollector(Context(duration_s=1, interval_s=1))
        net.start()
        net_sample = ratio(repeated(net.sample, SAMPLES), repeated(lambda: read("/proc/net/dev", "/proc/net/snmp"),
                                                                   SAMPLES), ROUNDS, cpu)
        print(f"| network `sample()` (/proc/net/dev + /proc/net/snmp) | {net_sample.text()} | "
              f"{net_sample.base_text(1000 / SAMPLES, digits=3)} |", flush=True)
        disk = StorageCollector(Context(duration_s=1, interval_s=1))
        disk.start()
        disk_sample = ratio(repeated(disk.sample, SAMPLES), repeated(lambda: read("/proc/diskstats"), SAMPLES),
                            ROUNDS, cpu)
        print(f"| storage `sample()` (/proc/diskstats) | {disk_sample.text()} | "
              f"{disk_sample.base_text(1000 / SAMPLES, digits=3)} |", flush=True)

        def net_finish() -> None:
            net.ctx.cache.clear()
            net.finish()
        net_end = ratio(net_finish, raw_connections, ROUNDS, cpu)
        print(f"| network `finish()` (TCP dump with tcp_info, owners from the fds) | {net_end.text()} | "
              f"{net_end.base_text()} |", flush=True)
        med = statistics.median
        per_window = (med(snap_start.times) + med(snap.times) + 2 * med(net_end.times)
                      + 31 * (med(net_sample.times) + med(disk_sample.times)) / SAMPLES)
        print(f"30 s window at 1 s interval: {per_window * 1000:.1f} ms CPU = {per_window / 30 * 100:.2f} % of one "
              f"core on this machine at this load; load average at the end: {load()}")
    finally:
        for s in shells:
            os.killpg(s.pid, signal.SIGKILL)  # each pipeline is its own process group
        for s in shells:
            s.wait()
        for a, b in pairs + tcp:
            a.close(), b.close()
        srv.close()


if __name__ == "__main__":
    main()
