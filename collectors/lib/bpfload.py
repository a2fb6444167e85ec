"""An image (collectors.lib.bpfimage) loaded into the kernel: its maps created, its functions loaded
(the verifier's verdict comes before the window opens), each map read as a collectors.lib.bpfsys.Table.

It answers the few calls the collectors make of bcc's BPF object (`bpf[name]`, attach and detach
of tracepoints and perf events, `cleanup`), so that they read it the same way;
everything it opened is closed by `cleanup`, or by the kernel when the process ends. Nothing here
loads libbcc: an image found kept is loaded by system calls alone.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from witty_profiler.collectors.lib import bpfsys
from witty_profiler.collectors.lib.bpfcache import IMAGES
from witty_profiler.collectors.lib.bpfimage import PROG_PERF_EVENT, PROG_TRACEPOINT, Image, map_references

TRACEPOINT_FN_PREFIX = "tracepoint__"  # bcc names a TRACEPOINT_PROBE's function after its tracepoint
REFUSED = (errno.EINVAL, errno.EACCES, errno.E2BIG)  # the verifier's answers to a program it rejects
READ_TYPES = (1, 2, 7, 9)  # hash, array, stack trace, LRU hash: the maps these programs read


def load_program(load_bcc: Callable[[], ModuleType], text: str, kernel_source: str | None,
                 tracefs: Path | None = None, prog_types: dict[str, int] | None = None) -> tuple[Loaded, dict[str, str]]:
    """The program of `text` loaded, every function of it too (TRACEPOINT_PROBEs as tracepoint
    programs, the others as `prog_types` says), not attached yet; and where its image came from
    (collectors.lib.bpfcache). `load_bcc` gives the bcc module where the program must be compiled.
    A kept image the kernel refuses is compiled again. RuntimeError when clang cannot compile it,
    OSError when the kernel refuses what clang made."""
    image, said = IMAGES.image(load_bcc, text, kernel_source, tracefs)
    try:
        return Loaded(image, prog_types, tracefs), said
    except OSError as exc:
        # only an image read from disk can be stale; a refused map (ENOMEM, EPERM) is not the image's fault
        if said["program"] != "cached on disk" or exc.errno not in REFUSED:
            raise
        refused = exc
    try:
        image, said = IMAGES.image(load_bcc, text, kernel_source, tracefs, fresh=True)
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}; the kept image had been refused: {refused}") from None
    said["program_cache"] = f"the kept image was refused ({refused}): compiled again"
    return Loaded(image, prog_types, tracefs), said


class Loaded:
    """The maps and programs of one image in this process."""

    def __init__(self, image: Image, prog_types: dict[str, int] | None = None, tracefs: Path | None = None) -> None:
        self.image, self.tracefs = image, tracefs
        self.map_fds: dict[str, int] = {}
        self.prog_fds: dict[str, int] = {}
        self.tracepoint_fds: dict[bytes, int] = {}  # "category:event" -> its perf event
        self.open_perf_events: dict[tuple[int, int], list[int]] = {}
        self._tables: dict[str, bpfsys.Table] = {}
        self._retired: list[int] = []  # perf events disabled, to be closed
        try:
            for spec in image.maps:
                try:
                    self.map_fds[spec.name] = bpfsys.create_map(spec.type, spec.name, spec.key_size, spec.leaf_size,
                                                                spec.max_entries, spec.flags)
                except OSError as exc:
                    raise OSError(exc.errno, f"map {spec.name} not created: {exc.strerror}") from None
            for name in image.functions:  # the verifier's verdict now, not at the window's start
                tracepoint = PROG_TRACEPOINT if name.startswith(TRACEPOINT_FN_PREFIX) else None
                prog_type = (prog_types or {}).get(name, tracepoint)
                if prog_type is None:
                    raise ValueError(f"no program type given for function {name}")
                self.load_func(name, prog_type)
        except BaseException:
            self.cleanup()
            raise

    def __getitem__(self, name: bytes | str) -> bpfsys.Table:
        """The map `name`, its keys and values of the C types bcc described."""
        name = name.decode() if isinstance(name, bytes) else name
        if name not in self._tables:
            spec = next((s for s in self.image.maps if s.name == name), None)
            if spec is None:
                raise KeyError(f"no map {name} in the program")
            if spec.type not in READ_TYPES:
                raise KeyError(f"map {name}: type {spec.type} is not read here")
            self._tables[name] = bpfsys.Table(self.map_fds[name], spec.type, spec.max_entries,
                                              bpfsys.ctype_of(json.loads(spec.key_desc)),
                                              bpfsys.ctype_of(json.loads(spec.leaf_desc)))
        return self._tables[name]

    def load_func(self, name: str, prog_type: int) -> int:
        """The descriptor of function `name` loaded as `prog_type`, its map references pointing at
        this process's maps."""
        if name in self.prog_fds:
            return self.prog_fds[name]
        code = bytearray(self.image.functions[name])
        by_old = {spec.fd: self.map_fds[spec.name] for spec in self.image.maps}
        for off, fd in map_references(bytes(code)):
            struct.pack_into("<i", code, off + 4, by_old[fd])
        try:
            # named as libbcc names it (what bpftool lists): a tracepoint's category and event, cut to 15 bytes
            fd = bpfsys.load_program(prog_type, name.removeprefix(TRACEPOINT_FN_PREFIX), bytes(code),
                                     self.image.license, self.image.kern_version)
        except OSError as exc:
            raise OSError(exc.errno, f"the kernel refused {name}: {exc.strerror}") from None
        self.prog_fds[name] = fd
        return fd

    def attach_tracepoints(self) -> None:
        """Every TRACEPOINT_PROBE of the image on its tracepoint, as bcc does when it loads a program."""
        for name in self.image.functions:
            if name.startswith(TRACEPOINT_FN_PREFIX):
                category, event = name.removeprefix(TRACEPOINT_FN_PREFIX).split("__", 1)
                self.attach_tracepoint(f"{category}:{event}".encode(), name)

    def attach_tracepoint(self, tp: bytes, fn_name: str) -> None:
        fd = self.load_func(fn_name, PROG_TRACEPOINT)
        category, event = tp.decode().split(":")
        if self.tracefs is None:
            raise OSError(errno.ENOENT, f"not attached to {tp.decode()}: where tracefs is was not given")
        try:
            self.tracepoint_fds[tp] = bpfsys.attach_tracepoint(fd, self.tracefs, category, event)
        except OSError as exc:
            raise OSError(exc.errno, f"not attached to {tp.decode()}: {exc.strerror}") from None

    def detach_tracepoint(self, tp: bytes) -> None:
        self._retire(self.tracepoint_fds.pop(tp))

    def attach_perf_event(self, ev_type: int, ev_config: int, fn_name: str, sample_freq: int) -> None:
        """`fn_name` on a perf event of every online CPU, sampled `sample_freq` times a second."""
        fd = self.load_func(fn_name, PROG_PERF_EVENT)
        fds = self.open_perf_events.setdefault((ev_type, ev_config), [])
        for cpu in bpfsys.online_cpus():
            try:
                fds.append(bpfsys.attach_sampling(fd, ev_type, ev_config, sample_freq, cpu))
            except OSError as exc:
                raise OSError(exc.errno, f"perf event not attached on CPU {cpu}: {exc.strerror}") from None

    def detach_perf_event(self, ev_type: int, ev_config: int) -> None:
        for fd in self.open_perf_events.pop((ev_type, ev_config), []):
            self._retire(fd)

    def _retire(self, perf_fd: int) -> None:
        """A perf event stops sampling now (PERF_EVENT_IOC_DISABLE); a tracepoint's program runs until
        its event is closed, which cleanup does without waiting for it."""
        try:
            fcntl.ioctl(perf_fd, bpfsys.PERF_EVENT_IOC_DISABLE, 0)
        except OSError:
            pass
        self._retired.append(perf_fd)

    def cleanup(self) -> None:
        """Everything detached and closed, in the background: closing a perf event waits for an RCU
        grace period (50-80 ms), which the window's end need not wait for. Each event is closed by a
        thread of its own, so that their grace periods overlap and every program stops within one;
        the programs and maps (freed with their last descriptor) are closed after them."""
        for tp in list(self.tracepoint_fds):
            self.detach_tracepoint(tp)
        for event in list(self.open_perf_events):
            self.detach_perf_event(*event)
        events, rest = self._retired, [*self.prog_fds.values(), *self.map_fds.values()]
        self._retired, self._tables = [], {}
        self.prog_fds.clear()
        self.map_fds.clear()
        closer = threading.Thread(target=_close_all, args=(events, rest), name="bpf-close", daemon=True)
        with _CLOSING_LOCK:
            CLOSING[:] = [t for t in CLOSING if t.is_alive()]
            CLOSING.append(closer)
        closer.start()


def _close_all(events: list[int], rest: list[int]) -> None:
    closers = [threading.Thread(target=_close, args=(fd,), daemon=True) for fd in events]
    for t in closers:
        t.start()
    for t in closers:
        t.join()
    for fd in rest:
        _close(fd)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def settle() -> None:
    """Wait until every descriptor a cleanup handed to the background is closed."""
    with _CLOSING_LOCK:
        pending = list(CLOSING)
    for t in pending:
        t.join()


_CLOSING_LOCK = threading.Lock()
CLOSING: list[threading.Thread] = []  # cleanups still closing descriptors
