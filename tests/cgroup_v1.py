"""Processes in v1 cgroups that the cgroup collector and the diagnosis tests look at: a busy loop
under a 0.1-core CPU quota (throttled), and a reader of a 64 MiB file under a 16 MiB memory limit
(its page cache evicted as fast as it reads: major faults). Skips where the host cannot make one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CPU_V1 = Path("/sys/fs/cgroup/cpu")
MEMORY_V1 = Path("/sys/fs/cgroup/memory")

# reads one byte of every page of the file at random-access readahead (one page per fault),
# round and round: with the file larger than the limit, each page was evicted since its last read
READER = """
import mmap, sys
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
m.madvise(mmap.MADV_RANDOM)
total = 0
while True:
    for offset in range(0, len(m), 4096):
        total += m[offset]
"""
# the same, one byte of every page in one C loop: the reader is I/O-bound, waiting on each fault
FAST_READER = READER.replace("""    for offset in range(0, len(m), 4096):
        total += m[offset]""", "    total += sum(m[::4096])")


@contextmanager
def busy_in_quota_cgroup(prefix: str) -> Iterator[tuple[Path, subprocess.Popen]]:
    """(the cgroup's folder, the busy process in it); both gone on exit."""
    if os.geteuid() != 0:
        pytest.skip("creating a cgroup needs root")
    if not (CPU_V1 / "cpu.cfs_quota_us").exists():
        pytest.skip(f"no cgroup v1 cpu controller mounted at {CPU_V1}")
    group = CPU_V1 / f"{prefix}-{os.getpid()}"
    group.mkdir()
    busy = None
    try:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("10000")  # 0.1 core
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        (group / "cgroup.procs").write_text(str(busy.pid))
        time.sleep(0.3)
        yield group, busy
    finally:
        _remove(group, busy)


@contextmanager
def reader_in_memory_cgroup(prefix: str, data: Path, others: int = 0,
                            code: str = READER) -> Iterator[tuple[Path, subprocess.Popen]]:
    """(the cgroup's folder, a process re-reading `data`, 64 MiB, under a 16 MiB memory limit);
    `others` more readers of the same file in the same cgroup; `code` the reader's program."""
    if os.geteuid() != 0:
        pytest.skip("creating a cgroup needs root")
    if not (MEMORY_V1 / "memory.limit_in_bytes").exists():
        pytest.skip(f"no cgroup v1 memory controller mounted at {MEMORY_V1}")
    data.write_bytes(os.urandom(64 << 20))
    fd = os.open(data, os.O_RDONLY)
    try:  # out of the page cache: pages already cached stay charged to this test's cgroup, not the reader's
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    group = MEMORY_V1 / f"{prefix}-{os.getpid()}"
    group.mkdir()
    reader, more = None, []
    try:
        (group / "memory.limit_in_bytes").write_text(str(16 << 20))
        procs = str(group / "cgroup.procs")
        reader = subprocess.Popen([sys.executable, "-c", code, str(data)],
                                  preexec_fn=lambda: Path(procs).write_text(str(os.getpid())))
        for _ in range(others):
            more.append(subprocess.Popen([sys.executable, "-c", code, str(data)],
                                         preexec_fn=lambda: Path(procs).write_text(str(os.getpid()))))
        time.sleep(0.5)
        yield group, reader
    finally:
        for p in more:
            p.kill()
            p.wait()
        _remove(group, reader)


def _remove(group: Path, member: subprocess.Popen | None) -> None:
    if member is not None:
        member.kill()
        member.wait()
    for _ in range(50):  # the kernel empties the group a moment after the exit
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.1)
