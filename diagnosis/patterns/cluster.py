"""Cross-host patterns: they compare hosts, so they judge a merged graph of several hosts or the
digests of `cluster diagnose DIR`, and are not evaluated on one host. Listed in their layers:
control.straggler_host (6) and network.odd_host (4). The statistics are in diagnosis.crosshost."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from witty_profiler.diagnosis import evidence as ev
from witty_profiler.diagnosis.catalog import Param, Pattern, Threshold, Verdict, clear, finding, not_evaluated, worst
from witty_profiler.diagnosis.crosshost import odd_facts, rank_outliers
from witty_profiler.diagnosis.digest import RANK_SIGNALS
from witty_profiler.diagnosis.models import Evidence
from witty_profiler.diagnosis.scope import Scope
from witty_profiler.topology.ids import host_id
from witty_profiler.topology.vocabulary import E

_ONE_HOST = ("{n} in the graph: cross-host patterns compare hosts (merge host graphs with witty-profiler merge, or "
             "run witty-profiler cluster diagnose DIR)")

# what to look at first, by the signal that set the rank apart
_ADVICE = {
    "runqueue_wait_pct": "On {host}, find what competes for the CPUs of rank {rank} (its control.scheduling_latency "
                         "finding, top -H): a stray process, too many loader workers; give ranks exclusive cores.",
    "cpu_util_pct": "On {host}, rank {rank} gets less CPU than its peers: check its CPU affinity, quota and what "
                    "else runs there.",
    "throttled_periods_pct": "Raise or remove the CPU quota of rank {rank}'s cgroup on {host} (it is throttled, its "
                             "peers are not).",
    "numa_remote_pages_pct": "Bind rank {rank} on {host} to the NUMA node of its device (numactl --cpunodebind "
                             "--membind), as its peers are.",
    "loader_cpu_util_pct": "The data loaders of rank {rank} on {host} work harder than their peers': check that "
                           "host's input path (storage, decoding) and its loader worker count.",
    "device_sm_clock_mhz": "The accelerator of rank {rank} on {host} runs at lower clocks: check its throttle "
                           "reasons, power cap and cooling (nvidia-smi -q -d PERFORMANCE).",
    "device_temperature_c": "The accelerator of rank {rank} on {host} runs hotter than its peers: check airflow and "
                            "fans before it throttles.",
    "device_throttled": "An accelerator of rank {rank} on {host} is throttling: check its power cap and cooling.",
    "device_power_w": "The accelerator of rank {rank} on {host} draws less power than its peers: check its power "
                      "cap (nvidia-smi -q -d POWER).",
    "device_util_pct": "The accelerator of rank {rank} on {host} is less busy than its peers: look at what feeds it "
                       "on that host (input, CPU, PCIe).",
    "io_blocked_pct": "Rank {rank} on {host} waits for its disk: find what it reads or writes (checkpoints, logs, "
                      "a dataset on local disk: iotop, its storage findings) and make it asynchronous or move it off "
                      "the step.",
    "write_bytes_per_s": "Rank {rank} on {host} writes far more than its peers: find what (checkpoints, traces, "
                         "logs; iotop -o) and move it out of the training step or to another rank.",
    "read_bytes_per_s": "Rank {rank} on {host} reads far more from storage than its peers: check its data shard "
                        "and page cache (is its dataset cached where the peers' is?).",
    "major_faults_per_s": "Rank {rank} on {host} faults pages in from disk: check that host's free memory and "
                          "swap, and what evicts the rank's pages (memory.major_faults).",
    "psi_io_some_pct": "The cgroup of rank {rank} on {host} stalls on I/O: check its io limits and what shares its "
                       "disk.",
    "psi_memory_some_pct": "The cgroup of rank {rank} on {host} stalls on memory: raise its memory limit or reduce "
                           "what runs beside the rank.",
    "net_bytes_per_s": "Rank {rank} on {host} moves far more over TCP than its peers: check what it fetches or "
                       "sends (a remote dataset, checkpoints to a network store, a parameter server).",
}


def _digests(scope: Scope, least: int) -> tuple[list[dict[str, Any]], Verdict | None]:
    digests = scope.digests()
    if len(digests) < 2:
        return digests, not_evaluated(_ONE_HOST.format(n=ev.counted(len(digests), "hosts")))
    if len(digests) < least:  # already several hosts: how to get more is not the question
        return digests, not_evaluated(f"{ev.counted(len(digests), 'hosts')}: this pattern compares {least} or more "
                                      "(with two, neither is the odd one)")
    return digests, None


# -- control.straggler_host ---------------------------------------------------------------
def _straggler(scope: Scope, t: dict[str, Any]) -> Verdict:
    digests, skip = _digests(scope, 2)
    if skip:
        return skip
    outliers, groups = rank_outliers(digests, RANK_SIGNALS, t["deviation_pct"], t["robust_z"], int(t["min_peers"]))
    if not groups:
        ranks = sum(len(d.get("ranks", [])) for d in digests)
        return not_evaluated(f"no job with at least {int(t['min_peers'])} ranks on two or more hosts among "
                             f"{ev.counted(len(digests), 'hosts')} ({ev.counted(ranks, 'ranks')} found; ranks come "
                             "from RANK/WORLD_SIZE or Slurm's task ids in the processes' environment)")
    compared = f"{ev.counted(len(groups), 'jobs')} compared ({sum(g[1] for g in groups)} ranks on " \
               f"{ev.counted(len({d['host'] for d in digests}), 'hosts')})"
    if not outliers:
        return clear(f"{compared}; no rank differs from its peers on CPU, run-queue wait, throttling, NUMA placement, "
                     "loader CPU, storage I/O and time blocked on it, major faults, I/O and memory pressure, TCP "
                     "bytes, or accelerator utilisation, clocks, power and temperature")
    by_rank: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for o in outliers:
        by_rank[(o["host"], o["rank"]["id"])].append(o)
    ranked = sorted(by_rank.values(), key=lambda os_: (min(_level(o) for o in os_), -max(o["deviation_pct"]
                                                                                            for o in os_)))
    items: list[Evidence] = []
    sentences, advice, subjects = [], [], []
    for found in ranked[:ev.MAX_SUBJECTS]:
        found.sort(key=lambda o: (_level(o), -o["deviation_pct"]))  # what sets it apart most, first
        first = found[0]
        rank, host = first["rank"], first["host"]
        subjects += [rank["id"], host_id(host)]
        signals = "; ".join(f"{o['signal']} {_shown(o['value'], o['unit'])} vs the peers' median "
                            f"{_shown(o['median'], o['unit'])} (robust z {_z(o['z'])})" for o in found)
        sentences.append(f"rank {rank.get('rank')} ({ev.short(rank['id'])}) on host {host}: {signals}")
        for o in found:
            items.append(ev.statistic([rank["id"], host_id(host)], f"{o['signal']} deviation from peers",
                                      round(o["deviation_pct"], 1), "%", levels=t["deviation_pct"],
                                      severity=o["severity"],
                                      note=f"{o['signal']} {_shown(o['value'], o['unit'])}; the {o['peers']} peers' "
                                           f"median {_shown(o['median'], o['unit'])}, MAD {_shown(o['mad'], o['unit'])}"
                                           f", robust z {_z(o['z'])} (> {ev.fmt(t['robust_z'])})"))
            line = _ADVICE.get(o["signal"])
            if line:
                text = line.format(host=host, rank=rank.get("rank"))
                if text not in advice:
                    advice.append(text)
    if len(ranked) > ev.MAX_SUBJECTS:
        items.append(ev.more(len(ranked) - ev.MAX_SUBJECTS, "ranks"))
    severity = worst(*(o["severity"] for o in outliers))
    hosts = sorted({o["host"] for o in outliers})
    description = (f"{ev.counted(len(by_rank), 'ranks')} on {ev.listed('host', hosts)} "
                   f"{ev.agree(len(by_rank), 'differ')} from the other ranks of {ev.their(len(by_rank))} "
                   f"job: " + "; ".join(sentences) + f". {compared}. Where the job synchronises its ranks (a "
                   f"collective each step), the others wait for {'it' if len(by_rank) == 1 else 'them'}.")
    return finding(severity or "warning", description, items, subjects=subjects,
                   related=["control.load_imbalance", "control.scheduling_latency", "control.cpu_throttling",
                            "compute.accelerator_throttling"],
                   recommendations=advice + list(STRAGGLER_HOST.recommendations))


def _level(outlier: dict[str, Any]) -> int:
    return ("critical", "warning", "notice").index(outlier["severity"])


def _shown(value: float, unit: str) -> str:
    """A signal's value for a sentence: byte rates in MB/s (478 MB/s reads better than 478000000 bytes/s)."""
    if unit == "bytes/s":
        return ev.fmt(round(value / 1e6, 3), "MB/s")
    return ev.fmt(value, unit)


