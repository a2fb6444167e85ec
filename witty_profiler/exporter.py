"""The Prometheus exposition of a window: what node_exporter does not export (per-process and
per-thread run-queue wait, NUMA placement, the process-to-device mapping) and the current findings.

`exposition(graph, diagnosis)` renders one window as the Prometheus text format; `WindowCollector`
is a prometheus_client Collector that renders the latest window on every scrape (`witty-profiler
export --listen`), `write_textfile` writes one window for node_exporter's textfile collector
(`witty-profiler export --textfile`).

Labels: `host`, `pid`, `comm` (the process or thread name as the kernel reports it), `role` and
`rank` where the graph knows them (empty otherwise). Never the command line: command lines hold
secrets (tokens, passwords, keys in URLs) and redaction catches only the forms it knows, while a
label is stored by every Prometheus that scrapes it, for its whole retention.

Bounded cardinality. The processes exported are those of the workload first, then the top
consumers by CPU, at most `top` (default 20) in all; threads only the busiest `THREADS_PER_PROCESS`
(5) of each exported process, at most `MAX_THREADS` (100) in all; at most `DEVICES_PER_PROCESS`
(16) devices per process; the `NUMA_NODES_PER_PROCESS` (4) NUMA nodes holding most of a process's
run time and pages; one finding series per pattern of the catalog; one `up` series per collector, at
most `MAX_COLLECTORS` (64). So one scrape holds at most `max_series(top)` series:

    7 * top                      process gauges (cpu, run-queue wait, remote pages, colocation, rss,
                                 runnable threads, write burst)
  + 2 * 4 * top                  run-time share and pages per NUMA node
  + 2 * min(5 * top, 100)        thread gauges (cpu, run-queue wait)
  + 16 * top                     witty_process_device_info
  + P + 3                        witty_finding (P = patterns in the catalog, 37 today), witty_findings
  + 64 + 1                       witty_collector_up, witty_window_seconds

= 31 * top + min(10 * top, 200) + P + 68; 888 + P = 925 series for the default top 20, however many
processes, threads, NUMA nodes or devices the host has.

The Prometheus source reads these series back (sources/promwitty.py): a cluster's Prometheus keeps
them, and a past window of them becomes processes, threads and placement edges again.
"""

from __future__ import annotations

import os
import tempfile
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from witty_profiler.topology import Entity, Graph
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.query import GraphQuery
from witty_profiler.topology.vocabulary import T, metric_info
from witty_profiler.topology.workload import resolve_workload

DEFAULT_TOP = 20
THREADS_PER_PROCESS = 5
MAX_THREADS = 100
DEVICES_PER_PROCESS = 16
NUMA_NODES_PER_PROCESS = 4
MAX_COLLECTORS = 64
LABEL_MAX = 64  # characters of a label value (comm is 15 in the kernel; legacy names may be longer)
# the first line of every file `write_textfile` writes: how a later run knows the file is its own
TEXTFILE_MARKER = "# witty-profiler textfile exporter: rewritten every window; edits are lost"

PROCESS_LABELS = ["host", "pid", "comm", "role", "rank"]
THREAD_LABELS = ["host", "pid", "tid", "comm", "role"]
# (exported name, graph metric, divisor to the Prometheus unit, note on the unit)
RATIO = "as a ratio: the graph's percentage / 100"
PROCESS_GAUGES = [
    ("witty_process_cpu_utilisation_ratio", "cpu_util_pct", 100.0, "as a ratio of one core: 2 = two cores busy"),
    ("witty_process_runqueue_wait_ratio", "runqueue_wait_pct", 100.0, RATIO),
    ("witty_process_numa_remote_pages_ratio", "numa_remote_pages_pct", 100.0, RATIO),
    ("witty_process_cpu_mem_colocation_ratio", "cpu_mem_colocation_pct", 100.0, RATIO + ", 1 = memory exactly "
     "where the CPU time is"),
    ("witty_process_resident_memory_bytes", "rss_bytes", 1.0, ""),
    ("witty_process_runnable_threads", "runnable_threads", 1.0, "threads in state R at the end of the window; "
     "workload processes only"),
    ("witty_process_write_burst_seconds", "write_burst_s", 1.0, "the longest run of seconds it kept writing in "
     "the window; workload processes only"),
]
THREAD_GAUGES = [
    ("witty_thread_cpu_utilisation_ratio", "cpu_util_pct", 100.0, "as a ratio of one core"),
    ("witty_thread_runqueue_wait_ratio", "runqueue_wait_pct", 100.0, RATIO),
]
# (exported name, help): where a process runs and keeps its pages, per NUMA node (topology.placement)
NUMA_GAUGES = [
    ("witty_process_numa_runtime_ratio", "share of a process's run time on a NUMA node over the window (a ratio; "
     "from runs_on edges: run time per node)"),
    ("witty_process_numa_pages", "pages a process holds on a NUMA node at the end of the window (allocates_on "
     "edges or numa_maps)"),
]
FALLBACK_HELP = {"numa_remote_pages_pct": "share of a process's pages that are remote",
                 "cpu_mem_colocation_pct": "CPU/memory NUMA colocation"}


