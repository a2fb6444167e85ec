"""The bpf(2) and perf_event_open(2) calls a loaded image needs, through ctypes and libc alone.

Loading a kept image (collectors.lib.bpfload) needs no compiler: creating maps, loading and
attaching programs and reading maps are a handful of system calls. Making them here rather than
through libbcc spares every run that finds its image kept the load of libbcc with its clang and
LLVM (25-35 ms of CPU and 65 MiB of memory); libbcc is loaded only to compile, and to name the
addresses of sampled stacks.

`Table` reads a map as bcc's table classes do (`Key`, `Leaf`, `items`, `items_lookup_batch`,
`walk` of a stack trace), its C types decoded from the description bcc gave when it compiled.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import resource
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from witty_profiler.collectors.lib.perf_event import PERF_ATTR_SIZE_VER5, perf_event_open
from witty_profiler.topology.cpulist import parse_cpulist

# enum bpf_cmd
MAP_CREATE, MAP_LOOKUP_ELEM, MAP_UPDATE_ELEM, MAP_GET_NEXT_KEY, PROG_LOAD, MAP_LOOKUP_BATCH = 0, 1, 2, 4, 5, 24
BPF_SYSCALL = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "loongarch64": 280, "ppc64le": 361, "ppc64": 361,
               "s390x": 351, "i686": 357, "armv7l": 386}
PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT = 1, 2
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_SAMPLE_RAW = 1 << 10
PERF_ATTR_FREQ = 1 << 10  # perf_event_attr's flag bit: sample_freq rather than sample_period
PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_DISABLE, PERF_EVENT_IOC_SET_BPF = 0x2400, 0x2401, 0x40042408
BPF_OBJ_NAME_LEN = 16

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long
_MACHINE = os.uname().machine

# bcc's names of C types (bcc.BPF.str2ctype)
C_TYPES = {"_Bool": ctypes.c_bool, "char": ctypes.c_char, "wchar_t": ctypes.c_wchar, "unsigned char": ctypes.c_ubyte,
           "short": ctypes.c_short, "unsigned short": ctypes.c_ushort, "int": ctypes.c_int,
           "unsigned int": ctypes.c_uint, "long": ctypes.c_long, "unsigned long": ctypes.c_ulong,
           "long long": ctypes.c_longlong, "unsigned long long": ctypes.c_ulonglong, "float": ctypes.c_float,
           "double": ctypes.c_double, "long double": ctypes.c_longdouble, "__int128": ctypes.c_int64 * 2,
           "unsigned __int128": ctypes.c_uint64 * 2}


def bpf(cmd: int, attr: ctypes.Array) -> int:
    """bpf(cmd, attr): its result, or OSError with the kernel's errno."""
    nr = BPF_SYSCALL.get(_MACHINE)
    if nr is None:
        raise OSError(errno.ENOSYS, f"bpf(2) is not known on {_MACHINE}")
    result = _LIBC.syscall(ctypes.c_long(nr), ctypes.c_int(cmd), attr, ctypes.c_uint(len(attr)))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _attr(fmt: str, *values: Any) -> ctypes.Array:
    return ctypes.create_string_buffer(struct.pack(fmt, *values), 128)  # the rest of union bpf_attr zero


def create_map(map_type: int, name: str, key_size: int, value_size: int, max_entries: int, flags: int) -> int:
    """A new map's descriptor. Kernels before 5.11 charge maps to RLIMIT_MEMLOCK: where that is
    too low (EPERM as root), the limit is lifted and the map made again, as libbcc does."""
    attr = _attr("<7I16s", map_type, key_size, value_size, max_entries, flags, 0, 0,
                 name.encode()[:BPF_OBJ_NAME_LEN - 1])
    try:
        return bpf(MAP_CREATE, attr)
    except OSError as exc:
        if exc.errno != errno.EPERM or not _lift_memlock():
            raise
    return bpf(MAP_CREATE, attr)


