"""The Slurm fan-out against a real Slurm: a controller and three slurmd daemons on this machine
(tests/slurm_cluster.py), a running job of three ranks, one node's rank held back by a CPU quota."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cgroup_v1 import CPU_V1
from marked_processes import KEY, kill_marked, new_mark, wait_for, wait_gone
from slurm_cluster import slurm_cluster  # noqa: F401 - the fixture

pytestmark = [pytest.mark.live, pytest.mark.slow]

PY = sys.executable
# a rank: busy; on the slow node it first joins the quota cgroup the test made
RANK = """
import os, sys
if os.environ["SLURMD_NODENAME"] == sys.argv[1]:
    with open(sys.argv[2], "w") as f:
        f.write(str(os.getpid()))
while True:
    pass
"""


def cli(cluster, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "witty_profiler", *args], env=cluster.env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture()
def quota_group():
    if not (CPU_V1 / "cpu.cfs_quota_us").exists():
        pytest.skip(f"no cgroup v1 cpu controller at {CPU_V1}")
    group = CPU_V1 / f"witty-slurm-slow-{os.getpid()}"
    group.mkdir()
    (group / "cpu.cfs_period_us").write_text("100000")
    (group / "cpu.cfs_quota_us").write_text("20000")  # 0.2 of a core
    try:
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            (CPU_V1 / "cgroup.procs").write_text(pid)
        time.sleep(0.2)
        group.rmdir()


def test_slurm_job_straggler_is_named_with_its_evidence(slurm_cluster, quota_group, tmp_path):  # noqa: F811
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    job = slurm_cluster.submit(
        f"srun --ntasks-per-node=1 bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS MASTER_ADDR=n1 "
        f"MASTER_PORT=29500 exec {PY} {script} n2 {quota_group}/cgroup.procs'", nodes=3, steps=1)
    try:
        time.sleep(1.0)
        out = tmp_path / "graphs"
        done = cli(slurm_cluster, "cluster", "collect", "--slurm-job", job, "--duration", "3", "--collectors",
                   "process,cpu,cgroup", "--remote-command", f"{PY} -m witty_profiler", "-o", str(out),
                   "--diagnose", "--format", "json")
    finally:
        slurm_cluster.cancel(job)
    assert done.returncode == 0, done.stderr  # every node gave a graph
    assert sorted(p.name for p in out.iterdir()) == ["cluster.json", "n1.json", "n2.json", "n3.json"]
    manifest = json.loads((out / "cluster.json").read_text())
    assert {h: r["status"] for h, r in manifest["hosts"].items()} == dict.fromkeys(["n1", "n2", "n3"], "ok")
    report = json.loads(done.stdout)
    # each node's graph holds its own rank only, a member of the one Slurm job
    ranks = {h["host"]: [r["rank"] for r in h["ranks"]] for h in report["hosts"]}
    assert ranks == {"n1": [0], "n2": [1], "n3": [2]}
    assert all(r["job"] == f"job:slurm:{job}" for h in report["hosts"] for r in h["ranks"])
    straggler = next(f for f in report["findings"] if f["pattern"] == "control.straggler_host")
    assert "host:n2" in straggler["subjects"] and "rank 1" in straggler["description"]
    signals = {e["metric"] for e in straggler["evidence"]}
    assert {"cpu_util_pct deviation from peers", "throttled_periods_pct deviation from peers"} <= signals
    assert all("n2" in " ".join(e["ids"]) for e in straggler["evidence"] if e["metric"])
    md = cli(slurm_cluster, "cluster", "diagnose", str(out), "--format", "summary").stdout
    assert "control.straggler_host" in md and "n2" in md


def test_which_node_states_take_a_step():
    """States as `scontrol show node` writes them, some of which the test cluster cannot reach."""
    from witty_profiler.cluster.slurm import _reason, unusable_state
    for state, alone, in_job in [("IDLE", None, None), ("MIXED", None, None), ("ALLOCATED+COMPLETING", None, None),
                                 ("IDLE+DRAIN", "drained", None), ("ALLOCATED+DRAIN", "drained", None),
                                 ("DOWN", "down", "down"), ("DOWN*+DRAIN", "down", "down"),
                                 ("IDLE*", "not responding", "not responding"),
                                 ("IDLE+POWERED_DOWN", "powered down", "powered down"),
                                 ("MIXED+MAINTENANCE", "maintenance", None), ("FUTURE", "future", "future")]:
        assert (unusable_state(state), unusable_state(state, in_job=True)) == (alone, in_job), state
    line = ("NodeName=n3 Arch=x86_64 State=DOWN+DRAIN Partitions=main ExtSensorsTemp=n/s "
            "Reason=GPU=3 fell off the bus [root@2026-12-05T21:31:18] Comment=(null)")
    assert _reason(line) == "GPU=3 fell off the bus [root@2026-12-05T21:31:18]"
    assert _reason("NodeName=n1 State=IDLE") == ""


def test_slurm_nodes_without_a_job_unknown_drained_and_down_nodes(slurm_cluster, tmp_path):  # noqa: F811
    """n[1-4] where n4 is no node of the cluster, n2 is drained and n3 down: n1 is collected, the others are
    skipped with what Slurm says of them (the unknown name no longer fails the whole step), exit 3."""
    slurm_cluster.run("scontrol", "update", "nodename=n2", "state=drain", "reason=bad gpu 2")
    slurm_cluster.down("n3", "maintenance")
    try:
        out = tmp_path / "graphs"
        done = cli(slurm_cluster, "cluster", "collect", "--slurm-nodes", "n[1-4]", "--duration", "1", "--collectors",
                   "process,cpu", "--remote-command", f"{PY} -m witty_profiler", "-o", str(out))
    finally:
        slurm_cluster.resume("n2")
        slurm_cluster.resume("n3")
    assert done.returncode == 3, done.stderr  # some hosts gave a graph, not every one
    manifest = json.loads((out / "cluster.json").read_text())["hosts"]
    assert {h: r["status"] for h, r in manifest.items()} == {"n1": "ok", "n2": "skipped", "n3": "skipped",
                                                              "n4": "skipped"}
    assert manifest["n4"]["reason"].startswith("not a node of this cluster")
    assert manifest["n2"]["reason"].startswith("Slurm reports the node drained: State=IDLE+DRAIN Reason=bad gpu 2 [")
    assert manifest["n3"]["reason"].startswith("Slurm reports the node down: State=DOWN Reason=maintenance [")
    assert "n4: skipped (0 s): not a node of this cluster" in done.stderr
    assert "n3: skipped (0 s): Slurm reports the node down: State=DOWN Reason=maintenance" in done.stderr
    assert "collecting 1 nodes through srun (1 s window; 3 of 4 skipped)" in done.stderr
    hosts = cli(slurm_cluster, "cluster", "hosts", str(out)).stdout
    assert "n3" in hosts and "Reason=maintenance" in hosts


def test_a_step_of_a_job_runs_on_its_draining_node(slurm_cluster, tmp_path):  # noqa: F811
    """A drained node that still runs the job (ALLOCATED+DRAIN) takes a step of that job: it is collected."""
    job = slurm_cluster.submit("srun --ntasks-per-node=1 sleep 300", nodes=3, steps=1)
    slurm_cluster.run("scontrol", "update", "nodename=n2", "state=drain", "reason=draining for a test")
    try:
        out = tmp_path / "graphs"
        done = cli(slurm_cluster, "cluster", "collect", "--slurm-job", job, "--duration", "1", "--collectors",
                   "process", "--remote-command", f"{PY} -m witty_profiler", "-o", str(out))
    finally:
        slurm_cluster.cancel(job)
        slurm_cluster.resume("n2")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "cluster.json").read_text())["hosts"]
    assert {h: r["status"] for h, r in manifest.items()} == dict.fromkeys(["n1", "n2", "n3"], "ok")


def test_a_task_that_fails_is_reported_by_its_node(slurm_cluster, tmp_path):  # noqa: F811
    out = tmp_path / "graphs"
    done = cli(slurm_cluster, "cluster", "collect", "--slurm-nodes", "n[1-2]", "--duration", "1",
               "--remote-command", "/nonexistent/witty-profiler", "-o", str(out))
    assert done.returncode == 4, done.stderr  # no host gave a graph
    manifest = json.loads((out / "cluster.json").read_text())["hosts"]
    assert set(manifest) == {"n1", "n2"} and all(r["status"] == "failed" for r in manifest.values())
    # what srun said of the task and what the node said: per node, not one line for all
    assert manifest["n1"]["reason"].startswith("Exited with exit code 2 (slurmstepd-n1: error: execve()")
    assert "No such file or directory" in manifest["n2"]["reason"] and "n2" in manifest["n2"]["reason"]
    assert Path(out / "n1.json").exists() is False


def _steps(cluster) -> list[str]:
    """The steps Slurm runs now, of any job."""
    return cluster.run("squeue", "-h", "-s", "-o", "%i", check=False).stdout.split()


def test_ctrl_c_ends_srun_and_its_step_on_the_nodes(slurm_cluster, tmp_path):  # noqa: F811
    """Ctrl-C while the step's tasks run: srun is ended so that it cancels the step, and no task is left on any
    node (a SIGKILLed srun leaves them running); the manifest names the nodes cancelled; exit 130."""
    mark, out = new_mark(), tmp_path / "graphs"
    cmd = subprocess.Popen([PY, "-m", "witty_profiler", "cluster", "collect", "--slurm-nodes", "n[1-2]", "--duration",
                            "100", "--remote-command", "sh -c 'sleep 600 & wait'", "-o", str(out)],
                           env={**slurm_cluster.env, KEY: mark}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        wait_for(mark, 5)  # srun, and on each node a task's shell and its sleep
        assert len(_steps(slurm_cluster)) == 1
        cmd.send_signal(signal.SIGINT)
        _, stderr = cmd.communicate(timeout=60)
        left = wait_gone(mark, 15)
    finally:
        cmd.kill()
        kill_marked(mark)
    assert left == [], f"still running after Ctrl-C: {left}"
    assert cmd.returncode == 130, stderr
    assert _steps(slurm_cluster) == []
    manifest = json.loads((out / "cluster.json").read_text())
    assert manifest["cancelled"] is True
    assert {h: r["status"] for h, r in manifest["hosts"].items()} == {"n1": "cancelled", "n2": "cancelled"}


def test_past_its_deadline_the_step_is_ended_on_the_nodes(slurm_cluster, tmp_path):  # noqa: F811
    mark, out = new_mark(), tmp_path / "graphs"
    done = subprocess.run([PY, "-m", "witty_profiler", "cluster", "collect", "--slurm-nodes", "n[1-2]", "--duration",
                           "100", "--timeout", "3", "--remote-command", "sh -c 'sleep 600 & wait'", "-o", str(out)],
                          env={**slurm_cluster.env, KEY: mark}, capture_output=True, text=True, timeout=60)
    try:
        left = wait_gone(mark, 15)
    finally:
        kill_marked(mark)
    assert left == [], f"still running after the deadline: {left}"
    assert done.returncode == 4, done.stderr
    manifest = json.loads((out / "cluster.json").read_text())["hosts"]
    assert {h: (r["status"], r["reason"]) for h, r in manifest.items()} == dict.fromkeys(
        ["n1", "n2"], ("timeout", "no graph after 3 s"))
