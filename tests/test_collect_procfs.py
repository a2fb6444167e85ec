"""Parsers of /proc and /sys text, on real file texts: read from this machine's /proc during the
test where the file exists everywhere, inline where the text comes from a host we lack (kubepods,
huge pages, a second NUMA node)."""

from __future__ import annotations

import os
import threading
import time

from witty_profiler.collectors.cgroup import cgroup_mounts, quota_cores
from witty_profiler.collectors.lib import procfs
from witty_profiler.collectors.lib.sampling import Series, p95, ratio_metrics, window_metrics


def test_stat_of_this_process_and_a_name_with_parentheses():
    st = procfs.parse_stat(procfs.read_text(f"/proc/{os.getpid()}/stat"))
    assert st.ppid == os.getppid() and st.state in "RS" and st.num_threads >= 1
    assert 0 <= st.processor < os.cpu_count() and not st.kernel_thread
    # a command name may hold spaces and ')' - the fields start after the LAST ')'
    text = ("4242 (evil) S 1 (x)) R 1 4242 4242 0 -1 4194560 800 0 3 0 150 25 0 0 20 0 7 0 12345 "
            "1000000 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0")
    st = procfs.parse_stat(text)
    assert (st.comm, st.state, st.ppid, st.utime, st.stime, st.num_threads, st.starttime, st.rss, st.processor,
            st.majflt) == ("evil) S 1 (x)", "R", 1, 150, 25, 7, 12345, 2048, 3, 3)


def test_kernel_thread_flag_on_kthreadd():
    text = procfs.read_text("/proc/2/stat")
    if text and "kthreadd" in text:
        assert procfs.parse_stat(text).kernel_thread


def _spin_then_wait(done: threading.Event) -> None:
    # time.thread_time() reads the kernel's own run-time account of this thread, so the spin ends
    # only once schedstat's first field is non-zero: a thread that blocks at once may be charged
    # 0 ns on a VM whose steal time eats its only timeslice
    while time.thread_time() < 0.002:
        pass
    done.wait()


def test_schedstat_status_io_of_a_thread():
    done = threading.Event()
    worker = threading.Thread(target=_spin_then_wait, args=(done,), name="witty-worker")
    worker.start()
    try:
        tid = worker.native_id
        # the run time is charged when the thread leaves the CPU: wait until it blocks
        deadline = time.monotonic() + 5
        while True:
            run, wait, slices = procfs.parse_schedstat(procfs.read_text(f"/proc/self/task/{tid}/schedstat"))
            if run > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert run > 0 and wait >= 0 and slices >= 1
        status = procfs.parse_status(procfs.read_text(f"/proc/self/task/{tid}/status"))
        assert status["Name"]  # Python 3.11 does not name OS threads; the name is the process's
        assert procfs.parse_cpulist(status["Cpus_allowed_list"]) == sorted(os.sched_getaffinity(0))
        assert int(status["voluntary_ctxt_switches"]) >= 0
    finally:
        done.set()
        worker.join()
    io = procfs.parse_kv_numbers(procfs.read_text("/proc/self/io"))
    assert io["rchar"] > 0 and "write_bytes" in io


def test_read_text_of_a_vanished_process_is_none():
    assert procfs.read_text("/proc/999999999/stat") is None


def test_numa_maps_counts_huge_pages_in_base_pages():
    own = procfs.parse_numa_maps(procfs.read_text("/proc/self/numa_maps"))
    assert sum(own.values()) > 0
    text = ("7f0000000000 default file=/usr/lib/libc.so.6 mapped=10 mapmax=3 N0=6 N1=4 kernelpagesize_kB=4\n"
            "7f2000000000 bind:1 anon=2 dirty=2 N1=2 kernelpagesize_kB=2048\n"
            "7ffd00000000 default stack anon=3 dirty=3 active=0 N0=3 kernelpagesize_kB=4\n")
    assert procfs.parse_numa_maps(text) == {0: 9, 1: 4 + 2 * 512}


def test_maps_libraries_and_environ_and_cmdline():
    libs = procfs.parse_maps_libraries(procfs.read_text("/proc/self/maps"))
    assert any("libc" in lib for lib in libs) and all(lib.startswith("/") for lib in libs)
    env = procfs.parse_environ(procfs.read_text("/proc/self/environ"))
    assert env.get("PATH") == os.environ.get("PATH")
    assert procfs.parse_cmdline("python3\0-c\0print(1)\0") == "python3 -c print(1)"