def _z(z: float) -> str:
    return "inf (the peers agree exactly)" if z == float("inf") else ev.fmt(round(z, 1))


STRAGGLER_HOST = Pattern(
    id="control.straggler_host", layer=6, title="Straggler host: a rank slower than its peers",
    why="In a synchronous job every collective waits for the last rank: one host whose rank gets less CPU, waits "
        "for a run queue, is throttled, waits for its disk or its page cache, or has a slower accelerator makes every "
        "rank of the job wait, so the whole job runs at that host's pace.",
    metrics=("process.rank", E.MEMBER_OF, "process.cpu_util_pct", "process.runqueue_wait_pct",
             "cgroup.throttled_periods_pct", "process.numa_remote_pages_pct", "gpu.util_pct", "gpu.sm_clock_mhz",
             "gpu.power_w", "gpu.temperature_c", "npu.util_pct", "process.io_blocked_pct", "process.write_bytes_per_s",
             "process.read_bytes_per_s", "process.major_faults_per_s", "cgroup.psi_io_some_pct",
             "cgroup.psi_memory_some_pct", "tcp_connection.bytes_sent_total", "tcp_connection.bytes_received_total"),
    thresholds=(Threshold("deviation_pct", "%", "above", "how much worse a rank's signal is than the median of the "
                          "other ranks of its job: (value - median) / max(|median|, the signal's floor)",
                          critical=50, warning=25),),
    params=(Param("robust_z", 3.5, "ratio", "the least robust z-score 0.6745 (value - median) / MAD of the peers "
                  "(Iglewicz-Hoaglin): a rank within its peers' own spread is not an outlier"),
            Param("min_peers", 3, "ranks", "the least ranks of one job (on two or more hosts) to compare: with two, "
                  "neither is the odd one")),
    evidence="Per outlying rank (the worst first, eight at most, the rest counted): for each signal that sets it "
             "apart, its deviation from the other ranks' median with the value, the median, the MAD and the robust "
             "z-score. Signals: CPU utilisation, run-queue wait, cgroup throttling, remote NUMA pages, loader CPU, "
             "time blocked on block I/O (delay accounting), storage read and write bytes/s, major faults, the "
             "cgroup's I/O and memory pressure, TCP bytes/s, accelerator utilisation, SM clock, power, temperature "
             "and throttling; each has a floor below which a difference does not count (10 points of CPU, 5 points "
             "of wait, 50 MB/s, 100 faults/s, 100 MHz, 5 °C...).",
    recommendations=(
        "Fix or drain the named host (scontrol update nodename=... state=drain) and rerun the job on its peers.",
        "Compare that host's own diagnosis (witty-profiler cluster diagnose DIR --host NAME) with a peer's.",
    ),
    needs="two or more hosts: a merged graph or a cluster directory",
    cross_host=True, check=_straggler)


