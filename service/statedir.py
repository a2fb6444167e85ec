"""The state directory, held to the rules sshd holds ~/.ssh to: a local user who can write into it must
not be able to make the service read, serve, truncate or delete anything outside it.

    the directory      created 0700; owned by the service's user and not writable by group or others,
                       or the service does not start
    its files          every file or folder in it (and in ring/ and kept/) owned by the service's user
                       and not writable by group or others, or the service does not start
    opening files      relative to the opened directory (dir_fd), never following a symbolic link
                       (O_NOFOLLOW), and only a regular file is read
    writing files      0600 whatever the umask, to a new temporary name (O_EXCL), then renamed

The path the administrator gives may itself be a symbolic link: it is followed once, and the directory
it leads to is checked and then used through its descriptor only. The folders above it are the
administrator's (SECURITY.md).

A refusal is an `UnsafeState` (an InputError: one line, exit 2) naming the path and what is wrong.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import weakref
from pathlib import Path

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.text import visible

DIR_MODE = 0o700
FILE_MODE = 0o600
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class UnsafeState(InputError):
    """The state directory, or something in it, that the service must not trust."""


class NotRegular(OSError):
    """A name among the windows that is a symbolic link or not a regular file (a FIFO, a folder...)."""


def kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def check_owner(info: os.stat_result, path: Path | str) -> None:
    """Refuse what another user owns or what group or others may write (the service's user: its euid)."""
    uid = os.geteuid()
    if info.st_uid != uid:
        raise UnsafeState(f"{visible(str(path))}: owned by uid {info.st_uid}, not by the service's user (uid {uid}); "
                          f"the service trusts only what its own user owns in its state directory")
    if info.st_mode & 0o022:
        raise UnsafeState(f"{visible(str(path))}: writable by group or others (mode {stat.S_IMODE(info.st_mode):04o}); "
                          f"run chmod go-w on it")


class Folder:
    """A directory opened once; every name in it is opened relative to that descriptor."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd = path, fd
        self._closer = weakref.finalize(self, os.close, fd)

    def close(self) -> None:
        self._closer()

    # -- opening --------------------------------------------------------------------------------
    @classmethod
    def open_root(cls, path: Path) -> Folder:
        """The state directory: created 0700 (with its parents) when missing; refused unless the service's user
        owns it and nobody else may write it, and nothing in it is another user's or writable by others."""
        path = Path(path)
        created = False
        try:
            if not os.path.lexists(path):
                for parent in reversed(path.parents):  # missing folders above it: 0755 at most, whatever the umask
                    if not os.path.lexists(parent):
                        with contextlib.suppress(FileExistsError):
                            os.mkdir(parent, 0o755)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(path, DIR_MODE)
                    created = True
        except OSError as exc:
            raise UnsafeState(f"{visible(str(path))}: cannot create the state directory ({exc.strerror})") from None
        try:
            fd = os.open(path, _DIR_FLAGS)
        except NotADirectoryError:
            raise UnsafeState(f"{visible(str(path))}: not a directory; storage.state_dir must name a directory") \
                from None
        except OSError as exc:
            raise UnsafeState(f"{visible(str(path))}: cannot open the state directory ({exc.strerror})") from None
        folder = cls(path, fd)
        try:
            if created:
                os.fchmod(fd, DIR_MODE)  # whatever the umask
            check_owner(os.fstat(fd), path)
            folder.check_entries()
        except BaseException:
            folder.close()
            raise
        return folder

    def subfolder(self, name: str) -> Folder:
        """A folder of ours inside this one (ring/, kept/): created or tightened to 0700; a symbolic link or
        anything but a directory, or one another user owns or may write, is refused."""
        where = self.path / name
        try:
            os.mkdir(name, DIR_MODE, dir_fd=self.fd)
        except FileExistsError:
            pass
        try:
            fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                found = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
                raise UnsafeState(f"{visible(str(where))}: is {kind(found.st_mode)}, not a directory; the service "
                                  f"keeps its windows only in a directory of its own") from None
            raise UnsafeState(f"{visible(str(where))}: cannot open ({exc.strerror})") from None
        folder = Folder(where, fd)
        try:
            check_owner(os.fstat(fd), where)
            os.fchmod(fd, DIR_MODE)  # windows are process lists: for the service's user only
        except BaseException:
            folder.close()
            raise
        return folder

    # -- the rules ------------------------------------------------------------------------------
    def names(self) -> list[str]:
        return os.listdir(self.fd)

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None  # gone since it was listed

    def check_entries(self) -> None:
        """Every file and folder here is the service's user's and not writable by others. Symbolic links are
        not judged here: where the service uses a name it opens it without following it."""
        for name in self.names():
            info = self.lstat(name)
            if info is not None and not stat.S_ISLNK(info.st_mode):
                check_owner(info, self.path / name)

    # -- files ------------------------------------------------------------------------------------
    def open_regular(self, name: str) -> tuple[int, os.stat_result]:
        """A regular file of ours, opened for reading without following a symbolic link; `NotRegular` for a
        link or anything else, `UnsafeState` for a file another user owns or may write."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NotRegular(errno.ELOOP, "a symbolic link", str(self.path / name)) from None
            raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise NotRegular(errno.EINVAL, kind(info.st_mode), str(self.path / name))
            check_owner(info, self.path / name)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd, info

    def read(self, name: str, limit: int) -> bytes:
        """The content of a regular file of ours of at most `limit` bytes (see open_regular)."""
        fd, info = self.open_regular(name)
        return read_fd(fd, info, limit, self.path / name)

    def write(self, name: str, data: bytes) -> None:
        """Atomically, 0600: a reader (or a restart after a crash) never sees half a file. The temporary name
        is created (O_EXCL: never an existing file or a link), so nothing is written through a link."""
        tmp = f".{name}.tmp{os.getpid()}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(tmp, flags, FILE_MODE, dir_fd=self.fd)
        except FileExistsError:  # left by a process of this pid that died before its rename
            os.unlink(tmp, dir_fd=self.fd)
            fd = os.open(tmp, flags, FILE_MODE, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:
                f.write(data)
            os.fchmod(fd, FILE_MODE)  # whatever the umask
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=self.fd)
            raise
        os.close(fd)
        os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def move(self, name: str, to: Folder) -> None:
        """Rename `name` into another opened folder: the link, never what it points to."""
        os.replace(name, name, src_dir_fd=self.fd, dst_dir_fd=to.fd)

    def unlink(self, name: str) -> None:
        """Remove `name` here (a link is removed itself: unlink never follows one); gone already is fine."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass


def read_fd(fd: int, info: os.stat_result, limit: int, path: Path) -> bytes:
    """Read an opened regular file of at most `limit` bytes, and close it."""
    with os.fdopen(fd, "rb") as f:
        if info.st_size > limit:
            raise InputError(f"{visible(str(path))}: {info.st_size} bytes, more than the {limit} it may hold")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{visible(str(path))}: grew past the {limit} bytes it may hold while it was read")
    return data
