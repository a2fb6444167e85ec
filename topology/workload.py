"""The workload: recognising AI training/inference processes and their roles, and choosing the
processes a diagnosis is about.

Pure functions over a process's name, command line, mapped libraries and allowlisted
environment, used by the live collectors and the legacy reader (which store the result in the
process's attrs ``framework``, ``role``, ``ai``); then `resolve_workload`, which the diagnosis and
the views share: the processes named by pid and their descendants, else the AI processes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cached_property
from operator import attrgetter
from typing import Any, Literal

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.ids import threads_of_processes
from witty_profiler.topology.lazy import LazyPattern
from witty_profiler.topology.models import Entity, Fields
from witty_profiler.topology.query import GraphQuery
from witty_profiler.topology.vocabulary import T
from witty_profiler.topology.wording import counted

# (framework, pattern in cmdline or name)
_CMDLINE_FRAMEWORKS = [
    ("vllm", re.compile(r"\bvllm\b", re.I)),
    ("sglang", re.compile(r"\bsglang\b", re.I)),
    ("deepspeed", re.compile(r"\bdeepspeed\b", re.I)),
    ("megatron", re.compile(r"megatron", re.I)),
    ("torchrun", re.compile(r"\btorchrun\b|torch\.distributed\.(run|launch)", re.I)),
    ("mindspore", re.compile(r"\bmindspore\b", re.I)),
    ("tensorflow", re.compile(r"\btensorflow\b", re.I)),
    ("jax", re.compile(r"\bjax\b", re.I)),
    ("triton", re.compile(r"tritonserver", re.I)),
    ("tgi", re.compile(r"text-generation-launcher|text-generation-server", re.I)),
]

# (library, framework it implies) from /proc/PID/maps
_LIBRARIES = [
    ("libtorch_cuda", "pytorch"), ("libtorch_npu", "pytorch"), ("libtorch", "pytorch"),
    ("libcudart", "cuda"), ("libnccl", "cuda"), ("libcublas", "cuda"),
    ("libascendcl", "cann"), ("libhccl", "cann"), ("libge_runner", "cann"),
    ("libtensorflow", "tensorflow"), ("libmindspore", "mindspore"), ("libxla", "jax"),
]

# what to look for in a maps file before parsing it: the directory separator keeps 'libtorch' from
# matching inside another name
LIBRARY_MARKERS = tuple(f"/{prefix}".encode() for prefix, _ in _LIBRARIES)
RANK_MARKERS = (b"RANK=", b"WORLD_SIZE=")  # at the start of an environ entry (after a NUL, or first)

# Benchmark clients that drive a server: part of the experiment, not the workload being served.
_LOAD_GENERATORS = re.compile(r"\bvllm\s+bench\b|benchmark_serving|\bsglang\.bench_serving\b|\bgenai-perf\b", re.I)
# PyTorch names its DataLoader worker processes pt_data_worker and the pin-memory thread pt_data_pin
# (torch.multiprocessing._set_thread_name); pt_autograd_N threads run the backward pass: compute
_LOADER_NAMES = re.compile(r"pt_data_worker|pt_data_pin|dataloader|data_loader|loader|preprocess|pin_memory", re.I)
# the names PyTorch gives threads of its own, by what they do
_THREAD_ROLES = [("loader", _LOADER_NAMES), ("compute", re.compile(r"^pt_(main_thread|autograd|nccl|hccl)", re.I)),
                 ("launcher", re.compile(r"^pt_elastic", re.I))]
_RANK_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
_NUMBERS = LazyPattern(globals(), "_NUMBERS", r"\d+")


def frameworks_in(name: str, cmdline: str, libraries: Iterable[str] = ()) -> list[str]:
    found = [fw for fw, pattern in _CMDLINE_FRAMEWORKS if pattern.search(cmdline) or pattern.search(name)]
    for lib in libraries:
        base = lib.rsplit("/", 1)[-1]
        for prefix, fw in _LIBRARIES:
            if base.startswith(prefix) and fw not in found:
                found.append(fw)
                break
    return found


def classify_process(name: str, cmdline: str, libraries: Iterable[str] = (), env: dict[str, str] | None = None,
                     parent: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return attrs to set on a process: ai (bool), framework (str|None), role, rank, world_size.

    role is one of: ``inference`` (a serving engine or its workers), ``trainer``, ``loader``
    (DataLoader / preprocessing workers: children of an AI process whose name or command line
    says so, or multiprocessing children of a trainer), ``launcher`` (torchrun, deepspeed
    launcher), ``load_generator`` (a benchmark client such as ``vllm bench serve``: not part of the
    workload, so ai is False), or ``None`` for a process that is not part of an AI workload.
    """
    env = env or {}
    frameworks = frameworks_in(name, cmdline, libraries)
    ranked = any(k in env for k in _RANK_KEYS)
    parent_ai = bool(parent and parent.get("ai"))
    ai = bool(frameworks) or ranked
    role: str | None = None
    if _LOAD_GENERATORS.search(cmdline):
        return {"ai": False, "framework": frameworks[0] if frameworks else None, "role": "load_generator"}
    if _LOADER_NAMES.search(name) and (ai or parent_ai):
        role = "loader"
    elif any(fw in frameworks for fw in ("vllm", "sglang", "triton", "tgi")) or (
            parent_ai and parent.get("role") == "inference"):
        role = "inference"
    elif "torchrun" in frameworks and not ranked:
        role = "launcher"
    elif ai:
        role = "trainer"
    elif parent_ai and "multiprocessing" in cmdline:
        role = "loader" if parent.get("role") == "trainer" else parent.get("role")
    if parent_ai and role is not None:
        ai = True
    result: dict[str, Any] = {"ai": ai, "framework": frameworks[0] if frameworks else (
        parent.get("framework") if parent_ai else None), "role": role}
    for key, attr, slurm in (("RANK", "rank", "SLURM_PROCID"), ("LOCAL_RANK", "local_rank", "SLURM_LOCALID"),
                             ("WORLD_SIZE", "world_size", "SLURM_NTASKS")):
        # a job that srun starts directly (Megatron, Lightning) takes its rank from Slurm's task ids
        value = env.get(key, env.get(slurm) if ai and "RANK" not in env else None)
        if value is not None:
            result[attr] = _int(value)
    if "MASTER_ADDR" in env:
        result["master_addr"] = env["MASTER_ADDR"] + (f":{env['MASTER_PORT']}" if env.get("MASTER_PORT") else "")
    return result


