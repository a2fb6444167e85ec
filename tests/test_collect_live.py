"""A real window of `witty-profiler collect` against processes this test starts: a busy loop, a
sleeper, a pinned process, a process with secrets in its command line and environment, one that
exits and one that starts inside the window, a process with named threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from graph_checks import assert_known_names

from witty_profiler.topology import load_graph

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
SECRET_ARG = "hunter2-cmdline-0f9e8d"
SECRET_ENV = "envsecret-7c6b5a"
SECRET_URL_PW = "urlpw-3d2c1b"
LONG_ARG = "--pad=" + "p" * 9000

# a busy main thread plus three sleeping threads that name themselves (prctl PR_SET_NAME)
BUSY_WITH_THREADS = """
import ctypes, threading, time
def named(name):
    ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)
    time.sleep(120)
for i in range(3):
    threading.Thread(target=named, args=(f"witty-sleep{i}",), daemon=True).start()
while True:
    pass
"""


def plain_env(**extra: str) -> dict[str, str]:
    """This environment without the keys a graph keeps (a CI host may set OMP_NUM_THREADS or
    NCCL_*), plus `extra`: what the graph shows of it is then exactly `extra`'s allowlisted keys."""
    from witty_profiler.topology.privacy import allowed_env_key
    return {**{k: v for k, v in os.environ.items() if not allowed_env_key(k)}, **extra}


def spawn(args, **kw) -> subprocess.Popen:
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)


# keeps writing (and syncing) 64 KiB every 50 ms: a steady write stream on the disk
WRITER = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)
while True:
    os.write(fd, b"w" * 65536)
    os.fsync(fd)
    time.sleep(0.05)
