"""An image (collectors.lib.bpfimage) loaded into the kernel: its maps created, its functions loaded
(the verifier's verdict comes before the window opens), each map read through bcc's table classes.

It answers the few calls the collectors make of bcc's BPF object (`bpf[name]`, attach and detach
of tracepoints and perf events, `sym`, `ksym`, `cleanup`), so that they read it the same way;
everything it opened is closed by `cleanup`, or by the kernel when the process ends.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import struct
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from witty_profiler.collectors.lib.bpfcache import IMAGES
from witty_profiler.collectors.lib.bpfimage import (
    PROG_PERF_EVENT,
    PROG_TRACEPOINT,
    TABLE_CLASSES,
    Image,
    libbcc,
    map_references,
)

TRACEPOINT_FN_PREFIX = "tracepoint__"  # bcc names a TRACEPOINT_PROBE's function after its tracepoint
LOG_SIZE = 1 << 16  # the verifier's log, read when a load fails
PERF_EVENT_IOC_DISABLE = 0x2401
REFUSED = (errno.EINVAL, errno.EACCES, errno.E2BIG)  # the verifier's answers to a program it rejects


def load_program(bcc: ModuleType, text: str, kernel_source: str | None, tracefs: Path | None = None,
                 prog_types: dict[str, int] | None = None) -> tuple[Loaded, dict[str, str]]:
    """The program of `text` loaded, every function of it too (TRACEPOINT_PROBEs as tracepoint
    programs, the others as `prog_types` says), not attached yet; and where its image came from
    (collectors.lib.bpfcache). A kept image the kernel refuses is compiled again. RuntimeError
    when clang cannot compile it, OSError when the kernel refuses what clang made."""
    image, said = IMAGES.image(bcc, text, kernel_source, tracefs)
    try:
        return Loaded(bcc, image, prog_types), said
    except OSError as exc:
        # only an image read from disk can be stale; a refused map (ENOMEM, EPERM) is not the image's fault
        if said["program"] != "cached on disk" or exc.errno not in REFUSED:
            raise
        refused = exc
    try:
        image, said = IMAGES.image(bcc, text, kernel_source, tracefs, fresh=True)
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}; the kept image had been refused: {refused}") from None
    said["program_cache"] = f"the kept image was refused ({refused}): compiled again"
    return Loaded(bcc, image, prog_types), said


class Loaded:
    """The maps and programs of one image in this process."""

    def __init__(self, bcc: ModuleType, image: Image, prog_types: dict[str, int] | None = None) -> None:
        self.bcc, self.image, self.lib = bcc, image, libbcc(bcc)
        self.map_fds: dict[str, int] = {}
        self.prog_fds: dict[str, int] = {}
        self.tracepoint_fds: dict[bytes, int] = {}  # "category:event" -> its perf event
        self.open_perf_events: dict[tuple[int, int], list[int]] = {}
        self._tables: dict[str, Any] = {}
        self._retired: list[int] = []  # perf events disabled, to be closed
        self.sym, self.ksym = bcc.BPF.sym, bcc.BPF.ksym  # bcc's symbol caches need no program
        self.module = None  # no compiled module: what bcc's table classes ask it for, the image's specs give
        try:
            for spec in image.maps:
                fd = self.lib.bcc_create_map(spec.type, spec.name.encode()[:15], spec.key_size, spec.leaf_size,
                                             spec.max_entries, spec.flags)
                if fd < 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"map {spec.name} not created: {os.strerror(err)}")
                self.map_fds[spec.name] = fd
            for name in image.functions:  # the verifier's verdict now, not at the window's start
                tracepoint = PROG_TRACEPOINT if name.startswith(TRACEPOINT_FN_PREFIX) else None
                prog_type = (prog_types or {}).get(name, tracepoint)
                if prog_type is None:
                    raise ValueError(f"no program type given for function {name}")
                self.load_func(name, prog_type)
        except BaseException:
            self.cleanup()
            raise

    def __getitem__(self, name: bytes | str) -> Any:
        """bcc's table object over the map `name`."""
        name = name.decode() if isinstance(name, bytes) else name
        if name not in self._tables:
            spec = next((s for s in self.image.maps if s.name == name), None)
            if spec is None:
                raise KeyError(f"no map {name} in the program")
            cls = getattr(self.bcc.table, TABLE_CLASSES.get(spec.type, ""), None)
            if cls is None:
                raise KeyError(f"map {name}: type {spec.type} is not read here")
            decode = self.bcc.BPF._decode_table_type
            # bcc's constructor asks the compiled module (None here: libbcc answers -1) for what the spec holds
            table = cls(self, 0, self.map_fds[name], decode(json.loads(spec.key_desc)), decode(json.loads(spec.leaf_desc)))
            table.ttype, table.flags, table.max_entries = spec.type, spec.flags, spec.max_entries
            self._tables[name] = table
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
        log = ctypes.create_string_buffer(LOG_SIZE)
        buf = (ctypes.c_char * len(code)).from_buffer(code)
        fd = self.lib.bcc_prog_load(prog_type, name.encode()[:15], buf, len(code), self.image.license.encode(),
                                    self.image.kern_version, 0, log, LOG_SIZE)
        if fd < 0:
            err = ctypes.get_errno()
            said = log.value.decode("utf-8", "replace").strip().splitlines()
            raise OSError(err, f"the kernel refused {name}: {os.strerror(err)}" + (f" ({said[-1]})" if said else ""))
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
        category, event = tp.split(b":")
        perf = self.lib.bpf_attach_tracepoint(fd, category, event)
        if perf < 0:
            raise OSError(ctypes.get_errno(), f"not attached to {tp.decode()}")
        self.tracepoint_fds[tp] = perf

    def detach_tracepoint(self, tp: bytes) -> None:
        self._retire(self.tracepoint_fds.pop(tp))

    def attach_perf_event(self, ev_type: int, ev_config: int, fn_name: str, sample_freq: int) -> None:
        """`fn_name` on a perf event of every online CPU, sampled `sample_freq` times a second."""
        fd = self.load_func(fn_name, PROG_PERF_EVENT)
        fds = self.open_perf_events.setdefault((ev_type, ev_config), [])
        for cpu in self.bcc.utils.get_online_cpus():
            perf = self.lib.bpf_attach_perf_event(fd, ev_type, ev_config, 0, sample_freq, -1, cpu, -1)
            if perf < 0:
                raise OSError(ctypes.get_errno(), f"perf event not attached on CPU {cpu}")
            fds.append(perf)

    def detach_perf_event(self, ev_type: int, ev_config: int) -> None:
        for fd in self.open_perf_events.pop((ev_type, ev_config), []):
            self._retire(fd)

    def _retire(self, perf_fd: int) -> None:
        """A perf event stops sampling now (PERF_EVENT_IOC_DISABLE); a tracepoint's program runs until
        its event is closed, which cleanup does without waiting for it."""
        try:
            fcntl.ioctl(perf_fd, PERF_EVENT_IOC_DISABLE, 0)
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
