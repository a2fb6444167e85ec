"""The NVML calls the GPU collector makes, behind one tiny interface with two implementations.

`LiveNvml` calls nvidia-ml-py (`pynvml`) on this host's driver. `RecordedNvml` answers the same
calls from a JSON recording: per device, per call (``"nvmlDeviceGetClockInfo(1)"`` with its
arguments), the list of successive answers in the shapes nvidia-ml-py returns (structs as
objects with the same field names, lists of structs, ints, strings). An answer
``{"nvml_error": "NVML_ERROR_NOT_SUPPORTED"}`` raises that NVML error; a call that the recording
does not hold raises NVML_ERROR_NOT_SUPPORTED, as a driver does for a feature a device lacks.
XID critical-error events are recorded under ``"xid_events"``: per drain, [device index, XID] pairs.
`RecordingNvml` wraps either and writes down every answer in that format, so that a window on a
real GPU host becomes a recording the tests replay (``python3 -m benchmarks.record_nvml``).
"""

from __future__ import annotations

import ctypes
import json
import math
from collections.abc import Callable
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


def call_key(fn: str, args: tuple) -> str:
    """How a recording names a call: the function, with its arguments after the device if any."""
    return f"{fn}({','.join(str(a) for a in args)})" if args else fn


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
