"""The Slurm fan-out against a real Slurm: a controller and three slurmd daemons on this machine
(tests/slurm_cluster.py), a running job of three ranks, one node's rank held back by a CPU quota."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cgroup_v1 import CPU_V1
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
    assert done.returncode == 0, done.stderr
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


def test_slurm_nodes_without_a_job_and_a_node_down(slurm_cluster, tmp_path):  # noqa: F811
    slurm_cluster.down("n3", "maintenance")
    try:
        out = tmp_path / "graphs"
        done = cli(slurm_cluster, "cluster", "collect", "--slurm-nodes", "n[1-3]", "--duration", "1", "--collectors",
                   "process,cpu", "--remote-command", f"{PY} -m witty_profiler", "-o", str(out))
    finally:
        slurm_cluster.resume("n3")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "cluster.json").read_text())["hosts"]
    assert manifest["n1"]["status"] == manifest["n2"]["status"] == "ok"
    assert manifest["n3"]["status"] == "skipped" and "down" in manifest["n3"]["reason"]
    assert "n3: skipped" in done.stderr
    hosts = cli(slurm_cluster, "cluster", "hosts", str(out)).stdout
    assert "n3" in hosts and "down" in hosts


def test_a_task_that_fails_is_reported_by_its_node(slurm_cluster, tmp_path):  # noqa: F811
    out = tmp_path / "graphs"
    done = cli(slurm_cluster, "cluster", "collect", "--slurm-nodes", "n[1-2]", "--duration", "1",
               "--remote-command", "/nonexistent/witty-profiler", "-o", str(out))
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "cluster.json").read_text())["hosts"]
    assert set(manifest) == {"n1", "n2"} and all(r["status"] == "failed" for r in manifest.values())
    # what srun said of the task and what the node said: per node, not one line for all
    assert manifest["n1"]["reason"].startswith("Exited with exit code 2 (slurmstepd-n1: error: execve()")
    assert "No such file or directory" in manifest["n2"]["reason"] and "n2" in manifest["n2"]["reason"]
    assert Path(out / "n1.json").exists() is False
