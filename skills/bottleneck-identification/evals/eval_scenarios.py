"""Live workloads the evals create for real: each one starts processes that cause one bottleneck,
hands the runner the pids by role, and cleans up after itself (processes, cgroups)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

BUSY = "while True: pass"
# CPU-bound producer: hashes for a while, then writes one small block into the pipe
PRODUCER = ("import hashlib, sys\nx = b'0' * 64\nwhile True:\n"
            "    for _ in range(50000):\n        x = hashlib.sha256(x).digest()\n"
            "    sys.stdout.buffer.write(x * 16); sys.stdout.flush()\n")
# the consumer does a little work per block (a trainer step on its input), then blocks on the pipe again
CONSUMER = ("import hashlib, sys\nwhile block := sys.stdin.buffer.read1(65536):\n"
            "    for _ in range(500):\n        block = hashlib.sha256(block).digest()\n")
SLEEPER = "import time\ntime.sleep(3600)"
# four threads taking turns on one lock, each doing a little work while it holds it
CONTENDED = ("import threading, time\nlock = threading.Lock()\n"
             "def work():\n    while True:\n        with lock:\n            sum(range(20000))\n"
             "for _ in range(4):\n    threading.Thread(target=work, daemon=True).start()\ntime.sleep(3600)\n")
# four idle threads, each polling an empty queue of its own: as long in futex waits, but nobody wakes them
POLLER = ("import queue, threading, time\n"
          "def poll():\n    q = queue.Queue()\n    while True:\n        try:\n            q.get(timeout=0.05)\n"
          "        except queue.Empty:\n            pass\n"
          "for _ in range(4):\n    threading.Thread(target=poll, daemon=True).start()\ntime.sleep(3600)\n")
QUOTA_US, PERIOD_US = 10_000, 100_000  # 0.1 core


class ScenarioUnavailable(Exception):
    """This host cannot run the scenario (no writable cgroup...): the case is skipped, with why."""


def _favoured() -> None:
    """Run ahead of the host's other work where allowed (root): on a busy shared host the pipeline
    must still show its own shape, a producer that keeps a core busy and a consumer that is
    blocked on input rather than queued for a CPU. With autogroup scheduling a task's nice value
    only counts inside its session, so the process gets a session (an autogroup) of its own."""
    os.setsid()
    for favour in (lambda: Path("/proc/self/autogroup").write_text("-20\n"), lambda: os.nice(-20)):
        try:
            favour()
        except OSError:
            pass


def _python(code: str, favoured: bool = False, **kwargs) -> subprocess.Popen:
    # no inherited pipes: the runner's own stdout must not show up as an IPC edge of the workload
    streams = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    return subprocess.Popen([sys.executable, "-c", code], preexec_fn=_favoured if favoured else None,
                            **{**streams, **kwargs})


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _busy_count(spec: dict) -> int:
    per_cpu = spec.get("per_cpu", 2)
    return max(spec.get("min", 3), per_cpu * (os.cpu_count() or 1) + 1)


def _cpu_cgroup(name: str) -> tuple[Path, str]:
    """Create a cgroup with a CPU quota; returns (its folder, the file to write pids into)."""
    v2 = Path("/sys/fs/cgroup")
    controllers = v2 / "cgroup.controllers"
    if controllers.exists() and "cpu" in (v2 / "cgroup.subtree_control").read_text().split():
        folder = v2 / name
        folder.mkdir()
        (folder / "cpu.max").write_text(f"{QUOTA_US} {PERIOD_US}\n")
        return folder, "cgroup.procs"
    v1 = Path("/sys/fs/cgroup/cpu")
    if not (v1 / "cpu.cfs_quota_us").exists():
        raise ScenarioUnavailable("no cgroup v2 cpu controller and no cgroup v1 cpu hierarchy")
    folder = v1 / name
    folder.mkdir()
    (folder / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
    (folder / "cpu.cfs_quota_us").write_text(f"{QUOTA_US}\n")
    return folder, "cgroup.procs"


def _need_ebpf() -> None:
    """The futex waits come from the eBPF collector: root, bcc and kernel headers."""
    from witty_profiler.collectors.lib.bpfhost import NotReady, kernel_headers, load_bcc
    if os.geteuid() != 0:
        raise ScenarioUnavailable("the eBPF collector needs root")
    try:
        load_bcc()
        kernel_headers(os.uname().release)
    except NotReady as exc:
        raise ScenarioUnavailable(str(exc)) from None


def lift_quota(pid: int) -> None:
    """The fix of the cgroup_quota scenario: remove the CPU quota of PID's cgroup."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            Path(f"/sys/fs/cgroup/cpu{path}/cpu.cfs_quota_us").write_text("-1\n")
            return
        if controllers == "" and Path(f"/sys/fs/cgroup{path}/cpu.max").exists():
            Path(f"/sys/fs/cgroup{path}/cpu.max").write_text("max\n")
            return
    raise ScenarioUnavailable(f"pid {pid} has no CPU cgroup to lift the quota of")


