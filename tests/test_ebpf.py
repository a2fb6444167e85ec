"""The eBPF collector: the host checks on recorded trees, and futex waits traced live on threads
this test starts (a contended lock, Python's GIL, an idle poller), diagnosed as lock contention.

The live tests need root, bcc (Debian's python3-bpfcc) and kernel headers; they skip, saying
which is missing, on a host without them, except where WITTY_REQUIRE_EBPF=1 (as .ci/run sets),
where a missing piece fails instead."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
from ebpf_support import ebpf_ready

from witty_profiler.collectors.base import Context
from witty_profiler.collectors.ebpf import (
    HOST_PIDNS_INO,
    SYSCALLS,
    EbpfCollector,
    futex_wait_address,
    kernel_version,
    main_locks,
    nested_pid_namespace,
    program,
    started_rows,
    thread_metrics,
    wait_rows,
)
from witty_profiler.collectors.engine import run_window
from witty_profiler.collectors.lib import bpfhost
from witty_profiler.collectors.lib.bpfcache import IMAGES
from witty_profiler.collectors.lib.bpfload import settle
from witty_profiler.collectors.lib.bpfhost import (
    NotReady,
    debian_header_pairs,
    kernel_headers,
    load_bcc,
    merge_header_tree,
    tracefs,
)
from witty_profiler.diagnosis import diagnose

PY = sys.executable


# -- the program and the arithmetic ---------------------------------------------------------
def test_the_program_traces_the_waiting_futex_ops_of_each_syscall_it_is_given():
    text = program(["futex", "futex_waitv"])
    assert "TRACEPOINT_PROBE(syscalls, sys_enter_futex)" in text and "sys_exit_futex_waitv" in text
    assert "sys_enter_futex_wait)" not in text  # not asked for: this kernel would lack it
    # FUTEX_WAIT, LOCK_PI, WAIT_BITSET, WAIT_REQUEUE_PI, LOCK_PI2 wait; WAKE (1) and the rest do not
    assert "op != 0 && op != 6 && op != 9 && op != 11 && op != 13" in text and "& 127" in text
    assert set(SYSCALLS) == {"futex", "futex_waitv", "futex_wait"}


def test_in_a_container_the_program_reports_the_ids_of_its_pid_namespace():
    assert "#define PIDNS_INO" not in program(["futex"])  # the host's namespace: the kernel's own ids
    text = program(["futex"], (4, 4026532301))
    assert "#define PIDNS_DEV 4ULL\n#define PIDNS_INO 4026532301ULL\n" in text
    assert "bpf_get_ns_current_pid_tgid(PIDNS_DEV, PIDNS_INO" in text


def test_a_pid_namespace_of_its_own_is_told_from_the_hosts(tmp_path):
    (tmp_path / "self" / "ns").mkdir(parents=True)
    (tmp_path / "self" / "ns" / "pid").write_text("")  # any inode but the initial namespace's
    ns = os.stat(tmp_path / "self" / "ns" / "pid")
    assert ns.st_ino != HOST_PIDNS_INO
    assert nested_pid_namespace(str(tmp_path), "6.1.0-57-amd64") == (ns.st_dev, ns.st_ino)
    with pytest.raises(NotReady, match="kernel 5.4.0-150-generic \\(before 5.7\\) cannot give eBPF its ids: run in "
                                       "the host's PID namespace"):
        nested_pid_namespace(str(tmp_path), "5.4.0-150-generic")
    assert nested_pid_namespace(str(tmp_path / "gone"), "6.1.0") is None  # unreadable: as on the host
    assert [kernel_version(r) for r in ("6.18.44-fc-v1098", "5.7.0", "4.19.0-27-amd64", "6.10rc1", "x")] == \
        [(6, 18), (5, 7), (4, 19), (6, 10), (0, 0)]


def test_thread_metrics_are_shares_and_rates_of_the_window():
    assert thread_metrics(1_500_000_000, 300_000_000, 30, 3.0) == \
        {"futex_wait_pct": 50.0, "futex_lock_wait_pct": 10.0, "futex_wakeups_per_s": 10.0}
    # several waits of one thread can overlap the window's edges by a few ns: never above 100 %
    assert thread_metrics(3_000_000_100, 3_000_000_100, 0, 3.0)["futex_lock_wait_pct"] == 100.0
    assert "#define LOCK_WAIT_MAX_NS 10000000ULL" in program(["futex"])  # 10 ms: longer timed-out waits are sleeps


def test_the_map_is_read_in_batches_or_key_by_key_where_the_kernel_has_no_batches():
    value = SimpleNamespace(ns=2_000_000, lock_ns=500_000, woken=7, comm=b"python3")
    key = (42 << 32) | 43  # tgid 42, thread 43

    class Batches:
        def items_lookup_batch(self):
            return iter([(key, value)])

    class KeyByKey:
        def items_lookup_batch(self):
            raise Exception("BPF_MAP_LOOKUP_BATCH failed: Invalid argument")  # what bcc raises there

        def items(self):
            return [(ctypes.c_ulonglong(key), value)]

    assert wait_rows(Batches()) == wait_rows(KeyByKey()) == {(42, 43): (2_000_000, 500_000, 7, "python3")}


def test_a_thread_inside_a_futex_wait_is_told_from_its_syscall_file():
    # /proc/PID/task/TID/syscall of a Python thread blocked in Lock.acquire() on this x86_64 host:
    # futex (202) on the word at 0x558f7edb8d20, op 0x189 = FUTEX_WAIT_BITSET | PRIVATE | CLOCK_REALTIME
    blocked = "202 0x558f7edb8d20 0x189 0x0 0x0 0x0 0xffffffff 0x7f2c955bbaa0 0x7f2c95ca3f16"
    assert futex_wait_address(blocked, "x86_64") == 0x558f7edb8d20
    assert futex_wait_address(blocked.replace("0x189", "0x81", 1), "x86_64") is None  # FUTEX_WAKE | PRIVATE
    assert futex_wait_address(blocked, "aarch64") is None  # 202 is another syscall there (accept)
    assert futex_wait_address(blocked.replace("202", "98", 1), "aarch64") == 0x558f7edb8d20
    assert futex_wait_address("455 0x7f00aa10 0x0 0xffffffff 0x82 0x0 0x1 0x7ffd1f8 0x7f33", "x86_64") == 0x7f00aa10
    assert futex_wait_address("449 0x7ffd2a0 0x2 0x0 0x0 0x1 0x0 0x7ffd1f8 0x7f33", "aarch64") == 0  # a vector
    nanosleep = "230 0x1 0x0 0x7ffc6fcbb0e0 0x0 0x0 0x0 0x7ffc6fcbb0a8 0x7f9d1f8e3a23"
    assert all(futex_wait_address(text, "x86_64") is None
               for text in (nanosleep, "running", "-1 0x7ffc 0x7f9d", "", None))


def test_waits_in_progress_are_read_with_their_thread():
    began = SimpleNamespace(ts=123_456, addr=0x7F00AA10)

    class Batches:
        def items_lookup_batch(self):
            return iter([((42 << 32) | 43, began)])

    class KeyByKey:
        def items_lookup_batch(self):
            raise Exception("BPF_MAP_LOOKUP_BATCH failed: Invalid argument")

        def items(self):
            return [(ctypes.c_ulonglong((42 << 32) | 43), began)]

    assert started_rows(Batches()) == started_rows(KeyByKey()) == {(42, 43): (123_456, 0x7F00AA10)}


def test_each_thread_is_given_the_lock_it_waited_on_most():
    class LockWaits:
        def items_lookup_batch(self):
            thread = (42 << 32) | 43
            return iter([(SimpleNamespace(id=thread, addr=0x7F00AA10), 3_000_000),  # the GIL, say
                         (SimpleNamespace(id=thread, addr=0x55D0C0DE), 9_000_000),  # a mutex: most
                         (SimpleNamespace(id=(42 << 32) | 44, addr=0x55D0C0DE), 1_000),
                         (SimpleNamespace(id=(42 << 32) | 45, addr=0), 5_000)])  # futex_waitv: no word

    assert main_locks(LockWaits()) == {(42, 43): (0x55D0C0DE, 9_000_000), (42, 44): (0x55D0C0DE, 1_000)}


# -- what the host must have ---------------------------------------------------------------
def _headers(src: Path, version: str, flavour: str = "amd64") -> None:
    common, arch = src / f"linux-headers-{version}-common", src / f"linux-headers-{version}-{flavour}"
    (common / "include" / "linux").mkdir(parents=True)
    (common / "include" / "linux" / "sched.h").write_text("/* common */\n")
    (common / "arch" / "x86" / "include" / "asm").mkdir(parents=True)
    (common / "arch" / "x86" / "include" / "asm" / "ptrace.h").write_text("/* asm */\n")
    (common / "Makefile").write_text("common\n")
    (arch / "include" / "generated").mkdir(parents=True)
    (arch / "include" / "generated" / "autoconf.h").write_text(f"/* {version} */\n")
    (arch / "arch" / "x86" / "include" / "generated").mkdir(parents=True)
    (arch / ".config").write_text("CONFIG_BPF=y\n")
    (arch / "Makefile").write_text("flavour\n")
    (src / "linux-kbuild").mkdir(exist_ok=True)
    (arch / "scripts").symlink_to("../linux-kbuild")  # Debian links its scripts relatively


def test_debian_headers_merge_into_one_tree_of_links(tmp_path):
    src = tmp_path / "src"
    _headers(src, "6.1.0-57")
    (src / "linux-headers-6.1.0-58-amd64" / "include" / "generated").mkdir(parents=True)  # common part missing
    pairs = debian_header_pairs(src)
    assert list(pairs) == ["6.1.0-57-amd64"]
    tree = merge_header_tree(*pairs["6.1.0-57-amd64"], tmp_path / "cache" / "6.1.0-57-amd64")
    assert (tree / "include" / "linux" / "sched.h").read_text() == "/* common */\n"
    assert (tree / "include" / "generated" / "autoconf.h").read_text() == "/* 6.1.0-57 */\n"
    assert (tree / "arch" / "x86" / "include" / "asm" / "ptrace.h").exists()
    assert (tree / "arch" / "x86" / "include" / "generated").is_dir()
    assert (tree / ".config").exists() and (tree / "Makefile").read_text() == "flavour\n"  # the flavour wins
    assert (tree / "scripts").resolve() == (src / "linux-kbuild").resolve()  # a relative link still points right
    assert (tree / "include").is_dir() and not (tree / "include").is_symlink()  # filled from both parts
    # made once: a second call reuses it; the source files are links, never copies
    first = (tree / "include" / "linux").stat().st_ino
    assert merge_header_tree(*pairs["6.1.0-57-amd64"], tree) == tree
    assert (tree / "include" / "linux").stat().st_ino == first and (tree / "include" / "linux").is_symlink()


def test_kernel_headers_take_the_running_release_else_the_newest(tmp_path, monkeypatch):
    monkeypatch.delenv("BCC_KERNEL_SOURCE", raising=False)
    monkeypatch.setattr(bpfhost.Path, "exists", lambda self: False if str(self).endswith("kheaders.tar.xz")
                        else os.path.exists(self))
    src, cache, modules = tmp_path / "src", tmp_path / "cache", tmp_path / "modules"
    with pytest.raises(NotReady, match="no kernel headers for 6.18.4-vm: apt-get install python3-bpfcc"):
        kernel_headers("6.18.4-vm", src, modules, cache)
    _headers(src, "6.1.0-50")
    _headers(src, "6.1.0-9")
    tree, note = kernel_headers("6.18.4-vm", src, modules, cache)
    assert tree == cache / "6.1.0-50-amd64"  # newest by number, not by text (9 < 50)
    assert note == "kernel headers 6.1.0-50-amd64 for kernel 6.18.4-vm (tracepoints only)"
    assert kernel_headers("6.1.0-9-amd64", src, modules, cache) == (cache / "6.1.0-9-amd64",
                                                                    "kernel headers 6.1.0-9-amd64")
    (modules / "6.18.4-vm" / "build" / "include").mkdir(parents=True)
    assert kernel_headers("6.18.4-vm", src, modules, cache) == (None, "kernel headers of 6.18.4-vm")
    monkeypatch.setenv("BCC_KERNEL_SOURCE", "/opt/k")
    assert kernel_headers("6.18.4-vm", src, modules, cache) == (Path("/opt/k"),
                                                                "kernel headers from BCC_KERNEL_SOURCE=/opt/k")


def test_tracefs_is_found_in_the_mount_table_or_said_missing():
    mounts = ("sysfs /sys sysfs rw 0 0\n"
              "tracefs /sys/kernel/debug/tracing tracefs rw,nosuid 0 0\n")
    assert tracefs(mounts) == Path("/sys/kernel/debug/tracing")
    with pytest.raises(NotReady, match="tracefs is not mounted: mount -t tracefs nodev /sys/kernel/tracing"):
        tracefs("sysfs /sys sysfs rw 0 0\n", mount=False)


def test_bcc_comes_from_the_distribution_when_this_interpreter_lacks_it(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "dist-packages" not in p])
    real = sys.modules.pop("bcc", None)
    try:
        with pytest.raises(NotReady, match="the bcc Python module is not installed: apt-get install python3-bpfcc"):
            load_bcc(tmp_path)
        (tmp_path / "bcc").mkdir()
        (tmp_path / "bcc" / "__init__.py").write_text("WHERE = 'distribution'\n")
        before = list(sys.path)
        assert load_bcc(tmp_path).WHERE == "distribution"
        assert sys.path == before  # nothing else of the system Python is importable afterwards
        sys.modules.pop("bcc")
        (tmp_path / "bcc" / "__init__.py").write_text("raise OSError('libbcc.so.0: cannot open shared object file')\n")
        with pytest.raises(NotReady, match="does not load here: OSError: libbcc.so.0: cannot open shared object"):
            load_bcc(tmp_path)
        sys.path.append(str(tmp_path))  # importable as it is, but its library is missing
        with pytest.raises(NotReady, match="^bcc does not load: libbcc.so.0: cannot open shared object file: apt-get"):
            load_bcc(tmp_path / "elsewhere")
    finally:  # the stand-in must not serve the live tests
        sys.modules.pop("bcc", None)
        if real is not None:
            sys.modules["bcc"] = real


# -- live ------------------------------------------------------------------------------------
CONTENDED = """
import threading, time
lock = threading.Lock()
def work():
    while True:
        with lock:
            sum(range(20000))