def _lift_memlock() -> bool:
    try:
        if resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] == resource.RLIM_INFINITY:
            return False
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        return True
    except (OSError, ValueError):
        return False


def load_program(prog_type: int, name: str, code: bytes, license: str, kern_version: int,
                 log_size: int = 1 << 16) -> int:
    """A program's descriptor; OSError with the verifier's last line when the kernel refuses it
    (the load is made again with the verifier's log on, as libbcc does)."""
    insns = ctypes.create_string_buffer(code, len(code))
    lic = ctypes.create_string_buffer(license.encode())
    log = ctypes.create_string_buffer(log_size)

    def attempt(level: int) -> int:
        return bpf(PROG_LOAD, _attr("<IIQQIIQII16s", prog_type, len(code) // 8, ctypes.addressof(insns),
                                    ctypes.addressof(lic), level, log_size if level else 0,
                                    ctypes.addressof(log) if level else 0, kern_version, 0,
                                    name.encode()[:BPF_OBJ_NAME_LEN - 1]))

    try:
        return attempt(0)
    except OSError as first:
        try:
            return attempt(1)  # a refusal's reason is in the log; a second try may also pass (ENOSPC of nothing)
        except OSError:
            said = log.value.decode("utf-8", "replace").strip().splitlines()
            raise OSError(first.errno, f"{first.strerror}" + (f" ({said[-1]})" if said else "")) from None


def sampling_event(event_type: int, config: int, period_or_freq: int, attr_flags: int, sample_type: int,
                   cpu: int) -> int:
    """A perf event of every task on `cpu`, waking on each sample (a tracepoint's program runs on every
    CPU whichever it names)."""
    # type, size, config, sample_period or sample_freq, sample_type, read_format, flags, wakeup_events
    attr = struct.pack("<IIQQQQQI", event_type, PERF_ATTR_SIZE_VER5, config, period_or_freq, sample_type, 0,
                       attr_flags, 1)
    return perf_event_open(attr, -1, cpu)


def attach(perf_fd: int, prog_fd: int) -> int:
    """The program runs on each of the event's hits from now on; the event's descriptor is returned
    (closing it detaches the program). The event is closed when the attach fails."""
    try:
        fcntl.ioctl(perf_fd, PERF_EVENT_IOC_SET_BPF, prog_fd)
        fcntl.ioctl(perf_fd, PERF_EVENT_IOC_ENABLE, 0)
    except OSError:
        os.close(perf_fd)
        raise
    return perf_fd


def attach_tracepoint(prog_fd: int, tracefs: Path, category: str, event: str) -> int:
    event_id = int((tracefs / "events" / category / event / "id").read_text())
    return attach(sampling_event(PERF_TYPE_TRACEPOINT, event_id, 1, 0, PERF_SAMPLE_RAW, 0), prog_fd)


def attach_sampling(prog_fd: int, event_type: int, config: int, sample_freq: int, cpu: int) -> int:
    return attach(sampling_event(event_type, config, sample_freq, PERF_ATTR_FREQ, 0, cpu), prog_fd)


def online_cpus(sysfs: str = "/sys") -> list[int]:
    return sorted(parse_cpulist(Path(f"{sysfs}/devices/system/cpu/online").read_text()))


def ctype_of(desc: Any) -> Any:
    """The ctypes type of bcc's description of a C type: a name ("unsigned long long"), or
    [name, fields, "struct" | "struct_packed" | "union"] whose fields are [name, type],
    [name, type, [count]] (an array), [name, type, bits] or a nested [name, fields, kind]."""
    if isinstance(desc, str):
        return C_TYPES[desc]
    name, members, kind = desc[0], desc[1], desc[2] if len(desc) > 2 else "struct"
    fields, anonymous = [], []
    for member in members:
        if len(member) == 3 and isinstance(member[2], str):  # a nested struct or union
            field = member[0] or f"__anon{len(anonymous)}"
            if not member[0]:
                anonymous.append(field)
            fields.append((field, ctype_of(member)))
        elif len(member) == 3 and isinstance(member[2], list):
            fields.append((member[0], ctype_of(member[1]) * member[2][0]))
        elif len(member) == 3:
            fields.append((member[0], ctype_of(member[1]), member[2]))
        else:
            fields.append((member[0], ctype_of(member[1])))
    body = {"_anonymous_": anonymous, "_fields_": fields}
    if kind == "struct_packed":
        body["_pack_"] = 1
    return type(str(name), (ctypes.Union if kind == "union" else ctypes.Structure,), body)