"""


@pytest.fixture(scope="module")
def window(tmp_path_factory):
    """Start the processes, then collect 2 s at 0.5 s through the CLI, scoped to them."""
    out = tmp_path_factory.mktemp("collect") / "graph.json"
    env = plain_env(AWS_SECRET_ACCESS_KEY=SECRET_ENV, RANK="3", WORLD_SIZE="8",
                    DB_URL=f"postgres://app:{SECRET_URL_PW}@db/x")
    procs = {
        "busy": spawn([PY, "-c", BUSY_WITH_THREADS]),
        "sleeper": spawn(["sleep", "60"]),
        "pinned": spawn(["taskset", "-c", "0", "sleep", "60"]),
        # with a command line longer than a graph keeps (a `python -c <program>` can be megabytes)
        "secret": spawn([PY, "-c", "import time; time.sleep(60)", f"--password={SECRET_ARG}", LONG_ARG], env=env),
        # both wait for a line on stdin, sent once the window has started: one exits, one forks a child
        "writer": spawn([PY, "-c", WRITER, str(out.with_suffix(".data"))]),
        "ticker": spawn([PY, "-c", "import time\nwhile True: time.sleep(0.01)"]),  # blocks ~100 times a second
        "exits": spawn(["sh", "-c", "read line"], stdin=subprocess.PIPE),
        "forks": spawn(["sh", "-c", "read line; sleep 30 & wait"], stdin=subprocess.PIPE),
    }
    time.sleep(0.4)  # let the interpreters start and the busy loop spin
    try:
        cmd = [PY, "-m", "witty_profiler", "collect", "--duration", "2", "--interval", "0.5", "-o", str(out),
               "--collectors", "process,cpu,numa,cgroup,memory,pressure"]
        for p in procs.values():
            cmd += ["--pid", str(p.pid)]
        collect = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True)
        first = collect.stderr.readline()
        assert "started" in first, first
        time.sleep(0.3)
        for key in ("exits", "forks"):
            procs[key].stdin.write(b"go\n")
            procs[key].stdin.flush()
        stderr = first + collect.stderr.read()
        assert collect.wait(timeout=60) == 0, stderr
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
    return {"graph": load_graph(out), "bytes": out.read_bytes(), "pids": {k: p.pid for k, p in procs.items()},
            "stderr": stderr}


def _cpus(text: str) -> list[int]:
    from witty_profiler.collectors.lib.procfs import parse_cpulist
    return parse_cpulist(text)


def proc_entity(window, key):
    graph = window["graph"]
    return graph.entity(f"process:{graph.meta.hosts[0]}:{window['pids'][key]}")


def _runnable_floor(window) -> float:
    """80 % of the window, less what the hypervisor stole from the host's CPUs during it (stolen
    time is neither run time nor run-queue wait of the task that lost it)."""
    (host,) = window["graph"].entities("host")
    return 80 - 1.5 * host.metrics.get("cpu_steal_pct", 0.0)


def test_meta_describes_the_window(window):
    meta = window["graph"].meta
    assert meta.source == "live" and meta.interval_s == 0.5 and 1.8 <= meta.duration_s <= 4
    assert meta.started_at.endswith("Z")
    info = meta.host_info[meta.hosts[0]]
    assert info["cpus"] == os.cpu_count() and info["numa_nodes"] >= 1 and info["kernel"] == os.uname().release
    assert set(meta.collectors) == {"process", "cpu", "numa", "cgroup", "memory", "pressure"}
    assert all(c.duration_s is not None and c.status in ("ok", "partial") for c in meta.collectors.values())
    assert "collecting" in window["stderr"]


def test_busy_loop_and_sleeper(window):
    busy, sleeper = proc_entity(window, "busy"), proc_entity(window, "sleeper")
    # The test host's CPUs are shared: the loop may get less than a core, but it is runnable the
    # whole window, so on-CPU time plus run-queue wait covers (nearly) all of it.
    # Time the hypervisor steals counts as neither, so the floor drops by the host's steal share.
    runnable_pct = busy.metrics["cpu_util_pct"] + busy.metrics["runqueue_wait_ms_per_s"] / 10
    floor = _runnable_floor(window)
    assert busy.metrics["cpu_util_pct"] > 50 or (busy.metrics["cpu_util_pct"] > 15 and runnable_pct > floor), \
        busy.metrics
    assert floor < runnable_pct < 120, busy.metrics
    assert busy.metrics["cpu_util_pct_max"] >= busy.metrics["cpu_util_pct_p95"] > 0
    assert busy.metrics["cpu_user_pct"] > busy.metrics["cpu_system_pct"]
    assert busy.metrics["timeslices_per_s"] > 0 and "runqueue_wait_pct" in busy.metrics
    assert busy.attrs["state"] == "R" and busy.attrs["in_scope"] is True
    assert sleeper.metrics["cpu_util_pct"] < 5 and sleeper.attrs["state"] == "S"
    assert sleeper.metrics["rss_bytes"] > 0 and sleeper.metrics["num_threads"] == 1


def test_threads_with_names_and_where_they_ran(window):
    graph = window["graph"]
    busy = proc_entity(window, "busy")
    threads = [t for _, t in graph.neighbours(busy.id, "out", "has_thread")]
    assert len(threads) == 4
    names = sorted(t.attrs["name"] for t in threads)
    assert names[1:] == ["witty-sleep0", "witty-sleep1", "witty-sleep2"]
    main = graph.entity(f"thread:{graph.meta.hosts[0]}:{busy.attrs['pid']}:{busy.attrs['pid']}")
    assert main.metrics["cpu_util_pct"] > 15 and main.attrs["ran_on_cpus"]
    assert _runnable_floor(window) < main.metrics["cpu_util_pct"] + main.metrics["runqueue_wait_ms_per_s"] / 10 < 120, \
        main.metrics
    assert all(t.metrics["cpu_util_pct"] < 5 for t in threads if t.id != main.id)
    runs_on = graph.neighbours(main.id, "out", "runs_on")
    assert runs_on and abs(sum(e.metrics["runtime_share_pct"] for e, _ in runs_on) - 100) < 0.1
    assert graph.neighbours(busy.id, "out", "runs_on") and graph.neighbours(busy.id, "out", "allocates_on")
    assert busy.metrics["numa_pages_total"] > 0 and busy.attrs["numa_pages"]
    assert busy.metrics["numa_remote_pages_pct"] >= 0 and 0 <= busy.metrics["cpu_mem_colocation_pct"] <= 100
    # allowed_on: every node holding a CPU it may use; on one node everything is local
    allowed = [n.attrs["node"] for _, n in graph.neighbours(busy.id, "out", "allowed_on")]
    assert allowed == sorted(n.attrs["node"] for n in graph.entities("numa_node")
                             if set(range(os.cpu_count())) & set(_cpus(n.attrs.get("cpus", ""))))
    if len(graph.entities("numa_node")) == 1:
        assert busy.metrics["numa_remote_pages_pct"] == 0 and busy.metrics["cpu_mem_colocation_pct"] == 100
    assert graph.neighbours(main.id, "out", "allowed_on")


def test_pinned_process_affinity(window):
    pinned = proc_entity(window, "pinned")
    assert pinned.attrs["cpus_allowed"] == "0" and pinned.metrics["cpus_allowed_count"] == 1
    assert pinned.attrs["ran_on_cpus"] == "0"
    assert proc_entity(window, "sleeper").metrics["cpus_allowed_count"] == len(os.sched_getaffinity(0))


def test_secrets_never_reach_the_file(window):
    data = window["bytes"]
    for secret in (SECRET_ARG, SECRET_ENV, SECRET_URL_PW):
        assert secret.encode() not in data
    secret = proc_entity(window, "secret")
    assert "--password=<redacted>" in secret.attrs["cmdline"]
    # the rest of its 9,000-character argument is left out, and the cut says how much
    kept = secret.attrs["cmdline"]
    full = len(f"{PY} -c import time; time.sleep(60) --password=<redacted> {LONG_ARG}")
    assert kept.endswith(f"… [{full - 4096} more characters]") and len(kept) < 4200
    assert secret.attrs["env"] == {"RANK": "3", "WORLD_SIZE": "8"}  # allowlisted keys only
    assert secret.attrs["rank"] == 3 and secret.attrs["ai"] is True


def test_exit_and_start_inside_the_window(window):
    graph = window["graph"]
    exits = proc_entity(window, "exits")
    assert exits is not None and exits.attrs["exited_in_window"] is True
    assert "started_in_window" not in exits.attrs
    forks = proc_entity(window, "forks")
    children = [c for _, c in graph.neighbours(forks.id, "out", "parent_of")]
    assert any(c.attrs.get("started_in_window") and c.attrs["in_scope"] for c in children), children


def test_parent_edges_and_cgroups(window):
    graph = window["graph"]
    assert not graph.dangling_edges()
    busy = proc_entity(window, "busy")
    parents = [e for e, _ in graph.neighbours(busy.id, "in", "parent_of")]
    assert [e.source for e in parents] == [f"process:{graph.meta.hosts[0]}:{busy.attrs['ppid']}"]
    cgroups = [c for _, c in graph.neighbours(busy.id, "out", "in_cgroup")]
    assert cgroups and all(c.type == "cgroup" for c in cgroups)
    assert busy.attrs["cgroup"].startswith("/")


def test_host_and_cpu_entities(window):
    graph = window["graph"]
    host = graph.entities("host")[0]
    assert host.metrics["cpu_util_pct"] > 100 / os.cpu_count() * 0.5  # the busy loop alone
    cpus = graph.entities("cpu")
    assert len(cpus) == os.cpu_count()
    assert all("cpu_util_pct" in c.metrics and "cpu_iowait_pct" in c.metrics for c in cpus)
    nodes = graph.entities("numa_node")
    assert nodes and all(graph.neighbours(n.id, "out", "has_cpu") for n in nodes)


def test_context_switches_run_queue_per_slice_and_memory_policy(window):
    ticker, busy, sleeper = (proc_entity(window, k) for k in ("ticker", "busy", "sleeper"))
    # a 10 ms sleep loop blocks up to 100 times a second; a shared CPU stretches the loop (each wake-up
    # may wait for a CPU), never to a standstill
    assert 5 < ticker.metrics["voluntary_ctxt_switches_per_s"] <= 110, ticker.metrics
    assert sleeper.metrics["voluntary_ctxt_switches_per_s"] <= 1, sleeper.metrics  # asleep the whole window
    assert busy.metrics["voluntary_ctxt_switches_per_s"] <= 2, busy.metrics  # a loop never blocks
    assert busy.metrics["nonvoluntary_ctxt_switches_per_s"] >= 0
    # mean wait per timeslice = wait per second / timeslices per second
    m = ticker.metrics
    if m["timeslices_per_s"] > 0:
        expected_us = m["runqueue_wait_ms_per_s"] * 1000 / m["timeslices_per_s"]
        assert abs(m["runqueue_wait_per_slice_us"] - expected_us) <= max(1.0, 0.05 * expected_us), m
    online = Path("/sys/devices/system/node/online")
    nodes = online.read_text().strip() if online.exists() else "0"
    assert sleeper.attrs["mems_allowed"] == nodes


def test_host_memory_pressure_load_and_numa_rates(window):
    graph = window["graph"]
    host = graph.entities("host")[0].metrics
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    assert host["mem_total_bytes"] == int(meminfo["MemTotal"].split()[0]) * 1024
    assert 0 < host["mem_used_pct"] < 100 and 0 < host["mem_available_bytes"] < host["mem_total_bytes"]
    nodes = graph.entities("numa_node")
    for n in nodes:  # a node's own total (on a VM with hot-plugged memory they need not add up to the host's)
        text = Path(f"/sys/devices/system/node/node{n.attrs['node']}/meminfo").read_text()
        total_kb = int(text.split("MemTotal:")[1].split()[0])
        assert n.metrics["mem_total_bytes"] == total_kb * 1024
    assert host["load1"] >= 0
    for name in ("psi_cpu_some_pct", "psi_io_some_pct", "psi_memory_some_pct"):
        if Path("/proc/pressure").exists():
            assert 0 <= host[name] <= 100 and host[f"{name}_max"] >= host[f"{name}_p95"] >= 0
    for name in ("major_faults_per_s", "swap_in_pages_per_s", "swap_out_pages_per_s", "numa_hit_per_s"):
        assert host[name] >= 0 and host[f"{name}_max"] >= host[name] * 0.99
    # the interpreters of this test allocate pages all the time: the NUMA hit counter moves
    assert host["numa_hit_per_s"] > 0 and host["numa_local_per_s"] > 0


def test_graph_file_is_deterministic_json(window):
    doc = json.loads(window["bytes"])
    assert doc["format"] == "witty-graph" and doc["schema_version"] == 1
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((REPO / "topology" / "schema" / "graph-v1.schema.json").read_text())
    jsonschema.validate(doc, schema)
    ids = [e["id"] for e in doc["entities"]]
    assert ids == sorted(ids)


def test_writer_rates_and_write_burst(window):
    writer = proc_entity(window, "writer")
    m = writer.metrics
    assert m["write_bytes_per_s"] > 100_000, m  # ~1.3 MB/s when it gets the CPU it asks for
    assert m["write_bytes_per_s_max"] >= m["write_bytes_per_s_p95"] > 0
    assert m["write_burst_s"] >= 1.0, m  # it wrote in every interval of the 2 s window
    assert proc_entity(window, "sleeper").metrics["write_bytes_per_s"] == 0


def test_every_name_is_in_the_vocabulary(window):
    assert_known_names(window["graph"])


# an idle interpreter that maps a framework library, and one started with a rank by a launcher:
# neither name nor command line says AI, and neither uses CPU, yet both are the workload
MAPS_LIBRARY = """
import ctypes, mmap, sys, threading, time
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
def pin():  # the name PyTorch gives a DataLoader's pin-memory thread
    ctypes.CDLL(None).prctl(15, b"pt_data_pin", 0, 0, 0)
    time.sleep(60)