for _ in range(4):
    threading.Thread(target=work, daemon=True).start()
time.sleep(60)
"""
GIL = """
import ctypes, queue, threading, time
libc = ctypes.CDLL(None)
def spin():
    libc.prctl(15, b"spin")  # PR_SET_NAME
    while True:
        pass
def poll():  # idle, but each time its timeout ends it must take the GIL back from the spinners
    libc.prctl(15, b"gilpoll")
    q = queue.Queue()
    while True:
        try:
            q.get(timeout=0.05)
        except queue.Empty:
            pass
for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
for _ in range(2):
    threading.Thread(target=poll, daemon=True).start()
time.sleep(60)
"""
BLOCKED = """
import ctypes, os, sys, threading, time
libc = ctypes.CDLL(None)
def wait_on(lock, name):
    libc.prctl(15, name)  # PR_SET_NAME: the thread's comm
    lock.acquire()
    time.sleep(60)
held, later = threading.Lock(), threading.Lock()
held.acquire(); later.acquire()
threading.Thread(target=wait_on, args=(held, b"held"), daemon=True).start()
threading.Thread(target=wait_on, args=(later, b"later"), daemon=True).start()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
later.release()
time.sleep(60)
"""
POLLER = """
import queue, threading, time
def poll():
    q = queue.Queue()  # one each: no thread ever wakes another
    while True:
        try:
            q.get(timeout=0.05)
        except queue.Empty:
            pass
