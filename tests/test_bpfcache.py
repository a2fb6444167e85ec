"""Compiled eBPF programs kept once per kernel: the image's format and checks, the key, the private
files on disk; live, a kept image the kernel refuses is compiled again."""

from __future__ import annotations

import errno
import os
import platform
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
from ebpf_support import ebpf_ready

from witty_profiler.collectors.base import Context
from witty_profiler.collectors.ebpf import SYSCALLS, EbpfCollector, program
from witty_profiler.collectors.lib import bpfcache, bpfhost, bpfload, privatefolder
from witty_profiler.collectors.lib.bpfcache import IMAGES, ImageCache, image_key, read_private, write_private
from witty_profiler.collectors.lib.bpfhost import kernel_headers, tracefs
from witty_profiler.collectors.lib.bpfimage import Image, ImageError, MapSpec, map_references, tracepoints_of

BCC = SimpleNamespace(__version__="0.26.0")


def LOAD_BCC():  # noqa: N802 - stands for bpfhost.load_bcc
    return BCC


def NO_BCC():  # noqa: N802 - a kept image must not need bcc
    raise AssertionError("bcc was loaded, though the program was kept")
EXIT = struct.pack("<BBhi", 0x95, 0, 0, 0)


def _map_load(fd: int) -> bytes:
    """A 64-bit load of map `fd` into r1: two instructions."""
    return struct.pack("<BBhi", 0x18, 1 | 1 << 4, 0, fd) + struct.pack("<BBhi", 0, 0, 0, 0)


def _image(code: bytes = _map_load(4) + EXIT) -> Image:
    spec = MapSpec("waits", 4, 1, 8, 40, 65536, 0, '"unsigned long long"', '["wait_t", [["ns", "unsigned long long"]]]')
    return Image("GPL", 393664, {"tracepoint__syscalls__sys_enter_futex": code}, [spec])


# -- the image ---------------------------------------------------------------------------------
def test_an_image_reads_back_as_it_was_written_for_its_key_only():
    image = _image()
    assert Image.from_json(image.to_json("k1"), "k1") == image
    with pytest.raises(ImageError, match="another program, kernel or format"):
        Image.from_json(image.to_json("k1"), "k2")  # a file renamed to another key is not taken


@pytest.mark.parametrize("change, reason", [
    (lambda d: d.replace('"format": 2', '"format": 99'), "another program, kernel or format"),
    (lambda d: d.replace('"maps": [', '"maps": [7, '), "unreadable"),
    (lambda d: d[: len(d) // 2], "unreadable"),
    (lambda d: d.replace('"key_size": 8', '"key_size": "8"'), "map 'waits' is malformed"),
])
def test_an_image_that_is_not_one_is_refused(change, reason):
    with pytest.raises(ImageError, match=reason):
        Image.from_json(change(_image().to_json("k")), "k")


def test_instructions_must_be_whole_and_refer_only_to_maps_the_image_describes():
    with pytest.raises(ImageError, match="not a whole number of instructions"):
        _image(EXIT + b"\x00").check()
    with pytest.raises(ImageError, match="refers to maps the image does not describe"):
        _image(_map_load(9) + EXIT).check()


def test_map_references_are_the_64_bit_loads_of_a_map_descriptor():
    code = EXIT + _map_load(4) + struct.pack("<BBhi", 0x18, 1, 0, 77) + bytes(8) + _map_load(5) + EXIT
    assert list(map_references(code)) == [(8, 4), (40, 5)]  # a plain 64-bit constant (source 0) is not one


def test_the_tracepoints_a_program_reads_are_found_in_its_text():
    assert tracepoints_of(program(["futex", "futex_waitv"])) == [
        ("syscalls", "sys_enter_futex"), ("syscalls", "sys_exit_futex"),
        ("syscalls", "sys_enter_futex_waitv"), ("syscalls", "sys_exit_futex_waitv")]


# -- the key ------------------------------------------------------------------------------------
def test_the_key_changes_with_what_clang_reads(tmp_path, monkeypatch):
    fmt = tmp_path / "events" / "syscalls" / "sys_enter_futex" / "format"
    fmt.parent.mkdir(parents=True)
    fmt.write_text("field:int op;\toffset:16;\n")
    monkeypatch.setattr(bpfcache, "bcc_version", lambda: "0.26.0")
    monkeypatch.setattr(bpfcache, "LD_SO_CACHE", tmp_path / "ld.so.cache")
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    text = "TRACEPOINT_PROBE(syscalls, sys_enter_futex) { return 0; }"
    key = image_key(text, None, tmp_path)
    assert key == image_key(text, None, tmp_path)
    assert key != image_key(text + " ", None, tmp_path)
    assert key != image_key(text, str(tmp_path / "other-headers"), tmp_path)
    fmt.write_text("field:int op;\toffset:24;\n")  # another kernel build moves the argument
    key = image_key(text, None, tmp_path)
    monkeypatch.setattr(bpfcache, "bcc_version", lambda: "0.29.1")
    assert key != image_key(text, None, tmp_path)
    monkeypatch.setattr(bpfcache, "bcc_version", lambda: "0.26.0")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))  # another libbcc or clang may be loaded
    assert key != image_key(text, None, tmp_path)
    monkeypatch.delenv("LD_LIBRARY_PATH")
    (tmp_path / "ld.so.cache").write_text("")  # ldconfig ran: a library was installed or upgraded
    assert key != image_key(text, None, tmp_path)