threading.Thread(target=pin, daemon=True).start()
time.sleep(60)
"""


def test_ai_processes_recognised_by_their_libraries_and_rank(tmp_path):
    lib = tmp_path / "libtorch_cpu.so"
    lib.write_bytes(b"\0" * 8192)
    mapper = spawn([PY, "-c", MAPS_LIBRARY, str(lib)])
    ranked = spawn([PY, "-c", "import time; time.sleep(60)"], env=plain_env(RANK="5", WORLD_SIZE="8"))
    plain = spawn([PY, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.5)
        out = tmp_path / "g.json"
        done = subprocess.run([PY, "-m", "witty_profiler", "collect", "--duration", "1", "--interval", "0.5",
                               "--collectors", "process", "-q", "-o", str(out)], cwd=REPO, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    finally:
        for p in (mapper, ranked, plain):
            p.kill()
            p.wait()
    graph = load_graph(out)
    host = graph.meta.hosts[0]
    m, r, q = (graph.entity(f"process:{host}:{p.pid}") for p in (mapper, ranked, plain))
    assert (m.attrs["ai"], m.attrs["framework"], m.attrs["in_scope"]) == (True, "pytorch", True), m.attrs
    assert (r.attrs["ai"], r.attrs["rank"], r.attrs["world_size"], r.attrs["in_scope"]) == (True, 5, 8, True)
    assert r.attrs["env"] == {"RANK": "5", "WORLD_SIZE": "8"}
    threads = {t.attrs["name"]: t for _, t in graph.neighbours(m.id, "out", "has_thread")}
    assert threads["pt_data_pin"].attrs["role"] == "loader" and len(threads) == 2, threads
    assert graph.neighbours(r.id, "out", "has_thread")
    assert q.attrs["ai"] is False and not q.attrs.get("in_scope")
