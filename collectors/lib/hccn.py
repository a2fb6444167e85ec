"""The RoCE NIC of each Ascend NPU through Huawei's `hccn_tool`: link state and speed, health, IP,
optical module, and the port's packet counters (bytes, errors, retransmissions, PFC, CNP).

Every 910-series NPU carries its own RoCE port (200GE on Atlas 800T A2) that HCCL uses between
hosts; the host kernel does not see it, so /sys/class/infiniband and ethtool know nothing of it.
`hccn_tool -i <phy id> ...` asks the device (DSMI) instead. Commands and the lines they print
(the tool's own printf formats):

  -link -g         link status: UP
  -speed -g        Speed: 200000 Mb/s
  -net_health -g   net health status: Success        (Init, Fault, Socket fail, Receive timeout...)
  -ip -g           ipaddr:10.0.0.10 / netmask:255.255.255.0
  -optical -g      optical info: / present : present / temperature : 45 C / Tx Power0 : 0.9980 mW ...
  -stat -g         packet statistics: / mac_tx_pfc_pkt_num:0 / roce_new_pkt_rty_num:0 / ...

The parsers are pure functions of that text; `HccnPorts` runs the tool per NPU at both ends of
the window and turns two `-stat` readings into rates.
"""

from __future__ import annotations

import re
import time
from typing import Any

from witty_profiler.collectors.base import run_tool
from witty_profiler.topology import Entity, Graph, npuport
from witty_profiler.topology.vocabulary import M

RATES = ((M.PORT_RCV_BYTES_PER_S, ("mac_rx_total_oct_num",)), (M.PORT_XMIT_BYTES_PER_S, ("mac_tx_total_oct_num",)),
         (M.RX_PACKETS_PER_S, ("mac_rx_total_pkt_num",)), (M.TX_PACKETS_PER_S, ("mac_tx_total_pkt_num",)),
         *npuport.COUNTER_RATES)

HEALTHY_NET = {"Success", "Init"}  # -net_health states counted healthy (as Huawei's MindCluster counts them)

clock = time.monotonic  # module attribute so that tests replaying recorded counters can set the time


def _value(text: str, key: str) -> str | None:
    """The value after 'key:' on the first line that starts with it (case-insensitive)."""
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() == key.lower():
            return value.strip()
    return None


def parse_link(text: str) -> str | None:
    """'link status: UP' -> 'UP'."""
    value = _value(text, "link status")
    return value.upper() if value else None


def parse_speed(text: str) -> float | None:
    """'Speed: 200000 Mb/s' -> 200.0 (Gbit/s); 'Speed: unknown' -> None."""
    m = re.search(r"speed\s*:\s*(\d+)\s*Mb/s", text, re.IGNORECASE)
    return int(m.group(1)) / 1000 if m else None


def parse_net_health(text: str) -> str | None:
    """'net health status: Success' -> 'Success'."""
    return _value(text, "net health status")


def parse_ip(text: str) -> str | None:
    """'ipaddr:10.0.0.10' -> '10.0.0.10'."""
    return _value(text, "ipaddr")


def parse_stat(text: str) -> dict[str, int]:
    """'packet statistics:' then one 'name:count' per line -> {name: count}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        value = value.strip()
        if sep and value.isdigit():
            out[name.strip()] = int(value)
    return out


def _number(value: str | None) -> float | None:
    m = re.match(r"\s*(-?[0-9.]+)", value or "")
    return float(m.group(1)) if m else None


def parse_optical(text: str) -> dict[str, Any] | None:
    """`-optical -g`: presence, temperature (C), per-lane Tx/Rx power (mW) and the module's own
    Rx power thresholds; None when the output is not an optical report."""
    if "optical info" not in text.lower():
        return None
    fields = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields[" ".join(name.split()).lower()] = value.strip()
    lanes = sorted(k for k in fields if re.fullmatch(r"(tx|rx) power\d?", k))
    power = {k: _number(fields[k]) for k in lanes}
    return {
        "present": fields.get("present") == "present",
        "temperature_c": _number(fields.get("temperature")),
        "vendor": fields.get("vendor name") or None,
        "tx_power_mw": [v for k, v in power.items() if k.startswith("tx") and v is not None],
        "rx_power_mw": [v for k, v in power.items() if k.startswith("rx") and v is not None],
        "rx_power_low_mw": _number(fields.get("rxpower low thres")),
        "tx_power_low_mw": _number(fields.get("txpower low thres")),
    }


def stat_rates(first: dict, last: dict) -> dict[str, float]:
    """Rates over the window from two timed -stat readings; a counter that went backwards
    (`hccn_tool -stat -c` cleared it) is left out."""
    return npuport.counter_rates(counter_deltas(first, last), last["t"] - first["t"], RATES)


def counter_deltas(first: dict, last: dict) -> dict[str, int]:
    """Each counter's increase between two -stat readings; one that went backwards is left out."""
    a, b = first["stat"], last["stat"]
    return {n: b[n] - a[n] for n in b if n in a and b[n] >= a[n]}


