"""A past window of many hosts from Prometheus: node_exporter series -> graph JSON v1.

One range query per metric family and batch of hosts, with a step that keeps every series under
Prometheus's 11,000 points. Batches are cut by a series budget (the series each instance has, counted
by one cheap query first), so a host with hundreds of CPUs or interfaces takes a batch of its own
rather than making one answer huge; every family is read for a batch, its series folded into window
statistics as the answer arrives and its entities made, before the next batch is queried. Memory
holds one batch's statistics, not the window's series. Counters are read raw at each step
(Prometheus's value at a step is the newest sample at or before it) and turned into rates here the
way the live collectors do: the rate over the window, and p95/max of the per-step rates; a
counter that went down was reset (a reboot, an exporter restart) and counts from zero. Where a
family is summed on the server (per-CPU classes of modes, host modes), a reset of one summed series is
read as a reset of the sum. Gauges (memory, load, link speed) are the value at the end of the
window, as the live collectors read them at its end.

Entities have the live collectors' types, ids and metric names: host:<host>, cpu:<host>:<n>,
block_device:<host>:<name>, nic:<host>:<name>. A host is the `instance` label without its port,
or another label (`host_label`, e.g. nodename from node_uname_info). Accelerators come from
dcgm-exporter and npu-exporter series of the same hosts (sources/promaccel.py).
"""

from __future__ import annotations

import re
from array import array
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from witty_profiler.topology.version import VERSION as __version__
from witty_profiler.sources.promaccel import DCGM_SERIES, HOSTNAME_LABELS, NPU_SERIES, add_gpus, add_npus
from witty_profiler.sources.promapi import PrometheusAPI, auto_step, iso
from witty_profiler.sources.promcoverage import not_held
from witty_profiler.sources.promib import INFINIBAND_SERIES, add_ports
from witty_profiler.sources.promwitty import WITTY_SERIES, WittyReadBack
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.ids import cpu_id, entity_id, host_id
from witty_profiler.topology.models import CollectorStatus, Meta
from witty_profiler.topology.vocabulary import M, T
from witty_profiler.topology.windowstats import p95

BATCH_HOSTS = 100  # instances per batch at most: keeps a query's instance=~"a|b|..." short
# raw series a batch may hold: bounds an answer and the statistics held while a batch is read (the per-CPU
# query's answer has 6 of every 8 raw CPU series, the others about as many as they touch)
SERIES_BUDGET = 10_000
# raw samples a batch's largest query may load on the server: Prometheus refuses a query that loads more
# than --query.max-samples (50 million by default)
SAMPLES_BUDGET = 20_000_000
# (metric, part of the CPU time) as collectors/cpu.py reads /proc/stat: busy = user + nice + system + irq +
# softirq (guest time is inside user); softirq is also inside system
CPU_SHARES = ((M.CPU_UTIL_PCT, "busy"), (M.CPU_USER_PCT, "user"), (M.CPU_SYSTEM_PCT, "system"),
              (M.CPU_SOFTIRQ_PCT, "softirq"), (M.CPU_IOWAIT_PCT, "iowait"), (M.CPU_STEAL_PCT, "steal"))
PER_CPU_PARTS = {"busy": ("user", "system", "softirq"), "system": ("system", "softirq")}  # classes of _per_cpu
_BAD_HOST_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")
_PSI = {"cpu_waiting": M.PSI_CPU_SOME_PCT, "io_waiting": M.PSI_IO_SOME_PCT, "io_stalled": M.PSI_IO_FULL_PCT,
        "memory_waiting": M.PSI_MEMORY_SOME_PCT, "memory_stalled": M.PSI_MEMORY_FULL_PCT}
_VMSTAT = {"pgmajfault": M.MAJOR_FAULTS_PER_S, "pswpin": M.SWAP_IN_PAGES_PER_S, "pswpout": M.SWAP_OUT_PAGES_PER_S}
_DISK = {"read_bytes": M.READ_BYTES_PER_S, "written_bytes": M.WRITE_BYTES_PER_S, "reads_completed": M.READ_IOPS,
         "writes_completed": M.WRITE_IOPS}
_DISK_COUNTERS = "read_bytes|written_bytes|reads_completed|writes_completed|io_time_seconds|read_time_seconds|" \
                 "write_time_seconds"
_NIC = {"receive_bytes": M.RX_BYTES_PER_S, "transmit_bytes": M.TX_BYTES_PER_S,
        "receive_packets": M.RX_PACKETS_PER_S, "transmit_packets": M.TX_PACKETS_PER_S,
        "receive_drop": M.RX_DROPS_PER_S, "transmit_drop": M.TX_DROPS_PER_S,
        "receive_errs": M.RX_ERRORS_PER_S, "transmit_errs": M.TX_ERRORS_PER_S}

