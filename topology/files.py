"""Reading a file a user or an assistant names: only a regular file, and only up to a size.

A path may name /dev/zero (endless), a FIFO (a read blocks until someone writes), a sparse file of
2 GB (all of it would be read and parsed) or a directory. Each is one clear error before anything is
read: the file is opened without blocking and without following it into a terminal, checked with
fstat, and read with a limit (a file that grows while it is read is refused as well).
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import IO

from witty_profiler.topology.errors import GraphFormatError, InputError

MAX_GRAPH_BYTES = 1 << 30  # 1 GiB of JSON: about 3 million entities, and 6-8 GiB of memory to parse
MAX_SMALL_BYTES = 1 << 20  # a thresholds file: a few KiB in practice
MAX_TOKEN_FILE_BYTES = 64 * 1024  # a bearer token: a line

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


def open_regular(path: str | os.PathLike[str], what: str, limit: int,
                 error: type[InputError] = GraphFormatError) -> tuple[int, int]:
    """(file descriptor, size) of a regular file of at most `limit` bytes, or `error` saying why not."""
    p = Path(path)
    if "\0" in str(p):
        raise error(f"{str(p)[:200]!r}: holds a NUL character; give the path of a {what}")
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{p}: no such file") from None
    except IsADirectoryError:
        raise error(f"{p}: is a directory; give the path of a {what}") from None
    except OSError as exc:  # a name too long, a loop of links, no permission
        raise error(f"{str(p)[:200]}: cannot read ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        for test, kind in _KINDS:
            if test(info.st_mode):
                raise error(f"{p}: is {kind}, not a file; give the path of a {what}")
        if info.st_size > limit:
            raise error(f"{p}: {_size(info.st_size)} is more than a {what} may hold ({_size(limit)})")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def read_bytes(path: str | os.PathLike[str], what: str = "graph file", limit: int = MAX_GRAPH_BYTES,
               error: type[InputError] = GraphFormatError) -> bytes:
    """The content of a regular file of at most `limit` bytes (see the module's docstring)."""
    fd, _ = open_regular(path, what, limit, error)
    try:
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:  # e.g. /proc/self/mem: a regular file that cannot be read from its start
        raise error(f"{Path(path)}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise error(f"{Path(path)}: grew while it was read, past what a {what} may hold ({_size(limit)})")
    return data


def open_text(path: str | os.PathLike[str], what: str = "graph file", limit: int = MAX_GRAPH_BYTES,
              error: type[InputError] = GraphFormatError) -> IO[str]:
    """A regular file of at most `limit` bytes, open for reading as UTF-8 text (for a stream)."""
    fd, _ = open_regular(path, what, limit, error)
    return io.TextIOWrapper(io.BufferedReader(io.FileIO(fd, "rb"), buffer_size=1 << 20), encoding="utf-8")


def read_utf8(path: str | os.PathLike[str], what: str, limit: int, given_as: str) -> str:
    """The text of a small regular UTF-8 file the user named with `given_as` (an option: `--config`), or an
    InputError that starts with it: unreadable, not a regular file, over `limit` bytes, not UTF-8."""
    try:
        raw = read_bytes(path, what, limit, error=InputError)
    except InputError as exc:
        raise InputError(f"{given_as} {exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{given_as} {path}: not UTF-8 text") from None


# -- tokens ----------------------------------------------------------------------------------------------
def read_token_file(path: str, what: str) -> str:
    """The bearer token held in a file (`what` names where the path was given); empty, unreadable or not a
    small regular file: InputError."""
    token = read_utf8(path, "token file", MAX_TOKEN_FILE_BYTES, what).strip()
    if not token:
        raise InputError(f"{what} {path}: is empty")
    return token


def token_from(path: str | None, env: str, what: str) -> str | None:
    """The token of the file at `path` (given as `what`), else of the environment variable `env`, else None."""
    if path is not None:
        return read_token_file(path, what)
    return os.environ.get(env) or None
