"""The local Slurm cluster of slurm_cluster.py, and the srun behaviour a fan-out relies on: one task
per node, steps that join a running job, steps beside one, --label output, a node going down."""

from __future__ import annotations

import os
import re
import tempfile

import pytest

from slurm_cluster import MARKER, SlurmCluster, missing_requirements, slurm_cluster  # noqa: F401

pytestmark = [pytest.mark.live, pytest.mark.slow]

# one line per task: its label, then what Slurm put in its environment
ENV_LINE = "echo $SLURMD_NODENAME $SLURM_JOB_ID $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID"
ONE_PER_NODE = ("-N3", "--ntasks-per-node=1")


def task_env(stdout: str) -> dict[int, dict[str, str]]:
    """`srun --label bash -c ENV_LINE` output, by task number."""
    tasks = {}
    for line in stdout.splitlines():
        label, node, job, step, procid, localid = re.fullmatch(r"(\d+): (\S+) (\d+) (\d+) (\d+) (\d+)", line).groups()
        tasks[int(label)] = {"node": node, "job": job, "step": step, "procid": int(procid), "localid": int(localid)}
    return tasks


def assert_one_task_per_node(tasks: dict[int, dict[str, str]], nodes: list[str]) -> None:
    assert sorted(tasks) == [0, 1, 2]
    assert sorted(t["node"] for t in tasks.values()) == nodes
    assert all(t["procid"] == label and t["localid"] == 0 for label, t in tasks.items())
    assert len({(t["job"], t["step"]) for t in tasks.values()}) == 1  # one step of one job


def test_three_nodes_come_up(slurm_cluster):
    assert slurm_cluster.nodes == ["n1", "n2", "n3"]
    assert slurm_cluster.states() == {"n1": "idle", "n2": "idle", "n3": "idle"}


def test_srun_runs_one_labelled_task_per_node(slurm_cluster):
    done = slurm_cluster.run("srun", *ONE_PER_NODE, "--label", "bash", "-c", ENV_LINE)
    tasks = task_env(done.stdout)
    assert_one_task_per_node(tasks, slurm_cluster.nodes)
    assert tasks[0]["step"] == "0"  # a job of its own: its first step


def test_step_joins_a_running_job_with_overlap(slurm_cluster):
    jobid = slurm_cluster.submit("srun --ntasks-per-node=1 sleep 300", steps=1)
    try:
        done = slurm_cluster.run("srun", "--jobid", jobid, "--overlap", *ONE_PER_NODE, "--label",
                                 "bash", "-c", ENV_LINE, timeout=30)
        tasks = task_env(done.stdout)
        assert_one_task_per_node(tasks, slurm_cluster.nodes)
        assert {t["job"] for t in tasks.values()} == {jobid}
        assert tasks[0]["step"] == "1"  # step 0 is the job's own sleep, still running
        assert slurm_cluster.job_state(jobid) == "RUNNING"
    finally:
        slurm_cluster.cancel(jobid)


def test_nodelist_step_runs_beside_a_job_holding_every_cpu(slurm_cluster):
    cpus = os.cpu_count() or 1
    jobid = slurm_cluster.submit("srun sleep 300", 3, "--exclusive", f"--ntasks-per-node={cpus}")
    try:
        assert set(slurm_cluster.states().values()) == {"alloc"}
        done = slurm_cluster.run("srun", "--immediate=10", "--nodelist", "n[1-3]", *ONE_PER_NODE, "--label",
                                 "bash", "-c", ENV_LINE, timeout=30)
        tasks = task_env(done.stdout)
        assert_one_task_per_node(tasks, slurm_cluster.nodes)
        assert tasks[0]["job"] != jobid  # a job of its own, sharing the nodes (OverSubscribe=FORCE)
        assert slurm_cluster.job_state(jobid) == "RUNNING"
    finally:
        slurm_cluster.cancel(jobid)


def test_label_keeps_lines_whole_and_in_order(slurm_cluster):
    """3000 lines of 80 bytes per task: lines of tasks interleave, but none is split."""
    prog = ("import os, sys\nr = os.environ['SLURM_PROCID']\n"
            "for i in range(3000):\n    sys.stdout.write(f'{r}-{i:05d}-'.ljust(79, 'x') + '\\n')\n")
    out = slurm_cluster.run("srun", *ONE_PER_NODE, "--label", "python3", "-c", prog).stdout
    seen: dict[str, list[int]] = {"0": [], "1": [], "2": []}
    for line in out.splitlines():
        label, rank, number = re.fullmatch(r"(\d): (\d)-(\d{5})-x{71}", line).groups()
        assert label == rank
        seen[label].append(int(number))
    assert all(numbers == list(range(3000)) for numbers in seen.values())


