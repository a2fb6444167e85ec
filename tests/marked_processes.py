"""Processes found by a marker in their environment: the cancellation tests start a launcher's children with
`WITTY_TEST_MARK=<unique>` (it reaches every process they start, srun's tasks too) and then look for what is
left of them, zombies not counted (they are gone, only not reaped yet)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

KEY = "WITTY_TEST_MARK"


def new_mark() -> str:
    return f"cancel-{uuid.uuid4().hex[:12]}"


def living(mark: str) -> list[int]:
    """Pids of the processes that are running (not zombies) and carry KEY=mark in their environment."""
    needle = f"{KEY}={mark}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes() + b"\0":
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2:].split()[0] != "Z":
            found.append(int(entry.name))
    return found


def wait_for(mark: str, count: int, timeout: float = 60.0) -> list[int]:
    """Wait until at least `count` marked processes run; their pids."""
    deadline = time.monotonic() + timeout
    while True:
        pids = living(mark)
        if len(pids) >= count:
            return pids
        assert time.monotonic() < deadline, f"only {len(pids)} of {count} marked processes started"
        time.sleep(0.1)


def wait_gone(mark: str, timeout: float) -> list[int]:
    """Wait up to `timeout` s for every marked process to end; those still running then."""
    deadline = time.monotonic() + timeout
    while living(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    return living(mark)


def kill_marked(mark: str) -> None:
    """Clean-up: SIGKILL what a failed test left."""
    import os
    import signal
    for pid in living(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