def pattern_count() -> int:
    from witty_profiler.diagnosis.catalog import catalog
    return len(catalog())


def max_series(top: int = DEFAULT_TOP, patterns: int | None = None) -> int:
    """The most series one exposition can hold (see the module's docstring)."""
    p = pattern_count() if patterns is None else patterns
    threads = min(THREADS_PER_PROCESS * top, MAX_THREADS)
    return (len(PROCESS_GAUGES) * top + len(NUMA_GAUGES) * NUMA_NODES_PER_PROCESS * top
            + len(THREAD_GAUGES) * threads + DEVICES_PER_PROCESS * top
            + p + 3 + MAX_COLLECTORS + 1)


def _help(metric: str, note: str) -> str:
    info = metric_info(metric)
    text = info.help if info else FALLBACK_HELP.get(metric, metric)
    return f"{text} ({metric}{', ' + note if note else ''})"


def _label(value: Any) -> str:
    if value is None or isinstance(value, (dict, list)):
        return ""
    text = str(value)
    return text if len(text) <= LABEL_MAX else text[:LABEL_MAX - 1] + "…"


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _cpu(e: Entity) -> float:
    return _num(e.metrics.get("cpu_util_pct")) or 0.0


def _pid(e: Entity) -> str:
    pid = e.attrs.get("pid")
    return str(pid) if isinstance(pid, int) else e.id.rsplit(":", 1)[-1]


def select_processes(graph: Graph, pids: Iterable[int] | None = None, top: int = DEFAULT_TOP) -> list[Entity]:
    """The workload's processes (busiest first), then the other processes by CPU, at most `top`."""
    q = GraphQuery.of(graph)
    try:
        workload = resolve_workload(q, pids)
    except InputError:  # a pid named with --pid ended: the rest of the host is still worth exporting
        workload = resolve_workload(q, None)
    chosen = sorted(workload.processes, key=lambda e: (-_cpu(e), e.id))
    ids = {e.id for e in chosen}
    rest = sorted((e for e in graph.entities(T.PROCESS) if e.id not in ids), key=lambda e: (-_cpu(e), e.id))
    return (chosen + rest)[:max(top, 0)]


