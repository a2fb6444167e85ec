"""The sampling engine and the collect command: guarded collectors, early stop (stop event and
Ctrl-C), the scope, bad input, output files, and a collection run as a non-root user."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from witty_profiler.collectors.base import REGISTRY, Collector, register
from witty_profiler.collectors.engine import discover, run_window
from witty_profiler.topology import load_graph, loads_graph
from witty_profiler.topology.errors import InputError

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable


def cli(*args, cwd=REPO, timeout=60):
    return subprocess.run([PY, "-m", "witty_profiler", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO)})


class _Broken(Collector):
    """A collector that fails in sample(): the round must go on without it."""

    name = "witty_test_broken"
    default_enabled = False

    def sample(self) -> None:
        raise RuntimeError("disk on fire\nsecond line")

    def finish(self):
        return self.fragment()


@pytest.mark.live
def test_a_failing_collector_is_reported_and_the_round_goes_on():
    register(_Broken)
    try:
        g = run_window(0.6, 0.2, collectors=["witty_test_broken", "cpu"])
    finally:
        REGISTRY.pop("witty_test_broken", None)
    broken, cpu = g.meta.collectors["witty_test_broken"], g.meta.collectors["cpu"]
    assert broken.status == "error" and broken.reason == "sample: RuntimeError: disk on fire second line"
    assert cpu.status == "ok" and g.entities("host")[0].metrics["cpu_util_pct"] >= 0
    assert set(g.meta.collectors) == {"witty_test_broken", "cpu"}


@pytest.mark.live
def test_stop_event_ends_the_window_early_with_a_valid_graph():
    stop = threading.Event()
    seen = []
    threading.Timer(0.5, stop.set).start()
    t = time.monotonic()
    g = run_window(30, 0.2, collectors=["cpu", "memory"], stop=stop, progress=lambda *a: seen.append(a))
    assert time.monotonic() - t < 10
    assert 0.3 < g.meta.duration_s < 10 and g.meta.interval_s == 0.2
    assert seen[0][2] == "started" and seen[-1][2] == "finished early" and seen[-1][1] == 30
    assert "cpu_util_pct" in g.entities("host")[0].metrics


def test_bad_input_raises_input_error():
    for kwargs in ({"duration_s": 0}, {"duration_s": 4000}, {"interval_s": 0}, {"duration_s": 1, "interval_s": 2},
                   {"collectors": ["nope"]}, {"pids": [999999999]}):
        with pytest.raises(InputError):
            run_window(**{"duration_s": 1, "interval_s": 0.5, **kwargs})


@pytest.mark.live
def test_scope_includes_descendants():
    parent = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 10  # until the shell has forked and its child has become sleep
        while time.monotonic() < deadline and not any(
                (Path(f"/proc/{c}/comm").read_text().strip() if Path(f"/proc/{c}/comm").exists() else "") == "sleep"
                for c in _children(parent.pid)):
            time.sleep(0.05)
        g = run_window(0.5, 0.25, pids=[parent.pid], collectors=["process"])
    finally:
        for child in _children(parent.pid):
            os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait()
    host = g.meta.hosts[0]
    me = g.entity(f"process:{host}:{parent.pid}")
    children = [c for _, c in g.neighbours(me.id, "out", "parent_of")]
    assert me.attrs["in_scope"] and children and all(c.attrs["in_scope"] for c in children)
    assert [c.attrs["name"] for c in children] == ["sleep"]
    # processes outside the scope are listed without threads
    outside = [p for p in g.entities("process") if not p.attrs["in_scope"]]
    assert outside and not any(g.neighbours(p.id, "out", "has_thread") for p in outside)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [
    (["--duration", "0"], "duration must be > 0"),
    (["--duration", "5000"], "duration must be > 0 and <= 3600"),
    (["--duration", "1", "--interval", "2"], "interval must be > 0 and <= the duration"),
    (["--interval", "-1"], "interval must be > 0"),
    (["--duration", "x"], "invalid float value"),
    (["--pid", "999999999", "-o", "-"], "no such process: 999999999"),
    (["--collectors", "process,nope", "-o", "-"], "unknown collector: nope"),
    (["--collectors=-nope", "-o", "-"], "unknown collector: nope"),
    (["--collectors=cpu,-ebpf", "-o", "-"], "or the ones to leave out with '-' (e.g. -ebpf), not both"),
    (["-o", "/nonexistent-dir/g.json"], "no such directory"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args, message):
    result = cli("collect", *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.live
def test_cli_default_file_needs_force_and_stdout_works(tmp_path):
    existing = tmp_path / "witty-graph.json"
    existing.write_text("keep me")
    result = cli("collect", "--duration", "0.3", "--interval", "0.1", "--collectors", "cpu", cwd=tmp_path)
    assert result.returncode == 2 and "--force" in result.stderr and existing.read_text() == "keep me"
    result = cli("collect", "--duration", "0.3", "--interval", "0.1", "--collectors", "cpu", "--force", "--offline",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert load_graph(existing).meta.source == "live"
    result = cli("collect", "--duration", "0.3", "--interval", "0.1", "--collectors", "cpu,memory", "-o", "-", "-q")
    assert result.returncode == 0 and result.stderr == ""
    g = loads_graph(result.stdout)
    assert set(g.meta.collectors) == {"cpu", "memory"}


@pytest.mark.live
def test_ctrl_c_still_writes_a_valid_graph(tmp_path):
    out = tmp_path / "g.json"
    proc = subprocess.Popen([PY, "-m", "witty_profiler", "collect", "--duration", "60", "--interval", "0.25",
                             "--collectors", "process,cpu,cgroup", "-o", str(out)],
                            cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        assert "started" in proc.stderr.readline()
        time.sleep(0.8)
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        assert proc.wait(timeout=30) == 0, rest
    finally:
        proc.kill()
    assert "finished early" in rest
    g = load_graph(out)
    assert 0.5 < g.meta.duration_s < 20
    assert g.meta.collectors["process"].status in ("ok", "partial") and g.entities("process")
    busy = [p for p in g.entities("process") if "cpu_util_pct" in p.metrics]
    assert busy  # rates over the shortened window


def _collect_as_nobody(out: Path) -> None:
    """Child of a fork: drop to nobody (capabilities go with uid 0), then collect.

    The collection runs in a forked child rather than through `setpriv ... witty-profiler`
    because this test host's interpreter and site-packages live under a 0700 home directory
    that nobody cannot read; what is under test is what the collectors see without root."""
    try:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        g = run_window(1.0, 0.5)
        from witty_profiler.topology import dump_graph
        dump_graph(g, out)
        os._exit(0)
    except BaseException as exc:  # noqa: BLE001 - report to the parent, never return into pytest
        out.with_suffix(".err").write_text(repr(exc))
        os._exit(1)


@pytest.fixture
def nobody_can_write():
    """A folder the nobody user can write to (pytest's tmp_path lies in a 0700 folder of root's),
    removed afterwards with the graph of this host that it holds."""
    workdir = Path(tempfile.mkdtemp(prefix="witty-nonroot-"))
    workdir.chmod(0o777)
    yield workdir
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.live
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to the nobody user")
def test_collect_as_non_root_user_gives_a_smaller_valid_graph(nobody_can_write):
    out = nobody_can_write / "g.json"
    # an inference server as seen by its command line: recognised and in scope without --pid
    ai = subprocess.Popen([PY, "-c", "import time; time.sleep(30)", "vllm", "serve", "model"])
    try:
        time.sleep(0.3)
        discover()  # import the collector modules while their files are still readable
        pid = os.fork()
        if pid == 0:
            _collect_as_nobody(out)
        _, status = os.waitpid(pid, 0)
    finally:
        ai.kill()
        ai.wait()
    err = out.with_suffix(".err")
    assert os.waitstatus_to_exitcode(status) == 0, err.read_text() if err.exists() else status
    g = load_graph(out)
    proc = g.meta.collectors["process"]
    assert proc.status == "partial" and "needs root or the same user" in proc.reason
    assert proc.privileges == "uid 65534 (not root)"
    ebpf = g.meta.collectors["ebpf"]
    assert ebpf.status == "unavailable" and ebpf.reason.startswith("eBPF needs root")
    mine = ("process", "cpu", "memory", "pressure", "numa", "cgroup")
    assert all(g.meta.collectors[n].status in ("ok", "partial") for n in mine), g.meta.collectors
    host = g.meta.hosts[0]
    init = g.entity(f"process:{host}:1")
    assert init is not None and "cpu_util_pct" in init.metrics and "read_bytes_per_s" not in init.metrics
    server = g.entity(f"process:{host}:{ai.pid}")
    assert server.attrs["framework"] == "vllm" and server.attrs["role"] == "inference" and server.attrs["in_scope"]
    assert g.neighbours(server.id, "out", "has_thread")
    assert "numa_pages" not in server.attrs  # numa_maps of another user's process is not readable
    assert g.entities("host")[0].metrics["cpu_util_pct"] >= 0
    json.loads(out.read_text())


@pytest.mark.live
def test_an_idle_process_outside_the_scope_that_wakes_up_keeps_its_cpu_time():
    """Idle processes outside the scope are read every 5th interval: the window's rate must still
    hold all the CPU time of one that wakes up half-way."""
    sleeper = subprocess.Popen(["sleep", "30"])
    waker = subprocess.Popen([PY, "-c", "import time\ntime.sleep(1.6)\nwhile True: pass"])
    try:
        time.sleep(0.3)
        g = run_window(3.2, 0.2, pids=[sleeper.pid], collectors=["process"])
    finally:
        for p in (sleeper, waker):
            p.kill()
            p.wait()
    woke = g.entity(f"process:{g.meta.hosts[0]}:{waker.pid}")
    assert not woke.attrs["in_scope"]
    # busy for ~1.4 s of the 3.2 s window (less on a crowded host, but not nothing)
    assert woke.metrics["cpu_util_pct"] > 10, woke.metrics
    assert woke.metrics["cpu_util_pct_max"] > woke.metrics["cpu_util_pct"]


def test_the_modules_discovered_are_the_ones_pkgutil_lists(tmp_path):
    """engine.module_names stands for pkgutil.iter_modules (which imports inspect): the same modules, in
    its order, packages and what is not a module left out."""
    import pkgutil

    import witty_profiler.collectors as collectors
    from witty_profiler.collectors.engine import module_names
    for name in ("b.py", "a.py", "_private.py", "c.cpython-311-x86_64-linux-gnu.so", "d.pyc", "notes.txt",
                 "x.y.py", "__init__.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "folder").mkdir()
    # a folder that cannot be listed (gone, or unreadable to a user the collect dropped to) lists nothing
    for folders in ([str(tmp_path)], collectors.__path__, [str(tmp_path / "gone"), str(tmp_path)]):
        assert module_names(folders) == [m.name for m in pkgutil.iter_modules(folders) if not m.ispkg]
    assert "gpu" in module_names(collectors.__path__)
    assert module_names([str(tmp_path / "gone")]) == []


@pytest.mark.live
def test_collectors_named_with_a_minus_are_left_out_of_the_defaults():
    from witty_profiler.collectors.engine import _select
    discover()
    defaults = _select(None)
    assert "ebpf" in defaults and "ipc" in defaults
    assert _select(["-ebpf", "-ipc"]) == [n for n in defaults if n not in ("ebpf", "ipc")]
    g = run_window(0.4, 0.2, collectors=[f"-{n}" for n in defaults if n not in ("cpu", "memory")])
    assert set(g.meta.collectors) == {"cpu", "memory"}
