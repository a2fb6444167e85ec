"""Report files, written only inside the report directory (``--report-dir``, by default ``reports/`` in
the state directory), never relative to whatever working directory the server was started in.

An ``output_path`` names a file below that directory: a relative path is taken from it, an absolute
one must lie in it, and no part of the path may be a symbolic link. The file is written by
descriptor: each folder is opened from the one above with ``O_NOFOLLOW``, and the file is created in
the last with ``O_CREAT | O_EXCL | O_NOFOLLOW``. To replace a file (``overwrite``), the report goes to
a new file beside it that then takes its name (``os.replace``): a hard link to a file elsewhere is
never written through, and a link planted between the check and the write is refused or replaced,
never followed. The path is checked when the call starts, so that a bad one fails at once, and the
file is written only once the report exists, under the same rules.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.text import valid_text

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class ReportDir:
    """The report directory: report files (`check`, `write`) and folders for a cluster's graphs (`new_folder`)."""

    def __init__(self, path: Path) -> None:
        given = Path(os.path.abspath(path.expanduser()))
        self.path = Path(os.path.realpath(given))  # where it is, symbolic links in its own path followed
        self._names = {given, self.path}  # either spelling of it in an absolute output_path

    def parts(self, output_path: str, label: str = "output_path") -> tuple[str, ...]:
        """The names below the report directory that `output_path` stands for; refuses a path that
        leaves it."""
        if "\0" in output_path:
            raise InputError(f"{label} {output_path!r} holds a NUL character: give a plain file name, which is "
                             f"written in the report directory {self.path}, e.g. 'witty-report.md'")
        path = Path(os.path.normpath(Path(output_path).expanduser()))
        if path.is_absolute():
            inside = [path.relative_to(base) for base in self._names if path.is_relative_to(base)]
            path = inside[0] if inside else Path("..")
        if path.parts[:1] == ("..",):
            raise InputError(f"{label} {output_path!r} is outside the report directory {self.path}: give a "
                             f"name, which is made there, e.g. 'witty-report.md' or 'cluster-1'")
        return path.parts

    def check(self, output_path: str, overwrite: bool) -> tuple[str, ...]:
        """The names of `output_path` below the report directory, if a report can be written there now."""
        names = self.parts(output_path)
        with self._folder(output_path, names) as folder:
            self._existing(output_path, names, folder, overwrite)
        return names

    def write(self, output_path: str, names: tuple[str, ...], text: str, overwrite: bool) -> Path:
        """Write `text` to the file `names` stands for, checking the whole path again as it goes."""
        try:
            return self._write(output_path, names, valid_text(text).encode("utf-8"), overwrite)
        except OSError as exc:
            raise self._error(output_path, f"cannot be written ({exc.strerror})") from None

    def _write(self, output_path: str, names: tuple[str, ...], data: bytes, overwrite: bool) -> Path:
        with self._folder(output_path, names) as folder:
            if not overwrite:
                try:
                    fd = os.open(names[-1], _NEW_FILE, 0o666, dir_fd=folder)
                except FileExistsError:
                    raise self._error(output_path, "exists: choose another name, or pass overwrite=true to "
                                                   "replace it") from None
                _write_all(fd, data)
                return self.path.joinpath(*names)
            self._existing(output_path, names, folder, overwrite)
            temporary = f".{names[-1]}.{secrets.token_hex(4)}.tmp"
            fd = os.open(temporary, _NEW_FILE, 0o666, dir_fd=folder)
            try:
                _write_all(fd, data)
                os.replace(temporary, names[-1], src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                try:
                    os.unlink(temporary, dir_fd=folder)
                except OSError:
                    pass
                raise
        return self.path.joinpath(*names)

    def new_folder(self, output_dir: str) -> Path:
        """A folder below the report directory for files the server writes, made if missing; an existing
        one is used only if it is a real, empty folder, so that nothing already there is replaced. Its parent
        folders must exist and none of them may be a symbolic link."""
        names = self.parts(output_dir, "output_dir")
        with self._folder(output_dir, names, "output_dir") as folder:
            try:
                os.mkdir(names[-1], 0o777, dir_fd=folder)
            except FileExistsError:
                mode = os.stat(names[-1], dir_fd=folder, follow_symlinks=False).st_mode
                if not stat.S_ISDIR(mode):
                    kind = "a symbolic link" if stat.S_ISLNK(mode) else "a file"
                    raise self._error(output_dir, f"is {kind}: give a new folder name", "output_dir") from None
                fd = os.open(names[-1], _DIR_FLAGS, dir_fd=folder)
                try:
                    if os.listdir(fd):
                        raise self._error(output_dir, "is not empty: give a new folder name (files there are "
                                                      "never replaced)", "output_dir") from None
                finally:
                    os.close(fd)
            except OSError as exc:
                raise self._error(output_dir, f"cannot be made ({exc.strerror})", "output_dir") from None
        return self.path.joinpath(*names)

    @contextmanager
    def _folder(self, output_path: str, names: tuple[str, ...], label: str = "output_path") -> Iterator[int]:
        """A descriptor of the folder that holds the file, opened name by name from the report directory
        without following a symbolic link."""
        if not names:
            raise self._error(output_path, "is the report directory itself: give a name below it", label)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise InputError(f"the report directory {self.path} cannot be used ({exc.strerror}): start witty-mcp "
                             f"with --report-dir set to a folder it can write to") from None
        try:
            for i, name in enumerate(names[:-1]):
                try:
                    below = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise self._folder_error(output_path, names[:i + 1], fd, exc, label) from None
                os.close(fd)
                fd = below
            yield fd
        finally:
            os.close(fd)

    def _folder_error(self, output_path: str, names: tuple[str, ...], parent: int, exc: OSError,
                      label: str = "output_path") -> InputError:
        where = "/".join(names)
        try:
            mode = os.stat(names[-1], dir_fd=parent, follow_symlinks=False).st_mode
        except OSError:
            return self._error(output_path, f"needs folder {where}, which does not exist", label)
        if stat.S_ISLNK(mode):
            return self._error(output_path, f"goes through {where}, a symbolic link: reports are written only "
                                            f"to real folders inside it", label)
        if not stat.S_ISDIR(mode):
            return self._error(output_path, f"goes through {where}, which is not a folder", label)
        return self._error(output_path, f"cannot open folder {where} ({exc.strerror})", label)

    def _existing(self, output_path: str, names: tuple[str, ...], folder: int, overwrite: bool) -> None:
        """Refuse to replace what is already at the name, unless it is a file and `overwrite` says so."""
        try:
            mode = os.stat(names[-1], dir_fd=folder, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return
        if stat.S_ISLNK(mode):
            raise self._error(output_path, "is a symbolic link: choose another name")
        if stat.S_ISDIR(mode):
            raise self._error(output_path, "is a directory: give a file name")
        if not stat.S_ISREG(mode):
            raise self._error(output_path, "is not a regular file: choose another name")
        if not overwrite:
            raise self._error(output_path, "exists: choose another name, or pass overwrite=true to replace it")

    def _error(self, output_path: str, what: str, label: str = "output_path") -> InputError:
        return InputError(f"{label} {output_path!r} in the report directory {self.path} {what}")


def _write_all(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
