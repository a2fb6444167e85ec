"""Compiled bcc programs kept once per kernel: in this process, and on disk for the processes after it.

Compiling costs 0.25-0.6 s of CPU and 110-140 MiB at clang's peak, every run of a one-shot
`collect`; loading a kept image takes a few milliseconds (collectors.lib.bpfimage). An image is
kept under a key of everything clang's output depends on: the program's text and flags, bcc's
version, the environment variables libbcc reads, the shared libraries the dynamic linker would give
it (LD_LIBRARY_PATH and the stamp of /etc/ld.so.cache, which ldconfig rewrites whenever a library is
installed or upgraded), the running kernel (release and build), the kernel headers compiled against,
and the format of every tracepoint the program reads (bcc builds the argument structs from those
files). Any change of one of them is another key, so a kernel upgrade compiles once again. The
image also names the libbcc file that compiled it (path, size, mtime): one rebuilt in place since
is a miss. The key is made without loading libbcc, which a kept image does not need.

On disk: /var/cache/witty-profiler/bpf, or the folder WITTY_BPF_CACHE names ("off": none); the 64
newest images are kept. What is kept there is loaded into the kernel by root, so a file is used only
when it, its folder and every folder above pass collectors.lib.privatefolder's checks; anything else
is a miss (compile) with the reason in the collector's status, never an error.

Why not a precompiled CO-RE object where the kernel has BTF: it would be a second text of every
program in libbpf's dialect (bcc's TRACEPOINT_PROBE, BPF_HASH and lookup_or_try_init do not exist
there), a clang at build time and a binary in the package; these programs read no kernel structure,
so CO-RE's relocations bring nothing, and a cache serves kernels without BTF too.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from collections.abc import Callable
from types import ModuleType

from witty_profiler.collectors.lib.bpfhost import bcc_version
from witty_profiler.collectors.lib.bpfimage import FORMAT, Image, ImageError, compile_image, tracepoints_of
from witty_profiler.collectors.lib.privatefolder import private_folder, read_file, write_file
from witty_profiler.collectors.lib.procfs import read_text

DEFAULT_DIR = Path("/var/cache/witty-profiler/bpf")
ENV = "WITTY_BPF_CACHE"
MAX_FILE = 4 << 20  # an image is a few KiB
MEMORY_MAX = 8  # images kept in this process (one per program variant)
BCC_ENV = ("BCC_KERNEL_MODULES_SUFFIX", "BCC_LINUX_VERSION_CODE", "ARCH")  # read by libbcc as it compiles
LINKER_ENV = ("LD_LIBRARY_PATH", "LD_PRELOAD")  # which libbcc and clang a compile would load
LD_SO_CACHE = Path("/etc/ld.so.cache")


def cache_dir() -> Path | None:
    """Where images are kept on disk; None when WITTY_BPF_CACHE=off."""
    given = os.environ.get(ENV)
    if given is None:
        return DEFAULT_DIR
    return None if given.strip().lower() in ("", "off", "0", "no") else Path(given)


def image_key(text: str, kernel_source: str | None, tracefs: Path | None) -> str:
    """The key of everything clang's output depends on (see the module's text); NotReady
    (collectors.lib.bpfhost) when bcc is not installed."""
    uname = os.uname()
    tree = Path(kernel_source) if kernel_source else Path("/lib/modules") / uname.release / "build"
    parts = [FORMAT, bcc_version(), text, "-w", uname.release, uname.version, str(tree),
             read_text(f"{tree}/include/generated/utsrelease.h") or "", _stamp(tree / "include" / "generated" / "autoconf.h")]
    parts += [*(os.environ.get(name, "") for name in BCC_ENV + LINKER_ENV), _stamp(LD_SO_CACHE)]
    for category, event in tracepoints_of(text):
        parts.append(read_text(f"{tracefs}/events/{category}/{event}/format") or "" if tracefs else "")
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


class ImageCache:
    """Images by key, in memory and on disk."""

    def __init__(self) -> None:
        self._memory: dict[str, Image] = {}
        self._lock = threading.Lock()
        # one compile at a time: clang's stderr and BCC_KERNEL_SOURCE are the process's own
        self._compiling = threading.Lock()

    def image(self, load_bcc: Callable[[], ModuleType], text: str, kernel_source: str | None,
              tracefs: Path | None, fresh: bool = False) -> tuple[Image, dict[str, str]]:
        """The image of `text` and where it came from ({"program": "compiled" | "cached in memory" |
        "cached on disk", "program_cache": the file, or why the disk was not used}); `fresh`: compile
        even when one is kept (a kept one the kernel refused). `load_bcc` is called only to compile."""
        key = image_key(text, kernel_source, tracefs)
        folder = cache_dir()
        path = folder / f"{key}.json" if folder else None
        said = {"program_cache": str(path) if path else f"{ENV}=off"}
        image = None if fresh else self._kept(key)
        if image is not None:
            return image, {**said, "program": "cached in memory"}
        if path is not None and not fresh:
            try:
                image = Image.from_json(read_private(path), key)
                if image.built_by != _libbcc_identity(image.built_by.rsplit(":", 2)[0]):
                    raise ImageError(f"compiled by {image.built_by}, which has changed since")
                self._remember(key, image)
                return image, {**said, "program": "cached on disk"}
            except FileNotFoundError:
                pass
            except (OSError, ImageError) as exc:
                said["program_cache"] = f"{path} not used: {exc}"
        with self._compiling:
            image = None if fresh else self._kept(key)
            if image is not None:  # another window compiled it meanwhile
                return image, {**said, "program": "cached in memory"}
            bcc = load_bcc()
            image = compile_image(bcc, text, kernel_source)._replace(built_by=_libbcc_identity(_loaded_libbcc()))
            self._remember(key, image)
        if path is not None:
            try:
                write_private(path, image.to_json(key))
            except OSError as exc:
                said["program_cache"] = f"not kept in {path.parent}: {exc.strerror or exc}"
        return image, {**said, "program": "compiled"}

    def _kept(self, key: str) -> Image | None:
        with self._lock:
            return self._memory.get(key)

    def forget(self) -> None:
        with self._lock:
            self._memory.clear()

    def _remember(self, key: str, image: Image) -> None:
        with self._lock:
            if len(self._memory) >= MEMORY_MAX:
                self._memory.pop(next(iter(self._memory)))
            self._memory[key] = image


def read_private(path: Path) -> str:
    """The text of `path` when it and every folder above it pass collectors.lib.privatefolder's checks
    (OSError saying why otherwise; FileNotFoundError when there is none)."""
    with private_folder(path.parent, create=False) as folder:
        return read_file(folder, path.name, MAX_FILE).decode("utf-8", "replace")


def write_private(path: Path, text: str) -> None:
    """`text` to `path` through collectors.lib.privatefolder (its folder made 0700 where missing)."""
    with private_folder(path.parent, create=True) as folder:
        write_file(folder, path.name, text.encode())


def _loaded_libbcc() -> str:
    """The file of the libbcc this process loaded (from /proc/self/maps), "" when unknown."""
    try:
        with open("/proc/self/maps") as f:
            return next((line.split(None, 5)[5].strip() for line in f if "/libbcc.so" in line), "")
    except (OSError, IndexError):
        return ""


def _libbcc_identity(path: str) -> str:
    """A libbcc file (with the clang it holds) as path, size and mtime: the Python module's version
    alone does not change with a rebuild of the library."""
    return f"{path}:{_stamp(Path(path))}" if path else ""


def _stamp(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return ""
    return f"{st.st_size}:{st.st_mtime_ns}"


IMAGES = ImageCache()  # this process's images
