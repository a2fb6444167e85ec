"""Cost of the IPC, network and storage collectors on a host with many processes and sockets.

Starts PIPELINES shell pipelines (`sleep | sleep`: 3 processes and one pipe each) and opens
SOCKETPAIRS unix socket pairs and TCP_PAIRS loopback TCP connections in this process, then measures
- the IPC snapshots of the start and of the end of the window, each against a minimal raw reader
  of the same files in the same run (readlink of every fd, lstat of the fds of pipes shared by two
  processes or more, every /proc/PID/maps at the end only, the two /proc/sysvipc files, one unix
  and one TCP sock_diag dump);
- the per-interval `sample()` of the network and storage collectors (CPU time per call);
- the network collector's end-of-window connection table (`finish()`).
Usage: python benchmarks/ipc_network_storage_overhead.py [PIPELINES]
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import cpu_ms  # noqa: E402

from witty_profiler.collectors import ipc  # noqa: E402
from witty_profiler.collectors.base import Context  # noqa: E402
from witty_profiler.collectors.lib import fdscan, sockdiag  # noqa: E402
from witty_profiler.collectors.network import NetworkCollector  # noqa: E402
from witty_profiler.collectors.storage import StorageCollector  # noqa: E402

PIPELINES = int(sys.argv[1]) if len(sys.argv) > 1 else 150
SOCKETPAIRS, TCP_PAIRS, RUNS = 200, 100, 7


def raw_reader(maps: bool) -> None:
    """The same reads as one snapshot: readlink of every fd, the mode of every fd of a pipe that
    two processes or more hold (lstat of its link), every /proc/PID/maps (the end only), the two
    /proc/sysvipc files, one unix and one TCP sock_diag dump."""
    proc = "/proc"
    pipes: dict[str, set[int]] = {}
    pipe_fds: list[tuple[str, str]] = []
    for pid in fdscan.pids(Path(proc)):
        fd_dir = f"{proc}/{pid}/fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(f"{fd_dir}/{name}")
            except OSError:
                continue
            if target.startswith("pipe:"):
                pipes.setdefault(target, set()).add(pid)
                pipe_fds.append((target, f"{fd_dir}/{name}"))
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
        snap_start = cpu_ms(lambda: ipc.snapshot(Path("/proc"), {}, "start", maps=False), RUNS)
        raw_start = cpu_ms(lambda: raw_reader(maps=False), RUNS)
        snap = cpu_ms(lambda: ipc.snapshot(Path("/proc"), {}, "end"), RUNS)
        raw = cpu_ms(lambda: raw_reader(maps=True), RUNS)
        net = NetworkCollector(Context(duration_s=1, interval_s=1))
        net.start()
        net_sample = cpu_ms(net.sample, 50)
        disk = StorageCollector(Context(duration_s=1, interval_s=1))
        disk.start()
        disk_sample = cpu_ms(disk.sample, 50)

        def net_finish() -> None:
            net.ctx.cache.clear()
            net.finish()
        net_end = cpu_ms(net_finish, RUNS)
        print(f"{time.strftime('%Y-%m-%d')} {platform.node()} {platform.machine()} {os.cpu_count()} CPUs, "
              f"kernel {platform.release()}, Python {platform.python_version()}")
        print(f"processes {procs}, open fds {fds}, pipelines {PIPELINES}, unix pairs {SOCKETPAIRS}, "
              f"loopback TCP {TCP_PAIRS}")
        print(f"ipc snapshot, start (no maps)    {snap_start:8.2f} ms CPU")
        print(f"raw reader of the same files     {raw_start:8.2f} ms CPU   ratio {snap_start / raw_start:.2f}x")
        print(f"ipc snapshot, end                {snap:8.2f} ms CPU")
        print(f"raw reader of the same files     {raw:8.2f} ms CPU   ratio {snap / raw:.2f}x")
        print(f"network sample (per interval)    {net_sample:8.3f} ms CPU")
        print(f"storage sample (per interval)    {disk_sample:8.3f} ms CPU")
        print(f"network finish (connections)     {net_end:8.2f} ms CPU")
        window_s = 30.0
        per_window = snap_start + snap + 2 * net_end + 31 * (net_sample + disk_sample)
        print(f"30 s window at 1 s interval: {per_window:.1f} ms CPU = {per_window / (window_s * 10):.3f} % of one core")
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