def test_the_bccs_version_is_read_without_importing_it(tmp_path, monkeypatch):
    (tmp_path / "bcc").mkdir()
    (tmp_path / "bcc" / "__init__.py").write_text("raise ImportError('imported')\n")
    (tmp_path / "bcc" / "version.py").write_text("__version__ = '0.31.0'\n")
    monkeypatch.setattr(bpfhost.importlib.util, "find_spec", lambda name: None)  # not on this interpreter's path
    assert bpfhost.bcc_version(tmp_path) == "0.31.0"
    with pytest.raises(bpfhost.NotReady, match="the bcc Python module is not installed"):
        bpfhost.bcc_version(tmp_path / "elsewhere")


# -- private files ------------------------------------------------------------------------------
def test_an_image_file_is_written_private_and_whole(tmp_path):
    path = tmp_path / "images" / "k.json"
    write_private(path, "one")
    write_private(path, "two")
    assert read_private(path) == "two"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700" and oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in path.parent.iterdir()] == ["k.json"]  # nothing left aside


def test_a_file_others_may_write_or_that_is_not_a_plain_file_is_not_read(tmp_path):
    folder = tmp_path / "images"
    write_private(folder / "k.json", "text")
    (folder / "k.json").chmod(0o620)
    with pytest.raises(OSError, match="may be written by others"):
        read_private(folder / "k.json")
    (folder / "k.json").chmod(0o600)
    folder.chmod(0o777)
    with pytest.raises(OSError, match="may be written by others"):
        read_private(folder / "k.json")
    with pytest.raises(OSError, match="may be written by others"):
        write_private(folder / "k2.json", "text")
    folder.chmod(0o700)
    (folder / "link.json").symlink_to(folder / "k.json")
    with pytest.raises(OSError):  # ELOOP: never followed
        read_private(folder / "link.json")
    os.mkfifo(folder / "fifo.json")
    with pytest.raises(OSError, match="not a regular file"):
        read_private(folder / "fifo.json")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_of_another_user_is_not_read(tmp_path):
    write_private(tmp_path / "k.json", "text")
    os.chown(tmp_path / "k.json", 65534, 65534)
    with pytest.raises(OSError, match="belongs to uid 65534"):
        read_private(tmp_path / "k.json")


