"""Slurm fan-out: one step with one task per node, joining the running job (`srun --jobid J --overlap`)
or on a node list, each task running collect with its node's name (SLURMD_NODENAME) as the host.

The graphs come back through srun's own I/O forwarding, labelled by task (`srun --label`): no shared
file system is assumed. Nodes that are down or drained are reported and left out of the step (srun
would otherwise wait for them), and a node whose task fails is reported with what it printed.
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

from witty_profiler.cluster.fanout import GRACE_S, HostResult, ask, collect_args, keep_graph
from witty_profiler.topology.errors import InputError

_LABEL = re.compile(rb"^\s*(\d+): ?")
SRUN_LINE = 1024  # srun --label forwards a task's output in lines of at most this many bytes
_TASK_ERROR = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (.*)")
_UNUSABLE = ("down", "drain", "drng", "fail", "maint", "unk", "no_respond", "powered_down", "inval")


def _run(argv: list[str]) -> str:
    return ask(argv, "is this a Slurm login or compute node?")


def expand(nodelist: str) -> list[str]:
    """n[1-3,7] -> n1 n2 n3 n7, as Slurm expands it."""
    if not nodelist or nodelist.startswith("-"):
        raise InputError(f"bad node list {nodelist!r}: e.g. n[1-64] or gpu01,gpu02")
    return _run(["scontrol", "show", "hostnames", nodelist]).split()


def job_nodes(job: str) -> list[str]:
    """The nodes of a running job."""
    if not job.replace("_", "").isdigit():
        raise InputError(f"bad Slurm job id {job!r}: a number such as 4242 (or 4242_3 for an array task)")
    out = _run(["squeue", "-h", "-j", job, "-o", "%T|%N"]).strip()
    if not out:
        raise InputError(f"Slurm job {job} is not in the queue (finished, or another cluster's)")
    state, _, nodes = out.splitlines()[0].partition("|")
    if state != "RUNNING":
        raise InputError(f"Slurm job {job} is {state}, not RUNNING: a step can join a running job only")
    return expand(nodes)


def unusable(nodes: list[str]) -> dict[str, str]:
    """node -> its state, for the nodes a step cannot run on now (down, drained, failing...)."""
    out = _run(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N|%T"])
    found = {}
    for line in out.splitlines():
        node, _, state = line.partition("|")
        if any(word in state.lower() for word in _UNUSABLE):
            found[node] = state.lower()
    return found


def srun_argv(nodes: list[str], duration_s: float, interval_s: float, job: str | None = None,
              remote_command: str = "witty-profiler", collectors: str | None = None,
              timeout_s: float | None = None) -> list[str]:
    minutes = max(1, math.ceil((timeout_s or duration_s + GRACE_S) / 60))
    argv = ["srun", "--label", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
            f"--nodelist={','.join(nodes)}", "--kill-on-bad-exit=0", f"--time={minutes}",
            "--job-name=witty-profiler"]
    if job:
        argv += [f"--jobid={job}", "--overlap"]  # a step of the job, sharing its CPUs, not waiting for them
    else:
        argv += ["--oversubscribe", "--immediate=30"]  # beside running jobs; fail rather than queue
    # each task names its graph after its node (SLURMD_NODENAME, collect's default) and scopes the job's
    # processes of that node
    return argv + shlex.split(remote_command) + collect_args(duration_s, interval_s, None, job, collectors)


def run_step(nodes: list[str], directory: Path, duration_s: float, interval_s: float, job: str | None = None,
             remote_command: str = "witty-profiler", collectors: str | None = None,
             timeout_s: float | None = None) -> list[HostResult]:
    """Run the step and split its labelled output into one graph per node."""
    down = unusable(nodes)
    results = [HostResult(n, "skipped", f"Slurm reports the node {state}") for n, state in sorted(down.items())]
    usable = [n for n in nodes if n not in down]
    if not usable:
        return results
    argv = srun_argv(usable, duration_s, interval_s, job, remote_command, collectors, timeout_s)
    deadline = timeout_s or duration_s + GRACE_S
    start = time.monotonic()
    kept: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
        timer = _Timer(proc, deadline)
        try:
            outputs = _split_by_task(proc, Path(tmp))
            code = proc.wait()
        finally:
            timer.cancel()
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
        seconds = round(time.monotonic() - start, 3)
        for path in outputs:
            # a task that printed part of a graph is reported below, with what its node said
            result = keep_graph(None, path.read_bytes(), "", 0, directory, seconds)
            if result.status == "ok" and result.host in usable and result.host not in kept:
                kept.add(result.host)
                results.append(result)
    said = _said_by_node(stderr)
    for node in usable:
        if node in kept:
            continue
        if timer.fired:
            results.append(HostResult(node, "timeout", f"no graph after {deadline:g} s", seconds=seconds))
        else:
            reason = said.get(node) or f"srun exit code {code}" + (f": {_last(stderr)}" if _last(stderr) else "")
            results.append(HostResult(node, "failed", reason, seconds=seconds))
    return sorted(results, key=lambda r: r.host)


def _split_by_task(proc: subprocess.Popen, folder: Path) -> list[Path]:
    """srun's labelled stdout ('3: ...') into one file per task, lines joined where srun cut them."""
    outputs: dict[int, BinaryIO] = {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = _LABEL.match(line)
            if not m:
                continue
            task = int(m.group(1))
            if task not in outputs:
                outputs[task] = open(folder / f"{task}.json", "wb")
            piece = line[m.end():]
            # srun cuts a line of more than SRUN_LINE bytes into labelled pieces of that size (their ends
            # are not the task's): a piece of exactly that size runs on into the next one
            body = piece[:-1] if piece.endswith(b"\n") else piece
            outputs[task].write(body if len(body) == SRUN_LINE else piece)
    finally:
        for f in outputs.values():
            f.close()
    return [folder / f"{task}.json" for task in sorted(outputs)]


def _said_by_node(stderr: str) -> dict[str, str]:
    """node -> why its task failed: what srun said of it ('srun: error: n2: task 1: Exited with exit code
    127') and the last line the task itself wrote to stderr (labelled with its task number)."""
    last_line: dict[int, str] = {}
    for line in stderr.splitlines():
        m = _LABEL.match(line.encode())
        if m and line.encode()[m.end():].strip():
            last_line[int(m.group(1))] = line.encode()[m.end():].decode("utf-8", "replace").strip()
    found = {}
    for line in stderr.splitlines():
        m = _TASK_ERROR.search(line)
        if m:
            tasks = [int(t) for t in re.findall(r"\d+", m.group(2))]
            own = "; ".join(last_line[t][:200] for t in tasks if t in last_line)
            found[m.group(1)] = m.group(3).strip() + (f" ({own})" if own else "")
    return found


def _last(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


class _Timer:
    """Kills srun (which cancels its step) when the deadline passes."""

    def __init__(self, proc: subprocess.Popen, seconds: float) -> None:
        import threading
        self.fired = False
        self._timer = threading.Timer(seconds, self._fire, (proc,))
        self._timer.daemon = True
        self._timer.start()

    def _fire(self, proc: subprocess.Popen) -> None:
        self.fired = True
        proc.kill()

    def cancel(self) -> None:
        self._timer.cancel()