# -- network.odd_host ---------------------------------------------------------------------
def _odd_host(scope: Scope, t: dict[str, Any]) -> Verdict:
    least = int(t["min_hosts"])
    digests, skip = _digests(scope, least)
    if skip:
        return skip
    odd = odd_facts(digests, t["agree_share"], least)
    if not odd:
        facts = len({what for d in digests for what in d.get("facts", {})})
        return clear(f"{ev.counted(len(digests), 'hosts')} agree on {ev.counted(facts, 'facts')} (link speeds, "
                     "device counts, PCIe links, error rates) and on their collectors' status")
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for o in odd:
        by_host[o["host"]].append(o)
    severities = {h: worst(*("notice" if o["kind"] == "collector" else "warning" for o in found))
                  for h, found in by_host.items()}
    hosts = sorted(by_host, key=lambda h: (("critical", "warning", "notice").index(severities[h]), -len(by_host[h]), h))
    items: list[Evidence] = []
    sentences = []
    for host in hosts[:ev.MAX_SUBJECTS]:
        parts = []
        for o in by_host[host]:
            value = "absent" if o["value"] is None else o["value"]
            parts.append(f"{o['what']} {ev.fmt(value)} where {o['agree']} of {o['of']} peers have "
                         f"{ev.fmt(o['usual'])}")
            items.append(ev.entity(host_id(host), o["what"], value,
                                   note=f"{o['agree']} of the {o['of']} other hosts: {ev.fmt(o['usual'])}"))
        sentences.append(f"{host}: " + "; ".join(parts))
    if len(hosts) > ev.MAX_SUBJECTS:
        items.append(ev.more(len(hosts) - ev.MAX_SUBJECTS, "hosts"))
    description = (f"{ev.counted(len(hosts), 'hosts')} of {len(digests)} {ev.agree(len(hosts), 'differ')} from "
                   f"{ev.their(len(hosts))} peers: " + "; ".join(sentences) + ".")
    return finding(worst(*severities.values()) or "notice", description, items,
                   subjects=[host_id(h) for h in hosts], related=["control.straggler_host"])