for _ in range(4):
    threading.Thread(target=poll, daemon=True).start()
time.sleep(60)
"""


def _ebpf_ready() -> None:
    ebpf_ready()


THREADS = {"contended": 5, "gil": 7, "poller": 5, "blocked": 3}  # main + workers of each program above
SLEEP_SYSCALLS = {"x86_64": {35, 230}, "aarch64": {101, 115}}  # nanosleep, clock_nanosleep


def _settled(pid: int, threads: int, timeout_s: float = 20.0) -> None:
    """Wait until `pid` has started its `threads` and its main thread sleeps (or polls, for BLOCKED) in
    nanosleep: before that, starting threads is futex waiting of the main thread, which the window must
    not see. A fixed delay is not enough on a loaded host, where an interpreter can take seconds to start."""
    sleeping = SLEEP_SYSCALLS.get(os.uname().machine)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            started = len(os.listdir(f"/proc/{pid}/task")) >= threads
            nr = Path(f"/proc/{pid}/task/{pid}/syscall").read_text().split()[0]
        except (OSError, IndexError):
            started, nr = False, ""
        if started and (sleeping is None or (nr.isdigit() and int(nr) in sleeping)):
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} did not start its {threads} threads within {timeout_s} s")


RELEASE_AFTER_S = 1.5  # into the 3 s window, BLOCKED's "later" thread gets its lock


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    _ebpf_ready()
    flag = tmp_path_factory.mktemp("ebpf") / "release"
    procs = {name: subprocess.Popen([PY, "-c", code, str(flag)]) for name, code in
             (("contended", CONTENDED), ("gil", GIL), ("poller", POLLER), ("blocked", BLOCKED))}
    opened = EbpfCollector.start

    def start_then_release_later(collector):
        opened(collector)
        threading.Timer(RELEASE_AFTER_S, flag.touch).start()

    try:
        pids = {name: p.pid for name, p in procs.items()}
        for name, pid in pids.items():  # every thread started, the main thread asleep: only then the window
            _settled(pid, THREADS[name])
        time.sleep(0.2)  # the workers are in their loops
        with mock.patch.object(EbpfCollector, "start", start_then_release_later):
            graph = run_window(3.0, 1.0, pids=list(pids.values()), collectors=["process", "ebpf"])
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
    return graph, pids


def _threads(graph, pid):
    host = graph.meta.hosts[0]
    return {t.id: t for t in graph.entities("thread") if t.id.startswith(f"thread:{host}:{pid}:")}


@pytest.mark.live
def test_every_thread_in_scope_gets_its_futex_waits(traced):
    graph, pids = traced
    status = graph.meta.collectors["ebpf"]
    assert status.status == "ok", status
    assert status.reason.startswith("futex waits traced on futex") and status.duration_s < 30
    for name, pid in pids.items():
        threads = _threads(graph, pid)
        assert len(threads) == {"blocked": 3, "gil": 7}.get(name, 5), (name, sorted(threads))  # main + workers
        assert all("futex_wait_pct" in t.metrics and "futex_wakeups_per_s" in t.metrics for t in threads.values())
        main = graph.entity(f"thread:{graph.meta.hosts[0]}:{pid}:{pid}")
        assert main.metrics["futex_wait_pct"] == 0  # time.sleep is a nanosleep, not a futex wait
        assert graph.neighbours(main.id, "in", "has_thread")


@pytest.mark.live
def test_a_contended_lock_and_an_idle_poller_are_told_apart(traced):
    graph, pids = traced
    workers = {name: [t for t in _threads(graph, pid).values() if t.attrs["tid"] != pid] for name, pid in pids.items()}
    # the poller sleeps almost the whole window in timed waits, and nothing wakes it
    assert all(t.metrics["futex_wait_pct"] > 80 and t.metrics["futex_wakeups_per_s"] < 10
               and t.metrics["futex_lock_wait_pct"] < 10  # its waits run to their 50 ms timeout: sleeps
               for t in workers["poller"]), [t.metrics for t in workers["poller"]]
    # the lock's waiters are woken by its holder hundreds of times a second (tens on a starved VM):
    # above the pattern's 25/s and far above the poller's rare wake-ups
    poller_most = max(t.metrics["futex_wakeups_per_s"] for t in workers["poller"])
    assert all(t.metrics["futex_wakeups_per_s"] > max(25, 5 * poller_most) and t.metrics["futex_wait_pct"] > 20
               for t in workers["contended"]), [t.metrics for t in workers["contended"]]
    # three of four GIL waiters at any time: most of the window waiting, woken often
    spinners = [t for t in workers["gil"] if t.attrs.get("name") == "spin"]
    assert len(spinners) == 4
    assert sum(t.metrics["futex_lock_wait_pct"] for t in spinners) / 4 > 40
    assert sum(t.metrics["futex_wakeups_per_s"] for t in spinners) > 4 * 25
    # the pollers beside them sleep most of the window in 50 ms timed waits, and wait for the GIL each
    # time one ends (5-20 % of the window here, up to a third on a busy host): the sleeps are not
    # lock waiting, the GIL waits are
    gilpoll = [t for t in workers["gil"] if t.attrs.get("name") == "gilpoll"]
    assert len(gilpoll) == 2 and all(t.metrics["futex_wait_pct"] > 60 and t.metrics["futex_lock_wait_pct"] < 60
                                     and t.metrics["futex_wait_pct"] - t.metrics["futex_lock_wait_pct"] > 25
                                     for t in gilpoll), [t.metrics for t in gilpoll]

    d = diagnose(graph, pids=list(pids.values()))
    blocked = {t.id for t in workers["blocked"]}
    f = d.finding("control.lock_contention")
    assert f is not None, next(c for c in d.coverage if c.pattern == "control.lock_contention")
    poller = {t.id for t in workers["poller"]}
    assert f.subjects and not (poller | blocked) & set(f.subjects)
    assert set(f.subjects) <= {t.id for t in workers["contended"] + spinners + gilpoll}
    # which lock: the contended workers wait mostly on one futex word, the Lock's semaphore (on the
    # heap), the GIL's spinners on another, the GIL's condition variable in the interpreter's data
    on_one = [e for e in f.evidence if e.metric == "threads_on_one_lock"]
    contended = {t.id for t in workers["contended"]}
    lock = next(e for e in on_one if set(e.ids) == contended)
    assert lock.value == 4 and ("in [heap]" in lock.note or "in [anon]" in lock.note), lock
    gil_lock = next(e for e in on_one if {t.id for t in spinners} <= set(e.ids))
    assert " in /" in gil_lock.note and gil_lock.note != lock.note, gil_lock
    # a GIL poller, if named, waits on the GIL for part of the window only: never critical
    assert not [e for e in f.evidence if e.metric == "futex_lock_wait_pct" and e.ids[0] in {t.id for t in gilpoll}
                and e.threshold == "> 60"]
    assert any(e.metric == "futex_wakeups_per_s" and e.threshold == ">= 25" for e in f.evidence)


@pytest.mark.live
def test_waits_that_span_the_window_edges_count_inside_it(traced):
    graph, pids = traced
    by_name = {t.attrs.get("name"): t.metrics for t in _threads(graph, pids["blocked"]).values()}
    # blocked before the window opened and still blocked when it closed: the whole window
    held = by_name["held"]
    assert held["futex_wait_pct"] > 95 and held["futex_wakeups_per_s"] == 0, held
    # blocked before the window, woken 1.5 s into it: about half of the window (3 s, and what the
    # collectors before this one take to finish, more on a loaded host), woken by the release and by
    # a GIL hand-over or two as it takes the interpreter back
    later = by_name["later"]
    assert 0 < later["futex_wakeups_per_s"] < 2 and 25 < later["futex_wait_pct"] < 70, (held, later)


@pytest.mark.live
def test_what_other_threads_write_to_stderr_while_it_compiles_is_kept(capfd, monkeypatch):
    """clang's output is kept off file descriptor 2 during the compile; an MCP server's log lines
    written meanwhile by its other threads still reach it, every one."""
    _ebpf_ready()
    IMAGES.forget()  # an earlier test compiled it: this one must compile again
    monkeypatch.setenv("WITTY_BPF_CACHE", "off")
    collector, stop = EbpfCollector(Context()), threading.Event()

    def log():
        n = 0
        while not stop.is_set():
            os.write(2, f"log line {n}\n".encode())
            n += 1
            time.sleep(0.005)

    talker = threading.Thread(target=log)
    talker.start()
    try:
        collector.prepare()
    finally:
        stop.set()
        talker.join()
    assert collector.bpf is not None, collector.problem
    assert collector.status.extra["program"] == "compiled"
    collector.start()
    collector.finish()
    lines = capfd.readouterr().err.splitlines()
    numbers = sorted(int(line.split()[-1]) for line in lines if line.startswith("log line "))
    assert len(numbers) > 20 and numbers == list(range(len(numbers)))  # some written during the compile
    assert not [line for line in lines if not line.startswith("log line ")]  # and nothing from clang


@pytest.mark.live
def test_a_later_window_loads_what_the_first_one_compiled_and_none_stays_attached(tmp_path, monkeypatch):
    """The program is compiled once: a later window of this process takes it from memory, another
    process from the disk; between windows nothing is attached (the host pays nothing)."""
    _ebpf_ready()
    IMAGES.forget()
    monkeypatch.setenv("WITTY_BPF_CACHE", str(tmp_path / "images"))
    contended = subprocess.Popen([PY, "-c", CONTENDED])
    try:
        _settled(contended.pid, THREADS["contended"])
        windows = [run_window(2.0, 1.0, pids=[contended.pid], collectors=["process", "ebpf"]) for _ in range(2)]
        settle()
        assert not _bpf_links(os.getpid())  # no program or perf event of this process left open
        IMAGES.forget()  # as a new process finds it: on disk
        windows.append(run_window(2.0, 1.0, pids=[contended.pid], collectors=["process", "ebpf"]))
    finally:
        contended.kill()
        contended.wait()
    statuses = [g.meta.collectors["ebpf"] for g in windows]
    assert [s.extra["program"] for s in statuses] == ["compiled", "cached in memory", "cached on disk"], statuses
    assert statuses[2].extra["program_cache"] == str(next((tmp_path / "images").glob("*.json")))
    assert max(s.extra["cpu_s"] for s in statuses[1:]) < statuses[0].extra["cpu_s"]  # no clang after the first
    for graph in windows:  # every window saw the lock's waiters (on a loaded VM one thread may keep the lock
        # for a whole window and never wait: three of four)
        workers = [t for t in _threads(graph, contended.pid).values() if t.attrs["tid"] != contended.pid]
        assert len(workers) == 4 and sum(t.metrics["futex_wakeups_per_s"] > 25 for t in workers) >= 3, \
            [t.metrics for t in workers]


def _bpf_links(pid: int) -> list[str]:
    """The bpf programs, maps and perf events (tracepoints attached) a process holds open, by the names
    /proc gives their descriptors."""
    fds = Path(f"/proc/{pid}/fd")
    links = []
    for fd in fds.iterdir():
        try:
            links.append(os.readlink(fd))
        except OSError:
            continue
    return [link for link in links if link.startswith(("anon_inode:bpf", "anon_inode:[perf_event]"))]


IN_A_CONTAINER = """
import json, subprocess, sys, time
from witty_profiler.collectors.engine import run_window
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
time.sleep(0.5)
try:
    graph = run_window(2.0, 1.0, pids=[child.pid], collectors=["process", "ebpf"])
