"""The sampling engine: one window of every registered collector, merged into one graph.

`run_window` imports every module of the `collectors` package (each registers its collectors; lib/ holds
what they stand on),
calls `prepare`, `start`, then `sample` every interval, then `finish`, and merges the fragments. Every call
is guarded: an exception becomes that collector's `error` status with a one-line reason and the
round goes on without it. Ctrl-C (SIGINT, when run in the main thread) or `stop.set()` ends the
window early; the collectors still finish and the graph is valid, with the actual duration.
"""

from __future__ import annotations

import importlib
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from importlib.machinery import all_suffixes
from typing import Any

from witty_profiler.collectors.base import REGISTRY, Collector, Context
from witty_profiler.collectors.lib.jobscope import job_pids
from witty_profiler.collectors.lib.procfs import parse_stat, read_text
from witty_profiler.collectors.numa import numa_topology
from witty_profiler.collectors.window import validate_window
from witty_profiler.topology import Graph
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.ids import check_host_name
from witty_profiler.topology.models import CollectorStatus, Meta
from witty_profiler.topology.version import VERSION as __version__

Progress = Callable[[float, float, str], None]


def discover() -> dict[str, str]:
    """Import every collector module; returns {module: reason} for those that failed to import."""
    broken: dict[str, str] = {}
    for name in module_names(importlib.import_module(__package__).__path__):
        if name.startswith("_") or name == "engine":
            continue
        try:
            importlib.import_module(f"{__package__}.{name}")
        except Exception as exc:  # noqa: BLE001 - one broken module must not stop the others
            broken[name] = _one_line(f"import failed: {type(exc).__name__}: {exc}")
    return broken


def module_names(folders: list[str]) -> list[str]:
    """The modules (not the packages: lib/ holds what collectors stand on) in these folders, in the order
    pkgutil.iter_modules gives them; it imports inspect for that, 5-7 ms of every collect. A folder this
    user cannot list gives none, as with pkgutil (a collect that dropped root after importing them)."""
    suffixes = sorted(all_suffixes(), key=len, reverse=True)  # inspect.getmodulename's order
    names: list[str] = []
    for folder in folders:
        try:
            entries = sorted(os.listdir(folder))
        except OSError:
            continue
        for entry in entries:
            name = next((entry[: -len(s)] for s in suffixes if entry.endswith(s)), "")
            if name and "." not in name and name != "__init__" and name not in names:
                names.append(name)
    return names


def scope_with_descendants(pids: list[int] | set[int], proc: str = "/proc", must_exist: bool = True) -> set[int]:
    """The given pids (each must exist, unless told otherwise) and all their descendants at this moment."""
    parents: dict[int, int] = {}
    for name in os.listdir(proc):
        if name.isdigit():
            st = parse_stat(read_text(f"{proc}/{name}/stat") or "")
            if st is not None:
                parents[int(name)] = st.ppid
    missing = sorted(p for p in pids if p not in parents)
    if missing and must_exist:
        raise InputError(f"no such process: {', '.join(map(str, missing))}")
    scope = set(pids) & parents.keys()
    changed = True
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if ppid in scope and pid not in scope:
                scope.add(pid)
                changed = True
    return scope


