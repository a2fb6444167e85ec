"""The processes of one distributed job on this host: the scope of `collect --job ID`.

A Slurm step or torchrun worker carries its job in its environment (SLURM_JOB_ID, TORCHELASTIC_RUN_ID).
The step that runs this collector belongs to the job too (it joined it with `srun --jobid --overlap`),
so processes of our own step are left out; and where several slurmd daemons share one machine (a
test cluster, `slurmd -N`), only the tasks of our node (SLURMD_NODENAME) are this host's.
"""

from __future__ import annotations

import os

from witty_profiler.collectors.lib.procfs import parse_environ, read_bytes
from witty_profiler.topology.errors import InputError

_JOB_KEYS = ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")


def job_pids(job: str, proc: str = "/proc", own_env: dict[str, str] | None = None) -> set[int]:
    """Pids whose environment names `job`, less our own step and other nodes' tasks."""
    if not job or any(c.isspace() or c == "\0" for c in job):
        raise InputError(f"--job needs a job id (a Slurm job id or a torchrun run id), not {job!r}")
    own = dict(os.environ) if own_env is None else own_env
    own_step = (own.get("SLURM_JOB_ID"), own.get("SLURM_STEP_ID")) if own.get("SLURM_STEP_ID") else None
    node = own.get("SLURMD_NODENAME")
    needles = [f"{key}={job}".encode() for key in _JOB_KEYS]
    found: set[int] = set()
    me = os.getpid()
    for name in os.listdir(proc):
        if not name.isdigit() or int(name) == me:
            continue
        raw = read_bytes(f"{proc}/{name}/environ")
        if not raw or not any(raw.startswith(n + b"\0") or b"\0" + n + b"\0" in raw for n in needles):
            continue  # searched as bytes: environments of other jobs are not decoded
        env = parse_environ(raw.decode("utf-8", "replace"))
        if own_step and (env.get("SLURM_JOB_ID"), env.get("SLURM_STEP_ID")) == own_step:
            continue
        if node and env.get("SLURMD_NODENAME", node) != node:
            continue
        found.add(int(name))
    return found