class Table:
    """One map of a loaded image, read and written as bcc's table classes are."""

    def __init__(self, map_fd: int, map_type: int, max_entries: int, key: Any, leaf: Any) -> None:
        self.map_fd, self.ttype, self.max_entries = map_fd, map_type, max_entries
        self.Key, self.Leaf = key, leaf

    def _elem(self, cmd: int, key: Any, value: Any, flags: int = 0) -> int:
        return bpf(cmd, _attr("<IIQQQ", self.map_fd, 0, ctypes.addressof(key), ctypes.addressof(value), flags))

    def __getitem__(self, key: Any) -> Any:
        leaf = self.Leaf()
        try:
            self._elem(MAP_LOOKUP_ELEM, key, leaf)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise KeyError(key) from None
            raise
        return leaf

    def __setitem__(self, key: Any, leaf: Any) -> None:
        self._elem(MAP_UPDATE_ELEM, key, leaf)

    def update(self, key: Any, leaf: Any, flags: int) -> bool:
        """`leaf` under `key` as `flags` allow (BPF_NOEXIST: only where there is none); False when
        they did not allow it."""
        try:
            self._elem(MAP_UPDATE_ELEM, key, leaf, flags)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                return False
            raise
        return True

    def keys(self) -> Iterator[Any]:
        key, after = self.Key(), None
        while True:
            try:
                bpf(MAP_GET_NEXT_KEY, _attr("<IIQQ", self.map_fd, 0, ctypes.addressof(after) if after else 0,
                                            ctypes.addressof(key)))
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    return
                raise
            yield key
            key, after = self.Key(), key

    def items(self) -> list[tuple[Any, Any]]:
        """(key, value) of every entry, two system calls each (every kernel)."""
        out = []
        for key in self.keys():
            try:
                out.append((key, self[key]))
            except KeyError:  # removed by the program meanwhile
                pass
        return out

    def items_lookup_batch(self) -> Iterator[tuple[Any, Any]]:
        """(key, value) of every entry, a batch of them per system call (kernel 5.6 and later; OSError
        before): numbers come as ints, structs as ctypes."""
        keys, values = (self.Key * self.max_entries)(), (self.Leaf * self.max_entries)()
        token = ctypes.c_uint64(0)  # where the kernel's walk stopped (a bucket of a hash map)
        total, done = 0, False
        while not done and total < self.max_entries:
            attr = _attr("<QQQQIIQQ", ctypes.addressof(token) if total else 0, ctypes.addressof(token),
                         ctypes.addressof(keys) + ctypes.sizeof(self.Key) * total,
                         ctypes.addressof(values) + ctypes.sizeof(self.Leaf) * total,
                         self.max_entries - total, self.map_fd, 0, 0)
            try:
                bpf(MAP_LOOKUP_BATCH, attr)
            except OSError as exc:
                if exc.errno != errno.ENOENT:  # ENOENT: the walk reached the end
                    raise
                done = True
            total += struct.unpack_from("<I", attr, 32)[0]  # the kernel writes back how many it copied
        return ((keys[i], values[i]) for i in range(total))

    def walk(self, stack_id: int) -> Iterator[int]:
        """The addresses of one stack of a stack-trace map, leaf first; KeyError when it is gone."""
        for address in self[self.Key(stack_id)].ip:
            if address == 0:
                break
            yield address
