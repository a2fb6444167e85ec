"""Slurm fan-out: one step with one task per node, joining the running job (`srun --jobid J --overlap`)
or on a node list, each task running collect with its node's name (SLURMD_NODENAME) as the host.

The graphs come back through srun's own I/O forwarding, labelled by task (`srun --label`): no shared
file system is assumed. The nodes are checked against Slurm first (`scontrol show node`): a name Slurm
does not know is reported and left out (srun would refuse the whole step), and so is a node that is
down or drained, with the State and Reason Slurm holds for it (srun would otherwise wait for it); a
node whose task fails is reported with what it printed. srun leads its own process group: cancelling
the collection or passing its deadline sends it SIGTERM, on which it cancels the step on the nodes.
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

from witty_profiler.cluster.fanout import CANCELLED, GRACE_S, HostResult, Launched, ask, collect_args, keep_graph
from witty_profiler.topology.errors import InputError

_LABEL = re.compile(rb"^\s*(\d+): ?")
SRUN_LINE = 1024  # srun --label forwards a task's output in lines of at most this many bytes
_TASK_ERROR = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (.*)")
_NOT_FOUND = re.compile(r"^Node (\S+) not found\s*$")
# a node in these base states, or with one of these flags (State=IDLE+DRAIN), takes no new step; '*' (not
# responding) is a flag too. A step joining a running job still runs on the job's nodes that are draining, in
# maintenance or failing (ALLOCATED+DRAIN...): the job holds them, so long as they are up and answer.
_BASE_UNUSABLE = {"DOWN", "ERROR", "FUTURE", "UNKNOWN"}
_FLAGS_UNUSABLE = {"DRAIN", "FAIL", "MAINT", "MAINTENANCE", "NOT_RESPONDING", "NO_RESPOND", "POWERED_DOWN",
                   "POWER_DOWN", "POWERING_DOWN", "INVALID", "INVALID_REG", "REBOOT_ISSUED"}
_FLAGS_HELD_BY_THE_JOB = {"DRAIN", "FAIL", "MAINT", "MAINTENANCE"}


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


def node_states(nodes: list[str], timeout_s: float = 30.0) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """{node: (State, Reason)} of the nodes Slurm knows (`scontrol show node -o`), and the names it does not
    know ('Node n4 not found'), in the order given."""
    argv = ["scontrol", "show", "node", "-o", ",".join(nodes)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise InputError("scontrol: not found; is this a Slurm login or compute node?") from None
    except subprocess.TimeoutExpired:
        raise InputError(f"scontrol show node did not answer within {timeout_s:g} s") from None
    # 'Node n4 not found' comes on stdout (22.05) or stderr, and makes the exit code 1
    unknown = {m.group(1) for line in (done.stdout + "\n" + done.stderr).splitlines()
               if (m := _NOT_FOUND.match(line.strip()))}
    other = [line.strip() for line in done.stderr.splitlines() if line.strip() and not _NOT_FOUND.match(line.strip())]
    if done.returncode != 0 and (other or not unknown):  # not only names it does not know: it failed
        raise InputError(f"scontrol show node failed: {(other or ['no message'])[-1][:300]}")
    known = {}
    for line in done.stdout.splitlines():
        name = re.match(r"NodeName=(\S+)", line)
        if name:
            state = re.search(r"\sState=(\S+)", line)
            known[name.group(1)] = (state.group(1) if state else "UNKNOWN", _reason(line))
    return known, [n for n in nodes if n not in known]


def _reason(line: str) -> str:
    """Reason=... of a `scontrol show node -o` line: free text, ended by the [user@time] Slurm adds."""
    at = line.find(" Reason=")
    if at < 0:
        return ""
    rest = line[at + len(" Reason="):]
    stamped = re.match(r"(.*?\[[^\]\s]*@[^\]\s]*\])", rest)
    return (stamped.group(1) if stamped else rest).strip()


def _words(state: str) -> tuple[str, set[str]]:
    """State=DOWN*+DRAIN -> ('DOWN', {'DRAIN', 'NOT_RESPONDING'})."""
    base, *flags = state.upper().split("+")
    words = set(flags)
    if "*" in state:
        words.add("NOT_RESPONDING")
    return base.rstrip("*~#%!$@^-"), words


def unusable_state(state: str, in_job: bool = False) -> str | None:
    """Why a node in Slurm's `state` (IDLE, ALLOCATED+DRAIN, DOWN*...) cannot run the step, in a word, or None:
    a new allocation needs a node that is up and not drained; a step joining a running job (`in_job`) runs
    on the job's draining nodes too."""
    base, flags = _words(state)
    if in_job:
        flags -= _FLAGS_HELD_BY_THE_JOB
    if base in _BASE_UNUSABLE:
        return base.lower()
    if "DRAIN" in flags:
        return "drained"
    bad = sorted(flags & _FLAGS_UNUSABLE)
    return bad[0].lower().replace("_", " ") if bad else None


