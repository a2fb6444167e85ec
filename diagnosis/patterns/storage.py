"""Layer 5, storage: I/O wait, busy disks, checkpoint writes that stall the job."""

from __future__ import annotations

from typing import Any

from witty_profiler.diagnosis import evidence as ev
from witty_profiler.diagnosis.catalog import LEVELS, Pattern, Threshold, Verdict, clear, not_evaluated, number
from witty_profiler.diagnosis.models import Evidence
from witty_profiler.diagnosis.rules import host_or_scope_processes, levels_check, metric_check, metric_of
from witty_profiler.diagnosis.scope import Scope, num
from witty_profiler.topology import Entity
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.vocabulary import M, T

# -- storage.io_wait ----------------------------------------------------------------------
PAGING = ("swap_pages_per_s", M.MAJOR_FAULTS_PER_S)  # memory.pressure's readings that are disk reads and writes


def _io_wait(scope: Scope, t: dict[str, Any]) -> Verdict:
    names = (M.CPU_IOWAIT_PCT, M.PSI_IO_SOME_PCT)
    hosts = [h for h in scope.hosts() if any(num(h, m) is not None for m in names)]
    blocked = _blocked_processes(scope, t)
    if not hosts:
        return blocked or not_evaluated(scope.missing("no CPU iowait or PSI io of the host", "cpu", "host",
                                                      "pressure"))
    verdict = levels_check(hosts, tuple((m, metric_of(m), "%") for m in names), t, "The CPUs wait for I/O: ",
                           context=_io_full, after=lambda: _busiest_disks(scope))
    if verdict.status == "finding":
        _explain(scope, verdict)
    return _with_blocked(verdict, blocked)


def _blocked_processes(scope: Scope, t: dict[str, Any]) -> Verdict | None:
    """The workload's processes (all, without one) judged on their time blocked on block I/O, where the kernel
    counts it: a rank that fsyncs every step waits for its disk while the host's iowait stays low (its other
    CPUs are busy)."""
    measured = [p for p in host_or_scope_processes(scope) if num(p, M.IO_BLOCKED_PCT) is not None]
    if not measured:
        return None
    return metric_check(scope, measured, t["io_blocked_pct"], M.IO_BLOCKED_PCT, "processes", ("process",),
                        "{n:processes|are} blocked on block I/O much of the window: {names}, {worst} "
                        "(threshold > {limit}).",
                        extra=lambda p: [ev.entity(p.id, m, num(p, m), unit="bytes/s")
                                         for m in (M.WRITE_BYTES_PER_S, M.READ_BYTES_PER_S) if num(p, m)])


def _with_blocked(host: Verdict, blocked: Verdict | None) -> Verdict:
    """The host's verdict with the processes' beside it: the worse finding first, the other's evidence after."""
    if blocked is None:
        return host
    if host.status != "finding" and blocked.status != "finding":
        both = f"{host.reason}; {blocked.reason}"
        return clear(both) if "clear" in (host.status, blocked.status) else not_evaluated(both)
    found = [v for v in (host, blocked) if v.status == "finding"]
    found.sort(key=lambda v: LEVELS.index(v.severity) if v.severity in LEVELS else len(LEVELS))
    first = found[0]
    for other in found[1:]:
        first.description += " " + other.description
        first.evidence.extend(other.evidence)
        first.subjects.extend(s for s in other.subjects if s not in first.subjects)
    first.reason = first.description
    return first


