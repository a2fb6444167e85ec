"""Ascend NPUs through `npu-smi`: AI Core utilisation, HBM (or DDR) use and bandwidth, temperature,
power, health, the processes on each chip, and the topology table (link types, CPU affinity).

`npu-smi info` (the table) is read at the start, every interval and at the end; it takes about a
second on a loaded host, so intervals shorter than that stretch. `-t usages` and `-t common` per
NPU are read at both ends, `-t board` and `-t topo` once. HCCS: `-t hccs` per chip once (lane
mode and speed of each link: how many links are up and what they can carry) and `-t hccs-bw` per
chip at both ends (the links' throughput over a short sampling time); models without HCCS (the
310 series) answer that they do not support it, which leaves those metrics out without making the
collector partial. The parsers are pure functions of the text and tolerate the differences
between generations and driver versions: extra or missing columns (Phy-ID, Device, HBM-Usage),
several chips per NPU, 'NA' and '-' for unknown values.

Each 910-series NPU's own RoCE port is read through `hccn_tool` (`collectors.hccn`): an
`rdma_port` per NPU, `has_port` from its NPU. The 310 series has no such port and is not asked.
"""

from __future__ import annotations

import os
import re
import shutil
from collections import defaultdict

from witty_profiler.collectors.base import Collector, Context, register, run_tool
from witty_profiler.collectors.lib.accel import host_nics, link_nearest_nics, place_device
from witty_profiler.collectors.lib.hccn import HccnPorts, add_port
from witty_profiler.collectors.pci import read_text
from witty_profiler.topology import Graph
from witty_profiler.topology.cpulist import parse_cpulist
from witty_profiler.topology.ids import entity_id, numa_id, pci_address, process_id
from witty_profiler.topology.lazy import LazyPattern
from witty_profiler.topology.vocabulary import E, M, T
from witty_profiler.topology.windowstats import gauge

