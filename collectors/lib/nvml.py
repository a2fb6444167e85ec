"""The NVML calls the GPU collector makes, behind one tiny interface with two implementations.

`LiveNvml` calls nvidia-ml-py (`pynvml`) on this host's driver. `RecordedNvml` answers the same
calls from a JSON recording: per device, per call (``"nvmlDeviceGetClockInfo(1)"`` with its
arguments), the list of successive answers in the shapes nvidia-ml-py returns (structs as
objects with the same field names, lists of structs, ints, strings). An answer
``{"nvml_error": "NVML_ERROR_NOT_SUPPORTED"}`` raises that NVML error; a call that the recording
does not hold raises NVML_ERROR_NOT_SUPPORTED, as a driver does for a feature a device lacks.
XID critical-error events are recorded under ``"xid_events"``: per drain, [device index, XID] pairs.
GPM (GPU Performance Monitoring) samples are opaque driver buffers: `LiveNvml` keeps them and hands
out a number instead, so that a recording holds, per device, the numbers ``"nvmlGpmSampleGet"``
(``"nvmlGpmMigSampleGet(GI)"`` for a MIG GPU instance) answered and, under
``"nvmlGpmMetricsGet([ids])"``, the metric structs (`metricId`, `nvmlReturn`, `value`, `metricInfo`)
each pair of samples gave; ``"migGpuInstanceIds"`` lists a MIG GPU's instances.
`RecordingNvml` wraps either and writes down every answer in that format, so that a window on a
real GPU host becomes a recording the tests replay (``python3 -m benchmarks.record_nvml``).
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import math
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any


class NvmlUnavailable(Exception):
    """NVML cannot be used on this host; the message says why, for a person to act on."""


NVML_LIBRARY = "libnvidia-ml.so.1"  # what nvidia-ml-py loads on Linux
LIBRARY_NOT_FOUND = f"NVML library not found ({NVML_LIBRARY}): no NVIDIA driver installed on this host"
NOT_INSTALLED = "nvidia-ml-py (pynvml) is not installed"


def _pynvml():
    try:
        import pynvml
    except ImportError as e:  # the package is a dependency, but an install may lack it
        raise NvmlUnavailable(NOT_INSTALLED) from e
    return pynvml


def _check_library() -> None:
    """A host without the driver's library is told so before nvidia-ml-py is imported: that import (7-12 ms)
    was most of what the GPU collector cost such a host. The reasons are the ones the import and nvmlInit give,
    in the same order."""
    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        if importlib.util.find_spec("pynvml") is None:
            raise NvmlUnavailable(NOT_INSTALLED) from None
        raise NvmlUnavailable(LIBRARY_NOT_FOUND) from None


def unavailable_reason(error: Exception) -> str:
    pynvml = _pynvml()
    code = getattr(error, "value", None)
    if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return LIBRARY_NOT_FOUND
    if code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return "NVIDIA driver not loaded (nvidia kernel module missing)"
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return "no permission to open /dev/nvidia* for NVML"
    return f"NVML initialisation failed: {error}"


class LiveNvml:
    def __init__(self) -> None:
        _check_library()
        self.pynvml = _pynvml()
        try:
            self.pynvml.nvmlInit()
        except self.pynvml.NVMLError as e:
            raise NvmlUnavailable(unavailable_reason(e)) from e
        self._handles: dict[int, Any] = {}
        self._events: Any = None
        self._gpm_samples: dict[int, Any] = {}  # number handed out -> nvmlGpmSample_t
        self._gpm_next = 0

    def system(self, fn: str) -> Any:
        return getattr(self.pynvml, fn)()

    def call(self, fn: str, index: int, *args: Any) -> Any:
        return getattr(self.pynvml, fn)(self._handle(index), *args)

    def common_ancestor(self, a: int, b: int) -> int:
        return self.pynvml.nvmlDeviceGetTopologyCommonAncestor(self._handle(a), self._handle(b))

    def xid_events(self, indices: list[int]) -> list[tuple[int, int]]:
        """(device index, XID) of the critical errors since the last call; registers on first use."""
        p = self.pynvml
        if self._events is None:
            self._events = p.nvmlEventSetCreate()
            for i in indices:
                try:
                    p.nvmlDeviceRegisterEvents(self._handle(i), p.nvmlEventTypeXidCriticalError, self._events)
                except p.NVMLError:
                    pass  # not supported on this GPU (e.g. MIG instances, some vGPUs)
        out = []
        while True:
            try:
                data = p.nvmlEventSetWait_v2(self._events, 0)
            except p.NVMLError:  # NVML_ERROR_TIMEOUT: nothing pending
                return out
            out.append((p.nvmlDeviceGetIndex(data.device), data.eventData))

    def gpm_sample(self, index: int, gpu_instance: int | None = None) -> int:
        """A GPM sample of the whole GPU (or of one MIG GPU instance), as a number for gpm_metrics."""
        p = self.pynvml
        sample = p.nvmlGpmSampleAlloc()
        try:
            if gpu_instance is None:
                p.nvmlGpmSampleGet(self._handle(index), sample)
            else:
                p.nvmlGpmMigSampleGet(self._handle(index), gpu_instance, sample)
        except p.NVMLError:
            p.nvmlGpmSampleFree(sample)
            raise
        self._gpm_next += 1
        self._gpm_samples[self._gpm_next] = sample
        return self._gpm_next

    def gpm_metrics(self, index: int, first: int, second: int, metric_ids: list[int],
                    gpu_instance: int | None = None) -> list:
        """nvmlGpmMetricsGet over two samples: one c_nvmlGpmMetric_t per id, each with its own nvmlReturn."""
        p = self.pynvml
        request = p.c_nvmlGpmMetricsGet_t()
        request.version = p.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(metric_ids)
        request.sample1, request.sample2 = self._gpm_samples[first], self._gpm_samples[second]
        for k, metric in enumerate(metric_ids):
            request.metrics[k].metricId = metric
        p.nvmlGpmMetricsGet(request)
        return [request.metrics[k] for k in range(len(metric_ids))]

    def gpm_release(self, number: int) -> None:
        sample = self._gpm_samples.pop(number, None)
        if sample is not None:
            try:
                self.pynvml.nvmlGpmSampleFree(sample)
            except self.pynvml.NVMLError:
                pass

    def mig_instances(self, index: int) -> list[int]:
        """The GPU instance ids of a GPU in MIG mode (empty slots skipped)."""
        p, parent = self.pynvml, self._handle(index)
        ids = []
        for k in range(p.nvmlDeviceGetMaxMigDeviceCount(parent)):
            try:
                ids.append(p.nvmlDeviceGetGpuInstanceId(p.nvmlDeviceGetMigDeviceHandleByIndex(parent, k)))
            except p.NVMLError:  # NVML_ERROR_NOT_FOUND: no MIG device in this slot
                continue
        return ids

    def close(self) -> None:
        for number in list(self._gpm_samples):
            self.gpm_release(number)
        try:
            if self._events is not None:
                self.pynvml.nvmlEventSetFree(self._events)
            self.pynvml.nvmlShutdown()
        except self.pynvml.NVMLError:
            pass

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self.pynvml.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]


def _to_object(value: Any) -> Any:
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _to_object(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_to_object(v) for v in value]
    return value


def call_key(fn: str, args: tuple) -> str:
    """How a recording names a call: the function, with its arguments after the device if any."""
    return f"{fn}({','.join(str(a) for a in args)})" if args else fn


def gpm_sample_key(gpu_instance: int | None) -> str:
    return "nvmlGpmSampleGet" if gpu_instance is None else call_key("nvmlGpmMigSampleGet", (gpu_instance,))


def gpm_metrics_key(metric_ids: list[int], gpu_instance: int | None) -> str:
    args = (list(metric_ids),) if gpu_instance is None else (gpu_instance, list(metric_ids))
    return call_key("nvmlGpmMetricsGet", args)


class RecordedNvml:
    def __init__(self, path: Path | str) -> None:
        self.pynvml = _pynvml()
        self.recording = json.loads(Path(path).read_text())
        self._calls: dict[tuple, int] = {}

    def system(self, fn: str) -> Any:
        return self._answer(self.recording, (fn,), fn)

    def call(self, fn: str, index: int, *args: Any) -> Any:
        key = call_key(fn, args)
        return self._answer(self.recording["devices"][index], (index, key), key)

    def common_ancestor(self, a: int, b: int) -> int:
        return self.call("nvmlDeviceGetTopologyCommonAncestor", a, f"gpu{b}")

    def xid_events(self, indices: list[int]) -> list[tuple[int, int]]:
        """Recorded under "xid_events": per drain, a list of [device index, XID]."""
        try:
            return [tuple(e) for e in self._answer(self.recording, ("xid_events",), "xid_events")]
        except self.pynvml.NVMLError:
            return []

    def gpm_sample(self, index: int, gpu_instance: int | None = None) -> int:
        key = gpm_sample_key(gpu_instance)
        return self._answer(self.recording["devices"][index], (index, key), key)

    def gpm_metrics(self, index: int, first: int, second: int, metric_ids: list[int],
                    gpu_instance: int | None = None) -> list:
        key = gpm_metrics_key(metric_ids, gpu_instance)
        return self._answer(self.recording["devices"][index], (index, key), key)

    def gpm_release(self, number: int) -> None:
        pass

    def mig_instances(self, index: int) -> list[int]:
        return self._answer(self.recording["devices"][index], (index, "migGpuInstanceIds"), "migGpuInstanceIds")

    def close(self) -> None:
        pass

    def _answer(self, record: dict, counter: tuple, key: str) -> Any:
        answers = record.get(key)
        if not answers:
            raise self.pynvml.NVMLError(self.pynvml.NVML_ERROR_NOT_SUPPORTED)
        n = self._calls.get(counter, 0)
        self._calls[counter] = n + 1
        answer = answers[min(n, len(answers) - 1)]  # the last answer repeats, like a value that stopped changing
        if isinstance(answer, dict) and "nvml_error" in answer:
            raise self.pynvml.NVMLError(getattr(self.pynvml, answer["nvml_error"]))
        return _to_object(answer)


def to_json(value: Any) -> Any:
    """An NVML answer (ctypes structs, unions and arrays, nvidia-ml-py's friendly objects, bytes) as
    plain JSON values with the same field names."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # a union's double read from an integer's bits
    if isinstance(value, (list, tuple, ctypes.Array)):
        return [to_json(v) for v in value]
    if isinstance(value, (ctypes.Structure, ctypes.Union)):
        return {f[0]: to_json(getattr(value, f[0])) for f in value._fields_}
    if isinstance(value, ctypes._SimpleCData):
        return to_json(value.value)
    if hasattr(value, "__dict__"):
        return {k: to_json(v) for k, v in vars(value).items()}
    return str(value)


class RecordingNvml:
    """Passes every call to `inner` (LiveNvml on a GPU host) and keeps each answer, or the NVML error
    it raised, in call order: `recording()` is a dict RecordedNvml replays to the same answers."""

    def __init__(self, inner: Any, source: str = "") -> None:
        self.inner = inner
        self.pynvml = inner.pynvml
        self.data: dict[str, Any] = {"source": source}
        self.devices: list[dict[str, list]] = []

    def system(self, fn: str) -> Any:
        return self._keep(self.data, fn, lambda: self.inner.system(fn))

    def call(self, fn: str, index: int, *args: Any) -> Any:
        return self._keep(self._device(index), call_key(fn, args), lambda: self.inner.call(fn, index, *args))

    def common_ancestor(self, a: int, b: int) -> int:
        return self._keep(self._device(a), call_key("nvmlDeviceGetTopologyCommonAncestor", (f"gpu{b}",)),
                          lambda: self.inner.common_ancestor(a, b))

    def xid_events(self, indices: list[int]) -> list[tuple[int, int]]:
        return self._keep(self.data, "xid_events", lambda: self.inner.xid_events(indices))

    def gpm_sample(self, index: int, gpu_instance: int | None = None) -> int:
        return self._keep(self._device(index), gpm_sample_key(gpu_instance),
                          lambda: self.inner.gpm_sample(index, gpu_instance))

    def gpm_metrics(self, index: int, first: int, second: int, metric_ids: list[int],
                    gpu_instance: int | None = None) -> list:
        return self._keep(self._device(index), gpm_metrics_key(metric_ids, gpu_instance),
                          lambda: self.inner.gpm_metrics(index, first, second, metric_ids, gpu_instance))

    def gpm_release(self, number: int) -> None:
        self.inner.gpm_release(number)

    def mig_instances(self, index: int) -> list[int]:
        return self._keep(self._device(index), "migGpuInstanceIds", lambda: self.inner.mig_instances(index))

    def close(self) -> None:
        self.inner.close()

    def recording(self) -> dict[str, Any]:
        return {**self.data, "devices": self.devices}

    def _device(self, index: int) -> dict[str, list]:
        while len(self.devices) <= index:
            self.devices.append({})
        return self.devices[index]

    def _keep(self, record: dict, key: str, answer: Callable[[], Any]) -> Any:
        try:
            value = answer()
        except self.pynvml.NVMLError as e:
            record.setdefault(key, []).append({"nvml_error": error_name(self.pynvml, e)})
            raise
        record.setdefault(key, []).append(to_json(value))
        return value


def error_name(pynvml: Any, error: Exception) -> str:
    """NVML_ERROR_NOT_SUPPORTED for an NVMLError of that code (RecordedNvml raises it back by name)."""
    code = getattr(error, "value", None)
    names = sorted(n for n in dir(pynvml) if n.startswith("NVML_ERROR_") and getattr(pynvml, n) == code)
    return names[0] if names else "NVML_ERROR_UNKNOWN"
