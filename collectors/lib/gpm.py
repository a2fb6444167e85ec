"""NVML GPU Performance Monitoring (GPM): what the GPU's own performance counters say about a window.

NVML's plain utilisation is the share of time *a* kernel ran, however few SMs it used, and its
memory figure is the share of time memory was touched. GPM (Hopper and later GPUs) reads the
hardware counters instead: the share of SMs busy, warp occupancy, tensor-pipe activity, DRAM
bandwidth as a share of peak, and NVLink and PCIe bytes per second measured over the whole
interval rather than in a 20 ms snapshot.

GPM works on pairs of samples: nvmlGpmSampleGet snapshots the counters and nvmlGpmMetricsGet turns
two snapshots into values over the time between them. One sample is taken at the start of the
window and one at every interval, so every interval gives one value of each metric (stored as the
window's mean, p95 and max like the other gauges). A GPU in MIG mode is also sampled per GPU
instance (nvmlGpmMigSampleGet). NVML has no per-process GPM sample: per-process figures stay
what nvmlDeviceGetComputeRunningProcesses says (memory per process).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from witty_profiler.topology.vocabulary import M
from witty_profiler.topology.windowstats import gauge

MiB = 1024 * 1024
# NVML_GPM_METRIC_* ids (nvml.h; tests check them against nvidia-ml-py) -> our metric, scale to its unit
GPM_METRICS: dict[int, tuple[str, float]] = {
    2: (M.SM_ACTIVE_PCT, 1),  # SM_UTIL: % of SMs busy
    3: (M.SM_OCCUPANCY_PCT, 1),  # SM_OCCUPANCY: % of the warps an SM can hold
    5: (M.TENSOR_ACTIVE_PCT, 1),  # ANY_TENSOR_UTIL
    6: (M.TENSOR_DFMA_ACTIVE_PCT, 1),  # DFMA_TENSOR_UTIL (FP64)
    7: (M.TENSOR_HMMA_ACTIVE_PCT, 1),  # HMMA_TENSOR_UTIL (FP16/BF16)
    10: (M.HBM_BW_UTIL_PCT, 1),  # DRAM_BW_UTIL: % of peak DRAM bandwidth
    20: (M.PCIE_TX_BYTES_PER_S, MiB),  # PCIE_TX_PER_SEC, MiB/s
    21: (M.PCIE_RX_BYTES_PER_S, MiB),  # PCIE_RX_PER_SEC
    60: (M.NVLINK_RX_BYTES_PER_S, MiB),  # NVLINK_TOTAL_RX_PER_SEC, every link
    61: (M.NVLINK_TX_BYTES_PER_S, MiB),  # NVLINK_TOTAL_TX_PER_SEC
}
METRIC_IDS = sorted(GPM_METRICS)
ARCH_HOPPER = 9  # nvmlDeviceArchitecture_t: GPM starts with Hopper


class GpmSampler:
    """GPM over one window for the GPUs of one NVML session (the GPU collector's)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.targets: dict[tuple[int, int | None], int | None] = {}  # (gpu index, GPU instance) -> last sample
        self.values: dict[tuple[int, int | None], dict[str, list]] = defaultdict(lambda: defaultdict(list))
        self.unsupported: dict[str, list[str]] = defaultdict(list)  # why -> GPU names
        self.failure: str | None = None

    def start(self, devices: list[dict]) -> None:
        """Which GPUs (and MIG instances) can be sampled; samples start with the first `sample`."""
        for d in devices:
            why = self._unsupported(d)
            if why:
                self.unsupported[why].append(d["name"])
                continue
            self.targets[(d["index"], None)] = None
            for gi in self._mig_instances(d["index"]):
                self.targets[(d["index"], gi)] = None

    def sample(self) -> None:
        p = self.nvml.pynvml
        for key, last in list(self.targets.items()):
            if key not in self.targets:
                continue  # dropped while sampling another
            index, gi = key
            try:
                number = self.nvml.gpm_sample(index, gi)
            except p.NVMLError as e:
                if gi is None and self.instances(index):
                    self._drop(key, None)  # a MIG GPU is read per instance; the whole GPU may not answer
                else:
                    self._drop(key, f"nvmlGpm{'Mig' if gi is not None else ''}SampleGet failed on GPU {index}: {e}")
                continue
            self.targets[key] = number
            if last is None:
                continue
            try:
                answers = self.nvml.gpm_metrics(index, last, number, METRIC_IDS, gi)
            except p.NVMLError as e:
                answers = []
                if getattr(e, "value", None) == p.NVML_ERROR_FUNCTION_NOT_FOUND:
                    for other in list(self.targets):  # no GPU of this driver will answer: stop sampling
                        self._drop(other, "the NVIDIA driver lacks nvmlGpmMetricsGet")
                    return
                self.failure = f"nvmlGpmMetricsGet failed on GPU {index}: {e}"
            finally:
                self.nvml.gpm_release(last)
            for a in answers:
                if a.nvmlReturn == 0 and a.metricId in GPM_METRICS and a.value is not None:
                    name, scale = GPM_METRICS[a.metricId]
                    self.values[key][name].append(a.value * scale)

    def close(self) -> None:
        for number in self.targets.values():
            if number is not None:
                self.nvml.gpm_release(number)
        self.targets = dict.fromkeys(self.targets)

    def metrics(self, index: int, gpu_instance: int | None = None) -> dict[str, float]:
        """Window mean, p95 and max of every GPM metric the GPU (or instance) answered."""
        out: dict[str, float] = {}
        for name, series in self.values.get((index, gpu_instance), {}).items():
            out.update(gauge(name, series, 1 if name.endswith("_per_s") else 2))
        return out

    def instances(self, index: int) -> list[int]:
        return sorted(gi for i, gi in self.targets if i == index and gi is not None)

    def reason(self) -> str | None:
        """Why some or all GPUs have no GPM metrics; None when every GPU has them."""
        parts = [why.replace("{name}", _names(names)) for why, names in sorted(self.unsupported.items())]
        if self.failure:
            parts.append(self.failure)
        if not parts:
            return None
        return "; ".join(parts) + ": SM activity and occupancy, tensor-pipe activity and HBM bandwidth share left out"

    # -- support --------------------------------------------------------------------------
    def _unsupported(self, d: dict) -> str | None:
        """Why GPM cannot be read on this GPU ('{name}' stands for the GPU names), or None."""
        p = self.nvml.pynvml
        try:
            supported = bool(self.nvml.call("nvmlGpmQueryDeviceSupport", d["index"]).isSupportedDevice)
        except p.NVMLError as e:
            code = getattr(e, "value", None)
            if code == p.NVML_ERROR_FUNCTION_NOT_FOUND:
                return f"the NVIDIA driver ({self._driver()}) lacks nvmlGpmQueryDeviceSupport, so no GPM on {{name}}"
            if code != p.NVML_ERROR_NOT_SUPPORTED:
                return f"GPM support query failed on {{name}}: {e}"
            supported = False
        if supported:
            return None
        try:
            arch = self.nvml.call("nvmlDeviceGetArchitecture", d["index"])
        except p.NVMLError:
            arch = None
        era = " (pre-Hopper)" if isinstance(arch, int) and arch < ARCH_HOPPER else ""
        return "GPM not supported on {name}" + era

    def _mig_instances(self, index: int) -> list[int]:
        p = self.nvml.pynvml
        try:
            current, _pending = self.nvml.call("nvmlDeviceGetMigMode", index)
        except (p.NVMLError, TypeError, ValueError):
            return []  # not MIG capable
        if current != 1:
            return []
        try:
            return list(self.nvml.mig_instances(index))
        except p.NVMLError:
            return []

    def _driver(self) -> str:
        try:
            version = self.nvml.system("nvmlSystemGetDriverVersion")
        except self.nvml.pynvml.NVMLError:
            return "version unknown"
        return version.decode() if isinstance(version, bytes) else str(version)

    def _drop(self, key: tuple[int, int | None], why: str | None) -> None:
        last = self.targets.pop(key, None)
        if last is not None:
            self.nvml.gpm_release(last)
        if why:
            self.failure = why


def _names(names: list[str]) -> str:
    """'2x NVIDIA L4' or 'NVIDIA A100-SXM4-80GB, NVIDIA L4'."""
    kinds = sorted(set(names))
    return ", ".join(f"{names.count(k)}x {k}" if names.count(k) > 1 else k for k in kinds)
