"""msprof-analyze cluster outputs: cluster_step_trace_time.csv and cluster_communication.json.

cluster_step_trace_time.csv has one row per rank (Type 'rank', Index = the rank) and step (Step,
empty when the run was not split into steps), with the step's Computing, Communication(Not
Overlapped), Overlapped, Communication, Free, Stage and Bubble times in microseconds; rows of Type
'stage' list the ranks of each pipeline stage. They become the metrics of `rank` entities, in ms:
the mean over the steps, with _p95 and _max over two or more steps.

cluster_communication.json holds, per communication group, step and op (its HCCL name, e.g.
'hcom_broadcast__501_0@6297232067196334501') and rank, the op's 'Communication Time Info'
(Elapse, Transit, Wait, Synchronization and Idle time in ms) and 'Communication Bandwidth Info' per
link type (RDMA, HCCS, PCIE, SDMA: Transit Size in MB, Transit Time in ms, Bandwidth in GB/s).
Ops are grouped into `collective` entities by group and normalised op ('broadcast'); each rank's
calls add up on its `takes_part` edge, and on one edge per link type that carried data. In every
call the rank that waited least arrived last (its peers waited for it): `last_arrivals` counts
those calls per rank, msprof's slow-rank vote.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.files import MAX_GRAPH_BYTES, open_text, read_bytes
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.models import CollectorStatus, Meta
from witty_profiler.topology.vocabulary import E, M, T
from witty_profiler.traces.common import collective_id, group_name, job_id, op_name, rank_id, step_stats

STEP_CSV = "cluster_step_trace_time.csv"
COMM_JSON = "cluster_communication.json"

# CSV column -> metric (microseconds in the file, ms in the graph)
COLUMNS = {
    "Computing": M.COMPUTE_MS,
    "Communication(Not Overlapped)": M.COMM_EXPOSED_MS,
    "Overlapped": M.COMM_OVERLAPPED_MS,
    "Communication": M.COMM_MS,
    "Free": M.FREE_MS,
    "Stage": M.STEP_TIME_MS,
    "Bubble": M.BUBBLE_MS,
}
REQUIRED = ("Type", "Index", "Computing", "Communication(Not Overlapped)", "Free")

TIME_INFO = "Communication Time Info"
BANDWIDTH_INFO = "Communication Bandwidth Info"
TIMES = {"Elapse Time(ms)": M.ELAPSE_MS, "Transit Time(ms)": M.TRANSIT_MS, "Wait Time(ms)": M.WAIT_MS,
         "Synchronization Time(ms)": M.SYNC_MS, "Idle Time(ms)": M.IDLE_MS}
TOTAL_OP = "Total Op Info"  # msprof's own sum over a group's ops: not a collective
MAX_RAW_NAMES = 20  # raw op names kept on a collective entity


def read_msprof(step_csv: Path | None, comm_json: Path | None, job_key: str) -> Graph:
    """A graph fragment of `rank` and `collective` entities from either file or both."""
    graph = Graph(Meta(source="trace"))
    job = job_id(job_key)
    scheduler, _, key = job_key.partition(":")
    graph.entity_of(T.JOB, job, {"scheduler": scheduler, "job_id": key or scheduler})
    missing = []
    if step_csv is not None:
        _read_steps(graph, Path(step_csv), job_key)
    else:
        missing.append(f"no {STEP_CSV}: no per-step times")
    if comm_json is not None:
        _read_communication(graph, Path(comm_json), job_key)
    else:
        missing.append(f"no {COMM_JSON}: no collectives")
    for rank in graph.entities(T.RANK):
        graph.edge_of(E.MEMBER_OF, rank.id, job, {"rank": rank.attrs["rank"]})
    graph.meta.collectors["msprof"] = CollectorStatus("partial", "; ".join(missing)) if missing else \
        CollectorStatus("ok")
    return graph


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise InputError(f"{where}: {value!r} is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {value!r} is not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise InputError(f"{where}: {value!r} is not a finite number")
    return number


def _rank(value: Any, where: str) -> int:
    text = str(value).strip()
    if not text.isdigit():
        raise InputError(f"{where}: {value!r} is not a rank number")
    return int(text)


# -- cluster_step_trace_time.csv ----------------------------------------------------------
def _read_steps(graph: Graph, path: Path, job_key: str) -> None:
    per_rank: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    stages: list[list[int]] = []
    first_seen: dict[tuple[int, str], int] = {}  # (rank, step) -> its line
    with open_text(path, "msprof step trace file", MAX_GRAPH_BYTES, InputError) as f:
        last: list[str] = [""]
        try:
            reader = csv.DictReader(_remember_last(f, last))
            header = reader.fieldnames or []
            absent = [c for c in REQUIRED if c not in header]
            if absent:
                raise InputError(f"{path}: no column {absent[0]!r} (is this msprof-analyze's {STEP_CSV}?)")
            for row in reader:
                line = reader.line_num
                _whole_row(row, header, last[0], f"{path}:{line}")
                kind = (row.get("Type") or "").strip()
                if kind == "stage":
                    stages.append(sorted({int(n) for n in _digits(row.get("Index"))}))
                    continue
                if kind != "rank":
                    raise InputError(f"{path}:{line}: Type {kind!r} is neither 'rank' nor 'stage'")
                rank = _rank(row.get("Index"), f"{path}:{line}: Index")
                step = (row.get("Step") or "").strip()
                if (rank, step) in first_seen:
                    raise InputError(f"{path}:{line}: Index: rank {rank}{f' step {step}' if step else ''} given "
                                     f"twice (first on line {first_seen[(rank, step)]})")
                first_seen[(rank, step)] = line
                values = per_rank[rank]
                for column, metric in COLUMNS.items():
                    cell = row.get(column)
                    if cell is None or (cell.strip() == "" and column not in REQUIRED):
                        continue
                    values[metric].append(_duration(cell, f"{path}:{line}: {column}") / 1000.0)
                values["_step"].append(1.0)
        except UnicodeDecodeError:
            raise InputError(f"{path}: not UTF-8 text (is this msprof-analyze's {STEP_CSV}?)") from None
        except csv.Error as exc:
            raise InputError(f"{path}: not CSV ({exc})") from None
    if not per_rank:
        raise InputError(f"{path}: no row of Type 'rank'")
    for rank, values in sorted(per_rank.items()):
        metrics: dict[str, float] = {M.STEPS: len(values.pop("_step"))}
        for metric, series in values.items():
            metrics.update(step_stats(metric, series))
        attrs: dict[str, Any] = {"rank": rank, "source": "msprof", "file": str(path)}
        stage = next((s for s in stages if rank in s), None)
        if stage is not None:
            attrs["stage_ranks"] = stage
        graph.entity_of(T.RANK, rank_id(job_key, rank), attrs, metrics)
    if stages:
        graph.entity(job_id(job_key)).attrs["stages"] = stages


def _remember_last(lines, last: list[str]):
    """The file's lines, the latest kept in last[0] (to tell a row cut short at the end of the file)."""
    for text in lines:
        last[0] = text
        yield text


