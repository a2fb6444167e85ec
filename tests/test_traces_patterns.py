"""The host-side patterns that also judge trace ranks (dataplane.pipeline_bubble, dataplane.data_loading_bottleneck,
compute.accelerator_idle) on the real fixtures (../shared/fixtures/traces): the expected values come from the
imported ranks' own metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from witty_profiler import diagnose
from witty_profiler.topology import Graph
from witty_profiler.traces.importer import import_traces

from conftest import SHARED

TRACES = SHARED / "traces"
NCCL_2RANK = TRACES / "kineto" / "nccl_2rank_rank0.json.gz"
MSPROF = TRACES / "msprof"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"trace fixture not found at {path} (../shared/fixtures is absent)")
    return path


@pytest.fixture(scope="module")
def kineto() -> Graph:
    return import_traces([_need(NCCL_2RANK)])


@pytest.fixture(scope="module")
def msprof() -> Graph:
    return import_traces([_need(MSPROF / "cluster_step_trace_time.csv").parent])


def _reason(d, pattern: str) -> str:
    return next(c.reason for c in d.coverage if c.pattern == pattern)


def _evidence(finding, rank_id: str) -> dict[str, float]:
    return {e.metric: e.value for e in finding.evidence if e.ids == [rank_id]}


def test_kineto_rank_is_mostly_idle_with_its_own_busy_share(kineto):
    (rank,) = kineto.entities("rank")
    busy = rank.metrics["kernel_busy_pct"]
    assert 20 < busy < 30  # the fixture: kernels run about 23 % of each step
    d = diagnose(kineto)
    f = d.finding("compute.accelerator_idle")
    assert f is not None, _reason(d, "compute.accelerator_idle")
    assert f.severity == "critical" and f.subjects == [rank.id]
    assert _evidence(f, rank.id)["kernel_busy_pct"] == busy
    assert f"runs kernels {busy:.1f} % of its step (threshold < 30 %)" in f.description, f.description
    assert f.description.startswith("From training traces: ")
    assert "dataplane.pipeline_bubble" in f.related


def test_kineto_rank_idles_most_of_each_step(kineto):
    (rank,) = kineto.entities("rank")
    free, step = rank.metrics["free_ms"], rank.metrics["step_time_ms"]
    assert 160 < free < 180 and 215 < step < 230  # the fixture: free about 170 ms of a 222 ms step
    share = round(free * 100 / step, 6)
    d = diagnose(kineto)
    f = d.finding("dataplane.pipeline_bubble")
    assert f is not None, _reason(d, "dataplane.pipeline_bubble")
    assert f.severity == "critical" and f.subjects == [rank.id]
    ev = _evidence(f, rank.id)
    assert ev["step_idle_pct"] == share and ev["free_ms"] == free
    assert "bubble_ms" not in ev  # Kineto has no pipeline bubble
    assert f"free {free:.1f} ms of its {step:.1f} ms step (mean of 3 steps), {share:.1f} %" in f.description
    # no DataLoader spans in this trace: data loading cannot be judged, and the reason says why
    assert d.status("dataplane.data_loading_bottleneck") == "not_evaluated"
    reason = _reason(d, "dataplane.data_loading_bottleneck")
    assert "1 trace rank (kineto) without data_loading_ms: the Kineto trace holds no DataLoader spans" in reason


def test_msprof_ranks_free_time_and_bubble(msprof):
    ranks = msprof.entities("rank")
    assert len(ranks) == 8
    shares = {r.id: round((r.metrics["free_ms"] + r.metrics["bubble_ms"]) * 100
                          / (r.metrics["step_time_ms"] + r.metrics["bubble_ms"]), 6) for r in ranks}
    assert min(shares.values()) > 50  # every rank free more than half its step; Bubble 0 (no pipeline parallelism)
    d = diagnose(msprof)
    f = d.finding("dataplane.pipeline_bubble")
    assert f is not None and f.severity == "critical"
    assert sorted(f.subjects) == sorted(shares)
    for r in ranks:
        ev = _evidence(f, r.id)
        assert ev["step_idle_pct"] == shares[r.id] and ev["free_ms"] == r.metrics["free_ms"]
    most = max(ranks, key=lambda r: shares[r.id])
    assert f.description.startswith(f"From training traces: 8 ranks leave their accelerators idle for much of each "
                                    f"step: rank {most.attrs['rank']} ({most.id})"), f.description
    assert "+ bubble 0 ms" in next(e.note for e in f.evidence if e.metric == "step_idle_pct")
    # msprof-analyze's step trace has neither kernel busy shares nor data-loading times
    assert d.status("compute.accelerator_idle") == "not_evaluated"
    assert "8 trace ranks (msprof) without kernel_busy_pct" in _reason(d, "compute.accelerator_idle")
    assert d.status("dataplane.data_loading_bottleneck") == "not_evaluated"
    assert "8 trace ranks (msprof) without data_loading_ms: msprof-analyze's step trace has no data-loading time" \
        in _reason(d, "dataplane.data_loading_bottleneck")
