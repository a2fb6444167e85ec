"""Fan-out on what a cluster already runs: one `witty-profiler collect -o -` per host, its graph streamed
back on stdout into DIR/<host>.json, and a manifest DIR/cluster.json that says, per host, what
happened (ok, failed, timed out, tool missing) and why.

Launchers (cluster.ssh, cluster.kube; cluster.slurm streams all nodes through one srun) only build
command lines; this module runs them with bounded parallelism and a deadline, checks every graph
before keeping it, and never lets one host's failure stop the others.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.ids import check_host_name

MANIFEST = "cluster.json"
GRACE_S = 60.0  # beyond the window: start-up, the eBPF compile, sending the graph back
_EXIT_MEANING = {127: "witty-profiler is not installed there (command not found)",
                 126: "witty-profiler is there but cannot be run (permission denied)",
                 255: "the connection failed"}


@dataclass
class HostRun:
    """One host to collect: its name (the graph's file name) and the local command that collects it."""

    host: str
    argv: list[str]


@dataclass
class HostResult:
    host: str
    status: str  # ok | failed | timeout | skipped
    reason: str = ""
    file: str | None = None
    seconds: float = 0.0


@dataclass
class Manifest:
    launcher: str
    started_at: str
    duration_s: float
    results: list[HostResult] = field(default_factory=list)

    def failed(self) -> list[dict[str, str]]:
        return [{"host": r.host, "reason": f"{r.status}: {r.reason}"} for r in self.results if r.status != "ok"]

    def to_dict(self) -> dict:
        return {"launcher": self.launcher, "started_at": self.started_at, "duration_s": self.duration_s,
                "hosts": {r.host: {k: v for k, v in asdict(r).items() if k != "host" and v not in (None, "")}
                          for r in sorted(self.results, key=lambda r: r.host)}}


def collect_args(duration_s: float, interval_s: float, host: str | None = None, job: str | None = None,
                 collectors: str | None = None) -> list[str]:
    """The arguments of the `collect` each host runs (after its command name)."""
    args = ["collect", "--duration", f"{duration_s:g}", "--interval", f"{interval_s:g}", "-q", "-o", "-"]
    if host:
        args += ["--host", host]
    if job:
        args += ["--job", job]
    if collectors:  # one argument: "-ebpf" on its own would be read as an option by the host's parser
        args.append(f"--collectors={collectors}")
    return args


def prepare_directory(path: str | os.PathLike[str], force: bool) -> Path:
    """DIR for the graphs: created if missing; an existing one must be empty unless --force (then only the
    files of hosts collected again and the manifest are replaced)."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise InputError(f"{target}: exists and is not a directory")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise InputError(f"{target}: is not empty; choose a new directory or pass --force to replace its graphs")
    if not target.parent.exists():
        raise InputError(f"{target.parent}: no such directory")
    target.mkdir(exist_ok=True)
    return target


def run_hosts(runs: list[HostRun], directory: Path, duration_s: float, parallel: int = 32,
              timeout_s: float | None = None, progress: Callable[[HostResult], None] | None = None) -> list[HostResult]:
    """Run every host's command (at most `parallel` at once), each with a deadline of the window plus
    GRACE_S unless `timeout_s` is given; keep each graph that parses, as DIR/<host>.json."""
    deadline = timeout_s if timeout_s is not None else duration_s + GRACE_S
    lock = threading.Lock()

    def one(run: HostRun) -> HostResult:
        result = _run_one(run, directory, deadline)
        if progress:
            with lock:
                progress(result)
        return result

    with ThreadPoolExecutor(max(1, min(parallel, len(runs) or 1))) as pool:
        return list(pool.map(one, runs))


def _run_one(run: HostRun, directory: Path, deadline: float) -> HostResult:
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(run.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True)
        except OSError as exc:
            return HostResult(run.host, "failed", f"cannot start {run.argv[0]}: {exc.strerror or exc}")
        try:
            code = proc.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            _kill(proc)
            return HostResult(run.host, "timeout", f"no graph after {deadline:g} s", seconds=_since(start))
        out.seek(0)
        err.seek(0)
        data, stderr = out.read(), err.read().decode("utf-8", "replace")
    return keep_graph(run.host, data, stderr, code, directory, _since(start))


def ask(argv: list[str], missing: str, timeout_s: float = 30.0) -> str:
    """The output of a launcher's query (squeue, kubectl get...), or an InputError that says why not."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise InputError(f"{argv[0]}: not found; {missing}") from None
    except subprocess.TimeoutExpired:
        raise InputError(f"{' '.join(argv[:3])} did not answer within {timeout_s:g} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise InputError(f"{' '.join(argv)} failed: {last}")
    return done.stdout


def keep_graph(host: str | None, data: bytes, stderr: str, code: int, directory: Path, seconds: float) -> HostResult:
    """Check one host's output and keep it as DIR/<host>.json, or say why not. Without a host name, the
    graph's own (a Slurm task's output names its node)."""
    if code != 0:
        return HostResult(host or "?", "failed", _why(code, stderr), seconds=seconds)
    from witty_profiler.topology.io import loads_graph
    try:
        graph = loads_graph(data, f"{host or 'a task'}'s output")
    except InputError as exc:
        return HostResult(host or "?", "failed", f"its output is not a graph ({exc})", seconds=seconds)
    names = graph.meta.hosts
    if host is None:
        if len(names) != 1:
            return HostResult("?", "failed", f"a graph of {len(names)} hosts came back", seconds=seconds)
        host = names[0]
    target = directory / f"{host}.json"
    target.write_bytes(data)
    note = "" if names == [host] else f"the graph names host {', '.join(names)}"
    return HostResult(host, "ok", note, str(target), seconds)


def _why(code: int, stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    meaning = _EXIT_MEANING.get(code, f"exit code {code}")
    if code == 127 or "command not found" in stderr or "No such file or directory" in last:
        meaning = _EXIT_MEANING[127]
    return f"{meaning}: {last[:300]}" if last else meaning


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except OSError:
        proc.kill()
    proc.wait()


def _since(start: float) -> float:
    return round(time.monotonic() - start, 3)


def write_manifest(directory: Path, manifest: Manifest) -> Path:
    path = directory / MANIFEST
    path.write_text(json.dumps(manifest.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read_manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable manifest ({exc})") from None
    return data if isinstance(data, dict) else {}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def host_name(target: str) -> str | None:
    """The graph's name for an ssh target: 'user@gpu-07:2222' -> 'gpu-07'; None if ids cannot carry it."""
    name = target.rsplit("@", 1)[-1]
    if name.count(":") == 1:
        name = name.split(":")[0]
    try:
        return check_host_name(name)
    except InputError:
        return None
