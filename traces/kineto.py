"""A PyTorch profiler (Kineto) trace of one rank, read into the graph: its steps and its collectives.

`read_kineto(path, job_key)` streams the trace (plain JSON or gzip) one event at a time with the C
scanner of the json module, and keeps only what the metrics need:

- the ProfilerStep#N spans of the host (a few per trace),
- the GPU busy intervals, folded as they arrive into disjoint unions (compute kernels, NCCL kernels,
  memcpy/memset): memory grows with the number of disjoint busy intervals of the trace (16 bytes each,
  plus up to FOLD raw intervals waiting to be folded), not with the file size or the CPU events,
- the data loader spans (a union as well),
- per collective (process group, op) the duration of each NCCL kernel (8 bytes a call) and the bytes.

Kineto gives every event's ts and dur in microseconds, GPU events on the same clock as the host's.
What comes out (topology.vocabulary): one `rank` entity `rank:<job key>:<rank>` with the mean, p95
and max over the steps of step_time_ms, compute_ms, comm_ms, comm_exposed_ms, comm_overlapped_ms,
free_ms, kernel_busy_pct and data_loading_ms (only where the trace holds DataLoader spans); a `job` entity `job:<job key>` it is member_of; one
`collective` entity per (group, op) and the rank's takes_part edge to it with calls, duration_ms
(mean, _p95, _max), transit_bytes, message_bytes (mean per call), bandwidth_gbytes_per_s (algorithm
bandwidth) and bus_bandwidth_gbytes_per_s (nccl-tests' bus bandwidth), the last three where the kernels'
args give message sizes (In/Out msg nelems and dtype).
"""

from __future__ import annotations

import ast
import gzip
import io
import re
import time
import zlib
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from heapq import merge as heap_merge
from pathlib import Path
from typing import IO, Any

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.files import open_regular
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.jsonstream import JsonStream
from witty_profiler.topology.models import CollectorStatus
from witty_profiler.topology.vocabulary import E, M, T
from witty_profiler.topology.windowstats import p95

