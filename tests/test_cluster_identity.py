"""Host, rank and job identity: `collect --host`, ranks and jobs from the environment, `collect --job`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from witty_profiler.collectors.base import default_host
from witty_profiler.collectors.engine import run_window
from witty_profiler.collectors.lib.jobscope import job_pids
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.ids import check_host_name
from witty_profiler.topology.workload import classify_process, job_of

SPIN = "import os, time\nif os.environ.get('FORK'):\n    os.fork()\nwhile True: pass"


def test_host_names_that_ids_can_carry():
    assert check_host_name("n1") == "n1"
    assert check_host_name("gpu-node-017.cluster_a") == "gpu-node-017.cluster_a"
    for bad in ("", "a:b", "a|b", "a b", "-x", "x" * 254, "é"):
        with pytest.raises(InputError, match="bad host name"):
            check_host_name(bad)


def test_default_host_follows_the_launcher(monkeypatch):
    monkeypatch.delenv("WITTY_HOST", raising=False)
    monkeypatch.setenv("SLURMD_NODENAME", "n7")
    assert default_host() == "n7"
    monkeypatch.setenv("WITTY_HOST", "k8s-node-3")
    assert default_host() == "k8s-node-3"


def test_rank_and_job_from_the_environment():
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
           "SLURM_JOB_ID": "42"}
    attrs = classify_process("python3", "python3 train.py", env=env)
    assert (attrs["rank"], attrs["local_rank"], attrs["world_size"], attrs["master_addr"]) == (3, 1, 8,
                                                                                                "10.0.0.1:29500")
    assert job_of(attrs, env, "n1") == {"id": "job:slurm:42", "scheduler": "slurm", "job_id": "42"}
    # torchrun's default run id names nothing; the rendezvous address does
    torch_env = {**env, "TORCHELASTIC_RUN_ID": "none"}
    del torch_env["SLURM_JOB_ID"]
    assert job_of(attrs, torch_env, "n1")["id"] == "job:world:10.0.0.1:29500:8"
    assert job_of(attrs, {**torch_env, "TORCHELASTIC_RUN_ID": "r7"}, "n1")["id"] == "job:torchelastic:r7"
    # a loopback rendezvous is one host's job: two hosts' 'localhost' jobs are different jobs
    local = classify_process("python3", "python3 train.py", env={"RANK": "0", "WORLD_SIZE": "2",
                                                                   "MASTER_ADDR": "127.0.0.1"})
    assert job_of(local, {}, "n1")["id"] != job_of(local, {}, "n2")["id"]
    assert job_of(classify_process("bash", "bash", env={}), {}, "n1") is None


def test_slurm_task_ids_are_ranks_of_an_ai_process_only():
    slurm = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "16", "SLURM_JOB_ID": "9"}
    assert classify_process("python3", "python3 -m megatron.train", env=slurm)["rank"] == 5
    assert "rank" not in classify_process("sleep", "sleep 100", env=slurm)


def _spawn(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SPIN], env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


@pytest.mark.live
def test_collect_job_scope_host_name_and_job_entity():
    """Two jobs on this host; `--job 4242` scopes the window to the first one's processes, which join a job
    entity in rank order; the forked child that inherited its parent's rank is not another member."""
    mine = {"SLURM_JOB_ID": "4242", "WORLD_SIZE": "2", "MASTER_ADDR": "10.9.9.9", "MASTER_PORT": "1234"}
    procs = [_spawn({**mine, "RANK": "0", "FORK": "1"}), _spawn({**mine, "RANK": "1"}),
             _spawn({"SLURM_JOB_ID": "4343", "RANK": "0", "WORLD_SIZE": "1"})]
    try:
        time.sleep(0.5)
        assert {procs[0].pid, procs[1].pid} <= job_pids("4242", own_env={})
        assert procs[2].pid not in job_pids("4242", own_env={})
        graph = run_window(1.0, 0.5, collectors=["process"], host="rack1-n07", job="4242")
    finally:
        for p in procs:  # the forked child too: each spinner leads its own process group
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert graph.meta.hosts == ["rack1-n07"]
    scope = graph.meta.extra["scope"]  # the two ranks, and the child of one once it has forked
    assert scope["job"] == "4242" and scope["processes"] >= 2 and "note" not in scope
    job = graph.entity("job:slurm:4242")
    assert job is not None and job.attrs["world_size"] == 2 and job.attrs["master_addr"] == "10.9.9.9:1234"
    members = {e.source: e.attrs["rank"] for e in graph.edges("member_of")}
    assert members == {f"process:rack1-n07:{procs[0].pid}": 0, f"process:rack1-n07:{procs[1].pid}": 1}
    in_scope = {e.attrs["pid"] for e in graph.entities("process") if e.attrs.get("in_scope")}
    assert {procs[0].pid, procs[1].pid} <= in_scope and procs[2].pid not in in_scope
    child = [e for e in graph.entities("process") if e.attrs.get("ppid") == procs[0].pid]
    assert child and all(e.attrs.get("job") is None for e in child)


@pytest.mark.live
@pytest.mark.slow
def test_collect_job_without_a_process_here_says_so(tmp_path):
    """`collect --job J` where no process of J runs: one line on stderr (even with -q) and meta.scope says so."""
    job = f"no-such-job-{os.getpid()}"
    out = tmp_path / "g.json"
    done = subprocess.run([sys.executable, "-m", "witty_profiler", "collect", "--job", job, "--duration", "0.5",
                           "--interval", "0.25", "--collectors", "process", "-q", "-o", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        f"witty-profiler: warning: no process of job {job} on this host"), done.stderr
    scope = json.loads(out.read_text())["meta"]["scope"]
    assert scope["job"] == job and scope["processes"] == 0
    assert scope["note"].startswith(f"no process of job {job} on this host when the window opened")


@pytest.mark.slow
def test_collect_rejects_a_bad_host_name_before_the_window():
    done = subprocess.run([sys.executable, "-m", "witty_profiler", "collect", "--duration", "1", "--host", "a:b",
                           "-o", "-"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "bad host name" in done.stderr


@pytest.mark.parametrize("given", ["-ebpf", "-ebpf,-pmu", "process,cpu"])
def test_every_collectors_form_reaches_the_hosts_as_one_argument(given):
    """`cluster collect --collectors=-ebpf` hands each host `--collectors=-ebpf`: the host's parser reads the
    value, not an option called -ebpf."""
    from witty_profiler.cli import build_parser
    from witty_profiler.cluster.fanout import collect_args
    outer = build_parser().parse_args(["cluster", "collect", "--hosts", "h1", "-o", "d", f"--collectors={given}"])
    assert outer.collectors == given
    host = build_parser().parse_args(collect_args(1.0, 0.5, host="h1", collectors=outer.collectors))
    assert host.collectors == given and host.host == "h1"