def usable_nodes(nodes: list[str], in_job: bool = False) -> tuple[list[str], list[HostResult]]:
    """The nodes a step can run on, and a 'skipped' result for each other: a name that is not a node of this
    cluster, or a node Slurm holds down or drained (with its State and Reason)."""
    known, unknown = node_states(nodes)
    skipped = [HostResult(n, "skipped", "not a node of this cluster (scontrol show node does not know it)")
               for n in unknown]
    usable = []
    for node in nodes:
        if node not in known:
            continue
        state, reason = known[node]
        word = unusable_state(state, in_job)
        if word is None:
            usable.append(node)
        else:
            skipped.append(HostResult(node, "skipped", f"Slurm reports the node {word}: State={state}"
                                                       + (f" Reason={reason}" if reason else "")))
    return usable, sorted(skipped, key=lambda r: r.host)


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
             timeout_s: float | None = None, launched: Launched | None = None) -> list[HostResult]:
    """Run the step on `nodes` (those `usable_nodes` kept) and split its labelled output into one graph per
    node. srun is started through `launched`: cancelling it, or the deadline, ends srun and so the step."""
    launched = launched or Launched()
    argv = srun_argv(nodes, duration_s, interval_s, job, remote_command, collectors, timeout_s)
    deadline = timeout_s or duration_s + GRACE_S
    start = time.monotonic()
    kept: set[str] = set()
    results: list[HostResult] = []
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryFile() as err:
        try:
            proc = launched.popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
        except OSError as exc:
            return [HostResult(n, "failed", f"cannot start srun: {exc.strerror or exc}") for n in nodes]
        if proc is None:
            return [HostResult(n, "cancelled", CANCELLED) for n in nodes]
        timer = _Timer(launched, proc, deadline)
        try:
            outputs = _split_by_task(proc, Path(tmp))
            code = proc.wait()
        finally:
            timer.cancel()
        launched.release(proc)  # not when something escaped: leaving `launched` then ends srun
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
        seconds = round(time.monotonic() - start, 3)
        for path in outputs:
            # a task that printed part of a graph is reported below, with what its node said
            result = keep_graph(None, path.read_bytes(), "", 0, directory, seconds)
            if result.status == "ok" and result.host in nodes and result.host not in kept:
                kept.add(result.host)
                results.append(result)
    said = _said_by_node(stderr)
    for node in nodes:
        if node in kept:
            continue
        if launched.cancelled:
            results.append(HostResult(node, "cancelled", CANCELLED, seconds=seconds))
        elif timer.fired:
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
    """Ends srun when the deadline passes: SIGTERM, on which it cancels its step on the nodes (a SIGKILLed
    srun would leave the step's tasks running there), then SIGKILL if it lingers."""

    def __init__(self, launched: Launched, proc: subprocess.Popen, seconds: float) -> None:
        import threading
        self.fired = False
        self._timer = threading.Timer(seconds, self._fire, (launched, proc))
        self._timer.daemon = True
        self._timer.start()

    def _fire(self, launched: Launched, proc: subprocess.Popen) -> None:
        self.fired = True
        launched.end(proc)

    def cancel(self) -> None:
        self._timer.cancel()