ODD_HOST = Pattern(
    id="network.odd_host", layer=4, title="Odd host: hardware or setup unlike its peers",
    why="Hosts of one cluster are built alike; one whose NIC trained at a lower speed, whose RDMA port counts "
        "errors, whose PCIe link is degraded, which has a device fewer or whose collectors failed where its peers' "
        "ran is the first suspect when a job is slower than it should be.",
    metrics=("nic.speed_mbps", "nic.rx_errors_per_s", "nic.rx_drops_per_s", "rdma_port.rate_gbps",
             "rdma_port.port_errors_per_s", "rdma_port.port_retrans_per_s", "rdma_port.pfc_rx_frames_per_s",
             "rdma_port.state", "pci_device.link_width", "gpu.pcie_link_width", "npu.health",
             "meta.collectors"),
    params=(Param("agree_share", 0.66, "ratio", "the share of hosts that must agree on a value for another value "
                  "to be odd"),
            Param("min_hosts", 3, "hosts", "the least hosts reporting a fact for it to be compared")),
    evidence="Per odd host (eight at most, the rest counted): each fact that differs, its value and how many "
             "peers have which value. A fact most hosts report and this one lacks counts as absent; an error, "
             "retransmission or received-PFC rate counts when it is above zero where the peers' median is zero. A "
             "collector that failed where its peers' ran is a notice; a fact that differs is a warning.",
    recommendations=(
        "Check the odd host's links (ethtool, ibstat, lspci -vv) against a peer's and reseat or replace what "
        "trained lower.",
        "Drain the host from the job until it matches its peers.",
        "Where a collector failed only there, install what it needs on that host (its reason says what).",
    ),
    needs="three or more hosts: a merged graph or a cluster directory",
    cross_host=True, check=_odd_host)