def run_window(duration_s: float = 10.0, interval_s: float = 1.0, pids: list[int] | None = None,
               collectors: list[str] | None = None, progress: Progress | None = None,
               stop: threading.Event | None = None, ctx: Context | None = None, host: str | None = None,
               job: str | None = None, stacks: bool = False, stacks_out: str | None = None) -> Graph:
    """Collect one window on this host and return the merged graph (meta.source = 'live'). `host` names
    the host in the graph's ids (default: Slurm's node name, else the hostname); `job` narrows the scope
    to the processes of that Slurm job or torchrun run (with `pids`, to both). `stacks` adds the on-CPU stack
    sampler (collectors.stacks, off by default) to the collectors; `stacks_out` (implies it) is where it
    writes every sampled stack, folded for a flame-graph tool."""
    validate_window(duration_s, interval_s)
    broken = discover()
    names = _select(collectors)
    if (stacks or stacks_out) and "stacks" not in names:
        names.append("stacks")
    ctx = ctx or Context()
    if stacks_out:
        ctx.cache["stacks_out"] = stacks_out
    if host is not None:
        ctx.host = check_host_name(host)
    ctx.duration_s, ctx.interval_s = duration_s, interval_s
    if pids or job is not None:
        ctx.pids = scope_with_descendants(pids or [], str(ctx.proc))
    job_scope: set[int] = set()
    if job is not None:  # a task of the job may end between the two reads
        job_scope = scope_with_descendants(job_pids(job, str(ctx.proc)), str(ctx.proc), must_exist=False)
        ctx.pids |= job_scope
    instances = [REGISTRY[n](ctx) for n in sorted(names, key=lambda n: (getattr(REGISTRY[n], "order", 50), n))]
    spent = {c.name: 0.0 for c in instances}  # wall seconds inside the collector's calls
    cpu = {c.name: 0.0 for c in instances}  # CPU seconds (user + system, reads included) of those calls
    failed: set[str] = set()

    def call(c: Collector, phase: str) -> Any:
        if c.name in failed:
            return None
        t, t_cpu = time.perf_counter(), time.thread_time()
        try:
            return getattr(c, phase)()
        except Exception as exc:  # noqa: BLE001 - a collector never stops the round
            failed.add(c.name)
            c.status = CollectorStatus(status="error", reason=_one_line(f"{phase}: {type(exc).__name__}: {exc}"))
            return None
        finally:
            spent[c.name] += time.perf_counter() - t
            cpu[c.name] += time.thread_time() - t_cpu

    halt = stop or threading.Event()
    restore = _catch_sigint(halt)
    try:
        for c in instances:
            call(c, "prepare")
        started_at = datetime.now(timezone.utc)
        t0 = time.monotonic()
        ctx.started_monotonic = t0
        for c in instances:
            call(c, "start")
        _report(progress, 0.0, duration_s, "started")
        k = 1
        while not halt.is_set():
            target = t0 + k * interval_s
            if target >= t0 + duration_s - 1e-3:
                break
            if halt.wait(max(0.0, target - time.monotonic())):
                break
            for c in instances:
                call(c, "sample")
            elapsed = time.monotonic() - t0
            _report(progress, elapsed, duration_s, f"sampled {k}")
            k = max(k + 1, int(elapsed / interval_s) + 1)  # skip ticks lost to a slow round
        if not halt.is_set():
            halt.wait(max(0.0, t0 + duration_s - time.monotonic()))
        actual = time.monotonic() - t0
        graph: Graph | None = None
        for c in instances:
            fragment = call(c, "finish")
            if isinstance(fragment, Graph):
                # the first fragment is taken as it is: merging copies every entity
                graph = fragment if graph is None else graph.merge(fragment)
        graph = graph if graph is not None else Graph()
    finally:
        restore()
    _report(progress, actual, duration_s, "finished early" if halt.is_set() else "finished")
    statuses = {}
    for c in instances:
        status = c.status.replace(extra=dict(c.status.extra))
        status.duration_s = round(spent[c.name], 4)
        status.extra["cpu_s"] = round(cpu[c.name], 4)  # the collector's own overhead on this host
        if status.privileges is None:
            status.privileges = "root" if ctx.is_root else f"uid {os.geteuid()} (not root)"
        statuses[c.name] = status
    if collectors is None:
        for module, reason in broken.items():
            statuses.setdefault(module, CollectorStatus(status="error", reason=reason))
    started = started_at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    graph.meta = Meta(hosts=[ctx.host], tool_version=__version__, started_at=started, duration_s=round(actual, 3),
                      interval_s=interval_s, host_info={ctx.host: host_info(ctx)},
                      collectors=dict(sorted(statuses.items())), source="live")
    if job is not None:  # what the window was scoped to: the job's processes are the diagnosis' workload
        graph.meta.extra["scope"] = job_scope_record(job, len(job_scope))
    graph.make_visible()  # names, command lines and paths are the host's words: data, never controls
    return graph


def job_scope_record(job: str, processes: int) -> dict[str, Any]:
    """meta.scope of a window scoped to a job: the job, how many of its processes (with their descendants) this
    host had when the window opened, and where there were none, a note that says so."""
    record: dict[str, Any] = {"job": job, "processes": processes}
    if processes == 0:
        record["note"] = (f"no process of job {job} on this host when the window opened (SLURM_JOB_ID or "
                          f"TORCHELASTIC_RUN_ID={job} in no process's environment): the window has no workload")
    return record


def host_info(ctx: Context) -> dict[str, Any]:
    model = None
    for line in (read_text(f"{ctx.proc}/cpuinfo") or "").splitlines():
        if line.startswith(("model name", "Model Name", "cpu model", "Hardware")):
            model = line.split(":", 1)[1].strip()
            break
    return {"kernel": os.uname().release, "cpu_model": model, "cpus": os.cpu_count(),
            "numa_nodes": len(numa_topology(ctx)) or 1}


def _select(wanted: list[str] | None) -> list[str]:
    """The collectors asked for; names given as '-name' leave that one out of the defaults instead
    (['-ebpf'] = every default collector but ebpf)."""
    defaults = [n for n, cls in REGISTRY.items() if cls.default_enabled]
    if wanted is None:
        return defaults
    unknown = sorted({n.removeprefix("-") for n in wanted} - set(REGISTRY))
    if unknown:
        what = "collector" if len(unknown) == 1 else "collectors"
        raise InputError(f"unknown {what}: {', '.join(unknown)}; known: {', '.join(sorted(REGISTRY))}")
    left_out = {n[1:] for n in wanted if n.startswith("-")}
    if left_out and len(left_out) != len(wanted):
        raise InputError("name the collectors to run, or the ones to leave out with '-' (e.g. -ebpf), not both")
    return [n for n in defaults if n not in left_out] if left_out else list(dict.fromkeys(wanted))


def _catch_sigint(halt: threading.Event) -> Callable[[], None]:
    """In the main thread, the first SIGINT ends the window instead of raising inside a collector;
    a second one (the collectors are finishing) interrupts as usual."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_sigint(signum: int, frame: Any) -> None:
        if halt.is_set():
            raise KeyboardInterrupt
        halt.set()

    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, on_sigint)
    return lambda: signal.signal(signal.SIGINT, previous)


def _report(progress: Progress | None, elapsed: float, total: float, message: str) -> None:
    if progress is not None:
        try:
            progress(round(elapsed, 3), total, message)
        except Exception:  # noqa: BLE001 - a broken progress callback must not lose the window
            pass


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