class HccnPorts:
    """hccn_tool over one window for a set of NPU NICs (by the device id `-i` takes: the phy id)."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.ports: dict[int, dict[str, Any]] = {}
        self.failures: list[str] = []

    def run(self, device: int, *args: str) -> str | None:
        out, why = run_tool([self.tool, "-i", str(device), *args], f"hccn_tool -i {device} {' '.join(args)}")
        if why:
            self.failures.append(why)
        return out

    def start(self, devices: list[int]) -> None:
        for d in devices:
            port: dict[str, Any] = {"link": [], "first": None, "last": None}
            self.ports[d] = port
            text = self.run(d, "-ip", "-g")
            port["ip"] = parse_ip(text) if text else None
            self._read(d)

    def finish(self) -> None:
        for d, port in self.ports.items():
            self._read(d)
            for key, args, parse in (("speed", ("-speed", "-g"), parse_speed),
                                     ("net_health", ("-net_health", "-g"), parse_net_health),
                                     ("optical", ("-optical", "-g"), parse_optical)):
                text = self.run(d, *args)
                port[key] = parse(text) if text else None

    def _read(self, d: int) -> None:
        port = self.ports[d]
        text = self.run(d, "-link", "-g")
        port["link"].append(parse_link(text) if text else None)
        text = self.run(d, "-stat", "-g")
        if text is not None:
            reading = {"t": clock(), "stat": parse_stat(text)}
            port["first"] = port["first"] or reading
            port["last"] = reading


def add_port(g: Graph, host: str, device: int, port: dict[str, Any], npu: Entity) -> str:
    """The rdma_port of one NPU's RoCE port from a window of hccn_tool readings, linked to its NPU
    (has_port) and the NPU's NUMA node; returns its id."""
    first, last = port["first"], port["last"]
    metrics: dict[str, float] = stat_rates(first, last) if first and last else {}
    if port.get("speed"):
        npuport.add_link_speed(metrics, port["speed"])
    states = [s for s in port["link"] if s]
    attrs: dict[str, Any] = {"device": f"npu{device}", "port": 0, "link_layer": "Ethernet",
                             "state": states[-1] if states else None, "net_health": port.get("net_health"),
                             "ip": port.get("ip"), "numa_node": npu.attrs.get("numa_node")}
    if attrs["net_health"] is not None:
        attrs["net_healthy"] = attrs["net_health"] in HEALTHY_NET
    if len(set(states)) > 1:
        attrs["link_states_seen"] = states  # the link changed during the window
    if first and last:
        attrs.update(npuport.delta_attrs(counter_deltas(first, last)))
    optical = port.get("optical")
    if optical:
        attrs["optical_present"] = optical["present"]
        if optical["temperature_c"] is not None:
            metrics[M.TEMPERATURE_C] = optical["temperature_c"]
        for metric, lanes in ((M.OPTICAL_RX_POWER_MW, optical["rx_power_mw"]),
                              (M.OPTICAL_TX_POWER_MW, optical["tx_power_mw"])):
            if lanes:
                metrics[metric] = min(lanes)
        if optical["rx_power_mw"] and optical["rx_power_low_mw"] is not None:
            attrs["optical_rx_power_low"] = min(optical["rx_power_mw"]) < optical["rx_power_low_mw"]
    return npuport.add_port(g, host, npu, npuport.port_id(host, device), attrs, metrics)