def families(graph: Graph, diagnosis: Any = None, pids: Iterable[int] | None = None,
             top: int = DEFAULT_TOP) -> list[Metric]:
    """The metric families of one window: `diagnosis` is witty_profiler.diagnose's result on `graph`
    (None: the findings are left out)."""
    q = GraphQuery.of(graph)
    default_host = graph.meta.hosts[0] if graph.meta.hosts else ""
    processes = select_processes(graph, pids, top)
    out: list[Metric] = []

    def labels_of(p: Entity) -> list[str]:
        return [host_of(p.id) or default_host, _pid(p), _label(p.attrs.get("name")), _label(p.attrs.get("role")),
                _label(p.attrs.get("rank"))]

    for name, metric, divisor, note in PROCESS_GAUGES:
        fam = GaugeMetricFamily(name, _help(metric, note), labels=PROCESS_LABELS)
        for p in processes:
            value = _num(p.metrics.get(metric))
            if value is not None:
                fam.add_metric(labels_of(p), value / divisor)
        out.append(fam)

    out.extend(_numa_families(q, processes, labels_of))

    threads: list[tuple[Entity, Entity]] = []
    for p in processes:
        busiest = sorted(q.threads_of(p), key=lambda t: (-_cpu(t), t.id))[:THREADS_PER_PROCESS]
        threads.extend((p, t) for t in busiest)
    threads = sorted(threads, key=lambda pt: (-_cpu(pt[1]), pt[1].id))[:MAX_THREADS]
    for name, metric, divisor, note in THREAD_GAUGES:
        fam = GaugeMetricFamily(name, _help(metric, note), labels=THREAD_LABELS)
        for p, t in threads:
            value = _num(t.metrics.get(metric))
            if value is not None:
                tid = t.attrs.get("tid")
                fam.add_metric([host_of(t.id) or default_host, _pid(p),
                                str(tid) if isinstance(tid, int) else t.id.rsplit(":", 1)[-1],
                                _label(t.attrs.get("name")), _label(p.attrs.get("role"))], value / divisor)
        out.append(fam)

    info = GaugeMetricFamily("witty_process_device_info", "a process uses an accelerator or device (1); numa_node is "
                             "the device's NUMA node, empty where unknown",
                             labels=["host", "pid", "comm", "device", "numa_node"])
    for p in processes:
        devices = sorted(q.devices_of(p), key=lambda ed: ed[1].id)[:DEVICES_PER_PROCESS]
        for _, device in devices:
            node, _ = q.device_node(device)
            host = host_of(device.id)
            short = device.id.replace(f":{host}:", ":", 1) if host else device.id
            info.add_metric([host_of(p.id) or default_host, _pid(p), _label(p.attrs.get("name")), short,
                             "" if node is None else str(node)], 1.0)
    out.append(info)

    if diagnosis is not None:
        finding = GaugeMetricFamily("witty_finding", "a finding of the pattern catalog on the latest window (1); "
                                    "`witty-profiler patterns` describes each pattern",
                                    labels=["pattern", "priority", "layer", "host"])
        counts = {"P0": 0, "P1": 0, "P2": 0}
        seen: set[str] = set()
        for f in diagnosis.findings:
            if f.pattern in seen:
                continue
            seen.add(f.pattern)
            counts[f.priority] = counts.get(f.priority, 0) + 1
            hosts = sorted({host_of(s) for s in f.subjects if host_of(s)})
            finding.add_metric([f.pattern, f.priority, str(f.layer), hosts[0] if len(hosts) == 1 else default_host],
                               1.0)
        out.append(finding)
        total = GaugeMetricFamily("witty_findings", "findings on the latest window by priority", labels=["priority"])
        for priority in ("P0", "P1", "P2"):
            total.add_metric([priority], float(counts.get(priority, 0)))
        out.append(total)

    up = GaugeMetricFamily("witty_collector_up", "1 where the collector read this window (ok or partial), 0 where "
                           "it was unavailable or failed (`witty-profiler collect` says why)",
                           labels=["host", "collector"])
    for name, status in sorted(graph.meta.collectors.items())[:MAX_COLLECTORS]:
        up.add_metric([default_host, _label(name)], 1.0 if status.status in ("ok", "partial") else 0.0)
    out.append(up)
    window = GaugeMetricFamily("witty_window_seconds", "length of the window the other series describe",
                               labels=["host"])
    if graph.meta.duration_s is not None:
        window.add_metric([default_host], float(graph.meta.duration_s))
    out.append(window)
    return out


def _numa_families(q: GraphQuery, processes: list[Entity], labels_of: Any) -> list[Metric]:
    """Run-time shares and pages per NUMA node of each process, the nodes holding most of them first."""
    runtime = GaugeMetricFamily(NUMA_GAUGES[0][0], NUMA_GAUGES[0][1], labels=[*PROCESS_LABELS, "numa_node"])
    pages = GaugeMetricFamily(NUMA_GAUGES[1][0], NUMA_GAUGES[1][1], labels=[*PROCESS_LABELS, "numa_node"])
    for p in processes:
        place = q.placement(p)
        total = sum(place.runtime.values())
        if total > 0:
            for node, v in sorted(place.runtime.items(), key=lambda nv: (-nv[1], nv[0]))[:NUMA_NODES_PER_PROCESS]:
                runtime.add_metric([*labels_of(p), str(node)], v / total)
        for node, v in sorted(place.pages.items(), key=lambda nv: (-nv[1], nv[0]))[:NUMA_NODES_PER_PROCESS]:
            pages.add_metric([*labels_of(p), str(node)], float(v))
    return [runtime, pages]


