"""NVIDIA GPUs over the window through NVML: utilisation, memory, PCIe and NVLink traffic, clocks,
temperature, power, throttling, ECC and XID errors, the processes on each GPU, and how GPUs reach each
other (NVLink, NVSwitch or the PCIe tree) and their nearest NICs; on Hopper and later GPUs also the
GPM counters (SM activity, occupancy, tensor pipes, HBM bandwidth: `collectors.gpm`).

NVML is reached through `collectors.nvml` so that tests replay recorded answers of real servers.
Gauges are sampled every interval; counters (ECC, NVLink bytes) are read at both ends of the window.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from witty_profiler.collectors.base import Collector, Context, register
from witty_profiler.collectors.lib.accel import host_nics, link_nearest_nics, place_device
from witty_profiler.collectors.lib.gpm import GpmSampler
from witty_profiler.collectors.lib.nvml import LiveNvml, NvmlUnavailable
from witty_profiler.topology import Graph
from witty_profiler.topology.ids import entity_id, pci_address, process_id
from witty_profiler.topology.vocabulary import E, M, T
from witty_profiler.topology.windowstats import gauge

NVLINK_TX, NVLINK_RX, ALL_LINKS = 138, 139, 0xFFFFFFFF  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{TX,RX}, every link
NVLINK_FIELDS = [(NVLINK_TX, ALL_LINKS), (NVLINK_RX, ALL_LINKS)]
# NVML_NVLINK_MAX_LINKS (36 since NVLink 6); a GPU answers NOT_SUPPORTED / INVALID_ARGUMENT past its own count
MAX_NVLINKS = 36
# bytes/s one NVLink carries per direction, by NVML's nvmlNvlinkVersion_t: 1 = 1.0 (P100, 4 x 40 GB/s
# both ways), 2 = 2.0 and 3 = 2.2 (V100), 4 = 3.0 and 5 = 3.1 (A100: 12 x 50 GB/s both ways), 6 = 4.0
# (H100: 18 x 50), 7 = 5.0 (B200: 18 x 100), 8 = 6.0 (Rubin: 36 links, 3.6 TB/s per GPU both ways)
NVLINK_BYTES_PER_S = {1: 20e9, 2: 25e9, 3: 25e9, 4: 25e9, 5: 25e9, 6: 25e9, 7: 50e9, 8: 50e9}
SM, MEM = 1, 2  # nvmlClockType_t: NVML_CLOCK_SM, NVML_CLOCK_MEM
# usable bytes/s per PCIe lane and direction, by generation (after 8b/10b or 128b/130b encoding)
PCIE_LANE_BYTES_PER_S = {1: 250e6, 2: 500e6, 3: 985e6, 4: 1969e6, 5: 3938e6, 6: 7563e6}
THERMAL = 0x20 | 0x40  # SwThermalSlowdown | HwThermalSlowdown
POWER = 0x04 | 0x80  # SwPowerCap | HwPowerBrakeSlowdown
THROTTLE_NAMES = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                  0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                  0x80: "hw_power_brake_slowdown", 0x100: "display_clocks_setting"}
ANCESTOR_LINK = {0: "INTERNAL", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
NVLINK_DEVICE_GPU, NVLINK_DEVICE_SWITCH = 0, 2


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_link(a: dict, b: dict, ancestor: int | None) -> dict | None:
    """How GPU a reaches GPU b: direct NVLinks, NVLinks into a shared NVSwitch fabric, or the PCIe tree."""
    direct = sum(1 for remote, kind in a["nvlinks"] if remote == b["pci"] and kind != NVLINK_DEVICE_SWITCH)
    if direct:
        return {"link_type": f"NV{direct}", "nvlinks": direct, "via": "nvlink"}
    switched_a = sum(1 for _, kind in a["nvlinks"] if kind == NVLINK_DEVICE_SWITCH)
    switched_b = sum(1 for _, kind in b["nvlinks"] if kind == NVLINK_DEVICE_SWITCH)
    if switched_a and switched_b:
        n = min(switched_a, switched_b)
        return {"link_type": f"NV{n}", "nvlinks": n, "via": "nvswitch"}
    if ancestor in ANCESTOR_LINK:
        return {"link_type": ANCESTOR_LINK[ancestor], "via": "pcie"}
    return None


@register
class GpuCollector(Collector):
    name = "gpu"
    reads = ("NVML: utilisation, memory, PCIe/NVLink traffic, clocks, power, throttling, ECC/XID, processes, "
             "topology; GPM on Hopper+")
    needs = "an NVIDIA driver (libnvidia-ml); any user"

    def __init__(self, ctx: Context, nvml: Any = None) -> None:
        super().__init__(ctx)
        self.nvml = nvml
        self.devices: list[dict] = []
        self.failed: str | None = None
        self.gpm: GpmSampler | None = None

    # -- window ---------------------------------------------------------------------------
    def start(self) -> None:
        try:
            if self.nvml is None:
                self.nvml = LiveNvml()
            count = self.nvml.system("nvmlDeviceGetCount")
        except NvmlUnavailable as e:
            self.failed = str(e)
            return
        except self.nvml.pynvml.NVMLError as e:
            self.failed = f"NVML could not count GPUs: {e}"
            return
        if not count:
            self.failed = "NVML found no NVIDIA GPU on this host"
            return
        for i in range(count):
            self.devices.append(self._static(i))
        self._drain_xids()  # registers for XID events; errors before the window are not counted
        for d in self.devices:
            d["xids"].clear()
        self.gpm = GpmSampler(self.nvml)
        self.gpm.start(self.devices)
        self.sample()

    def sample(self) -> None:
        if not self.devices:
            return
        self._drain_xids()
        for d in self.devices:
            i, s = d["index"], d["samples"]
            util = self._try("nvmlDeviceGetUtilizationRates", i)
            if util is not None:
                s[M.UTIL_PCT].append(util.gpu)
                s[M.MEM_BW_UTIL_PCT].append(util.memory)
            mem = self._try("nvmlDeviceGetMemoryInfo", i)
            if mem is not None:
                d["memory_total"] = mem.total
                s[M.MEMORY_USED_BYTES].append(mem.used)
            for metric, counter in ((M.PCIE_TX_BYTES_PER_S, 0), (M.PCIE_RX_BYTES_PER_S, 1)):
                kb = self._try("nvmlDeviceGetPcieThroughput", i, counter)  # KB/s over a 20 ms window
                if kb is not None:
                    s[metric].append(kb * 1024)
            for metric, fn, args, scale in ((M.POWER_W, "nvmlDeviceGetPowerUsage", (), 1e-3),
                                            (M.TEMPERATURE_C, "nvmlDeviceGetTemperature", (0,), 1),
                                            (M.SM_CLOCK_MHZ, "nvmlDeviceGetClockInfo", (SM,), 1),
                                            (M.MEM_CLOCK_MHZ, "nvmlDeviceGetClockInfo", (MEM,), 1),
                                            (M.PCIE_LINK_GEN, "nvmlDeviceGetCurrPcieLinkGeneration", (), 1),
                                            (M.PCIE_LINK_WIDTH, "nvmlDeviceGetCurrPcieLinkWidth", (), 1)):
                value = self._try(fn, i, *args)
                if value is not None:
                    s[metric].append(value * scale)
            reasons = self._try("nvmlDeviceGetCurrentClocksThrottleReasons", i)
            if reasons is None:
                reasons = self._try("nvmlDeviceGetCurrentClocksEventReasons", i)
            if reasons is not None:
                d["throttle"] |= reasons
            for p in self._try("nvmlDeviceGetComputeRunningProcesses", i) or []:
                # None where NVML may not tell (no permission to see another container's usage)
                used = p.usedGpuMemory if isinstance(p.usedGpuMemory, int) else None
                old = d["processes"].get(p.pid)
                d["processes"][p.pid] = used if old is None else max(old, used or 0)
        if self.gpm is not None:
            self.gpm.sample()

    def finish(self) -> Graph:
        if self.failed is None and not self.devices:
            self.start()  # finish without start: a one-shot round
        if self.failed:
            if self.nvml is not None:
                self.nvml.close()
            return self.unavailable(self.failed)
        try:
            self.sample()
            for d in self.devices:
                d["ecc_end"] = self._ecc(d["index"])
                d["nvlink_end"] = self._nvlink_counters(d["index"])
            why = self.gpm.reason() if self.gpm is not None else None
            if why:
                self.partial(why)
            return self._graph()
        finally:
            if self.gpm is not None:
                self.gpm.close()
            self.nvml.close()

    # -- reading --------------------------------------------------------------------------
    def _try(self, fn: str, index: int, *args: Any) -> Any:
        try:
            return self.nvml.call(fn, index, *args)
        except self.nvml.pynvml.NVMLError:
            return None  # not supported on this device or driver: the metric is left out

    def _static(self, i: int) -> dict:
        pci = self._try("nvmlDeviceGetPciInfo", i)
        d: dict[str, Any] = {
            "index": i, "name": _text(self._try("nvmlDeviceGetName", i) or ""),
            "uuid": _text(self._try("nvmlDeviceGetUUID", i) or ""),
            "pci": pci_address(_text(pci.busId)) if pci is not None else None,
            "gen_max": self._try("nvmlDeviceGetMaxPcieLinkGeneration", i),
            "width_max": self._try("nvmlDeviceGetMaxPcieLinkWidth", i),
            "power_limit_mw": self._try("nvmlDeviceGetEnforcedPowerLimit", i),
            "sm_clock_max": self._try("nvmlDeviceGetMaxClockInfo", i, SM),
            "mem_clock_max": self._try("nvmlDeviceGetMaxClockInfo", i, MEM),
            "samples": defaultdict(list), "throttle": 0, "processes": {}, "nvlinks": [], "nvlink_version": None,
            "nvlinks_present": 0, "xids": [],
        }
        for link in range(MAX_NVLINKS):
            state = self._try("nvmlDeviceGetNvLinkState", i, link)
            if state is None:
                break  # no NVLink, or past the last link of this GPU
            d["nvlinks_present"] += 1
            if not state:
                continue  # counted as down: a GPU that lost a link shows it beside its peers
            remote = self._try("nvmlDeviceGetNvLinkRemotePciInfo", i, link)
            kind = self._try("nvmlDeviceGetNvLinkRemoteDeviceType", i, link)
            d["nvlinks"].append((pci_address(_text(remote.busId)) if remote is not None else None, kind))
            if d["nvlink_version"] is None:
                d["nvlink_version"] = self._try("nvmlDeviceGetNvLinkVersion", i, link)
        d["ecc_start"] = self._ecc(i)
        d["nvlink_start"] = self._nvlink_counters(i) if d["nvlinks"] else None
        return d

    def _drain_xids(self) -> None:
        try:
            events = self.nvml.xid_events([d["index"] for d in self.devices])
        except self.nvml.pynvml.NVMLError:
            return
        for index, xid in events:
            if 0 <= index < len(self.devices):
                self.devices[index]["xids"].append(xid)

    def _ecc(self, i: int) -> int | None:
        return self._try("nvmlDeviceGetTotalEccErrors", i, 1, 0)  # uncorrected, volatile (since driver load)

    def _nvlink_counters(self, i: int) -> dict | None:
        values = self._try("nvmlDeviceGetFieldValues", i, NVLINK_FIELDS)
        if not values:
            return None
        out = {v.fieldId: (v.value.ullVal, v.timestamp) for v in values if v.nvmlReturn == 0}
        return out if len(out) == 2 else None

    # -- building -------------------------------------------------------------------------
    def _graph(self) -> Graph:
        g = self.fragment()
        host, sys_root = self.ctx.host, self.ctx.sys
        nics = host_nics(sys_root, self.ctx.cache)
        driver = self.nvml.system("nvmlSystemGetDriverVersion") if self.devices else None
        ids = {}
        for d in self.devices:
            eid = ids[d["index"]] = entity_id(T.GPU, host, d["pci"] or f"index{d['index']}")
            metrics = self._metrics(d)
            attrs = {"index": d["index"], "name": d["name"], "uuid": d["uuid"], "pci_address": d["pci"],
                     "driver_version": _text(driver) if driver else None,
                     "throttle_reasons": [n for bit, n in THROTTLE_NAMES.items() if d["throttle"] & bit]}
            if d["nvlink_version"] is not None:
                attrs["nvlink_version"] = d["nvlink_version"]
            if d["xids"]:
                attrs["xid_codes"] = sorted(set(d["xids"]))
            gen, width = metrics.get("pcie_link_gen_min"), metrics.get("pcie_link_width_min")
            if gen is not None and width is not None and d["gen_max"] and d["width_max"]:
                # an idle GPU lowers its link generation to save power; that is not a fault
                busy = metrics.get("util_pct_max", metrics.get(M.UTIL_PCT, 0)) >= 5
                attrs["pcie_link_degraded"] = width < d["width_max"] or (busy and gen < d["gen_max"])
            metrics.pop("pcie_link_gen_min", None)
            metrics.pop("pcie_link_width_min", None)
            attrs.update({k: v for k, v in place_device(g, sys_root, host, eid, d["pci"]).items()
                          if k != "pcie_link_degraded"})
            g.entity_of(T.GPU, eid, attrs, metrics)
            link_nearest_nics(g, sys_root, host, eid, d["pci"], attrs.get("numa_node"), nics)
            for pid, used in sorted(d["processes"].items()):
                g.edge_of(E.USES_DEVICE, process_id(host, pid), eid, {"pid": pid}, {M.MEMORY_USED_BYTES: used})
            for gi in self.gpm.instances(d["index"]) if self.gpm is not None else []:
                iid = entity_id(T.GPU_INSTANCE, host, d["pci"] or f"index{d['index']}", gi)
                g.entity_of(T.GPU_INSTANCE, iid, {"gpu_instance_id": gi}, self.gpm.metrics(d["index"], gi))
                g.edge_of(E.INSTANCE_OF, iid, eid)
        for a in self.devices:
            for b in self.devices:
                if a["index"] >= b["index"]:
                    continue
                try:
                    ancestor = self.nvml.common_ancestor(a["index"], b["index"])
                except self.nvml.pynvml.NVMLError:
                    ancestor = None
                link = gpu_link(a, b, ancestor)
                if link:
                    g.edge_of(E.DEVICE_LINK, ids[a["index"]], ids[b["index"]], link)
        return g

    def _metrics(self, d: dict) -> dict[str, float]:
        s, m = d["samples"], {}
        for name in (M.UTIL_PCT, M.MEM_BW_UTIL_PCT, M.PCIE_TX_BYTES_PER_S, M.PCIE_RX_BYTES_PER_S, M.POWER_W,
                     M.TEMPERATURE_C, M.SM_CLOCK_MHZ, M.MEM_CLOCK_MHZ):
            m.update(gauge(name, s[name]))
        if s[M.MEMORY_USED_BYTES]:
            m[M.MEMORY_USED_BYTES] = s[M.MEMORY_USED_BYTES][-1]
            m["memory_used_bytes_max"] = max(s[M.MEMORY_USED_BYTES])
            if d.get("memory_total"):
                m[M.MEMORY_TOTAL_BYTES] = d["memory_total"]
                m[M.MEMORY_USED_PCT] = round(100 * m[M.MEMORY_USED_BYTES] / d["memory_total"], 2)
        gpm = self.gpm.metrics(d["index"]) if self.gpm is not None else {}
        for name in (M.PCIE_TX_BYTES_PER_S, M.PCIE_RX_BYTES_PER_S):
            if name in gpm:  # over the whole interval, where nvmlDeviceGetPcieThroughput saw 20 ms of it
                for key in (name, f"{name}_p95", f"{name}_max"):
                    m.pop(key, None)
        nvlink_keys = (M.NVLINK_TX_BYTES_PER_S, M.NVLINK_RX_BYTES_PER_S)
        m.update({k: v for k, v in gpm.items() if not k.startswith(nvlink_keys)})
        for name in (M.PCIE_LINK_GEN, M.PCIE_LINK_WIDTH):
            if s[name]:
                m[name] = s[name][-1]
                m[f"{name}_min"] = min(s[name])
        if d["gen_max"]:
            m[M.PCIE_LINK_GEN_MAX] = d["gen_max"]
        if d["width_max"]:
            m[M.PCIE_LINK_WIDTH_MAX] = d["width_max"]
        lane = PCIE_LANE_BYTES_PER_S.get(d["gen_max"] or 0)
        if lane and d["width_max"] and (M.PCIE_TX_BYTES_PER_S in m or M.PCIE_RX_BYTES_PER_S in m):
            busiest = max(m.get(M.PCIE_TX_BYTES_PER_S, 0), m.get(M.PCIE_RX_BYTES_PER_S, 0))
            m[M.PCIE_UTIL_PCT] = round(100 * busiest / (lane * d["width_max"]), 2)
        if d["power_limit_mw"]:
            m[M.POWER_LIMIT_W] = d["power_limit_mw"] / 1000
        if d["sm_clock_max"]:
            m[M.SM_CLOCK_MAX_MHZ] = d["sm_clock_max"]
        if d["mem_clock_max"]:
            m[M.MEM_CLOCK_MAX_MHZ] = d["mem_clock_max"]
        m[M.THROTTLE_THERMAL] = int(bool(d["throttle"] & THERMAL))
        m[M.THROTTLE_POWER] = int(bool(d["throttle"] & POWER))
        if d["ecc_start"] is not None and d.get("ecc_end") is not None and d["ecc_end"] >= d["ecc_start"]:
            m[M.ECC_ERRORS_TOTAL] = d["ecc_end"] - d["ecc_start"]
        m[M.XID_ERRORS_TOTAL] = len(d["xids"])
        if d["nvlinks_present"]:
            m[M.NVLINK_LINKS] = d["nvlinks_present"]
            m[M.NVLINK_LINKS_UP] = len(d["nvlinks"])
            m[M.NVLINK_LINKS_DOWN] = d["nvlinks_present"] - len(d["nvlinks"])
        if d["nvlinks"]:
            m.update(self._nvlink_rates(d, {k: v for k, v in gpm.items() if k.startswith(nvlink_keys)}))
        return m

    def _nvlink_rates(self, d: dict, gpm: dict[str, float]) -> dict[str, float]:
        """From the field-value counters read at both ends, else from GPM's per-interval figures."""
        first, last = d["nvlink_start"], d.get("nvlink_end")
        out: dict[str, float] = {}
        if first and last:
            for metric, field in ((M.NVLINK_TX_BYTES_PER_S, NVLINK_TX), (M.NVLINK_RX_BYTES_PER_S, NVLINK_RX)):
                (v0, t0), (v1, t1) = first[field], last[field]
                if t1 > t0 and v1 >= v0:
                    out[metric] = round((v1 - v0) * 1024 / ((t1 - t0) / 1e6), 1)  # KiB over NVML's microsecond stamps
        if not out:
            out = dict(gpm)
        if not out:
            return {}
        busiest = max(out.get(M.NVLINK_TX_BYTES_PER_S, 0), out.get(M.NVLINK_RX_BYTES_PER_S, 0))
        per_link = NVLINK_BYTES_PER_S.get(d["nvlink_version"] or 0)
        if per_link:
            out[M.NVLINK_UTIL_PCT] = round(100 * busiest / (per_link * len(d["nvlinks"])), 2)
        return out
