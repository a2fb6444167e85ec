"""Fan-out on what a cluster already runs: one `witty-profiler collect -o -` per host, its graph streamed
back on stdout into DIR/<host>.json, and a manifest DIR/cluster.json that says, per host, what
happened (ok, failed, timed out, tool missing) and why.

Launchers (cluster.ssh, cluster.kube; cluster.slurm streams all nodes through one srun) only build
command lines; this module runs them with bounded parallelism and a deadline, checks every graph
before keeping it, and never lets one host's failure stop the others. Every launcher process (ssh,
kubectl, srun) leads its own process group, held in `Launched`: when the collection is cancelled
(Ctrl-C, a cancelled MCP call) or a host's deadline passes, its group is ended, so that nothing it
started is left running here.
"""

from __future__ import annotations

import json
import os
import signal
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
from witty_profiler.topology.files import read_bytes
from witty_profiler.topology.ids import check_host_name
from witty_profiler.topology.text import printable, valid_text

MANIFEST = "cluster.json"
MAX_MANIFEST_BYTES = 64 << 20  # a manifest of 100,000 hosts is about 20 MB
GRACE_S = 60.0  # beyond the window: start-up, the eBPF compile, sending the graph back
END_GRACE_S = 5.0  # after SIGTERM, before SIGKILL: srun cancels its step on the nodes in that time
CANCELLED = "the collection was cancelled before this host's graph came back"
_EXIT_MEANING = {127: "witty-profiler is not installed there (command not found)",
                 126: "witty-profiler is there but cannot be run (permission denied)",
                 255: "the connection failed"}


@dataclass
class HostRun:
    """One host to collect: its name (the graph's file name) and the local command that collects it."""

    host: str
    argv: list[str]
    # the launcher's stdin held open (never written) for as long as it runs: the remote side ends its
    # command when it sees that stdin close (`watched`), so a cancelled launcher ends it too
    hold_stdin: bool = False


@dataclass
class HostResult:
    host: str
    status: str  # ok | failed | timeout | skipped | cancelled
    reason: str = ""  # often a remote host's own words (its stderr): kept printable, on one line
    file: str | None = None
    seconds: float = 0.0
    source: str | None = None  # pulled from a service: its URL
    window: str | None = None  # and the id of its window

    def __post_init__(self) -> None:
        self.reason = printable(self.reason)


@dataclass
class Manifest:
    launcher: str
    started_at: str
    duration_s: float
    results: list[HostResult] = field(default_factory=list)
    cancelled: bool = False  # the collection was given up (Ctrl-C, a cancelled MCP call)

    def ok(self) -> int:
        return sum(1 for r in self.results if r.status == "ok")

    def failed(self) -> list[dict[str, str]]:
        return [{"host": r.host, "reason": f"{r.status}: {r.reason}"} for r in self.results if r.status != "ok"]

    def to_dict(self) -> dict:
        data = {"launcher": self.launcher, "started_at": self.started_at, "duration_s": self.duration_s,
                "hosts": {r.host: {k: v for k, v in asdict(r).items() if k != "host" and v not in (None, "")}
                          for r in sorted(self.results, key=lambda r: r.host)}}
        if self.cancelled:
            data["cancelled"] = True
        return data


