"""One service per state directory: an exclusive fcntl lock on STATE/service.lock, held for the
process's life. The kernel drops it when the process ends, however it ends, so no stale lock
survives a crash; the file keeps the holder's pid so the refusal can name it.

The file is opened relative to the opened state directory, without following a symbolic link and
without truncating anything on the way (O_NOFOLLOW | O_CREAT, no O_TRUNC): a link planted as
service.lock, anything but a regular file, or a file another user owns or others may write stops the
start (statedir.py). Only the service's own regular file is emptied, once the lock is held."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path

from witty_profiler.service.statedir import Folder, UnsafeState, check_owner, kind
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.text import visible

NAME = "service.lock"


class InstanceLock:
    def __init__(self, state: Path | Folder) -> None:
        self._state = state
        self.path = (state.path if isinstance(state, Folder) else Path(state)) / NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        home = self._state if isinstance(self._state, Folder) else Folder.open_root(self._state)
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open(NAME, flags, 0o600, dir_fd=home.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeState(f"{visible(str(self.path))}: is a symbolic link; the lock file must be the "
                                  f"service's own regular file (remove the link)") from None
            raise UnsafeState(f"{visible(str(self.path))}: cannot open the lock file ({exc.strerror})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise UnsafeState(f"{visible(str(self.path))}: is {kind(info.st_mode)}, not a regular file")
            check_owner(info, self.path)
            os.fchmod(fd, 0o600)  # whatever the umask
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "another process"
            os.close(fd)
            raise InputError(f"another witty-profiler service (pid {visible(holder)}) already uses "
                             f"{self.path.parent}; stop it, or give this one its own storage.state_dir") from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the lock; the file stays (unlinking it would race a newcomer)
            self._fd = None
