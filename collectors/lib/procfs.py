"""Pure parsers for /proc and /sys text: each takes the text of one file and returns plain data.

Collectors stay thin by reading files with `read_text` (which turns a vanished process, a
permission error or a missing file into None) and handing the text to a parser here. The
parsers are tested on real file texts (tests/test_collect_procfs.py).
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

from witty_profiler.topology.cpulist import format_cpulist, parse_cpulist  # noqa: F401 - process.py imports them from here
from witty_profiler.topology.lazy import LazyPattern

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_small(path: str) -> bytes:
    """A /proc file under 64 KiB (stat, status, io, schedstat) in one read, as bytes; b"" when it
    cannot be read (process gone, no permission, no such file). See read_text."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        return os.read(fd, 65536)
    except OSError:  # ESRCH when the task exits between open and read
        return b""
    finally:
        os.close(fd)


def read_text(path: str, small: bool = False) -> str | None:
    """The whole file, or None when it cannot be read (process gone, no permission, no such file).

    os.open/os.read is used instead of open() because it is several times cheaper per call, and
    the process collector reads thousands of small files per interval. With small=True one read
    is done: a /proc file under 64 KiB (stat, status, io, schedstat) comes back whole from one
    read, and the second read that would only confirm the end costs a system call per file."""
    raw = read_small(path) or None if small else read_bytes(path)
    return None if raw is None else raw.decode("utf-8", "replace")


def read_bytes(path: str) -> bytes | None:
    """The whole file as bytes (None when it cannot be read), for a search before any decoding.

    seq_file-backed files (maps, numa_maps, net tables) return about a page per read and less
    than a page when the next record does not fit: only an empty read means the end."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 262144):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:  # ESRCH when the task exits between open and read, EACCES for some files
        return None
    finally:
        os.close(fd)


# -- /proc/PID/stat and /proc/PID/task/TID/stat -----------------------------------------------
class Stat:
    """The fields of /proc/PID/stat the collectors use (times in clock ticks, rss in pages)."""

    __slots__ = ("comm", "state", "ppid", "flags", "majflt", "utime", "stime", "num_threads", "starttime", "rss",
                 "processor", "blkio")

    def __init__(self, comm: str, state: str, ppid: int, flags: int, majflt: int, utime: int, stime: int,
                 num_threads: int, starttime: int, rss: int, processor: int, blkio: int | None = None) -> None:
        self.comm, self.state, self.ppid, self.flags, self.majflt = comm, state, ppid, flags, majflt
        self.utime, self.stime, self.num_threads = utime, stime, num_threads
        self.starttime, self.rss, self.processor, self.blkio = starttime, rss, processor, blkio

    @property
    def kernel_thread(self) -> bool:
        return bool(self.flags & 0x00200000)  # PF_KTHREAD


def parse_stat(text: str) -> Stat | None:
    """Parse /proc/PID/stat. The command name may hold spaces and parentheses, so the fields are
    split after the LAST ')'."""
    close = text.rfind(")")
    if close < 0:
        return None
    comm = text[text.find("(") + 1:close]
    f = text[close + 2:].split(None, 40)  # nothing after field 42 (delayacct_blkio_ticks) is used
    if len(f) < 37:
        return None
    # f[0] is field 3 (state) of proc(5)
    return Stat(comm, f[0], int(f[1]), int(f[6]), int(f[9]), int(f[11]), int(f[12]), int(f[17]), int(f[19]),
                int(f[21]), int(f[36]), int(f[39]) if len(f) > 39 and f[39].isdigit() else None)


def blkio_ticks(raw: bytes) -> int | None:
    """Field 42 of a raw /proc/PID/stat: clock ticks the task spent blocked on block I/O (delay accounting)."""
    f = raw[raw.rfind(b")") + 2:].split(None, 40)
    return int(f[39]) if len(f) > 39 and f[39].isdigit() else None


def delay_accounting(proc_sys: str = "/proc/sys") -> bool:
    """Whether the kernel counts tasks' block I/O delays: kernel.task_delayacct (Linux 5.14 and later, off by
    default; `sysctl kernel.task_delayacct=1` or the `delayacct` boot option turn it on); before 5.14 it was on
    wherever it was built in."""
    text = read_text(f"{proc_sys}/kernel/task_delayacct", small=True)
    return text is None or text.strip() != "0"


def parse_schedstat(text: str) -> tuple[int, int, int] | None:
    """/proc/PID/task/TID/schedstat: (ns on CPU, ns waiting on a run queue, timeslices)."""
    parts = text.split()
    if len(parts) < 3:
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


_STATUS_LINES = re.compile(r"^(Name|State|PPid|Threads|VmRSS|RssShmem|Cpus_allowed_list|Mems_allowed_list|"
                           r"voluntary_ctxt_switches|nonvoluntary_ctxt_switches|Uid):[ \t]*(.*)$", re.M)


def parse_status(text: str) -> dict[str, str]:
    """/proc/PID/status: the keys the collectors use, values as text (one regex pass: status is
    read for every process at both ends of the window)."""
    return {key: value.strip() for key, value in _STATUS_LINES.findall(text)}


def parse_kv_numbers(text: str, sep: str = ":") -> dict[str, int]:
    """'key: number' (or 'key number' with sep=' ') lines: /proc/PID/io, cpu.stat, vmstat, numastat."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(sep)
        value = value.strip().split(" ")[0]
        if value.lstrip("-").isdigit():
            out[key.strip()] = int(value)
    return out


def parse_cmdline(raw: str) -> str:
    """/proc/PID/cmdline: NUL-separated arguments -> one space-separated line."""
    return " ".join(a for a in raw.split("\0") if a)