finally:
    child.kill()
print(json.dumps({"pid": child.pid, "reason": graph.meta.collectors["ebpf"].reason,
                  "threads": {t.id: t.metrics for t in graph.entities("thread")}}))
"""


@pytest.mark.live
def test_a_contended_lock_inside_a_pid_namespace_of_its_own(tmp_path):
    """Run where a container would: a new PID namespace with its own /proc. The kernel's ids are
    not the ones /proc shows there; the threads are still matched, and their waits counted."""
    _ebpf_ready()
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", PY, "-c", IN_A_CONTAINER, CONTENDED],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "ids of this PID namespace" in seen["reason"]
    assert seen["pid"] < 100  # a namespace-local id, as the process collector read it from that /proc
    workers = {tid: m for tid, m in seen["threads"].items() if not tid.endswith(f":{seen['pid']}:{seen['pid']}")}
    assert len(workers) == 4
    # the workers are traced (before, none was matched and all read 0 %); the lock is unfair, so on a loaded
    # VM one worker may keep it for the whole window and never wait (three of four, as in the sibling test
    # above): together they wait most of it
    assert sum(m["futex_wait_pct"] > 0 and m["futex_wakeups_per_s"] > 0 for m in workers.values()) >= 3, workers
    assert sum(m["futex_wait_pct"] for m in workers.values()) > 150, workers
