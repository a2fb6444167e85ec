"""A bcc program as what clang made of it (its instructions and its maps' shapes), and that image
loaded into the kernel without clang.

bcc compiles a program's C text with the clang inside libbcc: 0.25-0.6 s of CPU and 110-140 MiB
at its peak, for a result that depends only on the text, the kernel's headers and tracepoint
formats, and bcc itself. Its rewriter has already put each map's file descriptor into the
instructions (a 64-bit load with source register BPF_PSEUDO_MAP_FD), so the image keeps, per
map, the descriptor it had when compiled; loading the image creates the maps again and puts the
new descriptors in their place. The kernel's verifier checks the instructions as it checks bcc's.

Only what this project's programs use is loaded: hash, array and stack-trace maps, tracepoint and
perf-event programs (collectors.lib.bpfload, by system calls: libbcc is needed only to compile).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import re
import struct
import tempfile
from collections.abc import Iterator
from types import ModuleType
from typing import Any, NamedTuple

FORMAT = 2  # of an image on disk; a change of layout or meaning raises it
BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE = 1, 2  # the source register of a map reference
LD_IMM64 = 0x18  # BPF_LD | BPF_IMM | BPF_DW: a 64-bit load that spans two instructions
PROG_TRACEPOINT, PROG_PERF_EVENT = 5, 7  # enum bpf_prog_type
TRACEPOINT_PROBE = re.compile(r"TRACEPOINT_PROBE\(\s*(\w+)\s*,\s*(\w+)\s*\)")


class ImageError(Exception):
    """An image that cannot be used: compile the program instead."""


class MapSpec(NamedTuple):
    name: str
    fd: int  # its descriptor when the image was compiled, as the instructions hold it
    type: int
    key_size: int
    leaf_size: int
    max_entries: int
    flags: int
    key_desc: str  # bcc's JSON description of the key's C type
    leaf_desc: str


class Image(NamedTuple):
    license: str
    kern_version: int
    functions: dict[str, bytes]  # name -> its instructions
    maps: list[MapSpec]
    built_by: str = ""  # the libbcc file that compiled it: path, size and mtime

    def to_json(self, key: str) -> str:
        return json.dumps({"format": FORMAT, "key": key, "license": self.license, "kern_version": self.kern_version,
                           "functions": {n: base64.b64encode(code).decode() for n, code in self.functions.items()},
                           "maps": [m._asdict() for m in self.maps], "built_by": self.built_by}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, key: str) -> Image:
        """The image written by to_json for `key`; ImageError for any other text."""
        try:
            doc = json.loads(text)
            if doc["format"] != FORMAT or doc["key"] != key:
                raise ImageError("written for another program, kernel or format")
            functions = {str(n): base64.b64decode(code, validate=True) for n, code in doc["functions"].items()}
            maps = [MapSpec(**m) for m in doc["maps"]]
            image = cls(str(doc["license"]), int(doc["kern_version"]), functions, maps, str(doc["built_by"]))
        except ImageError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ImageError(f"unreadable ({type(exc).__name__})") from None
        image.check()
        return image

    def check(self) -> None:
        """Every field of the types the loader needs, and every map reference to a known map."""
        for m in self.maps:
            ints = (m.fd, m.type, m.key_size, m.leaf_size, m.max_entries, m.flags)
            if not all(type(v) is int for v in ints) or not (isinstance(m.name, str) and isinstance(m.key_desc, str)
                                                            and isinstance(m.leaf_desc, str)):
                raise ImageError(f"map {m.name!r} is malformed")
        fds = {m.fd for m in self.maps}
        for name, code in self.functions.items():
            if len(code) % 8:
                raise ImageError(f"function {name} is not a whole number of instructions")
            unknown = {fd for _, fd in map_references(code)} - fds
            if unknown:
                raise ImageError(f"function {name} refers to maps the image does not describe")


def map_references(code: bytes) -> Iterator[tuple[int, int]]:
    """(byte offset, map descriptor) of each map reference in `code`."""
    for off in range(0, len(code) - 8, 8):
        op, regs, _, imm = struct.unpack_from("<BBhi", code, off)
        if op == LD_IMM64 and regs >> 4 in (BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE):
            yield off, imm


def tracepoints_of(text: str) -> list[tuple[str, str]]:
    """(category, event) of each TRACEPOINT_PROBE in a program's text."""
    return TRACEPOINT_PROBE.findall(text)