MiB = 1024 * 1024
_BUS = LazyPattern(globals(), "_BUS", r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_PAIR = LazyPattern(globals(), "_PAIR", r"(\S+)\s*/\s*(\S+)|(\S+)")
LINK_TYPES = {"HCCS", "HCCS_SW", "SIO", "PIX", "PXB", "PHB", "SYS"}
HCCS_BW_SAMPLE_MS = 100  # npu-smi measures the links this long per call; it runs per chip at both ends
GB = 1e9  # hccs-bw prints GB/S, the unit of DCMI's dcmi_hccs_bandwidth_info it reads
HCCN_TOOL_DEFAULT = "/usr/local/Ascend/driver/tools/hccn_tool"  # where the driver installs it, often not on PATH


def _number(text: str | None) -> float | None:
    """'312.4' -> 312.4; 'NA', '-', '' -> None."""
    try:
        return float(text) if text not in (None, "", "NA", "-", "N/A") else None
    except ValueError:
        return None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _values(cell: str) -> list[object]:
    """'0    / 0          61320/ 65536' -> [('0', '0'), ('61320', '65536')]; '312.4  46' -> ['312.4', '46']."""
    return [(m.group(1), m.group(2)) if m.group(1) else m.group(3) for m in _PAIR.finditer(cell)]


def parse_info(text: str) -> dict:
    """`npu-smi info`: version, one record per chip, and the process table."""
    version = re.search(r"npu-smi\s+(\S+)", text)
    chips: list[dict] = []
    processes: list[dict] = []
    head1 = head2 = None
    pending: dict | None = None
    in_procs = False
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = _cells(line)
        if len(cells) >= 4 and "Process id" in cells[1]:
            in_procs = True
            continue
        if in_procs:
            if len(cells) >= 4 and cells[1].isdigit():
                npu, *chip = cells[0].split()
                processes.append({"npu": int(npu), "chip": int(chip[0]) if chip else 0, "pid": int(cells[1]),
                                  "name": cells[2], "memory_mb": _number(cells[3])})
            continue
        if len(cells) < 3:
            continue
        first = cells[0].split()
        if first[:1] == ["NPU"] and "Health" in cells[1]:
            head1 = [h for h in re.findall(r"\S+", cells[2])]
            continue
        if first[:1] == ["Chip"] and "Bus-Id" in cells[1]:
            head2 = first[1:], re.findall(r"\S+", cells[2])
            continue
        if _BUS.match(cells[1]) and pending is not None and head2:
            extra, names = head2
            ids = [int(x) for x in first if x.isdigit()]
            pending["chip"] = ids[0] if ids else 0
            for name, value in zip(extra, ids[1:]):
                pending[name.lower().replace("-", "_")] = value  # Phy-ID (910B, A3) or Device (310P)
            pending["bus_id"] = pci_address(cells[1])
            pending.update(_named(names, _values(cells[2])))
            chips.append(pending)
            pending = None
        elif head1 and first and first[0].isdigit():
            pending = {"npu": int(first[0]), "name": " ".join(first[1:]), "health": cells[1]}
            pending.update(_named(head1, _values(cells[2])))
    return {"version": version.group(1) if version else None, "chips": chips, "processes": processes}


def _named(headers: list[str], values: list[object]) -> dict:
    """Pair header names with the values of one cell, by position; 'a / b' pairs become used/total."""
    out: dict = {}
    for name, value in zip(headers, values):
        key = re.sub(r"\(.*\)", "", name).lower().replace("-", "_")  # 'HBM-Usage(MB)' -> 'hbm_usage'
        if isinstance(value, tuple):
            out[f"{key}_used"], out[f"{key}_total"] = _number(value[0]), _number(value[1])
        else:
            out[key] = _number(value)
    return out


def parse_kv(text: str) -> list[dict[str, str]]:
    """'Key : value' outputs (-t usages, common, board, power, temp...) as blocks split by blank lines."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        if ":" in line:
            key, value = line.split(":", 1)
            current[key.strip()] = value.strip()
    if current:
        blocks.append(current)
    return blocks


def parse_per_chip(text: str) -> dict[int, dict[str, str]]:
    """Per-chip blocks of a -t usages/common output: {chip id: {key: value}} (a header block is skipped)."""
    out: dict[int, dict[str, str]] = {}
    header_keys = {"NPU ID", "Chip Count"}
    for block in parse_kv(text):
        if set(block) <= header_keys:
            continue
        chip = block.get("Chip ID")
        out[int(chip) if chip and chip.isdigit() else len(out)] = block
    return out


def parse_hccs_bw(text: str) -> dict | None:
    """`npu-smi info -t hccs-bw -i N -c C -time MS`: HCCS throughput per link and in total, bytes/s.

    A header names the two columns (``tx_bandwidth(GB/S)`` then ``rx_bandwidth(GB/S)``; the order is
    taken from the header, not assumed), then one row per link index and a ``total`` row. A chip
    without HCCS prints "This device does not support querying hccs-bw." instead: None.
    """
    order: list[str] | None = None
    links: dict[int, dict[str, float]] = {}
    total: dict[str, float] | None = None
    for line in text.splitlines():
        tokens = line.split()
        if order is None:
            cols = [tok.lower()[:2] for tok in tokens if tok.lower().startswith(("tx_bandwidth", "rx_bandwidth"))]
            if sorted(cols) == ["rx", "tx"]:
                order = cols
            continue
        if len(tokens) < 3 or not (tokens[0].isdigit() or tokens[0].lower() == "total"):
            continue
        values = [_number(tok) for tok in tokens[1:3]]
        if None in values:
            continue
        row = {name: v * GB for name, v in zip(order, values)}  # type: ignore[operator]
        if tokens[0].isdigit():
            links[int(tokens[0])] = row
        else:
            total = row
    if order is None or (total is None and not links):
        return None
    if total is None:
        total = {k: sum(r[k] for r in links.values()) for k in ("tx", "rx")}
    return {"links": links, "tx_bytes_per_s": total["tx"], "rx_bytes_per_s": total["rx"]}


def parse_hccs(text: str) -> dict | None:
    """`npu-smi info -t hccs -i N -c C`: per-link lists in brackets (``hccs lane mode : [4  4 ...]``).

    Returns the health, the lane count and the speed (Gbit/s: 56 Gbit/s per lane, the tool's own
    definition) of each link; None when the chip reports no lane modes (no HCCS, or the 310
    series, which prints packet counters only).
    """
    fields: dict[str, object] = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, value = (part.strip() for part in line.split(":", 1))
        key = key.lower()
        fields[key] = value[1:-1].split() if value.startswith("[") and value.endswith("]") else value
    modes, speeds = fields.get("hccs lane mode"), fields.get("hccs link speed")
    if not isinstance(modes, list) or not modes:
        return None
    lanes = [int(m) if m.isdigit() else 0 for m in modes]
    gbps = [_number(s) or 0.0 for s in speeds] if isinstance(speeds, list) and len(speeds) == len(modes) else []
    health = fields.get("hccs health status")
    return {"health": health if isinstance(health, str) else None, "lanes": lanes, "speed_gbps": gbps}


def parse_topo(text: str) -> tuple[list[str], dict[tuple[str, str], str], dict[str, str]]:
    """`npu-smi info -t topo`: device names, link type per ordered pair, CPU affinity per device."""
    names: list[str] = []
    links: dict[tuple[str, str], str] = {}
    affinity: dict[str, str] = {}
    for line in text.splitlines():
        tokens = line.split()
        if not tokens or tokens[0].startswith("Legend"):
            if names and links:
                break
            continue
        if not names and re.fullmatch(r"NPU\d+", tokens[0]) and len(tokens) > 1 and re.fullmatch(r"NPU\d+", tokens[1]):
            names = [t for t in tokens if re.fullmatch(r"NPU\d+", t)]
            continue
        if names and tokens[0] in names:
            values = tokens[1:1 + len(names)]
            for other, kind in zip(names, values):
                if other != tokens[0]:
                    links[(tokens[0], other)] = kind
            rest = tokens[1 + len(names):]
            if rest:
                affinity[tokens[0]] = ",".join(rest)
    return names, links, affinity


@register
class NpuCollector(Collector):
    name = "npu"
    reads = "npu-smi info (table, usages, common, board, topo, hccs)"
    needs = "Ascend driver and npu-smi on PATH"

    def __init__(self, ctx: Context, npu_smi: str | None = None, hccn_tool: str | None = None) -> None:
        super().__init__(ctx)
        self.npu_smi = npu_smi or shutil.which("npu-smi")
        self.hccn_tool = hccn_tool or shutil.which("hccn_tool") or (
            HCCN_TOOL_DEFAULT if os.access(HCCN_TOOL_DEFAULT, os.X_OK) else None)
        self.hccn: HccnPorts | None = None
        self.failed: str | None = None
        self.chips: list[dict] = []
        self.samples: dict[tuple[int, int], dict[str, list]] = defaultdict(lambda: defaultdict(list))
        self.processes: dict[tuple[int, int, int], dict] = {}
        self.per_npu: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        self.topo: tuple[list[str], dict, dict] = ([], {}, {})
        self.boards: dict[int, dict[str, str]] = {}
        self.hccs: dict[tuple[int, int], dict] = {}
        self.unsupported: set[str] = set()  # optional sub-commands this host's NPUs do not answer
        self.version: str | None = None

    def _run(self, *args: str, optional: bool = False) -> str | None:
        """The output of `npu-smi ARGS`; None on failure, which makes the collector partial unless the
        query is optional (one that older drivers or other NPU models do not have)."""
        out, why = run_tool([self.npu_smi, *args], f"npu-smi {' '.join(args)}")
        if why and not optional:
            self.partial(why)
        return out

    def start(self) -> None:
        if not self.npu_smi:
            self.failed = "npu-smi not found on PATH (no Ascend driver/toolbox installed)"
            return
        if not self._table():
            self.failed = self.status.reason or "npu-smi info listed no NPU"
            return
        topo = self._run("info", "-t", "topo")
        if topo:
            self.topo = parse_topo(topo)
        for npu in sorted({c["npu"] for c in self.chips}):
            board = self._run("info", "-t", "board", "-i", str(npu))
            if board:
                self.boards[npu] = {k: v for b in parse_kv(board) for k, v in b.items()}
            self._usages(npu)
        self._hccs_links()
        self._hccs_bw()
        self._hccn_start()

    def sample(self) -> None:
        if self.chips:
            self._table()

    def finish(self) -> Graph:
        if self.failed is None and not self.chips and self.npu_smi:
            self.start()
        if self.failed:
            return self.unavailable(self.failed)
        self._table()
        for npu in sorted({c["npu"] for c in self.chips}):
            self._usages(npu)
            common = self._run("info", "-t", "common", "-i", str(npu))
            for chip, block in parse_per_chip(common or "").items():
                s = self.samples[(npu, chip)]
                s["clock"].append(_number(block.get("Aicore curFreq(MHZ)")))
                s["clock_max"].append(_number(block.get("Aicore Freq(MHZ)")))
        self._hccs_bw()
        if self.hccn is not None:
            self.hccn.finish()
            if self.hccn.failures:
                more = len(self.hccn.failures) - 1
                self.partial(self.hccn.failures[0] + (f" (and {more} more hccn_tool failures)" if more else ""))
        return self._graph()

    # -- reading --------------------------------------------------------------------------
    def _table(self) -> bool:
        text = self._run("info")
        if text is None:
            return False
        info = parse_info(text)
        self.version = info["version"]
        if not self.chips:
            self.chips = info["chips"]
        for c in info["chips"]:
            s = self.samples[(c["npu"], c["chip"])]
            s["util"].append(c.get("aicore"))
            s["power"].append(c.get("power"))
            s["temp"].append(c.get("temp"))
            s["health"].append(c.get("health"))
            hbm_total = c.get("hbm_usage_total")
            if hbm_total:  # 910 series: HBM; 310 series: the Memory-Usage column is the device memory
                s["mem"].append((c.get("hbm_usage_used"), hbm_total))
            elif c.get("memory_usage_total"):
                s["mem"].append((c.get("memory_usage_used"), c["memory_usage_total"]))
        for p in info["processes"]:
            key = (p["npu"], p["chip"], p["pid"])
            old = self.processes.get(key)
            if old is None or (p["memory_mb"] or 0) > (old["memory_mb"] or 0):
                self.processes[key] = p
        return bool(info["chips"])

    def _usages(self, npu: int) -> None:
        text = self._run("info", "-t", "usages", "-i", str(npu))
        for chip, block in parse_per_chip(text or "").items():
            bw = block.get("HBM Bandwidth Usage Rate(%)") or block.get("Memory Bandwidth Usage Rate(%)")
            self.samples[(npu, chip)]["bw"].append(_number(bw))

    def _optional_per_chip(self, kind: str, parse, *extra: str):
        """(chip, parsed output) of `npu-smi info -t KIND -i N -c C EXTRA` for every chip. A first chip
        that does not answer ends the round: the NPUs of one host are one model, the others would not
        either; a later chip that fails is only left out."""
        if kind in self.unsupported:
            return
        for n, c in enumerate(self.chips):
            text = self._run("info", "-t", kind, "-i", str(c["npu"]), "-c", str(c["chip"]), *extra, optional=True)
            parsed = parse(text or "")
            if parsed is None and n == 0:
                self.unsupported.add(kind)
                return
            if parsed is not None:
                yield c, parsed

    def _hccn_devices(self) -> dict[int, tuple[int, int]]:
        """The device id `hccn_tool -i` takes (the chip's Phy-ID, else its NPU id) -> (npu, chip),
        for the chips that have a RoCE port (not the 310 series)."""
        return {c.get("phy_id", c["npu"]): (c["npu"], c["chip"]) for c in self.chips
                if not str(c.get("name", "")).startswith("310")}

    def _hccn_start(self) -> None:
        devices = self._hccn_devices()
        if not devices:
            return
        if not self.hccn_tool:
            self.partial(f"hccn_tool not found on PATH or at {HCCN_TOOL_DEFAULT}: the NPUs' RoCE ports (link, speed, "
                         "packet, error, PFC and CNP counters) left out")
            return
        self.hccn = HccnPorts(self.hccn_tool)
        self.hccn.start(sorted(devices))

    def _hccs_links(self) -> None:
        for c, links in self._optional_per_chip("hccs", parse_hccs):
            self.hccs[(c["npu"], c["chip"])] = links

    def _hccs_bw(self) -> None:
        for c, bw in self._optional_per_chip("hccs-bw", parse_hccs_bw, "-time", str(HCCS_BW_SAMPLE_MS)):
            s = self.samples[(c["npu"], c["chip"])]
            s["hccs_tx"].append(bw["tx_bytes_per_s"])
            s["hccs_rx"].append(bw["rx_bytes_per_s"])

    # -- building -------------------------------------------------------------------------
    def _graph(self) -> Graph:
        g = self.fragment()
        host, sys_root = self.ctx.host, self.ctx.sys
        nics = host_nics(sys_root, self.ctx.cache)
        names, links, affinity = self.topo
        ids: dict[tuple[int, int], str] = {}
        seen: set[str] = set()
        for order, c in enumerate(self.chips):
            # npu-smi prints one Bus-Id for both chips of a 310P Duo card: the first chip listed keeps
            # the bare address (the id of the card's PCI function), the next ones add their chip id
            key = c["bus_id"] if c["bus_id"] not in seen else f"{c['bus_id']}:{c['chip']}"
            seen.add(key)
            eid = ids[(c["npu"], c["chip"])] = entity_id(T.NPU, host, key)
            s = self.samples[(c["npu"], c["chip"])]
            topo_name = names[order] if order < len(names) else None
            attrs = {"index": c["npu"], "chip": c["chip"], "name": c["name"], "health": s["health"][-1],
                     "pci_address": c["bus_id"], "npu_smi_version": self.version}
            for k in ("phy_id", "device"):
                if k in c:
                    attrs[k] = c[k]
            if c["npu"] in self.boards:
                attrs["firmware_version"] = self.boards[c["npu"]].get("Firmware Version")
            hccs = self.hccs.get((c["npu"], c["chip"]))
            if hccs and hccs["health"]:
                attrs["hccs_health"] = hccs["health"]
            if topo_name and topo_name in affinity:
                attrs["cpu_affinity"] = affinity[topo_name]
            attrs.update(place_device(g, sys_root, host, eid, c["bus_id"]))
            if attrs.get("numa_node") is None and attrs.get("cpu_affinity"):
                node = self._node_of_cpus(parse_cpulist(attrs["cpu_affinity"]))
                attrs["numa_node"] = node
                if node is not None:
                    g.edge_of(E.LOCAL_TO, eid, numa_id(host, node))
            g.entity_of(T.NPU, eid, attrs, self._metrics(s, hccs))
            link_nearest_nics(g, sys_root, host, eid, c["bus_id"], attrs.get("numa_node"), nics)
        for (npu, chip, pid), p in sorted(self.processes.items()):
            if (npu, chip) in ids:
                mem = p["memory_mb"] * MiB if p["memory_mb"] is not None else None
                g.edge_of(E.USES_DEVICE, process_id(host, pid), ids[(npu, chip)], {"pid": pid, "name": p["name"]},
                          {M.MEMORY_USED_BYTES: mem})
        if self.hccn is not None:
            self._hccn_ports(g, ids)
        order_ids = [ids[(c["npu"], c["chip"])] for c in self.chips]
        for (a, b), kind in sorted(links.items()):
            ia, ib = names.index(a), names.index(b)
            if ia < ib < len(order_ids) and kind in LINK_TYPES:
                g.edge_of(E.DEVICE_LINK, order_ids[ia], order_ids[ib], {"link_type": kind})
        return g

    def _hccn_ports(self, g: Graph, ids: dict[tuple[int, int], str]) -> None:
        for device, key in sorted(self._hccn_devices().items()):
            port = self.hccn.ports.get(device) if self.hccn is not None else None
            npu = g.entity(ids[key]) if key in ids else None
            if port is not None and npu is not None:
                add_port(g, self.ctx.host, device, port, npu)

    def _metrics(self, s: dict[str, list], hccs: dict | None = None) -> dict[str, float]:
        m: dict[str, float] = {}
        m.update(gauge(M.UTIL_PCT, s["util"]))
        m.update(gauge(M.MEM_BW_UTIL_PCT, s["bw"]))
        m.update(gauge(M.TEMPERATURE_C, s["temp"]))
        m.update(gauge(M.POWER_W, s["power"]))
        m.update(gauge(M.SM_CLOCK_MHZ, s["clock"]))
        if any(v is not None for v in s["clock_max"]):
            m[M.SM_CLOCK_MAX_MHZ] = max(v for v in s["clock_max"] if v is not None)
        mem = [(u, t) for u, t in s["mem"] if u is not None and t]
        if mem:
            used, total = mem[-1]
            m[M.MEMORY_USED_BYTES] = int(used * MiB)
            m["memory_used_bytes_max"] = int(max(u for u, _ in mem) * MiB)
            m[M.MEMORY_TOTAL_BYTES] = int(total * MiB)
            m[M.MEMORY_USED_PCT] = round(100 * used / total, 2)
        m.update(gauge(M.NVLINK_TX_BYTES_PER_S, s["hccs_tx"], 1))
        m.update(gauge(M.NVLINK_RX_BYTES_PER_S, s["hccs_rx"], 1))
        if hccs:
            up = [i for i, lanes in enumerate(hccs["lanes"]) if lanes > 0]  # 0 lanes: the link did not train
            m[M.NVLINK_LINKS] = len(hccs["lanes"])
            m[M.NVLINK_LINKS_UP] = len(up)
            m[M.NVLINK_LINKS_DOWN] = len(hccs["lanes"]) - len(up)
            capacity = sum(hccs["speed_gbps"][i] for i in up) * GB / 8 if hccs["speed_gbps"] else 0
            busiest = max(m.get(M.NVLINK_TX_BYTES_PER_S, -1), m.get(M.NVLINK_RX_BYTES_PER_S, -1))
            if capacity and busiest >= 0:
                m[M.NVLINK_UTIL_PCT] = round(100 * busiest / capacity, 2)
        return m

    def _node_of_cpus(self, cpus: list[int]) -> int | None:
        """The NUMA node holding a device's affine CPUs, when sysfs gives the device no node."""
        base = self.ctx.sys / "devices" / "system" / "node"
        if not cpus or not base.is_dir():
            return None
        for node in sorted(base.glob("node[0-9]*")):
            if cpus[0] in parse_cpulist(read_text(node / "cpulist")):
                return int(node.name[4:])
        return None
