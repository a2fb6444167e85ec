"""network.slow_link on collective times read from Kineto traces written here in PyTorch's format: a
collective's kernel time alone (no message size, one rank) never gives P0; a latency-bound message
with several ranks' traces is judged on the transfer without the waiting; a large message is
bandwidth-bound and left to the bandwidth comparison."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import SHARED
from witty_profiler.diagnosis import diagnose
from witty_profiler.topology.vocabulary import M, T
from witty_profiler.traces.importer import import_traces


def _trace(path: Path, rank: int, kernel_us: list[float], nelems: int | None = None, world: int = 2) -> Path:
    """One rank's trace: a 10 ms step holding NCCL AllReduce kernels of the given durations (with their
    message sizes in the kernels' args when nelems is given, as PyTorch 2.x records them)."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 7, "tid": 7, "ts": 0,
               "dur": 10_000}]
    ts = 100.0
    for dur in kernel_us:
        args = {"Process Group Name": "0", "Process Group Ranks": "[0, 1]"}
        if nelems is not None:
            args.update({"In msg nelems": nelems, "Out msg nelems": nelems, "dtype": "Float", "Group size": world})
        events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0,
                       "tid": 9, "ts": ts, "dur": dur, "args": args})
        ts += dur + 50
    doc = {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world}, "traceEvents": events}
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(doc, f)
    return path


def _slow_link(paths):
    return diagnose(import_traces(paths)).finding("network.slow_link")


def test_kernel_time_without_message_sizes_is_at_most_p2(tmp_path):
    f = _slow_link([_trace(tmp_path / "r0.json.gz", 0, [1827.0] * 4)])
    assert f is not None and f.severity == "notice"
    assert "no message sizes" in f.description and "at most P2" in f.description
    (item,) = [e for e in f.evidence if e.metric == "mean duration"]
    assert item.value == pytest.approx(1827.0) and item.threshold == "> 1000" and "size unknown" in item.note


def test_one_ranks_kernel_time_of_a_small_message_is_at_most_p1(tmp_path):
    f = _slow_link([_trace(tmp_path / "r0.json.gz", 0, [1827.0] * 4, nelems=16384)])  # 64 KiB of float32
    assert f is not None and f.severity == "warning"
    assert "65536 bytes" in f.description and "waiting for the other ranks included" in f.description


def test_a_large_message_is_judged_by_bandwidth_not_latency(tmp_path):
    path = _trace(tmp_path / "r0.json.gz", 0, [3000.0] * 4, nelems=5_000_000)  # 20 MB in 3 ms
    graph = import_traces([path])
    (c,) = graph.entities(T.COLLECTIVE)
    algbw = 20e6 / 3000e-6 / 1e9
    assert c.metrics[M.MESSAGE_BYTES] == 20_000_000
    assert c.metrics[M.BANDWIDTH_GBYTES_PER_S] == pytest.approx(algbw)
    assert c.metrics[M.BUS_BANDWIDTH_GBYTES_PER_S] == pytest.approx(algbw * 2 * (2 - 1) / 2)  # nccl-tests' busbw
    d = diagnose(graph)
    assert d.status("network.slow_link") == "clear" and "bandwidth-bound" in next(c.reason for c in d.coverage if c.pattern == "network.slow_link")


def test_two_ranks_separate_the_waiting_from_the_transfer(tmp_path):
    """Rank 0 waits 700 us a call for rank 1: the transfer is the faster rank's 1100 us (P0 for a latency-
    bound message), and the waiting is said apart."""
    paths = [_trace(tmp_path / "r0.json.gz", 0, [1800.0] * 4, nelems=16384),
             _trace(tmp_path / "r1.json.gz", 1, [1100.0] * 4, nelems=16384)]
    f = _slow_link(paths)
    assert f is not None and f.severity == "critical"
    (item,) = [e for e in f.evidence if e.metric == "transfer time per call"]
    assert item.value == pytest.approx(1100.0) and "waiting 350 us per call" in item.note
    assert "fastest of 2 ranks" in f.description
    # the same waiting with a faster transfer: only the waiting was slow, no latency finding
    paths = [_trace(tmp_path / "r0.json.gz", 0, [1800.0] * 4, nelems=16384),
             _trace(tmp_path / "r1.json.gz", 1, [90.0] * 4, nelems=16384)]
    assert _slow_link(paths) is None


def test_the_real_2_rank_trace_is_bandwidth_bound():
    """HTA's 2-rank trace: 20 MB AllReduce calls of about 3 ms each, formerly a P0 on their duration alone."""
    path = SHARED / "traces" / "kineto" / "nccl_2rank_rank0.json.gz"
    if not path.exists():
        pytest.skip(f"Kineto fixture not found at {path} (../shared/fixtures is absent)")
    graph = import_traces([path])
    allreduce = next(c for c in graph.entities(T.COLLECTIVE) if c.attrs["op"] == "allreduce")
    assert allreduce.metrics[M.MESSAGE_BYTES] > 1_000_000 and allreduce.metrics[M.DURATION_MS] > 1.0
    assert diagnose(graph).status("network.slow_link") == "clear"