class Launched:
    """The launcher processes of one collection (ssh, kubectl exec, srun), each the leader of its own process
    group. Used as a context manager: while it is open, `stop` being set (Ctrl-C in the CLI, a cancelled or
    timed-out MCP call) ends every group and refuses new ones; on leaving it, whatever still runs (an
    exception escaped) is ended too. A group is ended with SIGTERM (srun then cancels its step on the nodes,
    where a SIGKILLed srun would leave the step's tasks running), then SIGKILL after END_GRACE_S."""

    def __init__(self, stop: threading.Event | None = None, grace_s: float = END_GRACE_S) -> None:
        self.stop = stop if stop is not None else threading.Event()
        self.grace_s = grace_s
        self._procs: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._over = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def cancelled(self) -> bool:
        return self.stop.is_set()

    def popen(self, argv: list[str], **options) -> subprocess.Popen | None:
        """Start a launcher process in a new session (so its group is its own, and a terminal's Ctrl-C reaches
        this process only); None once the collection is cancelled. OSError as Popen raises it."""
        with self._lock:
            if self.stop.is_set():
                return None
            proc = subprocess.Popen(argv, start_new_session=True, **options)
            self._procs.add(proc)
            return proc

    def end(self, proc: subprocess.Popen) -> None:
        """End `proc`'s group (SIGTERM, then SIGKILL to what is left after the grace period) and reap it."""
        end_group(proc, self.grace_s)
        self.release(proc)

    def release(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.discard(proc)

    def end_all(self) -> None:
        with self._lock:
            procs = list(self._procs)
        enders = [threading.Thread(target=self.end, args=(p,), daemon=True) for p in procs]
        for t in enders:
            t.start()
        for t in enders:
            t.join()

    def __enter__(self) -> "Launched":
        self._watcher = threading.Thread(target=self._watch, name="witty cluster cancel", daemon=True)
        self._watcher.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._over.set()
        if self._watcher is not None:
            self._watcher.join()
        self.end_all()

    def _watch(self) -> None:
        while not self._over.is_set():
            if self.stop.wait(0.1):
                self.end_all()
                return


def end_group(proc: subprocess.Popen, grace_s: float = END_GRACE_S) -> None:
    """SIGTERM to the process group `proc` leads, SIGKILL to the group once `proc` has gone or after
    `grace_s` (what it started and left behind goes too), and `proc` reaped."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except OSError:  # the group is gone already
            pass
        if sig == signal.SIGTERM:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
    proc.wait()


# Neither sshd nor a container runtime's exec sends a signal to a command without a terminal when its client
# goes (and a terminal would turn the graph's newlines into CRLF), so the remote shell watches its stdin, which
# the local side holds open and never writes: when it closes (the local ssh or kubectl ended, the connection
# broke), the command's process group (setsid gives it its own where util-linux is there) is ended with SIGTERM
_WATCHED = ('exec 3<&0; if command -v setsid >/dev/null 2>&1; then setsid "$@" <&- & else "$@" <&- & fi; c=$!; '
            '{ cat <&3 >/dev/null 2>&1; kill -TERM "-$c" 2>/dev/null || kill -TERM "$c" 2>/dev/null; } '
            '>/dev/null 2>&1 & w=$!; wait "$c"; s=$?; kill "$w" 2>/dev/null; exit "$s"')


def watched(command: list[str]) -> list[str]:
    """`command` under a POSIX shell that ends it when its stdin closes (run with hold_stdin=True)."""
    return ["sh", "-c", _WATCHED, "sh", *command]


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
              timeout_s: float | None = None, progress: Callable[[HostResult], None] | None = None,
              launched: Launched | None = None) -> list[HostResult]:
    """Run every host's command (at most `parallel` at once), each with a deadline of the window plus
    GRACE_S unless `timeout_s` is given; keep each graph that parses, as DIR/<host>.json. Once `launched`
    is cancelled, the hosts still running or not started are 'cancelled'."""
    deadline = timeout_s if timeout_s is not None else duration_s + GRACE_S
    launched = launched or Launched()
    lock = threading.Lock()

    def one(run: HostRun) -> HostResult:
        result = _run_one(run, directory, deadline, launched)
        if progress:
            with lock:
                progress(result)
        return result

    with ThreadPoolExecutor(max(1, min(parallel, len(runs) or 1))) as pool:
        return list(pool.map(one, runs))


def _run_one(run: HostRun, directory: Path, deadline: float, launched: Launched) -> HostResult:
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = launched.popen(run.argv, stdin=subprocess.PIPE if run.hold_stdin else subprocess.DEVNULL,
                                   stdout=out, stderr=err)
        except OSError as exc:
            return HostResult(run.host, "failed", f"cannot start {run.argv[0]}: {exc.strerror or exc}")
        if proc is None:
            return HostResult(run.host, "cancelled", CANCELLED)
        try:
            code = proc.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            launched.end(proc)
            if launched.cancelled:
                return HostResult(run.host, "cancelled", CANCELLED, seconds=_since(start))
            return HostResult(run.host, "timeout", f"no graph after {deadline:g} s", seconds=_since(start))
        launched.release(proc)
        if proc.stdin is not None:
            proc.stdin.close()
        if code != 0 and launched.cancelled:  # ended by the cancellation
            return HostResult(run.host, "cancelled", CANCELLED, seconds=_since(start))
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
    notes = [] if names == [host] else [f"the graph names host {', '.join(names)}"]
    scope = graph.meta.extra.get("scope")
    if isinstance(scope, dict) and scope.get("processes") == 0 and scope.get("job"):  # collect --job found none
        notes.append(f"no process of job {scope['job']} on this host")
    return HostResult(host, "ok", "; ".join(notes), str(target), seconds)


def _why(code: int, stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    meaning = _EXIT_MEANING.get(code, f"exit code {code}")
    if code == 127 or "command not found" in stderr or "No such file or directory" in last:
        meaning = _EXIT_MEANING[127]
    return f"{meaning}: {last[:300]}" if last else meaning


def _since(start: float) -> float:
    return round(time.monotonic() - start, 3)


def write_manifest(directory: Path, manifest: Manifest) -> Path:
    """DIR/cluster.json, whole or not at all (written aside, then renamed): a reader never sees half of it."""
    path = directory / MANIFEST
    aside = directory / f".{MANIFEST}.part"
    aside.write_text(json.dumps(manifest.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(aside, path)
    return path


def read_manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    if not path.is_file():
        return {}
    try:
        data = json.loads(read_bytes(path, "cluster manifest", MAX_MANIFEST_BYTES, InputError))
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{path}: not a readable manifest ({str(exc).splitlines()[0][:120] or 'nested too deeply'})"
                         ) from None
    if not isinstance(data, dict):
        return {}
    data = valid_text(data)  # a lone surrogate in a host's reason is printed as U+FFFD, not a crash
    if not isinstance(data.get("hosts"), dict):
        data["hosts"] = {}
    return data


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
