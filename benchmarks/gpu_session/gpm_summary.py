"""gpm.sh's summary: per phase, what the load achieved, the GPU collector's status and GPM figures,
the NVML recording replayed through the collector, and whether memory.hbm_bandwidth_limit came.

    python3 benchmarks/gpu_session/gpm_summary.py OUT_DIR [PEAK_GBS]

PEAK_GBS is the board's HBM bandwidth (4800 for an H200 SXM): the load's own GB/s over it is what
GPM's hbm_bw_util_pct should be close to in the memory phase.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from witty_profiler.collectors.base import Context
from witty_profiler.collectors.gpu import GpuCollector
from witty_profiler.collectors.lib.nvml import RecordedNvml

GPM = ("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "tensor_hmma_active_pct", "hbm_bw_util_pct")


def figures(metrics: dict) -> str:
    return " ".join(f"{k} {metrics.get(k)}" for k in GPM)


def phase_lines(out: Path, phase: str, peak_gbs: float) -> list[str]:
    lines = []
    graph = json.loads((out / f"graph-gpm-{phase}.json").read_text())
    load = json.loads((out / f"gpm-{phase}.log").read_text().splitlines()[-1])
    status = graph["meta"]["collectors"].get("gpu", {})
    lines.append(f"[{phase}] load: {json.dumps(load)}")
    lines.append(f"[{phase}] gpu collector: {status.get('status')} {status.get('reason') or ''}".rstrip())
    for gpu in (e for e in graph["entities"] if e["type"] == "gpu"):
        m = gpu["metrics"]
        lines.append(f"[{phase}] {gpu['id']}: util_pct {m.get('util_pct')} mem_bw_util_pct "
                     f"{m.get('mem_bw_util_pct')} {figures(m)}")
        if phase == "tensor":
            lines.append(f"[tensor] expected tensor_active_pct > 30: "
                         f"{'yes' if (m.get('tensor_active_pct') or 0) > 30 else 'NO'}")
        if phase == "memory" and "gbytes_per_s" in load:
            share = 100 * load["gbytes_per_s"] / peak_gbs
            lines.append(f"[memory] the load's own bandwidth: {load['gbytes_per_s']} GB/s = {share:.1f} % of "
                         f"{peak_gbs:g} GB/s; GPM hbm_bw_util_pct {m.get('hbm_bw_util_pct')}")
    lines += replay_lines(out / f"nvml-gpm-{phase}.json", phase)
    return lines


def replay_lines(recording: Path, phase: str) -> list[str]:
    """The recording played back through the collector, with as many samples as it holds."""
    if not recording.exists():
        return [f"[{phase}] no NVML recording"]
    devices = json.loads(recording.read_text()).get("devices", [])
    c = GpuCollector(Context(host="replay"), nvml=RecordedNvml(recording))
    c.start()
    for _ in range(max((len(d.get("nvmlDeviceGetUtilizationRates", [])) for d in devices), default=2) - 2):
        c.sample()
    graph = c.finish()
    lines = [f"[{phase}] replayed recording: {gpu.id} {figures(gpu.metrics)}" for gpu in graph.entities("gpu")]
    calls = sorted({k for d in devices for k in d if "Gpm" in k or k == "migGpuInstanceIds"})
    lines.append(f"[{phase}] GPM calls recorded: {calls}")
    return lines


def main(argv: list[str]) -> int:
    out, peak_gbs = Path(argv[0]), float(argv[1]) if len(argv) > 1 else 4800.0
    for phase in ("tensor", "memory"):
        print("\n".join(phase_lines(out, phase, peak_gbs)))
    diagnosis = json.loads((out / "diagnosis-gpm-memory.json").read_text())
    found = {f["pattern"]: f for f in diagnosis["findings"]}
    hbm = found.get("memory.hbm_bandwidth_limit")
    print("[memory] memory.hbm_bandwidth_limit:", f"FOUND {hbm['severity']}: {hbm['description']}" if hbm
          else "not found")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