def _whole_row(row: dict[Any, Any], header: list[str], text: str, where: str) -> None:
    """A row with as many fields as the header, ending with its line end: a file cut short (a copy stopped
    halfway) ends in the middle of a row, and its last number may be cut as well."""
    if None in row:
        raise InputError(f"{where}: {len(header) + len(row[None])} fields, the header has {len(header)}")
    given = [column for column in header if row.get(column) is not None]
    if len(given) < len(header):
        raise InputError(f"{where}: the row ends after {len(given)} of {len(header)} fields (cut short?): no "
                         f"{header[len(given)]!r}")
    if not text.endswith(("\n", "\r")):
        raise InputError(f"{where}: {header[-1]}: the file ends in the middle of this row, without a line end "
                         "(cut short?)")


def _duration(cell: Any, where: str) -> float:
    """A time or size: a finite number, not negative."""
    value = _number(cell, where)
    if value < 0:
        raise InputError(f"{where}: {str(cell).strip()!r} is negative")
    return value


def _digits(text: Any) -> list[str]:
    import re
    return re.findall(r"\d+", str(text or ""))


# -- cluster_communication.json -----------------------------------------------------------
def _read_communication(graph: Graph, path: Path, job_key: str) -> None:
    raw = read_bytes(path, "msprof communication file", MAX_GRAPH_BYTES, InputError)
    try:
        data = json.loads(raw, object_pairs_hook=_once(path))
    except InputError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected an object of communication groups, found {type(data).__name__}")
    # (group, op) -> rank -> summed metrics; link sums per (group, op, rank, link)
    sums: dict[tuple[str, str], dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(
        float)))
    links: dict[tuple[str, str, int, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    elapses: dict[tuple[str, str], list[float]] = defaultdict(list)
    raw_names: dict[tuple[str, str], list[str]] = defaultdict(list)
    calls: dict[tuple[str, str], int] = defaultdict(int)
    for group_raw, steps in data.items():
        where = f"{path}: group {group_raw!r}"
        _object(steps, where)
        group = group_name(group_raw)
        for step, ops in steps.items():
            _object(ops, f"{where} step {step!r}")
            for raw_op, ranks in ops.items():
                if raw_op == TOTAL_OP:
                    continue
                at = f"{where} step {step!r} op {raw_op!r}"
                _object(ranks, at)
                key = (group, op_name(raw_op))
                calls[key] += 1
                if raw_op not in raw_names[key] and len(raw_names[key]) < MAX_RAW_NAMES:
                    raw_names[key].append(raw_op)
                waits: dict[int, float] = {}
                for rank_text, info in ranks.items():
                    rank = _rank(rank_text, f"{at}: rank")
                    _call(sums[key][rank], links, key, rank, info, f"{at} rank {rank}")
                    if M.ELAPSE_MS in (times := _times(info, f"{at} rank {rank}")):
                        elapses[key].append(times[M.ELAPSE_MS])
                    if M.WAIT_MS in times:
                        waits[rank] = times[M.WAIT_MS]
                last = _arrived_last(waits)
                for rank in waits:
                    sums[key][rank][M.LAST_ARRIVALS] += 1 if rank == last else 0
    for (group, op), ranks in sorted(sums.items()):
        cid = collective_id(job_key, group, op)
        total_bytes = sum(v.get(M.TRANSIT_BYTES, 0.0) for v in ranks.values())
        metrics: dict[str, float] = {M.CALLS: calls[(group, op)], M.TRANSIT_BYTES: round(total_bytes)}
        metrics.update(step_stats(M.DURATION_MS, elapses[(group, op)], 6))
        graph.entity_of(T.COLLECTIVE, cid, {"op": op, "group": group, "ranks": sorted(ranks), "source": "msprof",
                                            "raw_names": raw_names[(group, op)]}, metrics)
        for rank, values in sorted(ranks.items()):
            rid = rank_id(job_key, rank)
            graph.entity_of(T.RANK, rid, {"rank": rank, "source": "msprof"})
            edge = {m: round(v, 6) for m, v in values.items()}
            edge[M.CALLS] = int(values.get(M.CALLS, 0))
            edge[M.LAST_ARRIVALS] = int(values.get(M.LAST_ARRIVALS, 0))
            if M.TRANSIT_BYTES in edge:
                edge[M.TRANSIT_BYTES] = round(edge[M.TRANSIT_BYTES])
            wait, transit = values.get(M.WAIT_MS), values.get(M.TRANSIT_MS)
            if wait is not None and transit is not None and wait + transit > 0:
                edge[M.WAIT_RATIO] = round(wait / (wait + transit), 4)
            graph.edge_of(E.TAKES_PART, rid, cid, {"group": group}, edge)
        for (g, o, rank, link), values in sorted(links.items()):
            if (g, o) != (group, op) or not values.get("bytes"):
                continue
            metrics = {M.TRANSIT_BYTES: round(values["bytes"]), M.TRANSIT_MS: round(values["ms"], 6)}
            if values["ms"] > 0:  # MB per ms is GB/s
                metrics[M.BANDWIDTH_GBYTES_PER_S] = round(values["bytes"] / 1e6 / values["ms"], 4)
            graph.edge_of(E.TAKES_PART, rank_id(job_key, rank), cid, {"group": group, "link": link}, metrics,
                          qualifier=link)


def _once(path: Path):
    """json's object hook that refuses a key given twice (json.loads would keep the last one silently, and with
    it drop a rank or a call)."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise InputError(f"{path}: {key!r} given twice in one object (a rank or an op twice?)")
            out[key] = value
        return out
    return pairs


def _object(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected an object, found {type(value).__name__}")


def _times(info: Any, where: str) -> dict[str, float]:
    _object(info, where)
    times = info.get(TIME_INFO)
    if times is None:
        return {}
    _object(times, f"{where}: {TIME_INFO!r}")
    return {metric: _duration(times[field], f"{where}: {field!r}") for field, metric in TIMES.items() if field in times}


def _call(into: dict[str, float], links: dict[tuple[str, str, int, str], dict[str, float]], key: tuple[str, str],
          rank: int, info: Any, where: str) -> None:
    """Add one rank's call of an op to its sums."""
    for metric, value in _times(info, where).items():
        into[metric] += value
    into[M.CALLS] += 1
    bandwidth = info.get(BANDWIDTH_INFO)
    if bandwidth is None:
        return
    _object(bandwidth, f"{where}: {BANDWIDTH_INFO!r}")
    for link, values in bandwidth.items():
        at = f"{where}: {BANDWIDTH_INFO!r} {link!r}"
        _object(values, at)
        size = _duration(values.get("Transit Size(MB)", 0), f"{at} 'Transit Size(MB)'")
        ms = _duration(values.get("Transit Time(ms)", 0), f"{at} 'Transit Time(ms)'")
        if size <= 0 and ms <= 0:
            continue
        sums = links[(*key, rank, str(link))]
        sums["bytes"] += size * 1e6
        sums["ms"] += ms
        into[M.TRANSIT_BYTES] += size * 1e6


def _arrived_last(waits: dict[int, float]) -> int | None:
    """The one rank that waited least in a call (its peers waited for it), when the waits differ."""
    if len(waits) < 2:
        return None
    least = min(waits.values())
    if max(waits.values()) <= least:
        return None
    lowest = [r for r, w in waits.items() if w == least]
    return lowest[0] if len(lowest) == 1 else None
