"""node_exporter in the Prometheus source: per-CPU time shares, NIC facts (operstate, speed, MTU,
physical or not) and the scrape interval as the default step.

Live: the real Prometheus and node_exporters of tests/prometheus_stack.py; the graph's values are
checked against Prometheus's own answers and the namespaces' sysfs. Without an engine: NIC facts of
three hosts, one with its link down, make network.odd_host name that host.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.prometheus_stack import running_stack
from witty_profiler import diagnose
from witty_profiler.sources.prometheus import collect_window, nic_attrs, parse_duration
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.models import Meta

WINDOW_S = 10


# -- without an engine -----------------------------------------------------------------------
def test_prometheus_durations():
    assert parse_duration("15s") == 15 and parse_duration("1m30s") == 90 and parse_duration("500ms") == 0.5
    assert parse_duration("") is None and parse_duration("15") is None and parse_duration(None) is None


def test_nic_attrs_tell_physical_from_virtual():
    physical = nic_attrs("ens1f0", {"operstate": "up", "mtu_bytes": 9000.0, "address_assign_type": 0.0,
                                    "protocol_type": 1.0})
    assert physical == {"name": "ens1f0", "operstate": "up", "mtu": 9000, "virtual": False}
    assert nic_attrs("veth0", {"address_assign_type": 1.0, "protocol_type": 1.0})["virtual"] is True  # random MAC
    assert nic_attrs("lo", {"address_assign_type": 0.0, "protocol_type": 772.0})["virtual"] is True
    assert "virtual" not in nic_attrs("eth0", {})  # node_exporter without the netclass series: unknown


def test_odd_host_compares_prometheus_nic_facts():
    g = Graph(Meta(hosts=["n1", "n2", "n3"], source="prometheus"))
    for host, state in (("n1", "up"), ("n2", "up"), ("n3", "down")):
        g.entity_of("host", f"host:{host}", {"name": host})
        g.entity_of("nic", f"nic:{host}:ens1f0", nic_attrs("ens1f0", {"operstate": state, "mtu_bytes": 9000.0,
                                                                        "address_assign_type": 0.0}),
                    {"speed_mbps": 100000.0, "rx_errors_per_s": 0.0})
        g.entity_of("nic", f"nic:{host}:veth{host}", nic_attrs(f"veth{host}", {"operstate": "up",
                                                                                 "address_assign_type": 1.0}))
    odd = diagnose(g).finding("network.odd_host")
    assert odd is not None and odd.subjects == ["host:n3"]
    assert [e.metric for e in odd.evidence if e.metric.startswith("nic ")] == ["nic ens1f0 operstate"]


# -- with real engines -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with running_stack(tmp_path_factory.mktemp("prometheus-node"), WINDOW_S + 4, prefix="wpn") as s:
        yield s


@pytest.fixture(scope="module")
def window(stack):
    end = float(int(time.time()) - 2)
    return end - WINDOW_S, end, collect_window(stack.url, end - WINDOW_S, end, match='{job="node"}')  # no step


def _share(stack, modes: str, start: float, end: float) -> dict[tuple[str, str], float]:
    """Prometheus's own answer: each CPU's share (%) of time in `modes` over [start, end]."""
    part = f'node_cpu_seconds_total{{job="node", mode=~"{modes}"}}'
    total = 'node_cpu_seconds_total{job="node"}'
    out = {}
    for q, sign in ((part, 1), (total, 0)):
        query = f"sum by (instance, cpu) ({q}) - sum by (instance, cpu) ({q} offset {end - start:.0f}s)"
        data = stack.api("query", query=query, time=f"{end:.3f}")["result"]
        for r in data:
            key = (r["metric"]["instance"].split(":")[0], r["metric"]["cpu"])
            out.setdefault(key, [0.0, 0.0])[0 if sign else 1] = float(r["value"][1])
    return {k: a / b * 100 for k, (a, b) in out.items() if b > 0}


@pytest.mark.live
@pytest.mark.slow
def test_scrape_interval_is_the_default_step(stack, window):
    _, _, w = window
    assert w.graph.meta.extra["scrape_interval_s"] == 1.0  # the stack scrapes every second
    assert w.graph.meta.interval_s == 1.0
    assert all(win["duration_s"] == WINDOW_S for win in w.graph.meta.extra["windows"].values())


@pytest.mark.live
@pytest.mark.slow
def test_per_cpu_shares_equal_prometheus_own_answers(stack, window):
    start, end, w = window
    g = w.graph
    for metric, modes in (("cpu_user_pct", "user|nice"), ("cpu_system_pct", "system|irq|softirq"),
                          ("cpu_softirq_pct", "softirq"), ("cpu_iowait_pct", "iowait"), ("cpu_steal_pct", "steal"),
                          ("cpu_util_pct", "user|nice|system|irq|softirq")):
        expected = _share(stack, modes, start, end)
        assert expected, metric
        for (host, cpu), share in expected.items():
            m = g.entity(f"cpu:{host}:{cpu}").metrics
            assert m[metric] == pytest.approx(share, abs=0.02), (host, cpu, metric)
            assert m[f"{metric}_max"] >= m[metric] - 0.01
    some = g.entity(f"cpu:{stack.hosts[0]}:0").metrics
    assert some["cpu_util_pct"] >= some["cpu_system_pct"] >= some["cpu_softirq_pct"]


@pytest.mark.live
@pytest.mark.slow
def test_nic_facts_equal_the_hosts_sysfs(stack, window):
    g = window[2].graph
    for i, (host, ns) in enumerate(zip(stack.hosts, stack.namespaces), 1):
        for dev in ("eth0", "eth1"):
            def sysfs(name: str) -> str:
                return subprocess.run(["ip", "netns", "exec", ns, "cat", f"/sys/class/net/{dev}/{name}"],
                                      capture_output=True, text=True, timeout=10).stdout.strip()
            nic = g.entity(f"nic:{host}:{dev}")
            assert nic.attrs["operstate"] == sysfs("operstate"), (host, dev)
            assert nic.attrs["mtu"] == int(sysfs("mtu"))
            assert nic.attrs["virtual"] is (sysfs("addr_assign_type") != "0")  # veth pairs: a random MAC
            speed = sysfs("speed")
            if speed.lstrip("-").isdigit() and int(speed) > 0:
                assert nic.metrics["speed_mbps"] == int(speed)
    # host 3's data link has its far end down: its eth1 is not up, the peers' are
    states = {h: g.entity(f"nic:{h}:eth1").attrs["operstate"] for h in stack.hosts}
    assert states[stack.hosts[2]] != "up" and all(states[h] == "up" for h in stack.hosts[:2])
