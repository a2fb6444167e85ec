"""One service per state directory: an exclusive fcntl lock on STATE/service.lock, held for the
process's life. The kernel drops it when the process ends, however it ends, so no stale lock
survives a crash; the file keeps the holder's pid so the refusal can name it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from witty_profiler.topology.errors import InputError


class InstanceLock:
    def __init__(self, state: Path) -> None:
        self.path = state / "service.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "another process"
            os.close(fd)
            raise InputError(f"another witty-profiler service (pid {holder}) already uses {self.path.parent}; "
                             f"stop it, or give this one its own storage.state_dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the lock; the file stays (unlinking it would race a newcomer)
            self._fd = None
