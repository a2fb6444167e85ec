"""Accelerators of a past window from Prometheus: dcgm-exporter (GPUs) and npu-exporter (NPUs).

Rows are (host, labels, values) as a range query gives them: values [(t, v), ...] at each step.
Entities have the live collectors' types, ids and metric names: gpu:<host>:<pci address> (the
dcgm-exporter pci_bus_id label, normalised as NVML's is), npu:<host>:<pci address> (npu-exporter's
pcie_bus_info), with each NPU's RoCE port and HCCS links from sources/promascend.py. Gauges sampled
over the window give the mean with p95 and max; memory is the value at the end of the window, as the
live collectors read it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from witty_profiler.sources.promascend import NETWORK_SERIES, add_roce_port, hccs_metrics
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.ids import entity_id, pci_address
from witty_profiler.topology.models import CollectorStatus
from witty_profiler.topology.vocabulary import M, T
from witty_profiler.topology.windowstats import gauge

MiB = 1024 * 1024

# dcgm-exporter field -> metric, for gauges averaged over the window
DCGM_GAUGES = {"DCGM_FI_DEV_GPU_UTIL": M.UTIL_PCT, "DCGM_FI_DEV_MEM_COPY_UTIL": M.MEM_BW_UTIL_PCT,
               "DCGM_FI_DEV_SM_CLOCK": M.SM_CLOCK_MHZ, "DCGM_FI_DEV_MEM_CLOCK": M.MEM_CLOCK_MHZ,
               "DCGM_FI_DEV_POWER_USAGE": M.POWER_W, "DCGM_FI_DEV_GPU_TEMP": M.TEMPERATURE_C,
               # gauges of bytes/s in etc/dcp-metrics-included.csv (older lists called them counters of bytes)
               "DCGM_FI_PROF_PCIE_TX_BYTES": M.PCIE_TX_BYTES_PER_S, "DCGM_FI_PROF_PCIE_RX_BYTES": M.PCIE_RX_BYTES_PER_S,
               # not in the shipped lists; a site adds them: bytes/s without protocol headers
               "DCGM_FI_PROF_NVLINK_TX_BYTES": M.NVLINK_TX_BYTES_PER_S,
               "DCGM_FI_PROF_NVLINK_RX_BYTES": M.NVLINK_RX_BYTES_PER_S}
# DCGM's profiling ratios (0-1 gauges, the figures NVML's GPM gives a live collector) -> percent: SM_ACTIVE
# and SM_OCCUPANCY are commented out in the shipped lists (a site enables them), PIPE_TENSOR_ACTIVE (any
# tensor pipe, whatever the list's "(HMMA)" says) and DRAM_ACTIVE are on
DCGM_RATIOS = {"DCGM_FI_PROF_SM_ACTIVE": M.SM_ACTIVE_PCT, "DCGM_FI_PROF_SM_OCCUPANCY": M.SM_OCCUPANCY_PCT,
               "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": M.TENSOR_ACTIVE_PCT, "DCGM_FI_PROF_DRAM_ACTIVE": M.HBM_BW_UTIL_PCT}
# Field 449, in the default list typed as a counter, is an instantaneous figure in MB/s for all links and
# both directions (dcgmi dmon and nvidia-smi nvlink -gt d agree on it; NVIDIA's maintainers have said KB/s
# in dcgm-exporter issue #472, which a busy H100's figures rule out): averaged as a gauge.
NVLINK_TOTAL, NVLINK_TOTAL_SCALE = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 1e6
# counters over the window: increase -> metric (ECC volatile counts, off in the default list; PCIe replays, on)
DCGM_INCREASES = {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": M.ECC_ERRORS_TOTAL,
                  "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": M.ECC_CORRECTED_ERRORS_TOTAL,
                  "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": M.PCIE_REPLAYS_TOTAL}
# memory repair state at the end of the window -> attrs: row remapping (Ampere and later, default list),
# retired pages (earlier GPUs, off in the default list)
DCGM_STATE = {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remapped_rows", "correctable"),
              "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("remapped_rows", "uncorrectable"),
              "DCGM_FI_DEV_RETIRED_SBE": ("retired_pages", "single_bit"),
              "DCGM_FI_DEV_RETIRED_DBE": ("retired_pages", "double_bit"),
              "DCGM_FI_DEV_RETIRED_PENDING": ("retired_pages", "pending")}
# DCGM 3.3 renamed the throttle-reasons field to clocks-event reasons (same field id, same bits); a
# counter list names one or the other
THROTTLE_FIELDS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
# counters in KB (NVML's PCIe throughput), used where the DCP PCIe fields are not exported
DCGM_KB_COUNTERS = {"DCGM_FI_DEV_PCIE_TX_THROUGHPUT": M.PCIE_TX_BYTES_PER_S,
                    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": M.PCIE_RX_BYTES_PER_S}
DCGM_SERIES = "|".join([*DCGM_GAUGES, *DCGM_RATIOS, *DCGM_KB_COUNTERS, NVLINK_TOTAL, *DCGM_INCREASES, *DCGM_STATE,
                        "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                        "DCGM_FI_DEV_XID_ERRORS", *THROTTLE_FIELDS])
HOSTNAME_LABELS = ("Hostname", "hostname")  # dcgm-exporter 4.x renamed its Hostname label

# NVML's clocks-throttle-reason bits (nvmlClocksThrottleReasons), as collectors/gpu.py reads them
THROTTLE_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
THERMAL = 0x08 | 0x20 | 0x40  # HW_SLOWDOWN (thermal or power brake signal) | SW_THERMAL | HW_THERMAL
POWER = 0x04 | 0x80  # SW_POWER_CAP | HW_POWER_BRAKE

NPU_GAUGES = {"npu_chip_info_utilization": M.UTIL_PCT, "npu_chip_info_temperature": M.TEMPERATURE_C,
              "npu_chip_info_power": M.POWER_W, "npu_chip_info_aicore_current_freq": M.SM_CLOCK_MHZ}
NPU_MEMORY = ("npu_chip_info_hbm_used_memory", "npu_chip_info_hbm_total_memory",  # MB, chips with HBM
              "npu_chip_info_used_memory", "npu_chip_info_total_memory")  # MB, DDR (310P)
NPU_SERIES = "|".join([*NPU_GAUGES, *NPU_MEMORY, "npu_chip_info_health_status", "npu_chip_info_error_code",
                       NETWORK_SERIES])


def _values(values: list) -> list[float]:
    return [float(v) for _, v in values]


def _summary(devices: int, what: str, lacking: dict[str, list[str]]) -> CollectorStatus:
    if not devices:
        return CollectorStatus("unavailable", f"no {what} series")
    if lacking:
        return CollectorStatus("partial", "; ".join(f"no {series} for {', '.join(sorted(ids)[:3])}"
                                                    f"{' …' if len(ids) > 3 else ''}"
                                                    for series, ids in sorted(lacking.items())))
    return CollectorStatus("ok")


def add_gpus(g: Graph, rows: list[tuple[str, dict, list]]) -> CollectorStatus:
    """gpu entities from dcgm-exporter series; the collector status of prometheus.dcgm."""
    from witty_profiler.sources.prometheus import Steps, rate_metrics  # prometheus.py imports this module
    devs: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"series": {}, "labels": {}})
    unplaced = 0
    for host, labels, values in rows:
        if labels.get("GPU_I_ID"):  # a MIG instance's series: the GPU's own are read
            continue
        bus = labels.get("pci_bus_id")
        if not bus:
            unplaced += 1
            continue
        d = devs[(host, pci_address(bus))]
        d["labels"].update({k: v for k, v in labels.items() if v})
        d["series"].setdefault(labels.get("__name__", ""), values)
    lacking: dict[str, list[str]] = defaultdict(list)
    for (host, address), d in sorted(devs.items()):
        eid = entity_id(T.GPU, host, address)
        s, lab = d["series"], d["labels"]
        attrs: dict[str, Any] = {"pci_address": address}
        if str(lab.get("gpu", "")).isdigit():
            attrs["index"] = int(lab["gpu"])
        for attr, label in (("uuid", "UUID"), ("name", "modelName"), ("driver_version", "DCGM_FI_DRIVER_VERSION"),
                            ("device", "device"), ("hostname", "Hostname"), ("hostname", "hostname")):
            if lab.get(label):
                attrs[attr] = lab[label]
        m: dict[str, float] = {}
        for series, metric in DCGM_GAUGES.items():
            if series in s:
                m.update(gauge(metric, _values(s[series])))
        for series, metric in DCGM_RATIOS.items():
            if series in s:
                m.update(gauge(metric, [100.0 * v for v in _values(s[series])]))
        for series, metric in DCGM_KB_COUNTERS.items():
            if metric not in m and series in s:
                m.update(rate_metrics(metric, Steps().add(s[series]), scale=1024.0))
        used, free = s.get("DCGM_FI_DEV_FB_USED"), s.get("DCGM_FI_DEV_FB_FREE")
        if used:
            m[M.MEMORY_USED_BYTES] = int(used[-1][1] * MiB)
            m["memory_used_bytes_max"] = int(max(_values(used)) * MiB)
            if free:
                total = used[-1][1] + free[-1][1]
                m[M.MEMORY_TOTAL_BYTES] = int(total * MiB)
                if total > 0:
                    m[M.MEMORY_USED_PCT] = round(100 * used[-1][1] / total, 2)
        m.update(_dcgm_links_and_errors(s, attrs))
        reasons = next((s[f] for f in THROTTLE_FIELDS if f in s), None)
        if reasons:
            seen = 0
            for v in _values(reasons):
                seen |= int(v)
            m[M.THROTTLE_THERMAL] = int(bool(seen & THERMAL))
            m[M.THROTTLE_POWER] = int(bool(seen & POWER))
            attrs["throttle_reasons"] = [name for bit, name in THROTTLE_BITS.items() if seen & bit]
        xids = s.get("DCGM_FI_DEV_XID_ERRORS")
        if xids:
            # the last XID seen: each change to another non-zero value within the window is one more error
            vals = [int(v) for v in _values(xids)]
            new = [b for a, b in zip(vals, vals[1:]) if b != a and b != 0]
            m[M.XID_ERRORS_TOTAL] = len(new)
            if new:
                attrs["xid_codes"] = sorted(set(new))
        for series, what in (("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL"),
                             ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED")):
            if series not in s:
                lacking[what].append(eid)
        if not any(f in s for f in THROTTLE_FIELDS):
            lacking["DCGM_FI_DEV_CLOCKS_EVENT_REASONS or DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (throttle "
                    "flags)"].append(eid)
        g.entity_of(T.GPU, eid, attrs, m)
    status = _summary(len(devs), "DCGM_FI_*", lacking)
    if unplaced:
        why = f"{unplaced} DCGM_FI_* series without a pci_bus_id label (dcgm-exporter before 3.1) not read"
        status = CollectorStatus("partial" if devs else "unavailable",
                                 why if status.status != "partial" else f"{status.reason}; {why}")
    return status


def _dcgm_links_and_errors(s: dict[str, list], attrs: dict[str, Any]) -> dict[str, float]:
    """NVLink traffic, error counts over the window and the memory repair state of one GPU's series."""
    from witty_profiler.sources.prometheus import Steps  # prometheus.py imports this module
    m: dict[str, float] = {}
    if NVLINK_TOTAL in s:
        m.update(gauge(M.NVLINK_BYTES_PER_S, [v * NVLINK_TOTAL_SCALE for v in _values(s[NVLINK_TOTAL])], 0))
    for series, metric in DCGM_INCREASES.items():
        if series in s:
            m[metric] = int(sum(Steps().add(s[series]).dv.values()))
    for series, (attr, kind) in DCGM_STATE.items():
        if series in s:
            attrs.setdefault(attr, {})[kind] = int(s[series][-1][1])
    failure = s.get("DCGM_FI_DEV_ROW_REMAP_FAILURE")
    if failure:
        attrs["row_remap_failure"] = failure[-1][1] != 0
    return m


