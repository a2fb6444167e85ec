"""RDMA queue pairs: `rdma -j res show qp` recorded at both ends of a window on a two-HCA InfiniBand
host running two NCCL ranks, played by a stand-in `rdma`; and the real iproute2 `rdma` on this host,
whose kernel has no RDMA netlink."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from witty_profiler.collectors.base import Context
from witty_profiler.collectors.rdma_qp import RdmaQpCollector, parse_qps

from graph_checks import assert_known_names

FIXTURES = Path(__file__).parent / "fixtures" / "rdma"


def sys_with_hcas(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    for dev in ("mlx5_0", "mlx5_1"):
        (root / "class" / "infiniband" / dev).mkdir(parents=True, exist_ok=True)
    return root


@pytest.fixture()
def recorded(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    calls.mkdir()
    monkeypatch.setenv("RDMA_FIXTURE", str(FIXTURES))
    monkeypatch.setenv("RDMA_CALLS", str(calls))
    return str(FIXTURES / "rdma")


def window(tmp_path: Path, rdma: str | None):
    c = RdmaQpCollector(Context(host="n1", sys=sys_with_hcas(tmp_path)), rdma=rdma)
    c.start()
    return c, c.finish()


def test_parse_qps_real_format():
    qps = parse_qps((FIXTURES / "j_res_show_qp.2.json").read_text())
    assert len(qps) == 22
    smi = qps[0]
    assert smi == {"ifindex": 0, "ifname": "mlx5_0", "port": 1, "lqpn": 0, "type": "SMI", "state": "RTS",
                   "sq-psn": 0, "comm": "ib_core"}  # a kernel QP: comm, no pid
    rc = next(q for q in qps if q.get("pid") == 52002 and q["state"] == "ERR")
    assert rc["type"] == "RC" and rc["rqpn"] == rc["lqpn"] - 0x1c2 + 0x2d6 and rc["comm"] == "pt_main_thread"
    raw = json.loads((FIXTURES / "j_res_show_qp.2.json").read_text())
    assert [(q["lqpn"], q["state"]) for q in raw if "port" not in q] == [(0x1cc, "RESET")]
    assert parse_qps("[]\n") == [] and parse_qps("") == []
    with pytest.raises(ValueError):
        parse_qps('{"ifname": "mlx5_0"}')


def test_queue_pairs_per_port_and_process(tmp_path, recorded):
    c, g = window(tmp_path, recorded)
    assert c.status.status == "ok"
    assert_known_names(g)
    p0, p1 = g.entity("rdma_port:n1:mlx5_0:1"), g.entity("rdma_port:n1:mlx5_1:1")
    assert p0.metrics == {"qps": 11, "qps_error": 0, "qps_created_total": 0, "qps_destroyed_total": 0}
    assert p0.attrs["kernel_qps"] == {"ib_core": 2, "ib_ipoib": 1} and p0.attrs["qp_states"] == {"RTS": 11}
    # rank 1 lost two connections (ERR, SQE) and made two new QPs in their place
    assert p1.metrics == {"qps": 11, "qps_error": 2, "qps_created_total": 2, "qps_destroyed_total": 2}
    assert p1.attrs["qp_states"] == {"ERR": 1, "RTS": 9, "SQE": 1}
    uses = {(e.source, e.target): e for e in g.edges("uses_rdma")}
    assert set(uses) == {("process:n1:52001", p0.id), ("process:n1:52002", p1.id)}
    r1 = uses[("process:n1:52002", p1.id)]
    assert r1.metrics == {"qps": 8, "qps_error": 2}
    assert r1.attrs == {"pid": 52002, "comm": "pt_main_thread", "qp_states": {"ERR": 1, "RTS": 6, "SQE": 1},
                        "qp_types": {"RC": 8}}
    # the QP not yet bound to a port (RESET, rdma prints no port) belongs to no port: left out
    assert {e.id for e in g.entities("rdma_port")} == {p0.id, p1.id}


def test_one_shot_round_has_no_churn(tmp_path, recorded):
    c = RdmaQpCollector(Context(host="n1", sys=sys_with_hcas(tmp_path)), rdma=recorded)
    g = c.finish()
    assert g.entity("rdma_port:n1:mlx5_0:1").metrics["qps_created_total"] == 0


def test_unavailable_reasons(tmp_path, monkeypatch):
    c = RdmaQpCollector(Context(host="n1", sys=tmp_path / "empty"), rdma="/bin/true")
    c.start()
    assert len(c.finish()) == 0 and c.status.status == "unavailable"
    assert c.status.reason.startswith("no RDMA devices: ") and "class/infiniband does not exist" in c.status.reason
    monkeypatch.setenv("PATH", str(tmp_path))
    c = RdmaQpCollector(Context(host="n1", sys=sys_with_hcas(tmp_path)))
    c.finish()
    assert c.status.reason == "rdma (iproute2) not found on PATH"
    bad = tmp_path / "rdma-bad"
    bad.write_text("#!/bin/sh\necho '{\"not\": \"a list\"}'\n")
    bad.chmod(0o755)
    c = RdmaQpCollector(Context(host="n1", sys=sys_with_hcas(tmp_path)), rdma=str(bad))
    c.finish()
    assert c.status.reason == "rdma -j res show qp printed what this version cannot read: expected a JSON array"


@pytest.mark.live
def test_real_rdma_tool_on_this_host(tmp_path):
    """The real iproute2 `rdma` here: this machine's kernel has no RDMA subsystem, so the netlink socket
    cannot be opened; the collector says so, in the tool's words."""
    rdma = shutil.which("rdma")
    assert rdma, "iproute2's rdma is installed with iproute2 (.ci/run installs iproute2)"
    if Path("/sys/class/infiniband").is_dir():
        pytest.skip("this host has RDMA devices")
    c, g = window(tmp_path, rdma)
    real = subprocess.run([rdma, "-j", "res", "show", "qp"], capture_output=True, text=True)
    if real.returncode == 0:  # a kernel with RDMA netlink but no device: an empty list
        assert c.status.status == "ok" and json.loads(real.stdout) == [] and len(g) == 0
    else:
        assert len(g) == 0 and c.status.status == "unavailable"
        assert c.status.reason == f"rdma -j res show qp exited {real.returncode}: {real.stderr.strip()}"
        assert "NETLINK_RDMA" in c.status.reason  # iproute2: "Failed to open NETLINK_RDMA socket"
    # and on /sys as it is: no devices, said before running the tool
    c = RdmaQpCollector(Context(host="n1"))
    c.finish()
    assert c.status.reason.startswith("no RDMA devices: /sys/class/infiniband does not exist")


