"""A graph of this host, which has no GPU, NPU or RDMA device, says per collector why it saw none."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from witty_profiler.collectors.base import Context
from witty_profiler.collectors.gpu import GpuCollector
from witty_profiler.collectors.npu import NpuCollector
from witty_profiler.collectors.pci import PciCollector
from witty_profiler.collectors.rdma import RdmaCollector
from witty_profiler.topology import Graph, dumps_graph, loads_graph
from witty_profiler.topology.models import Meta

pytestmark = pytest.mark.live


def test_this_host_explains_missing_accelerators():
    if Path("/proc/driver/nvidia").exists() or shutil.which("npu-smi") or Path("/sys/class/infiniband").exists():
        pytest.skip("this host has accelerators or RDMA devices")
    ctx = Context(duration_s=0.2, interval_s=0.1)
    graph = Graph(Meta(hosts=[ctx.host], source="live"))
    for cls in (PciCollector, GpuCollector, NpuCollector, RdmaCollector):
        c = cls(ctx)
        c.start()
        c.sample()
        graph.merge(c.finish())
        graph.meta.collectors[c.name] = c.status

    back = loads_graph(dumps_graph(graph))  # the reasons survive the file format
    status = {name: (s.status, s.reason) for name, s in back.meta.collectors.items()}
    assert status["gpu"] == ("unavailable", "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver installed on this host")
    assert status["npu"] == ("unavailable", "npu-smi not found on PATH (no Ascend driver/toolbox installed)")
    assert status["rdma"][0] == "unavailable" and "/sys/class/infiniband does not exist" in status["rdma"][1]
    assert status["pci"] == ("ok", None)
    assert not back.entities("gpu") and not back.entities("npu") and not back.entities("rdma_port")
    # the PCI bus is there and holds no accelerator (no 3D/VGA controller, no processing accelerator)
    classes = {e.attrs["class"][:6] for e in back.entities("pci_device")}
    assert classes and not classes & {"0x0300", "0x0302", "0x1200"}