def compile_image(bcc: ModuleType, text: str, kernel_source: str | None) -> Image:
    """What clang makes of `text` (warnings off), against `kernel_source` (BCC_KERNEL_SOURCE) when given.
    RuntimeError with clang's first error line when it does not compile."""
    lib = libbcc(bcc)
    said: list[str] = []
    with stderr_to(said), environ("BCC_KERNEL_SOURCE", kernel_source):
        cflags = (ctypes.c_char_p * 1)(b"-w")
        module = lib.bpf_module_create_c_from_string(text.encode(), 0, cflags, 1, True, None)
    # clang wrote nothing (warnings are off): what was caught came from the process's other
    # threads (an MCP server's log), so it goes where they meant it to, a moment late
    errors = [line.strip() for line in "".join(said).splitlines() if "error" in line]
    if not module:
        raise RuntimeError("clang could not compile it" + (f" ({errors[0]})" if errors else ""))
    if "".join(said):
        os.write(2, "".join(said).encode())
    try:
        return _image_of(lib, module)
    finally:
        lib.bpf_module_destroy(module)  # closes the maps it created: a loaded image makes its own
        return_freed_memory()


def _image_of(lib: Any, module: int) -> Image:
    functions = {}
    for i in range(lib.bpf_num_functions(module)):
        name = lib.bpf_function_name(module, i)
        functions[name.decode()] = ctypes.string_at(lib.bpf_function_start(module, name),
                                                    lib.bpf_function_size(module, name))
    maps = [MapSpec(lib.bpf_table_name(module, i).decode(), lib.bpf_table_fd_id(module, i),
                    lib.bpf_table_type_id(module, i), lib.bpf_table_key_size_id(module, i),
                    lib.bpf_table_leaf_size_id(module, i), lib.bpf_table_max_entries_id(module, i),
                    lib.bpf_table_flags_id(module, i), lib.bpf_table_key_desc_id(module, i).decode(),
                    lib.bpf_table_leaf_desc_id(module, i).decode())
            for i in range(lib.bpf_num_tables(module))]
    image = Image(lib.bpf_module_license(module).decode(), lib.bpf_module_kern_version(module), functions, maps)
    image.check()
    return image


def libbcc(bcc: ModuleType) -> Any:
    """bcc's libbcc, with the types declared of the calls its Python module leaves undeclared (or
    misspells): ctypes would otherwise truncate 64-bit sizes and pointers to int."""
    lib, c, ll = bcc.libbcc.lib, ctypes, ctypes.c_ulonglong
    for name, restype, argtypes in (
            ("bpf_num_tables", ll, [c.c_void_p]), ("bpf_table_name", c.c_char_p, [c.c_void_p, ll]),
            ("bpf_table_fd_id", c.c_int, [c.c_void_p, ll]), ("bpf_table_key_size_id", c.c_size_t, [c.c_void_p, ll]),
            ("bpf_table_leaf_size_id", c.c_size_t, [c.c_void_p, ll]),
            ("bpf_table_key_desc_id", c.c_char_p, [c.c_void_p, ll]),
            ("bpf_table_leaf_desc_id", c.c_char_p, [c.c_void_p, ll]),
            ("bpf_function_size", c.c_size_t, [c.c_void_p, c.c_char_p])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def return_freed_memory() -> None:
    """clang frees what it allocated to compile, but glibc keeps the pages (about 40 MiB): give them
    back, so that a long-lived process (witty-mcp) does not keep them after its first round."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):  # not glibc (musl): nothing to trim
        pass


@contextlib.contextmanager
def environ(key: str, value: str | None) -> Iterator[None]:
    """`key` set to `value` (when not None) while bcc compiles, as it was afterwards: a long-lived
    process (witty-mcp) must not carry one round's choice into the next."""
    before = os.environ.get(key)
    if value is not None:
        os.environ[key] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


@contextlib.contextmanager
def stderr_to(said: list[str]) -> Iterator[None]:
    """clang inside libbcc writes its errors to file descriptor 2: keep them out of the user's
    terminal (and of an MCP server's log); what was written meanwhile is appended to `said`."""
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            said.append(sink.read().decode("utf-8", "replace"))