def test_no_folder_above_may_be_a_link_or_writable_by_another_user(tmp_path):
    (tmp_path / "real").mkdir()
    write_private(tmp_path / "real" / "images" / "k.json", "text")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OSError, match="link is not a folder that can be opened without following a link"):
        read_private(tmp_path / "link" / "images" / "k.json")
    (tmp_path / "real").chmod(0o777)  # anyone could rename images/ away and put their own in its place
    with pytest.raises(OSError, match="real may be written by others"):
        read_private(tmp_path / "real" / "images" / "k.json")
    (tmp_path / "real").chmod(0o1777)  # sticky, as /tmp: others cannot rename what is not theirs
    assert read_private(tmp_path / "real" / "images" / "k.json") == "text"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_folder_above_of_another_user_is_refused(tmp_path):
    write_private(tmp_path / "theirs" / "images" / "k.json", "text")
    os.chown(tmp_path / "theirs", 65534, 65534)  # its owner could swap images/ for anything
    with pytest.raises(OSError, match="theirs belongs to uid 65534"):
        read_private(tmp_path / "theirs" / "images" / "k.json")


def test_a_folder_on_a_users_fuse_mount_is_refused(tmp_path):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("22 1 0:21 / / rw - ext4 /dev/vda rw\n"
                         f"90 22 0:50 / {tmp_path}/mnt rw,nosuid - fuse.sshfs host: rw,user_id=1000\n")
    with pytest.raises(OSError, match="lies on a FUSE file system"):
        privatefolder._refuse_fuse(tmp_path / "mnt" / "images", str(mountinfo))
    privatefolder._refuse_fuse(tmp_path / "elsewhere", str(mountinfo))  # beside it: fine


def test_only_the_newest_images_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(privatefolder, "KEEP_NEWEST", 3)
    for i in range(5):
        write_private(tmp_path / "images" / f"{i}.json", "text")
        os.utime(tmp_path / "images" / f"{i}.json", (i, i))  # written in this order
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == ["2.json", "3.json", "4.json"]


# -- the cache ----------------------------------------------------------------------------------
@pytest.fixture
def compiles(monkeypatch, tmp_path):
    """Every compile counted, each giving the test image."""
    done = []
    monkeypatch.setattr(bpfcache, "compile_image", lambda bcc, text, source: done.append(text) or _image())
    monkeypatch.setattr(bpfcache, "bcc_version", lambda: "0.26.0")
    (tmp_path / "libbcc.so.0").write_text("a build")
    monkeypatch.setattr(bpfcache, "_loaded_libbcc", lambda: str(tmp_path / "libbcc.so.0"))
    monkeypatch.setenv("WITTY_BPF_CACHE", str(tmp_path / "images"))
    return done


def test_a_program_is_compiled_once_then_taken_from_memory_then_from_disk(compiles, tmp_path):
    first, later = ImageCache(), ImageCache()  # later: as another process finds it
    said = [first.image(LOAD_BCC, "text", None, None)[1], first.image(NO_BCC, "text", None, None)[1],
            later.image(NO_BCC, "text", None, None)[1]]
    assert [s["program"] for s in said] == ["compiled", "cached in memory", "cached on disk"]
    assert len(compiles) == 1
    assert said[2]["program_cache"] == str(next((tmp_path / "images").glob("*.json")))
    assert first.image(LOAD_BCC, "text", None, None, fresh=True)[1]["program"] == "compiled"  # a refused one


def test_an_image_whose_libbcc_was_rebuilt_since_is_compiled_again(compiles, tmp_path):
    ImageCache().image(LOAD_BCC, "text", None, None)
    kept = next((tmp_path / "images").glob("*.json"))
    assert Image.from_json(kept.read_text(), kept.stem).built_by.startswith(f"{tmp_path}/libbcc.so.0:7:")
    (tmp_path / "libbcc.so.0").write_text("another build")
    image, said = ImageCache().image(LOAD_BCC, "text", None, None)
    assert said["program"] == "compiled" and said["program_cache"].startswith(
        f"{kept} not used: compiled by {tmp_path}/libbcc.so.0:7:")
    assert ImageCache().image(NO_BCC, "text", None, None)[1]["program"] == "cached on disk"