FIXES = {"lift_quota": lift_quota}


@contextmanager
def run(spec: dict) -> Iterator[dict[str, list[int]]]:
    """Start the scenario SPEC ({"kind": ...}); yields {role: [pids]}; stops everything after."""
    kind = spec["kind"]
    procs: list[subprocess.Popen] = []
    cgroup: Path | None = None
    try:
        if kind == "busy_loops":
            procs = [_python(BUSY) for _ in range(_busy_count(spec))]
            roles = {"busy": [p.pid for p in procs]}
        elif kind == "pipe":
            producer = _python(PRODUCER, favoured=True, stdout=subprocess.PIPE)
            consumer = _python(CONSUMER, favoured=True, stdin=producer.stdout)
            producer.stdout.close()  # the consumer holds the read end now
            procs = [producer, consumer]
            roles = {"producer": [producer.pid], "consumer": [consumer.pid]}
        elif kind == "cgroup_quota":
            try:
                cgroup, procs_file = _cpu_cgroup(f"witty-eval-{os.getpid()}")
            except OSError as exc:
                raise ScenarioUnavailable(f"cannot create a CPU cgroup: {exc.strerror or exc}") from None
            procs = [_python(BUSY)]
            (cgroup / procs_file).write_text(f"{procs[0].pid}\n")
            roles = {"throttled": [procs[0].pid]}
        elif kind == "lock_contention":
            _need_ebpf()
            procs = [_python(CONTENDED), _python(POLLER)]
            roles = {"contended": [procs[0].pid], "idle": [procs[1].pid]}
        elif kind == "job_ranks":
            # the ranks of one job (torchrun's environment), the second one under a CPU quota: the runner
            # collects each rank as the host it would run on in a cluster, and merges the hosts
            try:
                cgroup, procs_file = _cpu_cgroup(f"witty-eval-{os.getpid()}")
            except OSError as exc:
                raise ScenarioUnavailable(f"cannot create a CPU cgroup: {exc.strerror or exc}") from None
            world = {"WORLD_SIZE": "3", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
                     "TORCHELASTIC_RUN_ID": f"eval-{os.getpid()}"}
            procs = [_python(BUSY, env={**os.environ, **world, "RANK": str(r)}) for r in range(3)]
            (cgroup / procs_file).write_text(f"{procs[1].pid}\n")
            roles = {f"rank{r}": [p.pid] for r, p in enumerate(procs)}
        elif kind == "sleeper":
            procs = [_python(SLEEPER)]
            roles = {"sleeper": [procs[0].pid]}
        else:
            raise ValueError(f"unknown scenario kind {kind!r}")
        time.sleep(spec.get("warmup_s", 0.5))  # let the workload reach its steady state
        yield roles
    finally:
        _stop(procs)
        if cgroup is not None:
            for _ in range(50):  # the kernel releases a cgroup shortly after its last task exits
                try:
                    cgroup.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