# node_network_* gauges read at the end of the window (node_exporter's netclass collector)
NIC_STATE = "speed_bytes|mtu_bytes|address_assign_type|protocol_type|info"
ARPHRD_LOOPBACK = 772

# every node_exporter series the families read: what a batch's series budget counts
NODE_SERIES = "|".join([
    "node_cpu_seconds_total", "node_load1", "node_memory_(MemTotal|MemAvailable|SwapTotal|SwapFree)_bytes",
    f"node_vmstat_({'|'.join(_VMSTAT)})", f"node_pressure_({'|'.join(_PSI)})_seconds_total",
    f"node_disk_({_DISK_COUNTERS})_total", "node_network_(receive|transmit)_(bytes|packets|drop|errs)_total",
    f"node_network_({NIC_STATE})", "node_netstat_Tcp_(OutSegs|RetransSegs)"])


# scrape intervals people configure: a spacing of samples within 10 % of one is taken as it
NICE_INTERVALS = (0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(text: Any) -> float | None:
    """Seconds of a Prometheus duration as the targets API gives it ('15s', '1m30s', '500ms')."""
    if not isinstance(text, str) or not text:
        return None
    parts = _DURATION.findall(text)
    if "".join(a + b for a, b in parts) != text:
        return None
    return sum(float(a) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[b] for a, b in parts)




def nic_attrs(dev: str, n: dict[str, Any]) -> dict[str, Any]:
    """The attrs of a NIC from node_exporter's netclass series, as collectors/network.py reads sysfs: name,
    operstate, mtu and virtual. Prometheus has no sysfs path, so `virtual` comes from the MAC address's
    origin (/sys/class/net/X/addr_assign_type, 0 = permanent, burnt into a device; veth pairs, bridges and
    dummies get a random or derived one) and loopback's link type."""
    attrs: dict[str, Any] = {"name": dev}
    if n.get("operstate"):
        attrs["operstate"] = n["operstate"]
    if isinstance(n.get("mtu_bytes"), float):
        attrs["mtu"] = int(n["mtu_bytes"])
    if isinstance(n.get("address_assign_type"), float):
        attrs["virtual"] = n["address_assign_type"] != 0 or n.get("protocol_type") == ARPHRD_LOOPBACK
    return attrs


# -- counters over the window ---------------------------------------------------------------
class Steps:
    """The increases of one counter (or a sum of counters) per step: t -> (seconds, increase).

    While every series added has the same step ends (a range query's grid: the usual case) they are held
    as three arrays of doubles, a sixth of two dicts' memory: a batch of hosts holds two of these per
    CPU and about eight per disk and NIC. Reading or setting `dv`/`dt` turns them into the dicts for good."""

    __slots__ = ("_ends", "_inc", "_span", "_dv", "_dt")

    def __init__(self) -> None:
        self._ends: array | None = None
        self._inc: array | None = None
        self._span: array | None = None
        self._dv: dict[float, float] | None = None
        self._dt: dict[float, float] | None = None

    def add(self, values: list[tuple[float, float]]) -> Steps:
        if len(values) < 2:
            return self
        pairs = list(zip(values, values[1:]))
        ends = array("d", [t1 for _, (t1, _) in pairs])
        inc = [v1 - v0 if v1 >= v0 else v1 for (_, v0), (_, v1) in pairs]  # went down: reset, counts from zero
        span = [t1 - t0 for (t0, _), (t1, _) in pairs]
        if self._dv is None and self._ends is None:
            self._ends, self._inc, self._span = ends, array("d", inc), array("d", span)
        elif self._dv is None and self._ends == ends:
            self._inc = array("d", [a + b for a, b in zip(self._inc, inc)])  # type: ignore[arg-type]
            self._span = array("d", [max(a, b) for a, b in zip(self._span, span)])  # type: ignore[arg-type]
        else:
            dv, dt = self._dicts()
            for t1, d, seconds in zip(ends, inc, span):
                dv[t1] += d
                dt[t1] = max(dt.get(t1, 0.0), seconds)
        return self

    def _dicts(self) -> tuple[dict[float, float], dict[float, float]]:
        if self._dv is None or self._dt is None:
            self._dv, self._dt = defaultdict(float), {}
            if self._ends is not None:
                self._dv.update(zip(self._ends, self._inc))  # type: ignore[arg-type]
                self._dt.update(zip(self._ends, self._span))  # type: ignore[arg-type]
            self._ends = self._inc = self._span = None
        return self._dv, self._dt

    @property
    def dv(self) -> dict[float, float]:
        return self._dicts()[0]

    @dv.setter
    def dv(self, value: dict[float, float]) -> None:
        self._dicts()
        self._dv = value

    @property
    def dt(self) -> dict[float, float]:
        return self._dicts()[1]

    @dt.setter
    def dt(self, value: dict[float, float]) -> None:
        self._dicts()
        self._dt = value

    def increases(self) -> dict[float, float]:
        """t -> increase, in time order (a new dict while held as arrays: nothing kept)."""
        return dict(zip(self._ends, self._inc)) if self._ends is not None else self._dv or {}  # type: ignore

    def __bool__(self) -> bool:
        return self._ends is not None or bool(self._dt)

    def rate(self) -> float | None:
        span = sum(self._span if self._ends is not None else (self._dt or {}).values())  # type: ignore[arg-type]
        return sum(self.increases().values()) / span if span > 0 else None

    def step_rates(self) -> list[float]:
        if self._ends is not None:
            return [d / s for d, s in zip(self._inc, self._span) if s > 0]  # type: ignore[arg-type]
        dv, dt = self._dicts()
        return [dv[t] / dt[t] for t in sorted(dt) if dt[t] > 0]


def stats(name: str, overall: float | None, per_step: list[float], digits: int = 3) -> dict[str, float]:
    if overall is None:
        return {}
    out = {name: round(overall, digits)}
    if len(per_step) >= 2:
        out[f"{name}_p95"] = round(p95(per_step), digits)  # type: ignore[arg-type]
        out[f"{name}_max"] = round(max(per_step), digits)
    return out


def rate_metrics(name: str, steps: Steps, scale: float = 1.0, digits: int = 3) -> dict[str, float]:
    if not steps:
        return {}
    inc = steps.increases()
    if inc and all(v == 0 for v in inc.values()) and len(inc) >= 2:
        return {name: 0.0, f"{name}_p95": 0.0, f"{name}_max": 0.0}
    rate = steps.rate()
    return stats(name, None if rate is None else rate * scale, [r * scale for r in steps.step_rates()], digits)


def ratio_metrics(name: str, num: Steps, den: Steps, scale: float = 100.0, digits: int = 3) -> dict[str, float]:
    num_inc, den_inc = num.increases(), den.increases()
    total = sum(den_inc.values())
    if not num or not den or total <= 0:
        return {}
    per = [num_inc.get(t, 0.0) / den_inc[t] * scale for t in sorted(den_inc) if den_inc[t] > 0]
    return stats(name, sum(num_inc.values()) / total * scale, per, digits)


# -- hosts --------------------------------------------------------------------------------
def host_name(value: str, strip_port: bool = True) -> str:
    """A host name for ids from a label value: '10.0.0.2:9100' -> '10.0.0.2', '[::1]:9100' -> '--1'."""
    if strip_port:
        if value.startswith("[") and "]" in value:
            value = value[1:value.index("]")]
        elif value.count(":") == 1:
            value = value.split(":", 1)[0]
    name = _BAD_HOST_CHARS.sub("-", value)[:253] or "unknown"
    return name if name[0] not in ".-" else f"h{name}"


def selector(match: str | None) -> str:
    """The matchers inside a '{job="node"}' selector, without the braces ('' for none)."""
    text = (match or "").strip()
    if not text:
        return ""
    if not (text.startswith("{") and text.endswith("}")):
        raise InputError(f"bad --match {text!r}: give a label selector such as '{{job=\"node\"}}'")
    return text[1:-1].strip().rstrip(",")


def _escape(value: str) -> str:
    return re.escape(value).replace("\\", "\\\\").replace('"', '\\"')


@dataclass
class Family:
    name: str
    what: str  # the series it needs, for messages
    hosts: set[str] = field(default_factory=set)


@dataclass
class PromWindow:
    """What one build read: the graph and the cost of reading it."""
    graph: Graph
    requests: int
    bytes: int
    seconds: float
    series: int
    points: int


class NodeSource:
    def __init__(self, api: PrometheusAPI, start: float, end: float, step: float | None = None,
                 match: str | None = None, host_label: str = "instance", batch_hosts: int = BATCH_HOSTS) -> None:
        if end <= start:
            raise InputError(f"the window ends ({iso(end)}) before it starts ({iso(start)})")
        self.api, self.start, self.end = api, start, end
        if step is not None and step <= 0:
            raise InputError("--step must be above 0")
        # without --step: the scrape interval, found once the hosts are known (detect_step)
        self.step = float(step) if step else auto_step(end - start)
        self.step_given = bool(step)
        self.scrape_interval: float | None = None
        self.match = selector(match)
        self.host_label = host_label
        self.batch_hosts = max(1, batch_hosts)
        self.host_of_instance: dict[str, str] = {}
        self.times: dict[str, list[float]] = defaultdict(list)  # host -> first/last sample times seen
        self.families: dict[str, Family] = {}
        self.batches: list[int] = []  # instances in each batch read
        self.budget = 0  # raw series per batch

    # -- queries --------------------------------------------------------------------------
    def _sel(self, *extra: str) -> str:
        parts = [p for p in (*extra, self.match) if p]
        return "{" + ", ".join(parts) + "}"

    def _range(self, query: str) -> Iterator[tuple[dict, list]]:
        """(labels, values) of each series, as the answer arrives."""
        return self.api.range_series(query, self.start, self.end, self.step)

    def discover(self) -> list[str]:
        """The instances with node_exporter series in the window, and each one's host name."""
        for probe in ("node_uname_info", "node_load1", "node_cpu_seconds_total"):
            series = list(self._range(f"max by (instance, {self.host_label}) ({probe}{self._sel()})"
                                      if self.host_label != "instance" else
                                      f"count by (instance) ({probe}{self._sel()})"))
            if series:
                break
        else:
            raise InputError(f"no node_exporter series (node_uname_info, node_load1, node_cpu_seconds_total) "
                             f"matching {self._sel() if self.match else 'any selector'} between {iso(self.start)} "
                             f"and {iso(self.end)} on {self.api.name}")
        for labels, _ in series:
            instance = labels.get("instance")
            if instance is None:
                continue
            if self.host_label == "instance":
                self.host_of_instance[instance] = host_name(instance)
            elif labels.get(self.host_label):
                self.host_of_instance[instance] = host_name(labels[self.host_label], strip_port=False)
        if not self.host_of_instance:
            raise InputError(f"no node_exporter series with a {self.host_label!r} label "
                             f"(and an instance label) on {self.api.name}")
        hosts = list(self.host_of_instance.values())
        twice = sorted({h for h in hosts if hosts.count(h) > 1})
        if twice:
            raise InputError(f"host name {twice[0]} stands for several instances: use --host-label with a label that "
                             "tells them apart")
        return sorted(self.host_of_instance)

    def _family(self, key: str, what: str, query_of: Any, instances: list[str]) -> Iterator[tuple[str, dict, list]]:
        """(host, labels, values) of one family's series of these instances (one query), one at a time as
        the answer arrives: the caller folds each into its window statistics before the next is read."""
        fam = self.families.setdefault(key, Family(key, what))
        only = f'instance=~"{"|".join(_escape(i) for i in instances)}"'
        for labels, values in self._range(query_of(only)):
            host = self.host_of_instance.get(labels.get("instance", ""))
            if host is None or not values:
                continue
            fam.hosts.add(host)
            times = self.times[host]
            times[:] = [min([values[0][0], *times[:1]]), max([values[-1][0], *times[1:2]])]
            yield host, labels, values

    def series_counts(self, instances: list[str]) -> dict[str, int]:
        """Raw series of the node families per instance, at the window's start and end (the larger): one
        query that loads two samples a series."""
        counts: dict[str, int] = {}
        name = f'__name__=~"{NODE_SERIES}"'
        query = f"count by (instance) ({self._sel(name)})"
        for labels, values in self.api.range_series(query, self.start, self.end, max(self.end - self.start, 1.0)):
            if labels.get("instance") in self.host_of_instance and values:
                counts[labels["instance"]] = int(max(v for _, v in values))
        return counts

    def plan(self, instances: list[str]) -> list[list[str]]:
        """Batches of instances within the series budget (see plan_batches)."""
        points = int((self.end - self.start) / self.step) + 1
        self.budget = max(1, min(SERIES_BUDGET, SAMPLES_BUDGET // points))
        return plan_batches(instances, self.series_counts(instances), self.budget, self.batch_hosts)

    # -- the graph ------------------------------------------------------------------------
    def detect_step(self) -> None:
        """The scrape interval of node_exporter's targets and, without --step, the default step from it (a
        step under the interval reads some samples twice, one above it skips some). Prometheus's targets
        say it (their scrapeInterval, the current configuration); else it is told from the samples' spacing
        at the end of the window (the median over hosts of node_load1's samples in up to an hour)."""
        interval = self._configured_interval() or self._sampled_interval()
        if interval is None:
            return
        self.scrape_interval = interval
        if not self.step_given:
            self.step = max(interval, auto_step(self.end - self.start, least=0.0))

    def _configured_interval(self) -> float | None:
        try:
            data = self.api.get("targets", {"state": "active"})
        except InputError:  # a server or proxy that does not answer the targets API (or too much): the samples tell
            return None
        targets = data.get("activeTargets") if isinstance(data, dict) else None
        if not isinstance(targets, list):
            return None
        found = sorted(parse_duration(t.get("scrapeInterval")) or 0.0 for t in targets
                       if isinstance(t, dict) and isinstance(t.get("labels"), dict)
                       and t["labels"].get("instance") in self.host_of_instance)
        found = [f for f in found if f > 0]
        return found[len(found) // 2] if found else None

    def _sampled_interval(self) -> float | None:
        span = min(self.end - self.start, 3600.0)
        data = self.api.get("query", {"query": f"quantile(0.5, count_over_time(node_load1{self._sel()}[{span:.0f}s]))",
                                      "time": f"{self.end:.3f}"})
        try:
            count = float(((data or {}).get("result") or [])[0]["value"][1])
        except (IndexError, KeyError, TypeError, ValueError):
            return None
        if count < 2:
            return None
        guess = span / (count - 0.5)  # count samples in the span: span / interval of them, give or take one
        nice = min(NICE_INTERVALS, key=lambda n: abs(n - guess))
        return nice if abs(nice - guess) <= 0.1 * nice else round(guess, 1)

    def build(self) -> Graph:
        instances = self.discover()
        self.detect_step()
        hosts = sorted(self.host_of_instance[i] for i in instances)
        g = Graph(Meta(hosts=hosts, tool_version=__version__, started_at=iso(self.start), duration_s=round(self.end - self.start, 3),
                       interval_s=self.step, source="prometheus"))
        host_metrics: dict[str, dict[str, float]] = {h: {} for h in hosts}
        accelerators: dict[str, list[CollectorStatus]] = defaultdict(list)
        witty = WittyReadBack(g, self.step)
        for batch in self.plan(instances):
            self.batches.append(len(batch))
            self._cpu(g, host_metrics, batch)
            self._memory(host_metrics, batch)
            self._pressure(host_metrics, batch)
            self._disks(g, batch)
            self._nics(g, batch)
            self._tcp(host_metrics, batch)
            batch_hosts = sorted(self.host_of_instance[i] for i in batch)
            for name, status in self._accelerators(g, batch_hosts).items():
                accelerators[name].append(status)
            # after the accelerators: the processes' device edges join their entities
            witty.add(self._other_rows("witty", WITTY_SERIES, "witty_*", batch_hosts, "host"), batch_hosts)
            # node_exporter's own, but matched as the other exporters' are (by address), so that a site's
            # separate job for them counts too
            accelerators["prometheus.rdma"].append(
                add_ports(g, self._other_rows("rdma", INFINIBAND_SERIES, "node_infiniband_*", batch_hosts)))
        for instance in instances:
            host = self.host_of_instance[instance]
            g.entity_of(T.HOST, host_id(host), {"name": host, "instance": instance}, host_metrics[host])
        windows = {}
        for host in hosts:
            seen = self.times.get(host)
            if seen:
                windows[host] = {"started_at": iso(seen[0]), "duration_s": round(seen[1] - seen[0], 3)}
        g.meta.extra["windows"] = windows
        if self.scrape_interval is not None:
            g.meta.extra["scrape_interval_s"] = self.scrape_interval
        cpus = defaultdict(int)
        for e in g.entities(T.CPU):
            cpus[e.id.split(":")[1]] += 1
        for h in hosts:
            if cpus.get(h):
                g.meta.host_info[h] = {"cpus": cpus[h], **g.meta.host_info.get(h, {})}
        node = self._status(hosts)
        s = self.api.stats
        node.extra["queries"] = {"requests": s.requests, "batches": len(self.batches),
                                 "largest_batch_hosts": max(self.batches), "series_budget": self.budget,
                                 "series": s.series, "points": s.points, "bytes": s.bytes}
        g.meta.collectors = {"prometheus.node": node,
                             "prometheus.dcgm": merged(accelerators["prometheus.dcgm"], add_gpus),
                             "prometheus.npu": merged(accelerators["prometheus.npu"], add_npus),
                             "prometheus.rdma": merged(accelerators["prometheus.rdma"], add_ports),
                             "prometheus.process": witty.status(), **not_held()}
        return g

    def _status(self, hosts: list[str]) -> CollectorStatus:
        missing = []
        for fam in (f for k, f in self.families.items() if not k.startswith("accel.")):
            if not fam.hosts:
                missing.append(f"no {fam.what} series")
            elif len(fam.hosts) < len(hosts):
                lacking = sorted(set(hosts) - fam.hosts)
                missing.append(f"no {fam.what} series on {len(lacking)} of {len(hosts)} hosts "
                               f"({', '.join(lacking[:3])}{' …' if len(lacking) > 3 else ''})")
        if missing:
            return CollectorStatus("partial", "; ".join(missing))
        return CollectorStatus("ok")

    def _accelerators(self, g: Graph, hosts: list[str]) -> dict[str, CollectorStatus]:
        return {"prometheus.dcgm": add_gpus(g, self._other_rows("dcgm", DCGM_SERIES, "DCGM_FI_*", hosts,
                                                                *HOSTNAME_LABELS)),
                "prometheus.npu": add_npus(g, self._other_rows("npu", NPU_SERIES, "npu_chip_info_*", hosts))}

    def _other_rows(self, key: str, names: str, what: str, hosts: list[str],
                    *own_labels: str) -> Iterator[tuple[str, dict, list]]:
        """(host, labels, values) of series another exporter of the same hosts serves (`names`, a regex of
        metric names). Such exporters run as other jobs, so --match (node_exporter's selector) does not
        apply: a series belongs to a host by its instance's address (any port), else by the exporter's own
        host label (`own_labels`: dcgm-exporter's Hostname or hostname, this tool's host) equal to the host's
        name."""
        by_address = {host_name(i): h for i, h in self.host_of_instance.items()}
        fam = self.families.setdefault(f"accel.{key}", Family(key, what))
        for i in range(0, len(hosts), self.batch_hosts):
            batch = hosts[i:i + self.batch_hosts]
            addresses = [a for a, h in by_address.items() if h in batch]
            name = f'__name__=~"{names}"'
            query = f'{{{name}, instance=~"({"|".join(_escape(a) for a in addresses)})(:[0-9]+)?"}}'
            for label in own_labels:
                query += f' or {{{name}, {label}=~"{"|".join(_escape(h) for h in batch)}"}}'
            for labels, values in self._range(query):
                host = by_address.get(host_name(labels.get("instance", "")))
                if host is None:
                    host = next((labels[k] for k in own_labels if labels.get(k) in batch), None)
                if host is None or not values:
                    continue
                fam.hosts.add(host)
                yield host, labels, values

    def _cpu(self, g: Graph, host_metrics: dict, instances: list[str]) -> None:
        by = "instance" if self.host_label == "instance" else f"instance, {self.host_label}"
        host_rows = self._family(
            "cpu", "node_cpu_seconds_total",
            lambda only: f"sum by ({by}, mode) (node_cpu_seconds_total{self._sel(only)})", instances)
        modes: dict[str, dict[str, Steps]] = defaultdict(lambda: defaultdict(Steps))
        for host, labels, values in host_rows:
            modes[host][labels.get("mode", "")].add(values)
            modes[host]["total"].add(values)
        for host, m in modes.items():
            parts = {"busy": ("user", "nice", "system", "irq", "softirq"), "user": ("user", "nice"),
                     "system": ("system", "irq", "softirq"), "softirq": ("softirq",), "iowait": ("iowait",),
                     "steal": ("steal",)}
            for metric, part in CPU_SHARES:
                num = Steps()
                for mode in parts[part]:
                    if mode in m:
                        for t in m[mode].dt:
                            num.dt[t] = m[mode].dt[t]
                            num.dv[t] += m[mode].dv[t]
                if not num:
                    num.dt = dict(m["total"].dt)
                    num.dv = defaultdict(float, {t: 0.0 for t in m["total"].dt})
                host_metrics[host].update(ratio_metrics(metric, num, m["total"], digits=2))
        self._per_cpu(g, by, instances)
        for host, _, values in self._family("load", "node_load1", lambda only: f"node_load1{self._sel(only)}",
                                            instances):
            host_metrics[host][M.LOAD1] = values[-1][1]

    def _per_cpu(self, g: Graph, by: str, instances: list[str]) -> None:
        """Each CPU's busy, user, system, softirq, iowait and steal shares: node_cpu_seconds_total summed into
        six classes of modes per CPU on the server (user+nice, system+irq, softirq, iowait, steal, idle)."""
        rows = self._family(
            "cpu", "node_cpu_seconds_total",
            lambda only: (f'sum by ({by}, cpu, cls) (label_replace(label_replace(label_replace('
                          f'node_cpu_seconds_total{self._sel(only)}, "cls", "$1", "mode", "(.*)"), '
                          f'"cls", "user", "mode", "user|nice"), "cls", "system", "mode", "system|irq"))'), instances)
        cpus: dict[tuple[str, str], dict[str, Steps]] = defaultdict(lambda: defaultdict(Steps))
        for host, labels, values in rows:
            c = cpus[(host, labels.get("cpu", ""))]
            cls = labels.get("cls", "")
            c["total"].add(values)
            c[cls].add(values)
            if cls in PER_CPU_PARTS["busy"]:
                c["busy"].add(values)
            if cls in PER_CPU_PARTS["system"]:
                c["system+"].add(values)
        for (host, cpu), c in sorted(cpus.items()):
            if not cpu.isdigit():
                continue
            metrics: dict[str, float] = {}
            for metric, part in CPU_SHARES:
                num = c["busy"] if part == "busy" else c["system+"] if part == "system" else c.get(part)
                if not num:  # a mode with no time in the window has no series of its own: 0 %
                    num = Steps()
                    num.dt = dict(c["total"].dt)
                    num.dv = defaultdict(float, {t: 0.0 for t in c["total"].dt})
                metrics.update(ratio_metrics(metric, num, c["total"], digits=2))
            g.entity_of(T.CPU, cpu_id(host, int(cpu)), {"cpu": int(cpu)}, metrics)

    def _memory(self, host_metrics: dict, instances: list[str]) -> None:
        rows = self._family("memory", "node_memory_*_bytes", lambda only: self._sel(
            '__name__=~"node_memory_(MemTotal|MemAvailable|SwapTotal|SwapFree)_bytes"', only), instances)
        last: dict[str, dict[str, float]] = defaultdict(dict)
        for host, labels, values in rows:
            last[host][labels["__name__"][len("node_memory_"):-len("_bytes")]] = values[-1][1]
        for host, info in last.items():
            m = host_metrics[host]
            if "MemTotal" in info:
                m[M.MEM_TOTAL_BYTES] = info["MemTotal"]
                if "MemAvailable" in info and info["MemTotal"] > 0:
                    m[M.MEM_AVAILABLE_BYTES] = info["MemAvailable"]
                    m[M.MEM_USED_PCT] = round((1 - info["MemAvailable"] / info["MemTotal"]) * 100, 2)
            if "SwapTotal" in info:
                m[M.SWAP_TOTAL_BYTES] = info["SwapTotal"]
                m[M.SWAP_USED_BYTES] = info["SwapTotal"] - info.get("SwapFree", 0)
        rows = self._family("vmstat", "node_vmstat_pgmajfault", lambda only: self._sel(
            f'__name__=~"node_vmstat_({"|".join(_VMSTAT)})"', only), instances)
        for host, labels, values in rows:
            host_metrics[host].update(rate_metrics(_VMSTAT[labels["__name__"][len("node_vmstat_"):]],
                                                   Steps().add(values), digits=2))

    def _pressure(self, host_metrics: dict, instances: list[str]) -> None:
        rows = self._family("pressure", "node_pressure_* (PSI)", lambda only: self._sel(
            f'__name__=~"node_pressure_({"|".join(_PSI)})_seconds_total"', only), instances)
        for host, labels, values in rows:
            key = labels["__name__"][len("node_pressure_"):-len("_seconds_total")]
            host_metrics[host].update(rate_metrics(_PSI[key], Steps().add(values), scale=100.0))  # s/s -> %

    def _disks(self, g: Graph, instances: list[str]) -> None:
        rows = self._family("disk", "node_disk_*", lambda only: self._sel(
            f'__name__=~"node_disk_({_DISK_COUNTERS})_total"', only), instances)
        devs: dict[tuple[str, str], dict[str, Steps]] = defaultdict(lambda: defaultdict(Steps))
        for host, labels, values in rows:
            counter = labels["__name__"][len("node_disk_"):-len("_total")]
            d = devs[(host, labels.get("device", "?"))]
            d[counter].add(values)
            if counter in ("reads_completed", "writes_completed"):
                d["ios"].add(values)
            if counter in ("read_time_seconds", "write_time_seconds"):
                d["wait_s"].add(values)
        for (host, dev), d in sorted(devs.items()):
            metrics: dict[str, float] = {}
            metrics.update(rate_metrics(M.DISK_UTIL_PCT, d["io_time_seconds"], scale=100.0))
            for counter, metric in _DISK.items():
                metrics.update(rate_metrics(metric, d[counter]))
            metrics.update(ratio_metrics(M.AWAIT_MS, d["wait_s"], d["ios"], scale=1000.0))
            g.entity_of(T.BLOCK_DEVICE, entity_id(T.BLOCK_DEVICE, host, dev), {"name": dev}, metrics)

    def _nics(self, g: Graph, instances: list[str]) -> None:
        rows = self._family("network", "node_network_*", lambda only: self._sel(
            f'__name__=~"node_network_(receive|transmit)_(bytes|packets|drop|errs)_total|node_network_({NIC_STATE})"',
            only), instances)
        nics: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: defaultdict(Steps))
        for host, labels, values in rows:
            name = labels["__name__"]
            n = nics[(host, labels.get("device", "?"))]
            if name == "node_network_info":  # one series per set of labels: the one seen last holds
                if values[-1][0] >= n.get("info_at", -1.0):
                    n["info_at"], n["operstate"] = values[-1][0], labels.get("operstate")
            elif name[len("node_network_"):] in NIC_STATE:
                n[name[len("node_network_"):]] = values[-1][1]
            else:
                n[name[len("node_network_"):-len("_total")]].add(values)
        for (host, dev), n in sorted(nics.items()):
            metrics: dict[str, float] = {}
            for counter, metric in _NIC.items():
                if counter in n:
                    metrics.update(rate_metrics(metric, n[counter]))
            speed = n.get("speed_bytes")
            if isinstance(speed, float) and speed > 0:
                mbps = speed * 8 / 1e6
                metrics[M.SPEED_MBPS] = round(mbps, 3)
                rx, tx = n.get("receive_bytes"), n.get("transmit_bytes")
                if rx and tx and rx.rate() is not None and tx.rate() is not None:
                    per = [max(a, b) * 8 / (mbps * 1e6) * 100 for a, b in zip(rx.step_rates(), tx.step_rates())]
                    metrics.update(stats(M.LINK_UTIL_PCT, max(rx.rate(), tx.rate()) * 8 / (mbps * 1e6) * 100, per))
            g.entity_of(T.NIC, entity_id(T.NIC, host, dev), nic_attrs(dev, n), metrics)

    def _tcp(self, host_metrics: dict, instances: list[str]) -> None:
        rows = self._family("tcp", "node_netstat_Tcp_RetransSegs/OutSegs", lambda only: self._sel(
            '__name__=~"node_netstat_Tcp_(OutSegs|RetransSegs)"', only), instances)
        tcp: dict[str, dict[str, Steps]] = defaultdict(lambda: defaultdict(Steps))
        for host, labels, values in rows:
            tcp[host][labels["__name__"].rsplit("_", 1)[1]].add(values)
        for host, t in tcp.items():
            if "OutSegs" not in t or "RetransSegs" not in t:
                continue
            host_metrics[host].update({**rate_metrics(M.TCP_OUT_SEGS_PER_S, t["OutSegs"]),
                                       **rate_metrics(M.TCP_RETRANS_SEGS_PER_S, t["RetransSegs"]),
                                       **ratio_metrics(M.TCP_RETRANS_PCT, t["RetransSegs"], t["OutSegs"])})


def plan_batches(instances: list[str], counts: dict[str, int], budget: int, most_hosts: int) -> list[list[str]]:
    """The instances in order, cut into batches whose raw series add up to the budget at most, and of
    most_hosts instances at most. An instance over the budget alone is a batch of its own; one without a
    count (no series at the window's start or end) is taken to have as many as the largest counted."""
    guess = max(counts.values(), default=1)
    batches: list[list[str]] = []
    batch: list[str] = []
    total = 0
    for instance in instances:
        n = counts.get(instance, guess)
        if batch and (total + n > budget or len(batch) >= most_hosts):
            batches.append(batch)
            batch, total = [], 0
        batch.append(instance)
        total += n
    return batches + [batch] if batch else batches


def merged(statuses: list[CollectorStatus], reader: Any) -> CollectorStatus:
    """One status of an exporter read in batches of hosts: a batch where it found nothing (what `reader`
    says of no series) counts only where every batch found nothing."""
    nothing = reader(Graph(Meta()), iter(()))
    found = [s for s in statuses if (s.status, s.reason) != (nothing.status, nothing.reason)]
    if not found:
        return nothing
    if all(s.status == "ok" for s in found):
        return CollectorStatus("ok")
    reasons = list(dict.fromkeys(s.reason for s in found if s.status != "ok" and s.reason))
    status = "unavailable" if all(s.status == "unavailable" for s in found) else "partial"
    return CollectorStatus(status, "; ".join(reasons[:3]) + (" …" if len(reasons) > 3 else ""))


def collect_window(url: str, start: float, end: float, *, step: float | None = None, match: str | None = None,
                   host_label: str = "instance", auth: str | None = None, timeout_s: float = 30.0,
                   batch_hosts: int = BATCH_HOSTS) -> PromWindow:
    """The graph of [start, end] (Unix seconds) from the Prometheus at `url`, with the cost of the queries."""
    api = PrometheusAPI(url, auth=auth, timeout_s=timeout_s)
    try:
        graph = NodeSource(api, start, end, step=step, match=match, host_label=host_label,
                           batch_hosts=batch_hosts).build()
    except InputError:
        raise
    except (KeyError, IndexError, ValueError, TypeError, AttributeError, ArithmeticError) as exc:
        # a well-formed answer this tool cannot read (a series of another name than asked, a label missing)
        last = api.stats.queries[-1] if api.stats.queries else "?"
        what = f"no label {exc.args[0]!r}" if isinstance(exc, KeyError) and exc.args else f"{type(exc).__name__}: {exc}"
        raise InputError(f"Prometheus at {api.name} answered {last[:120]!r} with a series this tool cannot read "
                         f"({what[:120]})") from None
    s = api.stats
    return PromWindow(graph, s.requests, s.bytes, round(s.seconds, 3), s.series, s.points)