_LOOPBACK = LazyPattern(globals(), "_LOOPBACK", r"^(localhost|127\.[\d.]+|::1|\[::1\])(:|$)", re.I)


def job_of(attrs: dict[str, Any], env: dict[str, str], host: str, pod: str | None = None) -> dict[str, str] | None:
    """The distributed job a rank belongs to, as (id, scheduler, job_id) for its `job` entity, or None
    for a process without a rank. The most specific name wins: the Slurm job, the torchrun run id
    (torchrun's default 'none' names nothing), the rendezvous address with the world size (qualified by
    the host when it is a loopback address: such ranks are all on that host), the Kubernetes pod."""
    if attrs.get("rank") is None:
        return None
    run_id = env.get("TORCHELASTIC_RUN_ID", "")
    master = attrs.get("master_addr") or ""
    if env.get("SLURM_JOB_ID"):
        scheduler, key = "slurm", env["SLURM_JOB_ID"]
    elif run_id and run_id != "none":
        scheduler, key = "torchelastic", run_id
    elif master:
        where = f"{host}/{master}" if _LOOPBACK.match(master) else master
        scheduler, key = "world", f"{where}:{attrs.get('world_size')}"
    elif pod:
        scheduler, key = "pod", pod
    else:
        return None
    return {"id": f"{T.JOB}:{scheduler}:{key}", "scheduler": scheduler, "job_id": key}


def program(cmdline: str) -> str:
    """A command line without its numbers: the program and options that workers of one job share, whose
    numbers tell the workers apart (multiprocessing's `spawn_main(tracker_fd=25, pipe_handle=31)`, a
    shard or a rank given as an argument)."""
    return _NUMBERS.sub("N", cmdline)