def _explain(scope: Scope, verdict: Verdict) -> None:
    """What the I/O is, where another finding shows it: pages of memory under pressure (swapped, or
    evicted and read again: major faults), or a saturated disk."""
    hosts = {host_of(s) for s in verdict.subjects}
    pressure = scope.verdict("memory.pressure")
    paging = [e for e in (pressure.evidence if pressure is not None and pressure.status == "finding" else [])
              if e.metric in PAGING and e.threshold is not None and any(host_of(i) in hosts for i in e.ids)]
    if paging:
        verdict.related.append("memory.pressure")
        verdict.evidence.extend(paging)
        what = " and ".join(sorted({"swapping" if e.metric == "swap_pages_per_s" else "major page faults"
                                    for e in paging}))
        first = paging[0].ids[0]
        where = f"on host {host_of(first)}" if first.startswith("host:") else f"in {ev.short(first)}"
        verdict.description += (f" The I/O is paging: memory is under pressure ({what}, "
                                f"{ev.fmt(paging[0].value, paging[0].unit or '')} {where}), and the pages it "
                                "evicted or swapped out are read back from disk; relieve the memory first (see "
                                "memory.pressure).")
        verdict.recommendations = list(PAGING_RECOMMENDATIONS)
    disks = scope.verdict("storage.disk_saturation")
    saturated = [d for d in (disks.subjects if disks is not None and disks.status == "finding" else [])
                 if host_of(d) in hosts]
    if saturated:
        verdict.related.append("storage.disk_saturation")
        verdict.description += (f" {ev.counted(len(saturated), 'disks', 'are')} busy nearly all the window "
                                f"({', '.join(ev.short(d) for d in saturated[:3])}; see storage.disk_saturation).")
    verdict.related.sort()
    verdict.reason = verdict.description


PAGING_RECOMMENDATIONS = (
    "Relieve the memory pressure first (see memory.pressure): the I/O is pages swapped out and in, or the page "
    "cache evicted and read again, and goes away with the memory it lacks (a higher cgroup limit, fewer copies of "
    "the data, smaller caches).",
    "Disable or limit swap on training hosts, and set container memory limits above the peak.",
    "Only then look at the storage itself (local NVMe, read-ahead, record formats).",
)


def _io_full(host: Entity) -> list[Evidence]:
    full = num(host, M.PSI_IO_FULL_PCT)
    return [ev.entity(host.id, M.PSI_IO_FULL_PCT, full, unit="%")] if full is not None else []


def _busiest_disks(scope: Scope) -> list[Evidence]:
    busiest = [d for d in scope.graph.entities(T.BLOCK_DEVICE) if num(d, M.DISK_UTIL_PCT) is not None]
    busiest.sort(key=lambda d: (-(num(d, M.DISK_UTIL_PCT) or 0.0), d.id))
    return [ev.entity(d.id, M.DISK_UTIL_PCT, num(d, M.DISK_UTIL_PCT), unit="%", note="busiest disks")
            for d in busiest[:3]]


IO_WAIT = Pattern(
    id="storage.io_wait", layer=5, title="I/O wait",
    why="Time the CPUs spend idle with I/O outstanding, tasks stalled on I/O (PSI), or a workload process blocked "
        "on its disk (delay accounting) is time the job is not computing: typically data reads from slow or remote "
        "storage, or checkpoint writes. A process can wait for its disk while the host's iowait stays low, when the "
        "other CPUs are busy.",
    metrics=("host.cpu_iowait_pct", "host.psi_io_some_pct", "host.psi_io_full_pct", "block_device.disk_util_pct",
             "process.io_blocked_pct"),
    thresholds=(Threshold("cpu_iowait_pct", "%", "above", "share of the window the CPUs were idle with I/O outstanding",
                          critical=40, warning=20),
                Threshold("psi_io_some_pct", "%", "above", "share of the window some task stalled on I/O",
                          critical=50, warning=20),
                Threshold("io_blocked_pct", "%", "above", "share of the window a workload process's main thread was "
                          "blocked on block I/O (delay accounting)", critical=40, warning=20)),
    evidence="The host's iowait share and PSI io stall over their thresholds, and the busiest disks; the workload's "
             "processes blocked on block I/O over their threshold with their read and write rates. When "
             "memory.pressure finds swapping or major faults over its thresholds on the same host (or in a cgroup "
             "of the workload), the I/O is paging: the finding cites them, relates to memory.pressure and "
             "recommends relieving the memory first; when storage.disk_saturation finds a disk of the host "
             "saturated, it relates to that too.",
    recommendations=(
        "Cache or stage the dataset on local NVMe (or in memory) instead of reading from network storage each epoch.",
        "Read ahead: more loader workers with prefetch_factor, larger sequential reads, a record format "
        "(WebDataset, TFRecord) instead of many small files.",
        "Write checkpoints asynchronously (see storage.checkpoint_stall).",
    ),
    check=_io_wait)