def test_recordings_are_what_rdma_prints():
    """One JSON array per call on one line, keys in the order iproute2 prints them."""
    order = ["ifindex", "ifname", "port", "lqpn", "rqpn", "type", "state", "rq-psn", "sq-psn", "path-mig-state",
             "pdn", "pid", "comm"]
    for path in sorted(FIXTURES.glob("j_res_show_qp.*.json")):
        text = path.read_text()
        assert text.count("\n") == 1 and text.startswith("[{")
        for q in json.loads(text):
            keys = list(q)
            assert keys == [k for k in order if k in q]


def test_queue_pairs_in_error_are_a_finding(tmp_path, recorded):
    from witty_profiler.diagnosis import diagnose

    _, g = window(tmp_path, recorded)
    f = diagnose(g).finding("network.rdma_bottleneck")
    assert f is not None and f.severity == "warning" and f.subjects == ["rdma_port:n1:mlx5_1:1"]
    assert "mlx5_1:1 holding 2 queue pairs in an error state" in f.description
    assert [(e.metric, e.value) for e in f.evidence] == [("qps_error", 2)]


def test_network_view_shows_queue_pairs(tmp_path, recorded):
    from witty_profiler.converters import render_view

    _, g = window(tmp_path, recorded)
    lines = render_view(g, "network").text.splitlines()
    header = next(line for line in lines if "qps_err" in line)
    assert header.split()[-2:] == ["qps", "qps_err"]
    assert next(line for line in lines if line.startswith("rdma_port:n1:mlx5_1:1")).split()[-2:] == ["11", "2"]
