"""bpf(2) without libbcc: bcc's descriptions of C types decoded to the same layouts, and (live, as
root) real maps written and read back key by key and in batches."""

from __future__ import annotations

import ctypes
import errno
import json
import os

import pytest

from witty_profiler.collectors.lib import bpfsys
from witty_profiler.collectors.lib.bpfsys import Table, create_map, ctype_of

# as libbcc describes the maps of the futex and stack programs
WAIT_T = '["wait_t", [["ns","unsigned long long"], ["lock_ns","unsigned long long"], ["woken","unsigned long long"], ' \
         '["comm","char", [16]] ], "struct_packed"]'
STACK_KEY = '["key_t", [["pid","unsigned int"], ["tid","unsigned int"], ["user_stack","int"], ' \
            '["kernel_stack","int"], ["comm","char", [16]] ], "struct_packed"]'
STACK_TRACE = '["bpf_stacktrace", [["ip","unsigned long long", [127]] ], "struct"]'
HASH, STACK_TRACE_MAP = 1, 7


def test_the_c_types_are_those_bcc_describes():
    wait = ctype_of(json.loads(WAIT_T))
    assert ctypes.sizeof(wait) == 40 and [f[0] for f in wait._fields_] == ["ns", "lock_ns", "woken", "comm"]
    row = wait(1, 2, 3, b"python3")
    assert (row.ns, row.woken, row.comm) == (1, 3, b"python3")
    assert ctypes.sizeof(ctype_of(json.loads(STACK_KEY))) == 32
    assert ctypes.sizeof(ctype_of(json.loads(STACK_TRACE))) == 127 * 8
    assert ctype_of("unsigned long long") is ctypes.c_ulonglong
    # packed, a nested anonymous union, a bit field
    odd = ctype_of(["odd_t", [["flag", "char"], ["", [["a", "int"], ["b", "short"]], "union"], ["bits", "unsigned int", 3]],
                    "struct_packed"])
    assert ctypes.sizeof(odd) == 1 + 4 + 4 and odd.a.offset == 1  # reached through the anonymous member
    assert ctypes.sizeof(ctype_of(["pad_t", [["c", "char"], ["n", "unsigned long long"]], "struct"])) == 16


def test_it_matches_bccs_own_decoding_where_bcc_is_installed():
    from witty_profiler.collectors.lib.bpfhost import NotReady, load_bcc
    try:
        bcc = load_bcc()
    except NotReady as exc:
        pytest.skip(str(exc))
    for desc in (WAIT_T, STACK_KEY, STACK_TRACE, '"unsigned int"'):
        ours, theirs = ctype_of(json.loads(desc)), bcc.BPF._decode_table_type(json.loads(desc))
        assert ctypes.sizeof(ours) == ctypes.sizeof(theirs)
        assert [(n, getattr(ours, n).offset) for n, *_ in getattr(ours, "_fields_", [])] == \
               [(n, getattr(theirs, n).offset) for n, *_ in getattr(theirs, "_fields_", [])]


def _map(*args) -> int:
    try:
        return create_map(*args)
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.ENOSYS, errno.EACCES):
            pytest.skip(f"bpf(2) is not allowed here: {exc}")
        raise


@pytest.mark.live
def test_a_hash_map_is_written_and_read_back_key_by_key_and_in_batches():
    wait = ctype_of(json.loads(WAIT_T))
    fd = _map(HASH, "waits", 8, 40, 4096, 0)
    try:
        table = Table(fd, HASH, 4096, ctypes.c_ulonglong, wait)
        for tid in range(1, 3001):  # more than one batch's bucket walk
            table[table.Key(42 << 32 | tid)] = table.Leaf(tid, 0, 1, b"t%d" % tid)
        assert table.update(table.Key(42 << 32 | 1), table.Leaf(9, 9, 9, b"late"), 1) is False  # BPF_NOEXIST
        assert table.update(table.Key(7), table.Leaf(9, 9, 9, b"new"), 1) is True
        assert table[table.Key(42 << 32 | 1)].comm == b"t1"
        with pytest.raises(KeyError):
            table[table.Key(1)]
        by_key = {k.value: (v.ns, v.comm) for k, v in table.items()}
        try:
            batched = {k: (v.ns, v.comm) for k, v in table.items_lookup_batch()}  # numbers come as ints
        except OSError as exc:
            assert exc.errno == errno.EINVAL  # a kernel before 5.6
            batched = by_key
        assert by_key == batched and len(by_key) == 3001 and by_key[42 << 32 | 3000] == (3000, b"t3000")
    finally:
        os.close(fd)


@pytest.mark.live
def test_a_stack_trace_is_walked_to_its_first_zero_address():
    trace = ctype_of(json.loads(STACK_TRACE))
    fd = _map(STACK_TRACE_MAP, "stack_traces", 4, 127 * 8, 16, 0)
    try:
        table = Table(fd, STACK_TRACE_MAP, 16, ctypes.c_uint, trace)
        with pytest.raises(KeyError):
            list(table.walk(3))  # nothing there yet; user space cannot write a stack-trace map
    finally:
        os.close(fd)


def test_a_system_call_the_architecture_lacks_is_said(monkeypatch):
    monkeypatch.setattr(bpfsys, "_MACHINE", "pdp11")
    with pytest.raises(OSError, match="bpf\\(2\\) is not known on pdp11"):
        create_map(HASH, "waits", 8, 40, 16, 0)