def test_cgroup_file_and_containers():
    own = procfs.parse_cgroup(procfs.read_text("/proc/self/cgroup"))
    assert own and all(path.startswith("/") for path in own.values())
    hybrid = procfs.parse_cgroup("4:memory:/a/b\n2:cpu,cpuacct:/x\n1:name=systemd:/s\n0::/\n")
    assert hybrid == {"memory": "/a/b", "cpu": "/x", "cpuacct": "/x", "name=systemd": "/s", "": "/"}
    cid = "3f1b2c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809"
    cases = {
        f"/docker/{cid}": ("docker", None),
        f"/system.slice/docker-{cid}.scope": ("docker", None),
        f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/"
        f"cri-containerd-{cid}.scope": ("containerd", "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"),
        f"/kubepods/besteffort/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/{cid}": (
            "kubernetes", "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"),
        f"/machine.slice/libpod-{cid}.scope/container": ("podman", None),
        f"/kubepods.slice/kubepods-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/crio-{cid}.scope": (
            "cri-o", "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"),
    }
    for path, (runtime, pod) in cases.items():
        found = procfs.container_from_cgroup(path)
        assert found and found["id"] == cid and found["runtime"] == runtime, path
        assert found.get("pod") == pod, path
    assert procfs.container_from_cgroup("/user.slice/user-1000.slice/session-2.scope") is None
    assert procfs.container_from_cgroup("/process_api/3baaf46793ed4748659ce742fd727bc5") is None


def test_host_files():
    cpus = procfs.parse_proc_stat_cpus(procfs.read_text("/proc/stat"))
    assert "cpu" in cpus and "cpu0" in cpus and cpus["ctxt"][0] > 0 and len(cpus["cpu"]) >= 8
    meminfo = procfs.parse_meminfo(procfs.read_text("/proc/meminfo"))
    assert meminfo["MemTotal"] > meminfo["MemFree"] > 0
    node = procfs.parse_meminfo("Node 0 MemTotal:        3761912 kB\nNode 0 MemFree:         3536328 kB\n")
    assert node == {"MemTotal": 3761912 * 1024, "MemFree": 3536328 * 1024}
    psi = procfs.parse_psi("some avg10=2.49 avg60=1.36 avg300=0.40 total=3710358\n"
                           "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    assert psi == {"some": 3710358, "full": 0}
    vmstat = procfs.parse_kv_numbers(procfs.read_text("/proc/vmstat"), sep=" ")
    assert "pgmajfault" in vmstat


def test_cgroup_mounts_and_quota():
    mounts = cgroup_mounts("cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n"
                           "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
                           "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nsdelegate 0 0\n")
    assert mounts == {"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
                      "memory": "/sys/fs/cgroup/memory", "": "/sys/fs/cgroup/unified"}
    assert quota_cores("10000\n", "100000\n") == 0.1
    assert quota_cores("-1\n", "100000\n") is None
    assert quota_cores("max 100000\n") is None and quota_cores("250000 100000\n") == 2.5


def test_series_rates_and_window_statistics():
    s = Series()
    for t, v in [(0.0, 0), (1.0, 50), (2.0, 150), (3.0, 160)]:
        s.add(t, v)
    assert s.rate() == 160 / 3
    assert s.interval_rates() == [50, 100, 10]
    m = window_metrics("x_per_s", s)
    assert m == {"x_per_s": 53.333, "x_per_s_p95": 100, "x_per_s_max": 100}
    assert p95(list(range(1, 101))) == 95
    reset = Series()
    reset.add(0, 100)
    reset.add(1, 5)  # counter went backwards: no rate rather than a negative one
    assert reset.rate() is None and window_metrics("x", reset) == {}
    busy, total = Series(), Series()
    for t, b, a in [(0, 0, 0), (1, 50, 100), (2, 50, 200)]:
        busy.add(t, b)
        total.add(t, a)
    assert ratio_metrics("u_pct", busy, total) == {"u_pct": 25.0, "u_pct_p95": 50.0, "u_pct_max": 50.0}


def test_a_process_in_a_kubernetes_container_gets_a_container_entity():
    from witty_profiler.collectors.base import Context
    from witty_profiler.collectors.lib.tasks import ProcState
    from witty_profiler.collectors.process import ProcessCollector
    from witty_profiler.topology import Graph

    cid = "3f1b2c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809"
    collector = ProcessCollector(Context(host="h"))
    p = ProcState(os.getpid(), procfs.parse_stat(procfs.read_text("/proc/self/stat")), False)
    p.cgroups = {"cpu": f"/kubepods/burstable/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/{cid}", "": "/"}
    g = Graph()
    collector._container_edge(g, f"process:h:{p.pid}", p)
    container = g.entity(f"container:h:{cid}")
    assert container.attrs == {"container_id": cid, "runtime": "kubernetes",
                               "pod": "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"}
    assert [e.type for e in g.edges()] == ["in_container"]