def parse_environ(raw: str) -> dict[str, str]:
    """/proc/PID/environ: NUL-separated KEY=VALUE pairs. Filter with topology.privacy before storing."""
    env: dict[str, str] = {}
    for item in raw.split("\0"):
        key, sep, value = item.partition("=")
        if sep and key:
            env[key] = value
    return env


def parse_maps_libraries(text: str) -> list[str]:
    """Shared objects mapped by a process (/proc/PID/maps), sorted, each once."""
    libs = set()
    for line in text.splitlines():
        parts = line.split(None, 5)
        path = parts[5].strip() if len(parts) == 6 else ""
        if ".so" in path and path.startswith("/"):
            libs.add(path)
    return sorted(libs)


def mapping_of(text: str, address: int) -> str | None:
    """What /proc/PID/maps maps at `address`: the file's path, "[heap]", "[stack]", "[anon]" for an
    anonymous mapping; None when nothing is mapped there."""
    for line in text.splitlines():
        parts = line.split(None, 5)
        start, _, end = parts[0].partition("-")
        if int(start, 16) <= address < int(end, 16):
            return parts[5].strip() if len(parts) == 6 and parts[5].strip() else "[anon]"
    return None


_NODE_PAGES = re.compile(r"\bN(\d+)=(\d+)")


def parse_numa_maps(text: str) -> dict[int, int]:
    """/proc/PID/numa_maps -> {node: pages}. Huge pages are counted in base pages so that the
    shares between nodes stay right."""
    pages: dict[int, int] = {}
    for line in text.splitlines():
        scale = 1
        k = line.find("kernelpagesize_kB=")
        if k >= 0:
            size_kb = int(line[k + 18:].split()[0])
            scale = max(1, size_kb * 1024 // PAGE_SIZE)
        for node, count in _NODE_PAGES.findall(line):
            pages[int(node)] = pages.get(int(node), 0) + int(count) * scale
    return pages


# -- cgroups and containers ---------------------------------------------------------------------
def parse_cgroup(text: str) -> dict[str, str]:
    """/proc/PID/cgroup -> {controller: path}; the v2 unified hierarchy is the key ''.

    A v1 line names one or more controllers ('2:cpu,cpuacct:/x'), each gets its own key;
    named hierarchies keep their 'name=' prefix."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(","):
            out[controller] = parts[2]
    return out


# (runtime, pattern); the id is the first group
_CONTAINER_PATTERNS = [
    ("docker", re.compile(r"/docker[-/]([0-9a-f]{12,64})(?:\.scope)?(?:/|$)")),
    ("containerd", re.compile(r"/cri-containerd[-:]([0-9a-f]{12,64})(?:\.scope)?(?:/|$)")),
    ("cri-o", re.compile(r"/crio[-:]([0-9a-f]{12,64})(?:\.scope)?(?:/|$)")),
    ("containerd", re.compile(r"/containerd[-:]([0-9a-f]{12,64})(?:\.scope)?(?:/|$)")),
    ("podman", re.compile(r"/libpod[-:]([0-9a-f]{12,64})(?:\.scope)?(?:/|$)")),
    # kubepods without a runtime prefix: /kubepods/burstable/pod<uid>/<container id>
    ("kubernetes", re.compile(r"/kubepods[^/]*/(?:[^/]+/)?pod[0-9a-f_-]+(?:\.slice)?/([0-9a-f]{12,64})(?:/|$)")),
]
_POD = LazyPattern(globals(), "_POD", r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


@lru_cache(maxsize=4096)  # many processes share a cgroup path
def container_from_cgroup(path: str) -> dict[str, str] | None:
    """Container id, runtime and Kubernetes pod uid from a cgroup path, or None.

    Covers the layouts of docker (cgroupfs and systemd drivers), containerd/CRI, CRI-O, podman
    and kubepods (``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/
    cri-containerd-<id>.scope``, ``/kubepods/besteffort/pod<uid>/<id>``)."""
    for runtime, pattern in _CONTAINER_PATTERNS:
        m = pattern.search(path)
        if m:
            found = {"id": m.group(1), "runtime": runtime}
            pod = _POD.search(path)
            if pod:
                found["pod"] = pod.group(1).replace("_", "-")
            return found
    return None


# -- host files -----------------------------------------------------------------------------------
def parse_proc_stat_cpus(text: str) -> dict[str, list[int]]:
    """/proc/stat cpu lines -> {'cpu': [user, nice, system, idle, iowait, irq, softirq, steal], 'cpu0': ...}
    (in clock ticks), plus {'ctxt': [n]}."""
    out: dict[str, list[int]] = {}
    for line in text.splitlines():
        if line.startswith("cpu"):
            parts = line.split()
            out[parts[0]] = [int(x) for x in parts[1:9]] + [0] * max(0, 9 - len(parts))
        elif line.startswith("ctxt "):
            out["ctxt"] = [int(line.split()[1])]
    return out


def parse_psi(text: str) -> dict[str, int]:
    """/proc/pressure/{cpu,io,memory} -> {'some': total_us, 'full': total_us}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] in ("some", "full"):
            for p in parts[1:]:
                if p.startswith("total="):
                    out[parts[0]] = int(p[6:])
    return out


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo (or a node's meminfo) -> {key: bytes}; 'Node 0 MemTotal:' lines lose the prefix."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.split()[-1] if key else key
        parts = value.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


def cpu_flags(proc: str = "/proc") -> set[str]:
    """The first CPU's flags in cpuinfo (x86); empty where cpuinfo names none (Arm lists 'Features')."""
    for line in (read_text(f"{proc}/cpuinfo") or "").splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()