def test_a_damaged_file_is_compiled_again_and_replaced(compiles, tmp_path):
    ImageCache().image(LOAD_BCC, "text", None, None)
    kept = next((tmp_path / "images").glob("*.json"))
    kept.write_text("{")
    image, said = ImageCache().image(LOAD_BCC, "text", None, None)
    assert said["program"] == "compiled" and said["program_cache"] == f"{kept} not used: unreadable (JSONDecodeError)"
    assert ImageCache().image(NO_BCC, "text", None, None)[1]["program"] == "cached on disk"


def test_without_a_usable_folder_the_program_is_compiled_and_the_reason_said(compiles, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("WITTY_BPF_CACHE", str(tmp_path / "file" / "images"))
    said = ImageCache().image(LOAD_BCC, "text", None, None)[1]
    assert said["program"] == "compiled" and said["program_cache"].startswith(f"not kept in {tmp_path}/file/images: ")
    monkeypatch.setenv("WITTY_BPF_CACHE", "off")
    assert ImageCache().image(LOAD_BCC, "text", None, None)[1] == {"program": "compiled",
                                                                   "program_cache": "WITTY_BPF_CACHE=off"}


# -- live ---------------------------------------------------------------------------------------
@pytest.mark.live
def test_a_kept_image_the_kernel_refuses_is_compiled_again(tmp_path, monkeypatch):
    ebpf_ready()
    monkeypatch.setenv("WITTY_BPF_CACHE", str(tmp_path))
    IMAGES.forget()
    events = tracefs(Path("/proc/self/mounts").read_text()) / "events" / "syscalls"
    present = [s for s in SYSCALLS if (events / f"sys_enter_{s}").is_dir()]
    tree, _ = kernel_headers(platform.release())
    text = program(present)
    key = image_key(text, str(tree) if tree else None, events.parent.parent)
    names = [f"tracepoint__syscalls__sys_{side}_{s}" for s in present for side in ("enter", "exit")]
    # `exit` with r0 never set: the verifier refuses it ("R0 !read_ok")
    write_private(tmp_path / f"{key}.json", Image("GPL", 0, dict.fromkeys(names, EXIT), []).to_json(key))
    collector = EbpfCollector(Context())
    collector.prepare()
    try:
        assert collector.bpf is not None, collector.problem
        said = collector.status.extra
        assert said["program"] == "compiled" and said["program_cache"].startswith("the kept image was refused ("), said
        collector.start()
    finally:
        collector.finish()
    assert Image.from_json(read_private(tmp_path / f"{key}.json"), key).functions[names[0]] != EXIT  # replaced


@pytest.mark.parametrize("where, code, compiles_again", [
    ("cached on disk", errno.EINVAL, True),  # the verifier refused a kept image: it may be stale
    ("cached on disk", errno.ENOMEM, False),  # the host is short of memory: compiling would not help
    ("cached in memory", errno.EINVAL, False),  # the same bytes this process loaded before
])
def test_only_a_kept_image_the_verifier_refuses_is_compiled_again(monkeypatch, where, code, compiles_again):
    asked = []

    def image(bcc, text, source, tracefs, fresh=False):
        asked.append(fresh)
        return _image(), {"program": "compiled" if fresh else where, "program_cache": "f"}

    def loaded(image, prog_types, tracefs):
        if len(asked) == 1:
            raise OSError(code, "refused")
        return "loaded"

    monkeypatch.setattr(bpfload.IMAGES, "image", image)
    monkeypatch.setattr(bpfload, "Loaded", loaded)
    if compiles_again:
        program, said = bpfload.load_program(LOAD_BCC, "text", None)
        assert program == "loaded" and said["program_cache"] == "the kept image was refused ([Errno 22] refused): " \
                                                               "compiled again"
    else:
        with pytest.raises(OSError, match="refused"):
            bpfload.load_program(LOAD_BCC, "text", None)
    assert asked == ([False, True] if compiles_again else [False])
