"""What a host needs before bcc can load a tracepoint program, found or made ready here.

Three things, each with the one-line reason a person can act on when it is missing:
- the `bcc` Python module. Debian and Ubuntu ship it as python3-bpfcc for the system Python
  only (the PyPI package named bcc is unrelated); an interpreter of its own (pyenv, a venv) is
  pointed at that copy, which is pure Python over libbcc.
- tracefs, where bcc reads the tracepoints' formats. Systemd mounts it at boot; where nothing did
  (containers, minimal VMs), root mounts it at its standard place.
- kernel headers: bcc compiles with clang against /lib/modules/<release>/build. Hosts without a
  matching package (a cloud or VM kernel) can use Debian's linux-headers-<version>-common plus
  linux-headers-<version>-<flavour>, merged here into one tree of links under a cache folder and
  given to bcc through BCC_KERNEL_SOURCE. Tracepoint programs read no kernel structure, so headers
  of another release compile the same program.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

DEBIAN_DIST_PACKAGES = Path("/usr/lib/python3/dist-packages")
TRACEFS_PLACES = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
HEADERS_CACHE = Path("/var/cache/witty-profiler/kernel-headers")
INSTALL_HINT = "apt-get install python3-bpfcc linux-headers-amd64 (Debian/Ubuntu: bpfcc-tools' Python module)"


class NotReady(Exception):
    """The host cannot load a bcc program; the message says what to do."""


def load_bcc(dist_packages: Path = DEBIAN_DIST_PACKAGES) -> ModuleType:
    """The bcc module: importable as it is, else the distribution's copy."""
    try:
        return importlib.import_module("bcc")
    except ImportError:
        pass
    except OSError as exc:  # the module is there but libbcc is not (or is of another ABI)
        raise NotReady(f"bcc does not load: {exc}: {INSTALL_HINT}") from None
    if not (dist_packages / "bcc" / "__init__.py").exists():
        raise NotReady(f"the bcc Python module is not installed: {INSTALL_HINT}")
    # only bcc itself is taken from there: the path is removed again, so that no other package of
    # the system Python shadows this interpreter's own
    sys.path.append(str(dist_packages))
    try:
        return importlib.import_module("bcc")
    except (ImportError, OSError) as exc:  # OSError: libbcc.so missing or of another ABI
        raise NotReady(f"bcc from {dist_packages} does not load here: {type(exc).__name__}: {exc}") from None
    finally:
        sys.path.remove(str(dist_packages))


def bcc_version(dist_packages: Path = DEBIAN_DIST_PACKAGES) -> str:
    """The version of the bcc module load_bcc would import, read from its files without importing it
    (which loads libbcc: 25-35 ms and 65 MiB that a kept program does not need); NotReady when
    there is none."""
    spec = importlib.util.find_spec("bcc")
    folder = Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None
    if folder is None:
        if not (dist_packages / "bcc" / "__init__.py").exists():
            raise NotReady(f"the bcc Python module is not installed: {INSTALL_HINT}")
        folder = dist_packages / "bcc"
    try:
        text = (folder / "version.py").read_text()
    except OSError:
        return "?"
    found = re.search(r"""__version__\s*=\s*['"]([^'"]+)['"]""", text)
    return found[1] if found else "?"


def tracefs(mounts_text: str, mount: bool = True) -> Path:
    """Where tracefs is mounted (from /proc/self/mounts), mounting it at /sys/kernel/tracing if
    nothing has and `mount` allows."""
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "tracefs":
            return Path(parts[1].replace("\\040", " "))
    place = TRACEFS_PLACES[0]
    if not mount:
        raise NotReady(f"tracefs is not mounted: mount -t tracefs nodev {place}")
    done = subprocess.run(["mount", "-t", "tracefs", "nodev", str(place)], capture_output=True, text=True)
    if done.returncode != 0:
        raise NotReady(f"tracefs is not mounted and mounting it failed: {done.stderr.strip() or done.returncode}")
    return place


