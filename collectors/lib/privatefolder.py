"""A folder only this user (and root) can change, and the files in it, for what root loads into the
kernel (collectors.lib.bpfcache).

The folder is reached from / one component at a time, each opened relative to the one before
without following a link, and every step is checked on the opened descriptor: no component may be
writable by a user other than root and this one (a sticky folder such as /tmp is fine: others
cannot rename what is not theirs in it), none may be a user's FUSE mount (whose owner and modes are
whatever its daemon says), and the folder itself must be this user's, writable by nobody else.
Files are then opened, made and renamed relative to the folder's descriptor, so no later change of
a path can redirect them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
KEEP_NEWEST = 64  # files kept in a folder; older ones go when a new one is written


@contextlib.contextmanager
def private_folder(path: Path, create: bool) -> Iterator[int]:
    """The descriptor of folder `path` (made 0700 where missing and `create`), checked as the module
    says; OSError saying why it cannot be used, FileNotFoundError where it is missing."""
    path = Path(os.path.abspath(path))
    _refuse_fuse(path)
    fd = os.open("/", DIR_FLAGS)
    try:
        for i, part in enumerate(path.parts[1:], start=2):
            here = Path(*path.parts[:i])
            try:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise OSError(exc.errno, f"{here} is not a folder that can be opened without following a link") \
                    from None
            os.close(fd)
            fd = child
            _check(os.fstat(fd), here, last=here == path)
        yield fd
    finally:
        os.close(fd)


def read_file(folder: int, name: str, limit: int) -> bytes:
    """At most `limit` bytes of regular file `name` of the folder, this user's and writable by nobody
    else (OSError otherwise; FileNotFoundError where there is none)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{name} is not a regular file")
        _check(st, Path(name), last=True)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"{name} is larger than {limit} bytes")
    return data


def write_file(folder: int, name: str, data: bytes) -> None:
    """`data` to `name` in the folder (mode 0600, written aside and renamed: a reader never sees half
    a file); the oldest files beyond KEEP_NEWEST go."""
    tmp = f".{name}.{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder)
        raise
    _prune(folder, keep=name)


def _prune(folder: int, keep: str) -> None:
    entries = []
    for name in os.listdir(folder):
        if name.endswith(".json") and name != keep:
            with contextlib.suppress(OSError):
                entries.append((os.stat(name, dir_fd=folder, follow_symlinks=False).st_mtime, name))
    for _, name in sorted(entries, reverse=True)[KEEP_NEWEST - 1:]:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=folder)


def _check(st: os.stat_result, what: Path, last: bool) -> None:
    """A component no other user can change; the last one (the folder, or a file in it) this user's own."""
    me = os.geteuid()
    if last:
        if st.st_uid != me:
            raise OSError(f"{what} belongs to uid {st.st_uid}")
        if st.st_mode & 0o022:
            raise OSError(f"{what} may be written by others (mode {stat.S_IMODE(st.st_mode):o})")
        return
    if st.st_uid not in (0, me):
        raise OSError(f"{what} belongs to uid {st.st_uid}")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise OSError(f"{what} may be written by others (mode {stat.S_IMODE(st.st_mode):o})")


def _refuse_fuse(path: Path, mountinfo: str = "/proc/self/mountinfo") -> None:
    """OSError where `path` or a folder above it lies on a FUSE file system."""
    try:
        with open(mountinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right.startswith("fuse"):
            continue
        point = fields[4].replace("\\040", " ")
        if path == Path(point) or Path(point) in path.parents:
            raise OSError(f"{path} lies on a FUSE file system ({point})")