class WindowCollector(Collector):
    """A prometheus_client Collector that renders the latest window on each scrape."""

    def __init__(self, pids: Iterable[int] | None = None, top: int = DEFAULT_TOP) -> None:
        self.pids = list(pids) if pids else None
        self.top = top
        self._lock = threading.Lock()
        self._families: list[Metric] = []

    def update(self, graph: Graph, diagnosis: Any = None) -> None:
        rendered = families(graph, diagnosis, self.pids, self.top)
        with self._lock:
            self._families = rendered

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            rendered = list(self._families)
        yield from rendered


def exposition(graph: Graph, diagnosis: Any = None, pids: Iterable[int] | None = None,
               top: int = DEFAULT_TOP) -> str:
    """One window in the Prometheus text format (version 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    collector = WindowCollector(pids, top)
    collector.update(graph, diagnosis)
    registry.register(collector)
    return generate_latest(registry).decode("utf-8")


# -- the textfile mode ------------------------------------------------------------------------

def check_textfile(path: str, force: bool = False) -> Path:
    """Refuse, before a window is spent, a textfile target that would lose something or never be
    read: not *.prom (node_exporter reads only those), a missing directory, a directory, or an
    existing file that this exporter did not write (without --force)."""
    target = Path(path)
    if target.suffix != ".prom":
        raise InputError(f"{target}: node_exporter's textfile collector reads only *.prom files; name it e.g. "
                         f"{target.with_suffix('.prom').name}")
    if target.is_dir():
        raise InputError(f"{target}: is a directory; give a file name")
    if not target.parent.is_dir():
        raise InputError(f"{target.parent}: no such directory")
    if target.exists() and not force and not _ours(target):
        raise InputError(f"{target}: exists and was not written by witty-profiler export; choose another name "
                         "or pass --force to overwrite it")
    return target


def _ours(path: Path) -> bool:
    try:
        with path.open("r", encoding="utf-8", errors="replace") as f:
            return f.readline().rstrip("\n") == TEXTFILE_MARKER
    except OSError:
        return False


def write_textfile(path: str | Path, text: str) -> None:
    """Write `text` atomically: a temporary file in the same directory (a name node_exporter ignores),
    flushed to disk, then renamed over `path`, so a scrape reads the old file or the new one, whole."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"{TEXTFILE_MARKER}\n{text}")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# -- the HTTP mode ----------------------------------------------------------------------------

def parse_listen(text: str, public: bool = False) -> tuple[str, int]:
    """'HOST:PORT' (IPv6 as '[::1]:PORT') -> (host, port) by the one listen policy (`app.access`). A
    non-loopback address is refused unless `public`: the series name the host's processes and its
    findings, and the endpoint has no authentication or TLS."""
    from witty_profiler.app.access import is_loopback
    from witty_profiler.app.access import parse_listen as parse
    host, port = parse(text, "--listen", 9818)
    if not public and not is_loopback(host):
        raise InputError(f"--listen {text!r}: not a loopback address; the metrics name this host's processes and "
                         "the endpoint has no authentication, so pass --listen-public to serve it anyway")
    return host, port


class WindowLoop:
    """Collects windows one after another in a background thread and hands each, with its diagnosis,
    to a WindowCollector. A window that fails keeps the previous one served."""

    def __init__(self, collector: WindowCollector, duration_s: float, interval_s: float,
                 pids: list[int] | None = None, host: str | None = None) -> None:
        self.collector = collector
        self.duration_s, self.interval_s = duration_s, interval_s
        self.pids, self.host = pids, host
        self.stop = threading.Event()
        self.windows = 0
        self.last_error: str | None = None
        self.thread = threading.Thread(target=self._run, name="witty-export-windows", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def one(self) -> None:
        from witty_profiler.collectors.engine import run_window
        from witty_profiler.diagnosis import diagnose
        graph = run_window(self.duration_s, self.interval_s, pids=self.pids, stop=self.stop, host=self.host)
        try:
            diagnosis = diagnose(graph, pids=self.pids)
        except InputError:  # a pid named ended during the window: the findings of the host instead
            diagnosis = diagnose(graph)
        self.collector.update(graph, diagnosis)
        self.windows += 1

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.one()
                self.last_error = None
            except Exception as exc:  # noqa: BLE001 - the endpoint keeps serving the last good window
                error = f"{type(exc).__name__}: {exc}"
                if error != self.last_error:
                    print(f"witty-profiler export: window failed, serving the previous one: {error}",
                          file=sys.stderr, flush=True)
                self.last_error = error
                self.stop.wait(min(self.duration_s, 5.0))