def add_npus(g: Graph, rows: list[tuple[str, dict, list]]) -> CollectorStatus:
    """npu entities from npu-exporter series; the collector status of prometheus.npu."""
    devs: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"series": {}, "labels": {}})
    for host, labels, values in rows:
        bus, chip = labels.get("pcie_bus_info"), labels.get("id")
        key = pci_address(bus) if bus else f"id{chip}" if chip is not None else None
        if key is None:
            continue
        d = devs[(host, key)]
        d["labels"].update({k: v for k, v in labels.items() if v})
        d["series"].setdefault(labels.get("__name__", ""), values)
    lacking: dict[str, list[str]] = defaultdict(list)
    for (host, key), d in sorted(devs.items()):
        eid = entity_id(T.NPU, host, key)
        s, lab = d["series"], d["labels"]
        attrs: dict[str, Any] = {}
        if not key.startswith("id"):
            attrs["pci_address"] = key
        else:
            lacking["pcie_bus_info label"].append(eid)
        if str(lab.get("id", "")).isdigit():
            attrs["index"] = int(lab["id"])
        for attr, label in (("name", "model_name"), ("vdie_id", "vdie_id")):
            if lab.get(label):
                attrs[attr] = lab[label]
        health = s.get("npu_chip_info_health_status")
        if health:
            attrs["health"] = "OK" if health[-1][1] == 1 else "Unhealthy"
        codes = sorted({int(v) for v in _values(s.get("npu_chip_info_error_code", [])) if v})
        if codes:
            attrs["error_codes"] = [hex(c) for c in codes]
        m: dict[str, float] = {}
        for series, metric in NPU_GAUGES.items():
            if series in s:
                m.update(gauge(metric, _values(s[series])))
        for used_s, total_s in (NPU_MEMORY[:2], NPU_MEMORY[2:]):
            used, total = s.get(used_s), s.get(total_s)
            if used and total and total[-1][1] > 0:
                m[M.MEMORY_USED_BYTES] = int(used[-1][1] * MiB)
                m["memory_used_bytes_max"] = int(max(_values(used)) * MiB)
                m[M.MEMORY_TOTAL_BYTES] = int(total[-1][1] * MiB)
                m[M.MEMORY_USED_PCT] = round(100 * used[-1][1] / total[-1][1], 2)
                break
        m.update(hccs_metrics(s, attrs))
        for series in ("npu_chip_info_utilization", "npu_chip_info_health_status"):
            if series not in s:
                lacking[series].append(eid)
        npu = g.entity_of(T.NPU, eid, attrs, m)
        add_roce_port(g, host, npu, str(lab.get("id", key)), s)
    return _summary(len(devs), "npu_chip_info_*", lacking)
