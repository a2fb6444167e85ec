"""Cost of the accelerator and interconnect collectors on this machine.

PCI: `finish()` over a sysfs tree the size of an 8-GPU server (300 functions); RDMA: `sample()`
over eight ConnectX ports; GPU: one `sample()` of eight GPUs replayed from the HGX H100
recording (the collector's own work, not the driver's: NVML calls on real hardware cost more);
NPU: parsing an 8-NPU `npu-smi info` table (npu-smi itself takes about a second per call);
hccn: parsing the two `hccn_tool -stat -g` readings of eight NPU RoCE ports into rates (the
tool's own time on the device not included).

Each is timed in CPU time against a baseline in the same rounds, interleaved (order reversed every
other round): PCI against reading every file of the same sysfs tree once (os.walk, os.open/os.read);
RDMA against reading the ports' 45 counter files each; GPU against the same replay without GPM; the
NPU table and the hccn readings against splitting the same text into lines and fields. A figure is
the median of the per-round ratios with their range, beside the baseline's own CPU time.

    python3 benchmarks/accelerators.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from sysfs_tree import add_pci  # noqa: E402
from test_rdma import add_hca  # noqa: E402
from timing import load, machine, ratio  # noqa: E402

from witty_profiler.collectors.base import Context  # noqa: E402
from witty_profiler.collectors.gpu import GpuCollector  # noqa: E402
from witty_profiler.collectors.lib.hccn import parse_stat, stat_rates  # noqa: E402
from witty_profiler.collectors.lib.nvml import RecordedNvml  # noqa: E402
from witty_profiler.collectors.npu import parse_info  # noqa: E402
from witty_profiler.collectors.pci import PciCollector  # noqa: E402
from witty_profiler.collectors.rdma import RdmaCollector  # noqa: E402


def read_files(paths: list[str]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.read(fd, 4096)
        finally:
            os.close(fd)


def files_under(root: Path, part: str = "") -> list[str]:
    return [os.path.join(d, f) for d, _, names in os.walk(root) if part in d for f in names]


def repeated(fn, n: int):
    def run() -> None:
        for _ in range(n):
            fn()
    return run


def split_fields(texts: list[str]) -> None:
    for text in texts:
        [line.split() for line in text.splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    rounds = ap.parse_args().rounds
    cpu = time.process_time
    print(f"{machine()}; {rounds} interleaved rounds, CPU time")
    with tempfile.TemporaryDirectory() as tmp:
        sys_root = Path(tmp) / "sys"
        for i in range(300):  # 30 root complexes of 10 functions behind a switch
            rc = i // 10
            add_pci(sys_root, f"pci0000:{rc:02x}", [f"0000:{rc:02x}:01.0", f"0000:{rc + 0x40:02x}:00.0"],
                    f"0000:{rc + 0x80:02x}:{i % 10:02x}.0", cls="0x030200", numa=rc % 2, cpulist="0-63")
        pci = ratio(lambda: PciCollector(Context(host="b", sys=sys_root)).finish(),
                    lambda: read_files(files_under(sys_root)), rounds, cpu)

        ib_root = Path(tmp) / "ib"
        for i in range(8):
            add_hca(ib_root, f"pci0000:{i:02x}", [f"0000:{i:02x}:01.0"], f"0000:{i + 0x10:02x}:00.0", f"mlx5_{i}",
                    numa=i // 4, rate="400 Gb/sec (4X NDR)", link_layer="InfiniBand", netdev=f"ibp{i}s0", roce=False)
        rdma = RdmaCollector(Context(host="b", sys=ib_root))
        rdma.start()
        counters = files_under(ib_root, "counters")
        rdma_sample = ratio(repeated(rdma.sample, 50), repeated(lambda: read_files(counters), 50), rounds, cpu)

    fixture = ROOT / "tests" / "fixtures" / "gpu" / "hgx-h100-8gpu.json"
    gpu = GpuCollector(Context(host="b", sys=Path(tmp)), nvml=RecordedNvml(fixture))
    gpu.start()
    gpm = gpu.gpm

    def without_gpm() -> None:  # the same replay without the GPM pairs: what GPM adds per sample
        gpu.gpm = None
        try:
            gpu.sample()
        finally:
            gpu.gpm = gpm
    gpu_sample = ratio(repeated(gpu.sample, 50), repeated(without_gpm, 50), rounds, cpu)

    table = (ROOT / "tests" / "fixtures" / "npu" / "910b" / "info.txt").read_text()
    npu_parse = ratio(repeated(lambda: parse_info(table), 200), repeated(lambda: split_fields([table]), 200),
                      rounds, cpu)

    hccn = ROOT / "tests" / "fixtures" / "npu" / "910b" / "hccn"
    stats = [((hccn / f"i_{i}_stat_g.1.txt").read_text(), (hccn / f"i_{i}_stat_g.2.txt").read_text()) for i in range(8)]
    texts = [t for pair in stats for t in pair]
    hccn_rates = ratio(repeated(lambda: [stat_rates({"t": 0.0, "stat": parse_stat(a)}, {"t": 10.0, "stat": parse_stat(b)})
                                         for a, b in stats], 200),
                       repeated(lambda: split_fields(texts), 200), rounds, cpu)

    print("| what | against | ratio, median (min-max) | baseline's CPU time per call |")
    print("|---|---|---|---|")
    print(f"| pci `finish()`, 300 PCI functions | reading every file of the tree once | {pci.text()} | "
          f"{pci.base_text()} |")
    print(f"| rdma `sample()`, 8 ports (21 counters + 24 hw_counters each) | reading the 360 counter files | "
          f"{rdma_sample.text()} | {rdma_sample.base_text(1000 / 50, digits=3)} |")
    print(f"| gpu `sample()`, 8 GPUs replayed with GPM (collector side only) | the same without GPM | "
          f"{gpu_sample.text()} | {gpu_sample.base_text(1000 / 50, digits=3)} |")
    print(f"| npu `parse_info`, 8-NPU table | splitting it into lines and fields | {npu_parse.text()} | "
          f"{npu_parse.base_text(1000 / 200, digits=4)} |")
    print(f"| hccn `-stat` parse and rates, 8 NPU ports x 2 readings | splitting them into lines and fields | "
          f"{hccn_rates.text()} | {hccn_rates.base_text(1000 / 200, digits=4)} |")
    print(f"load average at the end: {load()}")


if __name__ == "__main__":
    main()
