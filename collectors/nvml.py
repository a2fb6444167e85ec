"""The NVML calls the GPU collector makes, behind one tiny interface with two implementations.

`LiveNvml` calls nvidia-ml-py (`pynvml`) on this host's driver. `RecordedNvml` answers the same
calls from a JSON recording: per device, per call (``"nvmlDeviceGetClockInfo(1)"`` with its
arguments), the list of successive answers in the shapes nvidia-ml-py returns (structs as
objects with the same field names, lists of structs, ints, strings). An answer
``{"nvml_error": "NVML_ERROR_NOT_SUPPORTED"}`` raises that NVML error; a call that the recording
does not hold raises NVML_ERROR_NOT_SUPPORTED, as a driver does for a feature a device lacks.
XID critical-error events are recorded under ``"xid_events"``: per drain, [device index, XID] pairs.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any


class NvmlUnavailable(Exception):
    """NVML cannot be used on this host; the message says why, for a person to act on."""


def _pynvml():
    try:
        import pynvml
    except ImportError as e:  # the package is a dependency, but an install may lack it
        raise NvmlUnavailable("nvidia-ml-py (pynvml) is not installed") from e
    return pynvml


def unavailable_reason(error: Exception) -> str:
    pynvml = _pynvml()
    code = getattr(error, "value", None)
    if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver installed on this host"
    if code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return "NVIDIA driver not loaded (nvidia kernel module missing)"
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return "no permission to open /dev/nvidia* for NVML"
    return f"NVML initialisation failed: {error}"


class LiveNvml:
    def __init__(self) -> None:
        self.pynvml = _pynvml()
        try:
            self.pynvml.nvmlInit()
        except self.pynvml.NVMLError as e:
            raise NvmlUnavailable(unavailable_reason(e)) from e
        self._handles: dict[int, Any] = {}
        self._events: Any = None

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

    def close(self) -> None:
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


class RecordedNvml:
    def __init__(self, path: Path | str) -> None:
        self.pynvml = _pynvml()
        self.recording = json.loads(Path(path).read_text())
        self._calls: dict[tuple, int] = {}

    def system(self, fn: str) -> Any:
        return self._answer(self.recording, (fn,), fn)

    def call(self, fn: str, index: int, *args: Any) -> Any:
        key = f"{fn}({','.join(str(a) for a in args)})" if args else fn
        return self._answer(self.recording["devices"][index], (index, key), key)

    def common_ancestor(self, a: int, b: int) -> int:
        return self.call("nvmlDeviceGetTopologyCommonAncestor", a, f"gpu{b}")

    def xid_events(self, indices: list[int]) -> list[tuple[int, int]]:
        """Recorded under "xid_events": per drain, a list of [device index, XID]."""
        try:
            return [tuple(e) for e in self._answer(self.recording, ("xid_events",), "xid_events")]
        except self.pynvml.NVMLError:
            return []

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
