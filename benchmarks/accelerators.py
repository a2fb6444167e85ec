"""Cost of the accelerator and interconnect collectors on this machine.

PCI: `finish()` over a sysfs tree the size of an 8-GPU server (300 functions); RDMA: `sample()`
over eight ConnectX ports; GPU: one `sample()` of eight GPUs replayed from the HGX H100
recording (the collector's own work, not the driver's: NVML calls on real hardware cost more);
NPU: parsing an 8-NPU `npu-smi info` table (npu-smi itself takes about a second per call);
hccn: parsing the two `hccn_tool -stat -g` readings of eight NPU RoCE ports into rates (the
tool's own time on the device not included).

    python3 benchmarks/accelerators.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from sysfs_tree import add_pci  # noqa: E402
from test_rdma import add_hca  # noqa: E402
from timing import cpu_ms  # noqa: E402

from witty_profiler.collectors.base import Context  # noqa: E402
from witty_profiler.collectors.gpu import GpuCollector  # noqa: E402
from witty_profiler.collectors.lib.hccn import parse_stat, stat_rates  # noqa: E402
from witty_profiler.collectors.lib.nvml import RecordedNvml  # noqa: E402
from witty_profiler.collectors.npu import parse_info  # noqa: E402
from witty_profiler.collectors.pci import PciCollector  # noqa: E402
from witty_profiler.collectors.rdma import RdmaCollector  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sys_root = Path(tmp) / "sys"
        for i in range(300):  # 30 root complexes of 10 functions behind a switch
            rc = i // 10
            add_pci(sys_root, f"pci0000:{rc:02x}", [f"0000:{rc:02x}:01.0", f"0000:{rc + 0x40:02x}:00.0"],
                    f"0000:{rc + 0x80:02x}:{i % 10:02x}.0", cls="0x030200", numa=rc % 2, cpulist="0-63")
        pci = cpu_ms(lambda: PciCollector(Context(host="b", sys=sys_root)).finish(), 7)

        ib_root = Path(tmp) / "ib"
        for i in range(8):
            add_hca(ib_root, f"pci0000:{i:02x}", [f"0000:{i:02x}:01.0"], f"0000:{i + 0x10:02x}:00.0", f"mlx5_{i}",
                    numa=i // 4, rate="400 Gb/sec (4X NDR)", link_layer="InfiniBand", netdev=f"ibp{i}s0", roce=False)
        rdma = RdmaCollector(Context(host="b", sys=ib_root))
        rdma.start()
        rdma_sample = cpu_ms(rdma.sample, 50)

    fixture = ROOT / "tests" / "fixtures" / "gpu" / "hgx-h100-8gpu.json"
    gpu = GpuCollector(Context(host="b", sys=Path(tmp)), nvml=RecordedNvml(fixture))
    gpu.start()
    gpu_sample = cpu_ms(gpu.sample, 50)
    gpm, gpu.gpm = gpu.gpm, None  # the same replay without the GPM pairs: what GPM adds per sample
    gpu_sample_no_gpm = cpu_ms(gpu.sample, 50)
    gpu.gpm = gpm

    table = (ROOT / "tests" / "fixtures" / "npu" / "910b" / "info.txt").read_text()
    npu_parse = cpu_ms(lambda: parse_info(table), 200)

    hccn = ROOT / "tests" / "fixtures" / "npu" / "910b" / "hccn"
    stats = [((hccn / f"i_{i}_stat_g.1.txt").read_text(), (hccn / f"i_{i}_stat_g.2.txt").read_text()) for i in range(8)]
    hccn_rates = cpu_ms(lambda: [stat_rates({"t": 0.0, "stat": parse_stat(a)}, {"t": 10.0, "stat": parse_stat(b)})
                                 for a, b in stats], 200)

    print("| what | CPU per call |")
    print("|---|---|")
    print(f"| pci `finish()`, 300 PCI functions | {pci:.1f} ms |")
    print(f"| rdma `sample()`, 8 ports (21 counters + 24 hw_counters each) | {rdma_sample:.2f} ms |")
    print(f"| gpu `sample()`, 8 GPUs replayed (collector side only) | {gpu_sample:.3f} ms |")
    print(f"| the same without GPM (which adds a sample and a 10-metric nvmlGpmMetricsGet per GPU) | "
          f"{gpu_sample_no_gpm:.3f} ms |")
    print(f"| npu `parse_info`, 8-NPU table | {npu_parse:.3f} ms |")
    print(f"| hccn `-stat` parse and rates, 8 NPU ports x 2 readings | {hccn_rates:.3f} ms |")


if __name__ == "__main__":
    main()