def thread_role(name: str, process_ai: bool) -> str | None:
    """What a thread of an AI process does, from its OS name (a Python thread keeps the process's
    name unless the program names it): ``loader`` (DataLoader / pin-memory / preprocessing),
    ``compute`` (PyTorch's main, autograd and collective threads), ``launcher``, or None."""
    if not process_ai or not name:
        return None
    return next((role for role, pattern in _THREAD_ROLES if pattern.search(name)), None)


def _int(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:
        return text


# -- the workload of a graph ------------------------------------------------------------------
Mode = Literal["pids", "job", "ai", "host"]


class Workload(Fields):  # not a dataclass: `collect` imports this module
    """The processes a diagnosis and its views are about, and how they were chosen.

    ``pids``: the processes named (and their descendants, by ``parent_of``); ``job``: the processes
    of the job a window was collected for (`collect --job`); ``ai``: the processes marked ``ai`` (AI
    training/inference and their workers); ``host``: nobody, and only host-level facts are judged, on
    the whole host."""

    _FIELDS = ("mode", "processes", "requested_pids", "job")

    def __init__(self, mode: Mode, processes: list[Entity], requested_pids: list[int] | None = None,
                 job: str | None = None) -> None:
        self.mode = mode
        self.processes = processes  # id order
        self.requested_pids = [] if requested_pids is None else requested_pids
        self.job = job

    @cached_property
    def ids(self) -> frozenset[str]:
        return frozenset(p.id for p in self.processes)

    def describe(self) -> str:
        if self.mode == "pids":
            n = len(self.processes)
            return f"pid {', '.join(map(str, self.requested_pids))} and descendants ({counted(n, 'processes')})"
        if self.mode == "job":
            return f"the processes of job {self.job} on this host ({counted(len(self.processes), 'processes')})"
        if self.mode == "ai":
            return f"{len(self.processes)} AI training/inference processes"
        return "the whole host (no --pid given and no AI training/inference process recognised)"


def resolve_workload(q: GraphQuery, pids: Iterable[int] | None = None) -> Workload:
    """The workload of a graph: `pids` and their descendants, else the AI processes, else none.
    A pid the graph does not hold is an InputError."""
    requested = sorted(set(pids)) if pids else []
    processes = q.graph.entities(T.PROCESS)
    if requested:
        by_pid: dict[int, list[Entity]] = {}
        for p in processes:
            pid = p.attrs.get("pid")
            if isinstance(pid, int):
                by_pid.setdefault(pid, []).append(p)
        missing = [pid for pid in requested if pid not in by_pid]
        if missing:
            raise InputError(f"pid {', '.join(map(str, missing))} is not in this graph; "
                             f"list its processes with: witty-profiler query GRAPH --type process")
        chosen: dict[str, Entity] = {}
        frontier = [p for pid in requested for p in by_pid[pid]]
        while frontier:
            proc = frontier.pop()
            if proc.id not in chosen:
                chosen[proc.id] = proc
                frontier.extend(c for c in q.children_of(proc) if c.type == T.PROCESS)
        return Workload("pids", sorted(chosen.values(), key=lambda e: e.id), requested)
    job = collected_job(q.graph)
    if job is not None:  # collected for one job (collect --job): its processes, as the window read them
        return Workload("job", [p for p in processes if p.attrs.get("in_scope") is True], job=job)
    ai = [p for p in processes if p.attrs.get("ai") is True]
    return Workload("ai", ai) if ai else Workload("host", [])


def collected_job(graph: Any) -> str | None:
    """The job a graph's window was scoped to (`collect --job`), recorded in meta.scope."""
    scope = graph.meta.extra.get("scope")
    job = scope.get("job") if isinstance(scope, dict) else None
    return str(job) if job else None


def workload_members(q: GraphQuery, workload: Workload) -> frozenset[str]:
    """The workload's processes and their threads (by has_thread edge, or by what a thread's id says)."""
    members = set(workload.ids)
    members.update(t.id for p in workload.processes for t in q.threads_of(p))
    if workload.ids:
        members.update(threads_of_processes(map(_ID, q.graph.entities(T.THREAD)), workload.ids))
    return frozenset(members)


_ID = attrgetter("id")
