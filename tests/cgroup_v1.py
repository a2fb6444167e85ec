"""A busy loop in a v1 cpu cgroup with a 0.1-core quota: the throttled process that the cgroup
collector and the diagnosis tests look at. Skips where the host cannot make one."""

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
        if busy is not None:
            busy.kill()
            busy.wait()
        for _ in range(50):  # the kernel empties the group a moment after the exit
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