def kernel_headers(release: str, src: Path = Path("/usr/src"), modules: Path = Path("/lib/modules"),
                   cache: Path = HEADERS_CACHE) -> tuple[Path | None, str]:
    """(a kernel source tree for BCC_KERNEL_SOURCE or None when bcc finds its own, a note on what
    is used). Order: BCC_KERNEL_SOURCE as set, the running kernel's build tree, the kernel's own
    /sys/kernel/kheaders.tar.xz (bcc unpacks it), Debian headers (the same release, else the newest)."""
    given = os.environ.get("BCC_KERNEL_SOURCE")
    if given:
        return Path(given), f"kernel headers from BCC_KERNEL_SOURCE={given}"
    if (modules / release / "build" / "include").is_dir():
        return None, f"kernel headers of {release}"
    if Path("/sys/kernel/kheaders.tar.xz").exists():
        return None, "kernel headers built into the kernel (kheaders)"
    pairs = debian_header_pairs(src)
    if not pairs:
        raise NotReady(f"no kernel headers for {release}: {INSTALL_HINT}")
    name = next((n for n in pairs if n == release), None) or max(pairs, key=_version_key)
    common, flavour = pairs[name]
    tree = merge_header_tree(common, flavour, cache / name)
    note = f"kernel headers {name}" + ("" if name == release else f" for kernel {release} (tracepoints only)")
    return tree, note


def debian_header_pairs(src: Path) -> dict[str, tuple[Path, Path]]:
    """{'6.1.0-57-amd64': (…-common, …-amd64)} for every flavour whose common part is installed too."""
    found: dict[str, tuple[Path, Path]] = {}
    for flavour in sorted(src.glob("linux-headers-*")):
        name = flavour.name.removeprefix("linux-headers-")
        m = re.fullmatch(r"(\d+\.\d+\.\d+-\d+)-(?!common)[\w-]+", name)
        if not m or not (flavour / "include" / "generated").is_dir():
            continue
        common = src / f"linux-headers-{m.group(1)}-common"
        if (common / "include" / "linux").is_dir():
            found[name] = (common, flavour)
    return found


def merge_header_tree(common: Path, flavour: Path, dest: Path) -> Path:
    """One tree of links: the common headers with the flavour's generated files and config beside
    them, in include/ and arch/<arch>/include/ (the two folders both parts fill). Made once; a tree
    already made from the same two folders is reused."""
    stamp = dest / ".witty-merged-from"
    want = f"{common}\n{flavour}\n"
    if stamp.exists() and stamp.read_text() == want:
        return dest
    arch_include = [p.relative_to(flavour) for p in flavour.glob("arch/*/include")]
    shared = {Path("include"), *arch_include, *(p.parent for p in arch_include), *(p.parent.parent for p in arch_include)}
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    _link_union((common, flavour), tmp, Path("."), shared)
    (tmp / ".witty-merged-from").write_text(want)
    if dest.exists():
        shutil.rmtree(dest)  # links are removed, never followed
    tmp.rename(dest)
    return dest


def _link_union(parts: tuple[Path, ...], dest: Path, rel: Path, shared: set[Path]) -> None:
    """dest/rel holds a link to each entry of every part's rel folder, later parts winning, except
    for the folders in `shared`, which are made real and filled the same way."""
    (dest / rel).mkdir(parents=True, exist_ok=True)
    entries: dict[str, Path] = {}
    for part in parts:
        folder = part / rel
        if folder.is_dir():
            for child in sorted(folder.iterdir(), key=lambda p: p.name):
                entries[child.name] = child
    for name, target in entries.items():
        if rel / name in shared and target.is_dir():
            _link_union(parts, dest, rel / name, shared)
        else:
            (dest / rel / name).symlink_to(target.resolve() if target.is_symlink() else target)


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", name))
