"""`import_traces`: training traces of any supported format into one graph, alone or joined to a host graph.

Each input is either an msprof-analyze cluster output (a directory holding cluster_step_trace_time.csv
and/or cluster_communication.json, or those files named directly; files of one directory are read
together) or a PyTorch profiler (Kineto) trace (.json or .json.gz with traceEvents). Every reader
returns a fragment with its own status in meta.collectors; the fragments merge into one graph. With
`into`, they merge into that host graph (in place; it is returned), and a rank whose trace names a pid and hostname
of one of its processes gets a `trace_of` edge to that process.

The job key of the ranks' ids: `job` if given; else, with `into` holding exactly one `job` entity,
that job's key (its id without 'job:'), so that the ranks join the job the host graph already knows;
else 'trace:default'. Kineto traces join one job only where they can be ranks of one run (`one_job`):
never the same rank twice, and, unless `job` names the job, the same world size and process groups and
recording times within an hour.
"""

from __future__ import annotations

import gzip
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.ids import process_id
from witty_profiler.topology.models import Entity, Meta
from witty_profiler.topology.query import GraphQuery
from witty_profiler.topology.vocabulary import E, M, T
from witty_profiler.traces.common import DEFAULT_JOB
from witty_profiler.traces.msprof import COMM_JSON, STEP_CSV, read_msprof


def import_traces(paths: list[str | Path], job: str | None = None, into: Graph | None = None) -> Graph:
    """One graph of the traces' ranks and collectives (see the module's docstring)."""
    if not paths:
        raise InputError("no trace file given: name Kineto traces (.json, .json.gz) or msprof-analyze's "
                         f"{STEP_CSV} / {COMM_JSON} (or their directory)")
    job_key = job_key_for(job, into)
    msprof: dict[Path, dict[str, Path]] = defaultdict(dict)  # directory -> its msprof files
    kineto: list[Path] = []
    for given in paths:
        path = Path(given)
        kind = detect(path)
        if kind == "msprof-dir":
            for name in (STEP_CSV, COMM_JSON):
                if (path / name).is_file():
                    msprof[path.resolve()][name] = path / name
        elif kind == "msprof":
            msprof[path.resolve().parent][path.name] = path
        else:
            kineto.append(path)
    fragments = [read_msprof(files.get(STEP_CSV), files.get(COMM_JSON), job_key) for _, files in sorted(msprof.items())]
    if kineto:
        read_kineto = _kineto_reader()
        ranks = [read_kineto(path, job_key) for path in kineto]
        one_job(ranks, said_by_user=job is not None)
        fragments += ranks
    graph = into if into is not None else Graph(Meta(source="trace"))
    for fragment in fragments:
        if into is not None:
            fragment.meta.source = None  # the host graph keeps its own source
        graph.merge(fragment)
    if len(kineto) > 1:
        pool_collectives(graph)
    if into is not None:
        join_processes(graph)
    return graph


MAX_START_SPREAD_S = 3600  # the ranks of one run start their profilers within minutes of each other


def one_job(fragments: list[Graph], said_by_user: bool) -> None:
    """Refuse traces that cannot be ranks of one run: a rank given twice, always; unless the user named the
    job, traces whose world size, process groups or recording time disagree. The message names the files
    and the fact."""
    seen: dict[str, Entity] = {}
    groups: dict[str, tuple[list[int], str]] = {}  # collective id -> (its ranks, the file that said so)
    for fragment in fragments:
        file = next((r.attrs.get("file") for r in fragment.entities(T.RANK)), "?")
        for rank in fragment.entities(T.RANK):
            first = seen.setdefault(rank.id, rank)
            if first is not rank:
                raise InputError(f"{rank.attrs.get('file')}: rank {rank.attrs.get('rank')} again (distributedInfo."
                                 f"rank), as in {first.attrs.get('file')}: traces of two runs? import each run on "
                                 "its own")
            if said_by_user or len(seen) == 1:
                continue
            base = next(iter(seen.values()))
            _same_run(base, rank)
        for collective in fragment.entities(T.COLLECTIVE):
            ranks = collective.attrs.get("ranks")
            if said_by_user or not isinstance(ranks, list):
                continue
            before = groups.setdefault(collective.id, (ranks, file))
            if before[0] != ranks:
                raise InputError(f"{file}: process group {collective.attrs.get('group')} holds ranks {ranks}, but "
                                 f"{before[0]} in {before[1]}: traces of different runs (give --job to read them as "
                                 "one job anyway)")


def _same_run(base: Entity, rank: Entity) -> None:
    a, b = base.attrs, rank.attrs
    hint = "traces of different runs (give --job to read them as one job anyway)"
    if a.get("world_size") is not None and b.get("world_size") is not None and a["world_size"] != b["world_size"]:
        raise InputError(f"{b.get('file')}: world size {b['world_size']} (distributedInfo.world_size), but "
                         f"{a['world_size']} in {a.get('file')}: {hint}")
    started = [x.get("started_at") for x in (a, b)]
    if all(isinstance(t, str) for t in started):
        apart = abs((_when(started[1]) - _when(started[0])).total_seconds())
        if apart > MAX_START_SPREAD_S:
            raise InputError(f"{b.get('file')}: recorded at {started[1]}, {_span(apart)} from {a.get('file')} "
                             f"({started[0]}): {hint}")


