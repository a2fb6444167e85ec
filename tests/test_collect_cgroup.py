"""A busy process in a v1 cpu cgroup with a 0.1-core quota: the cgroup collector must see the
quota and the throttling, and link the process to its cgroup."""

from __future__ import annotations

import pytest

from cgroup_v1 import busy_in_quota_cgroup
from collectors.engine import run_window


@pytest.fixture
def quota_cgroup():
    with busy_in_quota_cgroup("witty-test") as found:
        yield found


def test_throttling_of_a_busy_process_in_a_quota_cgroup(quota_cgroup):
    group, busy = quota_cgroup
    g = run_window(1.5, 0.5, pids=[busy.pid], collectors=["process", "cgroup"])
    assert g.meta.collectors["cgroup"].status == "ok", g.meta.collectors["cgroup"]
    host = g.meta.hosts[0]
    cid = f"cgroup:{host}:v1:/{group.name}"
    cg = g.entity(cid)
    assert cg is not None, [e.id for e in g.entities("cgroup")]
    assert cg.attrs["version"] == "v1" and "cpu" in cg.attrs["controllers"]
    assert cg.metrics["cpu_quota_cores"] == 0.1
    assert cg.metrics["throttled_periods_pct"] > 20, cg.metrics
    assert cg.metrics["throttled_ms_per_s"] > 100, cg.metrics  # wants ~1000 ms/s, may run 100
    # cpuacct is a separate v1 hierarchy here (the process stays in its root), so the cgroup's own
    # CPU use may be absent; the process's is not
    proc = g.entity(f"process:{host}:{busy.pid}")
    assert proc.metrics["cpu_util_pct"] < 30 and proc.attrs["cgroup"] == f"/{group.name}"
    assert [t.id for _, t in g.neighbours(proc.id, "out", "in_cgroup")].count(cid) == 1
    # only the cgroups of the processes in scope are in the fragment
    assert all(g.neighbours(c.id, "in", "in_cgroup") for c in g.entities("cgroup"))