# -- storage.disk_saturation --------------------------------------------------------------
def _disk_saturation(scope: Scope, t: dict[str, Any]) -> Verdict:
    disks = scope.graph.entities(T.BLOCK_DEVICE)
    return metric_check(scope, disks, t["disk_util_pct"], M.DISK_UTIL_PCT, "block devices", ("disk", "block", "storage"),
                        "{n:disks|are} busy nearly all the time: {names} at {worst} (threshold > {limit}).",
                        extra=lambda d: [ev.entity(d.id, m, num(d, m), unit=u) for m, u in
                                         ((M.AWAIT_MS, "ms"), (M.READ_BYTES_PER_S, "bytes/s"),
                                          (M.WRITE_BYTES_PER_S, "bytes/s"), (M.READ_IOPS, "1/s"),
                                          (M.WRITE_IOPS, "1/s")) if num(d, m) is not None])


DISK_SATURATION = Pattern(
    id="storage.disk_saturation", layer=5, title="Disk saturation",
    why="A disk with I/O in flight nearly all the window queues further requests: await grows and readers "
        "(data loaders) or writers (checkpoints) block. On NVMe and RAID, 100 % busy can still have headroom; "
        "read it together with await.",
    metrics=("block_device.disk_util_pct", "block_device.await_ms", "block_device.read_bytes_per_s",
             "block_device.write_bytes_per_s"),
    thresholds=(Threshold("disk_util_pct", "%", "above", "share of the window the device had I/O in flight",
                          critical=90, warning=80),),
    evidence="Each block device over the threshold with its await, throughput and IOPS.",
    recommendations=(
        "Spread data over more devices (RAID 0, several NVMe) or move it to a faster tier.",
        "Reduce small random reads: pack samples into large shards, increase read sizes.",
        "Schedule checkpoint writes away from data reads, or write them to another device.",
    ),
    check=_disk_saturation)


# -- storage.checkpoint_stall -------------------------------------------------------------
def _checkpoint_stall(scope: Scope, t: dict[str, Any]) -> Verdict:
    levels = t["write_burst_s"]
    processes = host_or_scope_processes(scope)
    measured = [p for p in processes if num(p, M.WRITE_BURST_S) is not None]
    if not measured:
        return not_evaluated(scope.missing("no write bursts of processes (write_burst_s) in this graph", "process"))
    window = scope.meta.duration_s
    hit = any(levels.severity(num(p, M.WRITE_BURST_S)) for p in measured)
    if not hit and window is not None and window <= (levels.limit() or 0):
        return not_evaluated(f"the window of {number(window)} s is too short to see a write burst longer than "
                             f"{number(levels.limit())} s; collect for longer (e.g. --duration 60)")
    return metric_check(scope, measured, levels, M.WRITE_BURST_S, "processes with write activity", ("process",),
                        "{n:processes} wrote without pause for a long time: {names}, {worst} "
                        "(threshold > {limit}).",
                        extra=lambda p: [ev.entity(p.id, M.WRITE_BYTES_PER_S, num(p, M.WRITE_BYTES_PER_S),
                                                   unit="bytes/s")] if num(p, M.WRITE_BYTES_PER_S) is not None else [])


CHECKPOINT_STALL = Pattern(
    id="storage.checkpoint_stall", layer=5, title="Checkpoint stall",
    why="A synchronous checkpoint stops training for as long as the write takes; a burst of writes lasting "
        "more than 10 s every few minutes is a large share of the job's time.",
    metrics=("process.write_burst_s", "process.write_bytes_per_s"),
    thresholds=(Threshold("write_burst_s", "s", "above", "longest run of consecutive samples in which a process wrote",
                          critical=30, warning=10),),
    evidence="Each process over the threshold with its write rate.",
    recommendations=(
        "Write checkpoints asynchronously (torch.distributed.checkpoint async_save, a background thread).",
        "Shard checkpoints across ranks instead of gathering to rank 0.",
        "Write to fast local storage first and copy to shared storage in the background.",
    ),
    check=_checkpoint_stall)


PATTERNS = [IO_WAIT, DISK_SATURATION, CHECKPOINT_STALL]