def _span(seconds: float) -> str:
    return f"{seconds / 86400:.1f} days" if seconds >= 86400 else f"{seconds / 3600:.1f} hours"


def job_key_for(job: str | None, into: Graph | None) -> str:
    if job is not None:
        key = job.strip()
        if not key or any(c in key for c in "|\n\r\t") or key.startswith(f"{T.JOB}:"):
            raise InputError(f"--job {job!r}: give a job key such as slurm:1234 or trace:myrun (without 'job:', "
                             "no '|' or spaces)")
        return key
    if into is not None:
        jobs = into.entities(T.JOB)
        if len(jobs) == 1:
            return jobs[0].id.split(":", 1)[1]
    return DEFAULT_JOB


def detect(path: Path) -> str:
    """'msprof-dir', 'msprof' or 'kineto', or an InputError saying what the file is not."""
    if "\0" in str(path):  # before any look at the path: Path.exists() takes it for absent
        raise InputError(f"{str(path)[:200]!r}: holds a NUL character; give the path of a trace")
    try:
        return _detect(path)
    except OSError as exc:  # a name too long, a loop of links
        raise InputError(f"{str(path)[:200]}: cannot read ({exc.strerror or exc})") from None


def _detect(path: Path) -> str:
    if path.is_dir():
        if any((path / name).is_file() for name in (STEP_CSV, COMM_JSON)):
            return "msprof-dir"
        raise InputError(f"{path}: a directory without {STEP_CSV} or {COMM_JSON} (msprof-analyze's "
                         "cluster_analysis_output)")
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if not path.is_file():  # a FIFO would block the read (and every later call of a server), a device never end
        raise InputError(f"{path}: not a regular file; give a trace file or msprof-analyze's output directory")
    if path.name in (STEP_CSV, COMM_JSON):
        return "msprof"
    if path.name.endswith((".json", ".json.gz")) and _has_trace_events(path):
        return "kineto"
    raise InputError(f"{path}: not a trace this tool reads (a Kineto trace .json/.json.gz with traceEvents, or "
                     f"msprof-analyze's {STEP_CSV} / {COMM_JSON})")


def _has_trace_events(path: Path) -> bool:
    """Whether the first 64 KiB of a JSON (or gzipped JSON) file name 'traceEvents'."""
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as f:
            head = f.read(1 << 16)
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: cannot read ({exc})") from None
    return b'"traceEvents"' in head


def _kineto_reader():
    from witty_profiler.traces.kineto import read_kineto  # here: msprof inputs need not load it
    return read_kineto


def pool_collectives(graph: Graph) -> None:
    """A collective the ranks of several trace files ran: its calls and durations from every rank's
    `takes_part` edge (each file saw it from its own rank, and merging alone keeps the last file's mean).
    Calls: the most any rank made; duration: the mean over all the ranks' calls; _max and _p95: the
    largest of the ranks' (for _p95 an upper bound); bytes and message size: the most any rank moved."""
    q = GraphQuery.of(graph)
    for collective in graph.entities(T.COLLECTIVE):
        edges = [e for e in q.in_edges(collective.id, E.TAKES_PART) if not e.attrs.get("link")
                 and e.metrics.get(M.DURATION_MS) is not None and e.metrics.get(M.CALLS)]
        if len(edges) < 2:
            continue
        calls = sum(e.metrics[M.CALLS] for e in edges)
        m = collective.metrics
        m[M.CALLS] = max(e.metrics[M.CALLS] for e in edges)
        m[M.DURATION_MS] = round(sum(e.metrics[M.CALLS] * e.metrics[M.DURATION_MS] for e in edges) / calls, 3)
        for stat in ("_max", "_p95"):
            values = [e.metrics[M.DURATION_MS + stat] for e in edges if e.metrics.get(M.DURATION_MS + stat) is not None]
            if values:
                m[M.DURATION_MS + stat] = max(values)
        for metric in (M.TRANSIT_BYTES, M.MESSAGE_BYTES):
            values = [e.metrics[metric] for e in edges if e.metrics.get(metric) is not None]
            if values:
                m[metric] = max(values)


def join_processes(graph: Graph) -> int:
    """`trace_of` edges from each rank to the process it was: the trace's pid on the host its hostname names;
    or, where the trace names no host and the graph holds one, the pid there if that process had started
    before the trace did (a pid alone may since have been reused). Returns how many."""
    hosts = set(graph.meta.hosts)
    joined = 0
    for rank in graph.entities(T.RANK):
        pid, hostname = rank.attrs.get("pid"), rank.attrs.get("hostname")
        if not isinstance(pid, int):
            continue
        if isinstance(hostname, str):
            candidates = sorted(h for h in hosts if h == hostname or h.split(".", 1)[0] == hostname.split(".", 1)[0])
        else:
            candidates = [h for h in hosts if len(hosts) == 1 and _started_before(graph.entity(process_id(h, pid)), rank)]
        for host in candidates:
            pid_id = process_id(host, pid)
            if pid_id in graph:
                graph.edge_of(E.TRACE_OF, rank.id, pid_id)
                joined += 1
                break
    return joined


def _started_before(process: Entity | None, rank: Entity) -> bool:
    started, traced = (process.attrs.get("started_at") if process else None), rank.attrs.get("started_at")
    if not isinstance(started, str) or not isinstance(traced, str):
        return False
    try:
        return _when(started) <= _when(traced)
    except ValueError:
        return False


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
