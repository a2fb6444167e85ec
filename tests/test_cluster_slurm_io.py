"""An I/O straggler on a real Slurm (tests/slurm_cluster.py): three ranks step in lockstep through a
file barrier, and the rank on n2 also writes 50 MB and fsyncs each step. Its CPU and run queue look
like its peers' (they wait at the barrier for it), so only the storage signals set it apart."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from slurm_cluster import slurm_cluster  # noqa: F401 - the fixture

pytestmark = [pytest.mark.live, pytest.mark.slow]

PY = sys.executable
# a rank: a step of busy work, then (on the slow node) 50 MB written and fsynced, then a barrier: each rank
# writes its step number and waits until every rank has reached it
RANK = """
import os, sys, time
node, folder, world = os.environ["SLURMD_NODENAME"], sys.argv[1], int(os.environ["SLURM_NTASKS"])
rank = int(os.environ["SLURM_PROCID"])
block = b"x" * (1 << 20)
step = 0
while True:
    step += 1
    end = time.monotonic() + 0.05
    while time.monotonic() < end:
        pass
    if node == sys.argv[2]:
        with open(os.path.join(folder, f"ckpt-{rank}.bin"), "wb") as f:
            for _ in range(50):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
    mine = os.path.join(folder, f"step-{rank}")
    with open(mine + ".part", "w") as f:  # written aside, then renamed: a reader never sees it empty
        f.write(str(step))
    os.replace(mine + ".part", mine)
    while True:
        done = []
        for r in range(world):
            try:
                done.append(int(open(os.path.join(folder, f"step-{r}")).read() or 0))
            except (OSError, ValueError):
                done.append(0)
        if min(done) >= step:
            break
        time.sleep(0.002)
"""


@pytest.fixture()
def delay_accounting():
    """Block I/O delay accounting on for the test (Linux 5.14+ keeps it off by default), as it was after."""
    knob = Path("/proc/sys/kernel/task_delayacct")
    before = knob.read_text().strip() if knob.exists() else None
    try:
        if before == "0":
            knob.write_text("1")
    except OSError:
        pass  # not allowed here: the time blocked on I/O is then not measured, the bytes still are
    yield
    if before == "0":
        try:
            knob.write_text("0")
        except OSError:
            pass


def test_a_rank_that_writes_and_fsyncs_each_step_is_the_straggler(slurm_cluster, delay_accounting, tmp_path):  # noqa: F811
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    shared = tmp_path / "barrier"
    shared.mkdir()
    job = slurm_cluster.submit(
        f"srun --ntasks-per-node=1 bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS MASTER_ADDR=n1 "
        f"MASTER_PORT=29500 exec {PY} {script} {shared} n2'", nodes=3, steps=1)
    try:
        time.sleep(1.5)
        out = tmp_path / "graphs"
        import subprocess
        done = subprocess.run([PY, "-m", "witty_profiler", "cluster", "collect", "--slurm-job", job, "--duration", "4",
                               "--collectors", "process,cpu,cgroup,storage", "--remote-command",
                               f"{PY} -m witty_profiler", "-o", str(out), "--diagnose", "--format", "json"],
                              env=slurm_cluster.env, capture_output=True, text=True, timeout=180)
    finally:
        slurm_cluster.cancel(job)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    straggler = next((f for f in report["findings"] if f["pattern"] == "control.straggler_host"), None)
    assert straggler is not None, [f["pattern"] for f in report["findings"]]
    assert "host:n2" in straggler["subjects"] and "rank 1" in straggler["description"]
    signals = [e["metric"] for e in straggler["evidence"] if e["metric"]]
    assert "write_bytes_per_s deviation from peers" in signals, signals
    # every storage signal named is the slow rank's own, and it says its value, the median and the robust z; the
    # three "hosts" share this machine's two CPUs, so when the test host is busy (the whole suite running) a
    # rank elsewhere may also be named for CPU or run-queue wait, which is what its peers saw of it then
    named = [(e["metric"], e["ids"]) for e in straggler["evidence"] if e["metric"]]
    assert all("n2" in " ".join(ids) for metric, ids in named
               if not metric.startswith(("cpu_util_pct", "runqueue_wait_pct"))), named
    assert "write_bytes_per_s" in straggler["description"] and "robust z" in straggler["description"]
    steps = [int((shared / f"step-{r}").read_text() or 0) for r in range(3)]
    assert max(steps) - min(steps) <= 1  # the ranks did step in lockstep: n2 held the others back