SOURCE = "kineto"
FOLD = 1 << 16  # raw intervals gathered before they are folded into a union
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_NCCL_OP = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
# bytes per element of the dtypes NCCL kernels name ("dtype" of the kernel's args, as PyTorch spells it)
DTYPE_BYTES = {
    "float": 4, "float32": 4, "f32": 4, "half": 2, "float16": 2, "f16": 2, "bfloat16": 2, "bf16": 2,
    "double": 8, "float64": 8, "f64": 8, "int": 4, "int32": 4, "i32": 4, "uint32": 4, "long": 8, "int64": 8,
    "i64": 8, "uint64": 8, "short": 2, "int16": 2, "byte": 1, "uint8": 1, "u8": 1, "char": 1, "int8": 1,
    "i8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}
_STEP_CATS = ("cpu_op", "user_annotation")
INF = float("inf")
MAX_TRACE_BYTES = 64 << 30  # read as a stream: a bound against a sparse file or a device, not against memory


# -- the stream -------------------------------------------------------------------------------------------
class _Stream(JsonStream):
    """The trace as a JSON stream (topology.jsonstream), its errors saying what the file should have been."""

    def fail(self, what: str) -> InputError:
        return InputError(f"{self.name}: not a Kineto trace: {what} at character {self.base + self.pos}")

    def invalid(self, what: str) -> InputError:
        return self.fail(f"not valid JSON ({what})")

    def items(self) -> Iterator[Any]:
        for batch in self.batches():
            yield from batch


# -- intervals --------------------------------------------------------------------------------------------
class _Union:
    """A union of intervals: raw ones gathered in an array, folded every FOLD into disjoint sorted ones."""

    def __init__(self) -> None:
        self.raw = array("d")
        self.merged = array("d")  # start, end, start, end... disjoint, sorted

    def add(self, start: float, end: float) -> None:
        if end > start:
            self.raw.append(start)
            self.raw.append(end)
            if len(self.raw) >= 2 * FOLD:
                self._fold()

    def _fold(self) -> None:
        raw, old = self.raw, self.merged
        fresh = sorted(zip(raw[0::2], raw[1::2]))
        self.raw = array("d")
        self.merged = _merge(heap_merge(zip(old[0::2], old[1::2]), fresh))

    def done(self) -> _Measure:
        self._fold()
        return _Measure(self.merged)


def _merge(pairs) -> array:
    out = array("d")
    for start, end in pairs:
        if out and start <= out[-1]:
            if end > out[-1]:
                out[-1] = end
        else:
            out.append(start)
            out.append(end)
    return out


class _Measure:
    """Disjoint sorted intervals, measured within any window in O(log n)."""

    def __init__(self, merged: array) -> None:
        self.merged = merged
        self.starts, self.ends = merged[0::2], merged[1::2]
        self.prefix = array("d", [0.0])
        total = 0.0
        for s, e in zip(self.starts, self.ends):
            total += e - s
            self.prefix.append(total)

    def within(self, lo: float, hi: float) -> float:
        i, j = bisect_right(self.ends, lo), bisect_left(self.starts, hi)
        if i >= j:
            return 0.0
        total = self.prefix[j] - self.prefix[i]
        total -= max(0.0, lo - self.starts[i])
        total -= max(0.0, self.ends[j - 1] - hi)
        return max(0.0, total)

    def union(self, other: _Measure) -> _Measure:
        return _Measure(_merge(heap_merge(zip(self.starts, self.ends), zip(other.starts, other.ends))))

    def intersection(self, other: _Measure) -> _Measure:
        out, a, b = array("d"), self, other
        i = j = 0
        while i < len(a.starts) and j < len(b.starts):
            lo, hi = max(a.starts[i], b.starts[j]), min(a.ends[i], b.ends[j])
            if hi > lo:
                out.append(lo)
                out.append(hi)
            if a.ends[i] < b.ends[j]:
                i += 1
            else:
                j += 1
        return _Measure(out)


# -- statistics -------------------------------------------------------------------------------------------
def _stats(name: str, values, digits: int = 3) -> dict[str, float]:
    """{name: mean, name_p95, name_max} over the values (steps or calls)."""
    if not values:
        return {}
    return {name: round(sum(values) / len(values), digits), f"{name}_p95": round(p95(values), digits),
            f"{name}_max": round(max(values), digits)}


# -- reading ----------------------------------------------------------------------------------------------
@dataclass
class _Collective:
    durations: array = field(default_factory=lambda: array("d"))  # µs per call
    bytes_total: int = 0
    bytes_us: float = 0.0  # kernel time of the calls whose bytes are known
    bytes_calls: int = 0
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Trace:
    top: dict[str, Any] = field(default_factory=dict)  # the small top-level members (distributedInfo...)
    steps: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (ts, end), first seen
    step_pids: Counter = field(default_factory=Counter)
    cpu_pids: Counter = field(default_factory=Counter)
    compute: _Union = field(default_factory=_Union)
    comm: _Union = field(default_factory=_Union)
    memory: _Union = field(default_factory=_Union)
    loading: _Union = field(default_factory=_Union)
    collectives: dict[tuple[str, str], _Collective] = field(default_factory=dict)
    hostname: str | None = None
    events: int = 0
    skipped: int = 0  # complete events without a numeric ts or dur


@contextmanager
def _open(path: Path) -> Iterator[IO[str]]:
    """The trace as text, plain or gzip, read through the one descriptor that was checked to be a regular
    file (opening the path again could open something else)."""
    fd, _ = open_regular(path, "Kineto trace", MAX_TRACE_BYTES, InputError)  # not a FIFO or a device
    with io.BufferedReader(io.FileIO(fd, "rb")) as raw:
        body = gzip.GzipFile(fileobj=raw, mode="rb") if raw.peek(2)[:2] == b"\x1f\x8b" else raw
        with io.TextIOWrapper(body, encoding="utf-8") as text:
            yield text


def _ranks(value: Any) -> list[int] | None:
    if isinstance(value, str):  # "Process Group Ranks": "[0, 1]"
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
    return value if isinstance(value, list) and all(isinstance(r, int) for r in value) else None


def _op_of(name: str, args: dict[str, Any]) -> str:
    op = args.get("Collective name")
    if isinstance(op, str) and op:
        return op.lower()
    found = _NCCL_OP.match(name)
    return found.group(1).lower() if found else "unknown"


def _message_bytes(args: dict[str, Any]) -> int | None:
    """nccl-tests' message size S: the larger of the input and output element counts times the dtype size."""
    size = DTYPE_BYTES.get(str(args.get("dtype", "")).lower())
    counts = [n for n in (args.get("In msg nelems"), args.get("Out msg nelems"))
              if isinstance(n, int) and not isinstance(n, bool) and n >= 0]
    if size is None or not counts:
        return None
    return max(counts) * size


def _read(stream: _Stream, trace: _Trace) -> None:
    pending: list[tuple[str, dict[str, Any], float]] = []  # NCCL kernels: name, args, dur

    def events(items) -> None:
        for ev in items:
            if not isinstance(ev, dict):
                raise stream.fail("a traceEvents item that is not an object")
            trace.events += 1
            if ev.get("ph") != "X":
                continue
            cat, name = ev.get("cat"), ev.get("name")
            if not isinstance(cat, str) or not isinstance(name, str):
                continue
            ts, dur = ev.get("ts"), ev.get("dur")
            if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or not 0 <= dur < INF \
                    or not -INF < ts < INF:  # NaN fails both tests as well
                trace.skipped += 1
                continue
            cat = cat.lower()
            end = ts + dur
            if cat == "kernel":
                if name.startswith("nccl"):
                    trace.comm.add(ts, end)
                    args = ev.get("args")
                    pending.append((name, args if isinstance(args, dict) else {}, dur))
                else:
                    trace.compute.add(ts, end)
            elif cat in ("gpu_memcpy", "gpu_memset", "memcpy", "memset"):
                trace.memory.add(ts, end)
            elif cat in _STEP_CATS:
                trace.cpu_pids[ev.get("pid")] += 1
                if name.startswith("ProfilerStep#"):
                    trace.steps.setdefault(name, (ts, end))
                    trace.step_pids[ev.get("pid")] += 1
                elif "DataLoader" in name:
                    trace.loading.add(ts, end)
            if len(pending) >= FOLD:
                _collect(trace, pending)
                pending.clear()

    if stream.peek() == "[":  # the bare-array form of the trace event format
        events(stream.items())
        trace.top["traceEvents"] = True
    else:
        for key in stream.members():
            if key == "traceEvents":
                if stream.peek() != "[":
                    raise stream.fail("traceEvents is not an array")
                events(stream.items())
                trace.top[key] = True
            else:
                trace.top[key] = stream.value()
        if stream.peek():
            raise stream.fail("more data after the trace's object")
    _collect(trace, pending)


def _process_groups(top: dict[str, Any]) -> dict[str, dict[str, Any]]:
    info = top.get("distributedInfo")
    pgs = info.get("pg_config") if isinstance(info, dict) else None
    if isinstance(pgs, dict):  # some versions key the groups by name
        pgs = [{"pg_name": k, **v} for k, v in pgs.items() if isinstance(v, dict)]
    if not isinstance(pgs, list):  # absent, or of a shape no PyTorch writes
        return {}
    return {str(pg.get("pg_name")): pg for pg in pgs if isinstance(pg, dict) and "pg_name" in pg}


def _collect(trace: _Trace, kernels) -> None:
    """NCCL kernels into their collective, by the group their args name (None: resolved by _groups)."""
    for name, args, dur in kernels:
        group = args.get("Process Group Name")
        key = (None if group is None else str(group), _op_of(name, args))
        coll = trace.collectives.get(key)
        if coll is None:
            coll = trace.collectives[key] = _Collective()
        coll.durations.append(dur)
        ranks = _ranks(args.get("Process Group Ranks"))
        if ranks is not None:
            coll.attrs["ranks"] = ranks
        if args.get("Process Group Description"):
            coll.attrs["group_desc"] = str(args["Process Group Description"])
        if isinstance(args.get("Group size"), int):
            coll.attrs["group_size"] = args["Group size"]
        nbytes = _message_bytes(args)
        if nbytes is not None:
            coll.bytes_total += nbytes
            coll.bytes_us += dur
            coll.bytes_calls += 1


def _groups(trace: _Trace) -> dict[tuple[str, str], _Collective]:
    """The collectives by (group, op): a kernel that names no group belongs to the trace's one process group
    where distributedInfo lists exactly one, else to the group 'unknown'; pg_config gives ranks and names."""
    pgs = _process_groups(trace.top)
    out: dict[tuple[str, str], _Collective] = {}
    for (group, op), coll in sorted(trace.collectives.items(), key=lambda kv: (kv[0][0] or "", kv[0][1])):
        if group is None:
            group = next(iter(pgs)) if len(pgs) == 1 else "unknown"
        pg = pgs.get(group, {})
        if "ranks" not in coll.attrs and _ranks(pg.get("ranks")) is not None:
            coll.attrs["ranks"] = pg["ranks"]
        if "group_desc" not in coll.attrs and pg.get("pg_desc"):
            coll.attrs["group_desc"] = str(pg["pg_desc"])
        if (group, op) in out:  # the same group, named by some kernels and not by others
            into = out[(group, op)]
            into.durations.extend(coll.durations)
            into.bytes_total += coll.bytes_total
            into.bytes_us += coll.bytes_us
            into.bytes_calls += coll.bytes_calls
            into.attrs = {**coll.attrs, **into.attrs}
        else:
            out[(group, op)] = coll
    return out


# -- the graph --------------------------------------------------------------------------------------------
def bus_factor(op: str, n: int | None) -> float | None:
    """nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md): what each rank's link carries per byte of the
    message, so that the bus bandwidth of any op and group size compares with the link's peak."""
    if op in ("broadcast", "reduce", "send", "recv"):
        return 1.0
    if not n or n < 1:
        return None
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    return None


def _group_size(attrs: dict[str, Any], world: int | None) -> int | None:
    """The ranks of a collective's group: the kernel's 'Group size', the group's ranks, else the world's."""
    if isinstance(attrs.get("group_size"), int):
        return attrs["group_size"]
    if isinstance(attrs.get("ranks"), list):
        return len(attrs["ranks"])
    return world


def _rank_of(path: Path, info: dict[str, Any]) -> tuple[int | None, str | None]:
    """The rank and, where distributedInfo does not give it, how it was found (or that it was not)."""
    rank = info.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        return rank, None
    found = _RANK_IN_NAME.search(path.name)
    if found:
        return int(found.group(1)), f"no rank in distributedInfo: rank {found.group(1)} taken from the file name"
    return None, "rank unknown (no distributedInfo rank, no rank-N in the file name): the rank is named after the file"


def _started_at(top: dict[str, Any], ts_us: float) -> str | None:
    """ISO time of a trace timestamp: Unix µs, or µs after baseTimeNanoseconds where the trace gives it."""
    base = top.get("baseTimeNanoseconds")
    unix_us = ts_us + base / 1000 if isinstance(base, (int, float)) and ts_us < 1e15 else ts_us
    if not 1e15 < unix_us < 1e17:  # 2001..5138: else a clock this reader cannot place
        return None
    return datetime.fromtimestamp(unix_us / 1e6, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _hostname(top: dict[str, Any], info: dict[str, Any]) -> str | None:
    for where in (info, top):
        for key in ("hostname", "host_name", "host"):
            if isinstance(where.get(key), str) and where[key]:
                return where[key]
    return None


def read_kineto(path: Path, job_key: str) -> Graph:
    """One rank's Kineto trace as a graph fragment (see the module's docstring); InputError with one line
    naming the file when it is not a readable trace."""
    path = Path(path)
    began = time.monotonic()
    trace = _Trace()
    try:
        with _open(path) as handle:
            _read(_Stream(handle, str(path)), trace)
    except InputError:
        raise
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: not a readable gzip file ({exc})") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a Kineto trace: not UTF-8 text") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if "traceEvents" not in trace.top:
        raise InputError(f"{path}: not a Kineto trace: no traceEvents array")
    return _graph(path, job_key, trace, time.monotonic() - began)


def _graph(path: Path, job_key: str, trace: _Trace, took: float) -> Graph:
    top = trace.top
    info = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else {}
    problems: list[str] = []
    if not info:
        problems.append("no distributedInfo (rank, world size and process groups unknown)")
    rank, why = _rank_of(path, info)
    if why:
        problems.append(why)
    world = info.get("world_size") if isinstance(info.get("world_size"), int) else None
    key = str(rank) if rank is not None else path.name.split(".")[0]
    rank_id, job_id = f"rank:{job_key}:{key}", f"job:{job_key}"
    pid = (trace.step_pids or trace.cpu_pids).most_common(1)[0][0] if (trace.step_pids or trace.cpu_pids) else None
    attrs: dict[str, Any] = {"rank": rank, "world_size": world, "source": SOURCE, "file": str(path), "pid": pid,
                             "hostname": _hostname(top, info), "backend": info.get("backend"),
                             "nccl_version": info.get("nccl_version")}
    steps = sorted(trace.steps.values())
    metrics: dict[str, Any] = {M.STEPS: len(steps)}
    compute, comm, memory = trace.compute.done(), trace.comm.done(), trace.memory.done()
    if steps:
        loading = trace.loading.done()
        kernels = compute.union(comm)
        busy, overlap = kernels.union(memory), comm.intersection(compute)
        per: dict[str, list[float]] = {m: [] for m in (M.STEP_TIME_MS, M.COMPUTE_MS, M.COMM_MS, M.COMM_EXPOSED_MS,
                                                        M.COMM_OVERLAPPED_MS, M.FREE_MS, M.KERNEL_BUSY_PCT,
                                                        M.DATA_LOADING_MS)}
        for lo, hi in steps:
            span = hi - lo
            in_comm, hidden = comm.within(lo, hi), overlap.within(lo, hi)
            values = {M.STEP_TIME_MS: span, M.COMPUTE_MS: compute.within(lo, hi), M.COMM_MS: in_comm,
                      M.COMM_EXPOSED_MS: in_comm - hidden, M.COMM_OVERLAPPED_MS: hidden,
                      M.FREE_MS: span - busy.within(lo, hi), M.DATA_LOADING_MS: loading.within(lo, hi)}
            for name, us in values.items():
                per[name].append(us / 1000)
            per[M.KERNEL_BUSY_PCT].append(100 * kernels.within(lo, hi) / span if span > 0 else 0.0)
        if not loading.starts:  # no data loader span at all: not a 0, an unknown (a loader of its own)
            del per[M.DATA_LOADING_MS]
        for name, values in per.items():
            metrics.update(_stats(name, values))
        attrs["started_at"] = _started_at(top, steps[0][0])
        attrs["duration_s"] = round((max(hi for _, hi in steps) - steps[0][0]) / 1e6, 6)
    else:
        problems.append("no ProfilerStep#N spans: no per-step metrics (profile with torch.profiler's schedule "
                        "and call prof.step() each iteration)")
    if trace.skipped:
        problems.append(f"{trace.skipped} complete events without a finite ts or a finite, non-negative dur were "
                        "left out")

    graph = Graph()
    graph.entity_of(T.RANK, rank_id, {k: v for k, v in attrs.items() if v is not None}, metrics)
    scheduler, _, job = job_key.partition(":")
    graph.entity_of(T.JOB, job_id, {k: v for k, v in {"scheduler": scheduler, "job_id": job or None,
                                                       "world_size": world}.items() if v is not None})
    graph.edge_of(E.MEMBER_OF, rank_id, job_id, {"rank": rank} if rank is not None else {})
    for (group, op), coll in sorted(_groups(trace).items()):
        cid = f"collective:{job_key}:{group}:{op}"
        durations = [us / 1000 for us in coll.durations]
        numbers: dict[str, Any] = {M.CALLS: len(durations), **_stats(M.DURATION_MS, durations)}
        if coll.bytes_calls:
            numbers[M.TRANSIT_BYTES] = coll.bytes_total
            numbers[M.MESSAGE_BYTES] = round(coll.bytes_total / coll.bytes_calls)
            if coll.bytes_us > 0:  # algorithm bandwidth: bytes / kernel time, in GB/s (1e9 bytes)
                algbw = coll.bytes_total / (coll.bytes_us * 1e3)
                numbers[M.BANDWIDTH_GBYTES_PER_S] = round(algbw, 6)
                factor = bus_factor(op, _group_size(coll.attrs, world))
                if factor is not None:
                    numbers[M.BUS_BANDWIDTH_GBYTES_PER_S] = round(algbw * factor, 6)
        graph.entity_of(T.COLLECTIVE, cid, {"op": op, "group": group, **coll.attrs}, dict(numbers))
        graph.edge_of(E.TAKES_PART, rank_id, cid, {}, numbers)
    status = "partial" if problems else "ok"
    graph.meta.collectors[SOURCE] = CollectorStatus(status, "; ".join(problems) or None, duration_s=round(took, 3))
    return graph