def test_label_cuts_long_lines_into_1024_byte_pieces(slurm_cluster):
    """A line over 1024 bytes comes out as labelled pieces of 1024 (pieces of several tasks may
    interleave); a piece of exactly 1024 continues on the next line of the same label."""
    prog = ("import os, sys\nr = os.environ['SLURM_PROCID']\n"
            "sys.stdout.write(''.join(f'{r}:{i:06d};' for i in range(20000)) + '\\n' + 'B' * 1024 + '\\nend\\n')\n")
    out = slurm_cluster.run("srun", *ONE_PER_NODE, "--label", "python3", "-c", prog).stdout
    pieces = [(line[:1], line[3:]) for line in out.splitlines()]
    assert max(len(p) for _, p in pieces) == 1024
    joined: dict[str, list[str]] = {}
    pending: dict[str, str] = {}
    for label, piece in pieces:
        pending[label] = pending.get(label, "") + piece
        if len(piece) != 1024:
            joined.setdefault(label, []).append(pending.pop(label))
    for r in "012":
        assert joined[r] == ["".join(f"{r}:{i:06d};" for i in range(20000)), "B" * 1024, "end"]


def test_output_pattern_with_task_number_writes_one_file_per_task(slurm_cluster):
    """%t (and %n) name a file per task (per node); %N is the host name, shared by all three
    nodes here. With %t/%n/%N the file is opened by slurmstepd on the task's node (srun(1))."""
    with tempfile.TemporaryDirectory() as out:
        slurm_cluster.run("srun", *ONE_PER_NODE, f"--output={out}/%t.out", "bash", "-c", "echo $SLURMD_NODENAME")
        assert sorted(os.listdir(out)) == ["0.out", "1.out", "2.out"]
        assert sorted(open(f"{out}/{r}.out").read() for r in "012") == ["n1\n", "n2\n", "n3\n"]


def test_down_node_ends_the_job_and_refuses_new_steps(slurm_cluster):
    jobid = slurm_cluster.submit("srun --ntasks-per-node=1 sleep 300")
    try:
        slurm_cluster.down("n2")
        assert slurm_cluster.states()["n2"] == "down"
        # the job dies with the node (JobRequeue=0): a step that names it fails at once
        joined = slurm_cluster.run("srun", "--jobid", jobid, "--overlap", *ONE_PER_NODE, "true", check=False)
        assert joined.returncode == 1
        assert f"Slurm job {jobid} has expired" in joined.stderr
        slurm_cluster.wait_for(lambda: slurm_cluster.job_state(jobid) == "NODE_FAIL", 30, "NODE_FAIL")
        # a new job on the down node queues; --immediate turns the wait into an error
        fresh = slurm_cluster.run("srun", "--immediate=2", "--nodelist", "n[1-3]", *ONE_PER_NODE, "true",
                                  check=False, timeout=30)
        assert fresh.returncode == 1
        assert "Required node not available (down, drained or reserved)" in fresh.stderr
        assert "Unable to allocate resources: Requested nodes are busy" in fresh.stderr
    finally:
        slurm_cluster.resume("n2")
    assert slurm_cluster.states()["n2"] == "idle"


@pytest.mark.skipif(missing_requirements() is not None, reason=str(missing_requirements()))
def test_stop_leaves_no_process_behind():
    with tempfile.TemporaryDirectory(prefix="witty-slurm-") as root:
        cluster = SlurmCluster(root)
        cluster.start()
        daemons = [p.pid for p in cluster.procs]
        try:
            cluster.submit("srun --ntasks-per-node=1 sleep 300")
            assert len(cluster.run("squeue", "-h", "-o", "%i").stdout.split()) == 1
        finally:
            cluster.stop()
        for pid in daemons:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        marker = f"{MARKER}={root}\0".encode()
        left = []
        for entry in os.scandir("/proc"):
            try:
                if entry.name.isdigit() and marker in open(f"/proc/{entry.name}/environ", "rb").read() + b"\0":
                    left.append(entry.name)
            except OSError:
                continue
        assert left == []
        assert not cluster.procs
