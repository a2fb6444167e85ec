"""Patterns on training traces (`witty-profiler import-trace`): the ranks and collectives of a job as
its profiler saw them. Listed in their layers: control.slow_rank (6) and network.slow_link (4). The
helpers under "trace ranks" let host-side patterns (dataplane.pipeline_bubble,
dataplane.data_loading_bottleneck, compute.accelerator_idle) judge the ranks as well.

control.slow_rank applies msprof-analyze's slow-rank rule: for each step component (compute, exposed
communication, free, bubble) over the ranks of one job, (max - min) / mean step time, where the step
time of a rank is compute + exposed communication + free (msprof's denominator: the gap is measured
against the whole step, not against the component); and its collective-wait vote: in each call of a
collective the rank that waited least arrived last, so its peers waited for it.

network.slow_link compares, within each collective (group and op) and link type, each rank's transfer
bandwidth with the other ranks' median (leave one out), with the robust z-score 0.6745 (median - x) /
MAD of the peers (Iglewicz-Hoaglin) guarding against a rank within the peers' own spread; and flags
AllReduce/AllGather of latency-bound messages (latency_bound_bytes or less) whose time per call is over a
latency threshold: the transfer time without waiting where the traces tell it apart, the mean kernel time
(capped at P1) where one rank's trace is all there is, and P2 at most without message sizes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from witty_profiler.diagnosis import evidence as ev
from witty_profiler.diagnosis.catalog import (
    LEVELS,
    Param,
    Pattern,
    Threshold,
    Verdict,
    clear,
    finding,
    not_evaluated,
    worst,
)
from witty_profiler.diagnosis.crosshost import median
from witty_profiler.diagnosis.models import Evidence
from witty_profiler.diagnosis.scope import Scope, num
from witty_profiler.topology import Entity
from witty_profiler.topology.vocabulary import E, M, T

NO_RANKS = ("no trace ranks in this graph (import a job's training traces with witty-profiler import-trace: "
            "Kineto traces or msprof-analyze's cluster outputs)")

# (metric, name, the direction in which a rank holds the others up)
COMPONENTS = (
    (M.COMPUTE_MS, "compute", "higher"),
    (M.COMM_EXPOSED_MS, "exposed communication", "lower"),  # the one that waits least is the one waited for
    (M.FREE_MS, "free", "higher"),
    (M.BUBBLE_MS, "bubble", "higher"),
)
STEP_PARTS = (M.COMPUTE_MS, M.COMM_EXPOSED_MS, M.FREE_MS)


def _job_of(scope: Scope, rank: Entity) -> str:
    jobs = [e.target for e in scope.query.out_edges(rank.id, E.MEMBER_OF)]
    return jobs[0] if jobs else "job:" + rank.id.split(":", 1)[1].rsplit(":", 1)[0]


def _jobs(scope: Scope) -> dict[str, list[Entity]]:
    jobs: dict[str, list[Entity]] = defaultdict(list)
    for rank in scope.graph.entities(T.RANK):
        jobs[_job_of(scope, rank)].append(rank)
    return dict(sorted(jobs.items()))


def _job_name(job: str) -> str:
    return "job " + job.split(":", 1)[-1]


def _label(rank: Entity | None) -> str:
    if rank is None:
        return "rank ?"
    return f"rank {rank.attrs.get('rank', rank.id.rsplit(':', 1)[-1])}"


def _step_time(rank: Entity) -> float | None:
    parts = [num(rank, m) for m in STEP_PARTS]
    if all(p is not None for p in parts):
        return sum(parts)  # type: ignore[arg-type]
    return num(rank, M.STEP_TIME_MS)


def _gaps(ranks: list[Entity]) -> list[dict[str, Any]]:
    """msprof's (max - min) / mean step time per component, with the rank that holds the others up."""
    steps = [s for s in map(_step_time, ranks) if s is not None]
    if len(steps) < 2:
        return []
    mean_step = sum(steps) / len(steps)
    out = []
    for metric, name, worse in COMPONENTS:
        measured = sorted(((num(r, metric), r) for r in ranks if num(r, metric) is not None), key=lambda x: (x[0],
                                                                                                          x[1].id))
        if len(measured) < 2 or mean_step <= 0:
            continue
        (low, low_rank), (high, high_rank) = measured[0], measured[-1]
        if worse == "higher":  # ties: the lowest id among the highest
            high_rank = min((r for v, r in measured if v == high), key=lambda r: r.id)
        values = [v for v, _ in measured]
        out.append({"metric": metric, "name": name, "worse": worse, "ratio_pct": round((high - low) * 100 / mean_step,
                                                                                        6),
                    "max": high, "max_rank": high_rank, "min": low, "min_rank": low_rank,
                    "mean": sum(values) / len(values), "mean_step": mean_step, "ranks": len(measured),
                    "slow": high_rank if worse == "higher" else low_rank})
    return out


def _votes(scope: Scope, ranks: list[Entity]) -> tuple[dict[str, int], int, int]:
    """Calls each rank arrived last in (last_arrivals of its takes_part edges; where a collective has none,
    the rank with the least total wait in it), the calls voted on and the ranks taking part in them."""
    members = {r.id for r in ranks}
    by_collective: dict[str, list[Any]] = defaultdict(list)
    for edge in scope.graph.edges(E.TAKES_PART):
        if edge.source in members and not edge.attrs.get("link"):
            by_collective[edge.target].append(edge)
    votes: dict[str, int] = defaultdict(int)
    total = 0
    for _, edges in sorted(by_collective.items()):
        if any(num(e, M.LAST_ARRIVALS) is not None for e in edges):
            for e in edges:
                votes[e.source] += int(num(e, M.LAST_ARRIVALS) or 0)
                total += int(num(e, M.LAST_ARRIVALS) or 0)
            continue
        waits = sorted((num(e, M.WAIT_MS), e.source) for e in edges if num(e, M.WAIT_MS) is not None)
        if len(waits) >= 2 and waits[0][0] < waits[1][0]:
            votes[waits[0][1]] += 1
            total += 1
    return dict(votes), total, len({e.source for edges in by_collective.values() for e in edges})


# -- trace ranks for the host-side patterns that also read them ---------------------------
def trace_ranks(scope: Scope) -> list[Entity]:
    """The graph's trace ranks, in id order."""
    return sorted(scope.graph.entities(T.RANK), key=lambda r: r.id)


def full_step_ms(rank: Entity) -> float | None:
    """The wall time of one step of a rank: step_time_ms plus bubble_ms where the rank has one (msprof's Stage
    excludes the receive operators that its Bubble sums); without step_time_ms, compute + exposed communication +
    free (+ bubble)."""
    step = num(rank, M.STEP_TIME_MS)
    if step is None:
        parts = [num(rank, m) for m in STEP_PARTS]
        if any(p is None for p in parts):
            return None
        step = sum(parts)  # type: ignore[arg-type]
    return step + (num(rank, M.BUBBLE_MS) or 0.0)


def rank_label(rank: Entity) -> str:
    return _label(rank)


def sources(ranks: list[Entity]) -> list[str]:
    """The trace formats the ranks came from (kineto, msprof), sorted."""
    return sorted({str(r.attrs.get("source") or "unknown format") for r in ranks})


def sources_of(ranks: list[Entity]) -> str:
    """'msprof', 'kineto and msprof'."""
    return " and ".join(sources(ranks))


def with_traces(scope: Scope, host: Callable[[], Verdict], traces: Callable[[list[Entity]], Verdict]) -> Verdict:
    """A host-side pattern that also judges trace ranks: without ranks in the graph, exactly the host-side
    verdict; with ranks, both, combined: the worse finding first with the other's evidence after it, or where
    neither finds anything, both reasons. The text names the source of each part."""
    ranks = trace_ranks(scope)
    if not ranks:
        return host()
    return combine_sources(traces(ranks), host())


def combine_sources(trace: Verdict, host: Verdict) -> Verdict:
    parts = [("training traces", trace), ("host samples", host)]
    found = [(name, v) for name, v in parts if v.status == "finding"]
    found.sort(key=lambda nv: LEVELS.index(nv[1].severity) if nv[1].severity in LEVELS else len(LEVELS))
    others = [(name, v) for name, v in parts if v.status != "finding"]
    if not found:
        text = "; ".join(f"{name}: {_status_word(v)}{v.reason}" for name, v in parts)
        if any(v.status == "clear" for _, v in parts):
            return clear(text)
        return not_evaluated(text)
    description = " ".join(f"From {name}: {v.description}" for name, v in found)
    description += "".join(f" ({name}: {_status_word(v)}{v.reason})" for name, v in others)
    return finding(worst(*(v.severity for _, v in found)) or "warning", description,
                   [e for _, v in found for e in v.evidence], subjects=[s for _, v in found for s in v.subjects],
                   related=[r for _, v in found for r in v.related],
                   recommendations=[r for _, v in found for r in v.recommendations])


def _status_word(v: Verdict) -> str:
    return {"clear": "", "not_evaluated": "not evaluated, "}.get(v.status, "")


# -- control.slow_rank --------------------------------------------------------------------
def _slow_rank(scope: Scope, t: dict[str, Any]) -> Verdict:
    jobs = _jobs(scope)
    if not jobs:
        return not_evaluated(NO_RANKS)
    levels, min_votes = t["gap_pct"], int(t["min_votes"])
    items: list[Evidence] = []
    sentences, subjects, severities, judged, clear_parts = [], [], [], 0, []
    for job, ranks in jobs.items():
        gaps = _gaps(ranks)
        votes, calls, voters = _votes(scope, ranks)
        if not gaps and not calls:
            continue
        judged += 1
        crossed = [(g, levels.severity(g["ratio_pct"])) for g in gaps]
        crossed = [(g, s) for g, s in crossed if s]
        winner = _winner(votes)
        suspects: dict[str, int] = defaultdict(int)
        for g, _ in crossed:
            suspects[g["slow"].id] += 1
        if winner and votes[winner] >= min_votes:
            suspects[winner] += 1
        if not crossed and not (winner and votes[winner] >= min_votes):
            worst_gap = max(gaps, key=lambda g: g["ratio_pct"], default=None)
            clear_parts.append(f"{_job_name(job)}: {len(ranks)} ranks" + (
                f", widest gap {worst_gap['name']} {ev.fmt(worst_gap['ratio_pct'], '%')} of the mean step time "
                f"{ev.fmt(worst_gap['mean_step'], 'ms')}" if worst_gap else "") + (
                f", {ev.counted(calls, 'calls')} voted without a rank arriving last {min_votes} times or more"
                if calls else ""))
            continue
        # most pointed at; on a tie the step times win (they cover every rank, the vote may cover some)
        from_gaps = {g["slow"].id for g, _ in crossed}
        slow_id = max(sorted(suspects), key=lambda r: (suspects[r], r in from_gaps))
        slow = scope.graph.entity(slow_id)
        subjects.append(slow_id)
        parts = []
        for g, severity in crossed:
            severities.append(severity)
            value = g["max"] if g["worse"] == "higher" else g["min"]
            who = _label(g["slow"])
            parts.append(f"{g['name']} (max - min) / mean step = ({ev.fmt(g['max'], 'ms')} {_label(g['max_rank'])} - "
                         f"{ev.fmt(g['min'], 'ms')} {_label(g['min_rank'])}) / {ev.fmt(g['mean_step'], 'ms')} = "
                         f"{ev.fmt(g['ratio_pct'], '%')}, {who} at {ev.fmt(value, 'ms')}")
            items.append(ev.statistic([r.id for r in ranks], f"{g['metric']} gap", g["ratio_pct"], "%", levels=levels,
                                      severity=severity,
                                      note=f"(max {ev.fmt(g['max'], 'ms')} on {_label(g['max_rank'])} - min "
                                           f"{ev.fmt(g['min'], 'ms')} on {_label(g['min_rank'])}) / mean step time "
                                           f"{ev.fmt(g['mean_step'], 'ms')} (compute + exposed communication + free) "
                                           f"over {g['ranks']} ranks"))
            items.append(ev.entity(g["slow"].id, g["metric"], round(value, 3), "ms",
                                   note=f"{'highest' if g['worse'] == 'higher' else 'lowest'} of the job; mean "
                                        f"{ev.fmt(g['mean'], 'ms')}, min {ev.fmt(g['min'], 'ms')}, max "
                                        f"{ev.fmt(g['max'], 'ms')}"))
        if winner:
            ranked = sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))
            covered = f" (collective data of {voters} of the {len(ranks)} ranks)" if voters < len(ranks) else ""
            items.append(ev.entity(winner, M.LAST_ARRIVALS, votes[winner], "calls", bound=(">=", min_votes),
                                   note=f"arrived last (waited least) in {votes[winner]} of {calls} collective calls"
                                        f"{covered}; " + ", ".join(f"{_label(scope.graph.entity(r))} {n}"
                                                                   for r, n in ranked[:ev.MAX_SUBJECTS])))
            if winner != slow_id and votes[winner] >= min_votes:
                parts.append(f"the collective waits disagree: they point at {_label(scope.graph.entity(winner))}, "
                             f"last to arrive in {votes[winner]} of {calls} calls{covered}, not at {_label(slow)}")
            elif votes[winner] >= min_votes:
                severities.append("notice")
                parts.append(f"{_label(scope.graph.entity(winner))} arrived last in {votes[winner]} of {calls} "
                             f"collective calls{covered} (it waited least; its peers waited for it)")
        sentences.append(f"{_label(slow)} ({slow_id}) of {_job_name(job)}: " + "; ".join(parts))
    if not judged:
        return not_evaluated(f"{ev.counted(sum(map(len, jobs.values())), 'trace ranks')} without step times of two "
                             "or more ranks and without collective waits")
    if not sentences:
        return clear("; ".join(clear_parts) + f"; no component gap over {ev.fmt(levels.limit(), '%')} of the step")
    description = ("A rank holds its job up (msprof's slow-rank rule): " + ". ".join(sentences) + ".")
    return finding(worst(*severities) or "notice", description, items, subjects=subjects,
                   related=["control.straggler_host", "network.slow_link", "dataplane.data_loading_bottleneck"])


def _winner(votes: dict[str, int]) -> str | None:
    if not votes:
        return None
    ranked = sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))
    if ranked[0][1] <= 0 or (len(ranked) > 1 and ranked[1][1] == ranked[0][1]):
        return None
    return ranked[0][0]


SLOW_RANK = Pattern(
    id="control.slow_rank", layer=6, title="Slow rank: one rank of a job holds the others up (traces)",
    why="In a synchronous job every collective waits for the last rank. msprof-analyze's rule: when the ranks' "
        "compute, exposed communication or free time differ by more than 5 % of the step time, one rank works "
        "longer (more compute or host-side idle time) while the others wait for it in communication. The rank that "
        "waits least in the collectives is the one that arrived last.",
    metrics=("rank.compute_ms", "rank.comm_exposed_ms", "rank.free_ms", "rank.bubble_ms", "rank.step_time_ms",
             "takes_part.last_arrivals", "takes_part.wait_ms"),
    thresholds=(Threshold("gap_pct", "%", "above", "msprof's (max - min) / mean over the ranks of a job, of one step "
                          "component, against the mean step time (compute + exposed communication + free); 5 % is "
                          "msprof-analyze's own limit", critical=20, warning=10, notice=5),),
    params=(Param("min_votes", 2, "calls", "the least collective calls a rank must arrive last in (waiting least, "
                  "with no other rank as often) for the vote to name it"),),
    evidence="Per job: each step component whose gap crosses a level, with (max - min) / mean step time, the ranks "
             "holding the max and the min and the mean; the rank that holds the others up (highest compute, free or "
             "bubble; lowest exposed communication) with its value; the collective-wait vote (calls each rank arrived "
             "last in). The named rank is the one most components and the vote point at.",
    recommendations=(
        "Look at the named rank first: its host's CPU, data loading and accelerator (witty-profiler diagnose on that "
        "host's graph, or import-trace --into it); free time means its device waited for the host.",
        "Compare its profiler timeline with a fast rank's around the collectives it arrived last in.",
        "Balance the work (pipeline stages, data shards) when the gap is in compute or bubble.",
    ),
    needs="training traces: witty-profiler import-trace (Kineto or msprof-analyze)",
    check=_slow_rank)


# -- network.slow_link --------------------------------------------------------------------
MIN_LINK_BYTES = 1_000_000  # smaller transfers are latency-bound: their bandwidth says little about the link
LATENCY_OPS = ("allreduce", "allgather")


def _link_outliers(scope: Scope, t: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    groups: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for edge in scope.graph.edges(E.TAKES_PART):
        link = edge.attrs.get("link")
        bw = num(edge, M.BANDWIDTH_GBYTES_PER_S)
        if link and bw is not None and bw > 0 and (num(edge, M.TRANSIT_BYTES) or 0) >= MIN_LINK_BYTES:
            groups[(edge.target, str(link))].append(edge)
    out, compared = [], 0
    for (collective, link), edges in sorted(groups.items()):
        if len(edges) < int(t["min_peers"]):
            continue
        compared += 1
        for edge in edges:
            peers = [num(e, M.BANDWIDTH_GBYTES_PER_S) for e in edges if e is not edge]
            centre = median(peers)
            value = num(edge, M.BANDWIDTH_GBYTES_PER_S)
            if value >= centre:
                continue
            mad = median(abs(p - centre) for p in peers)
            z = round(0.6745 * (centre - value) / mad, 6) if mad else float("inf")
            slowdown = round(centre / value, 6)
            severity = t["slowdown"].severity(slowdown)
            if severity is None or z <= t["robust_z"]:
                continue
            out.append({"edge": edge, "collective": collective, "link": link, "value": value, "median": centre,
                        "mad": mad, "z": z, "slowdown": slowdown, "severity": severity, "peers": len(peers)})
    return out, compared


def _rank_edges(scope: Scope, collective: Entity) -> list[Any]:
    """Each rank's own takes_part edge into a collective (not its per-link ones)."""
    return [e for e in scope.query.in_edges(collective.id, E.TAKES_PART) if not e.attrs.get("link")]


def _message_bytes(collective: Entity, edges: list[Any]) -> float | None:
    """Bytes of one call: the trace's message size (Kineto), else what a rank moved per call (msprof)."""
    size = num(collective, M.MESSAGE_BYTES)
    if size is not None:
        return size
    moved = [num(e, M.TRANSIT_BYTES) / num(e, M.CALLS) for e in edges
             if num(e, M.TRANSIT_BYTES) and num(e, M.CALLS)]
    return median(moved) if moved else None


def _transfer_us(edges: list[Any]) -> tuple[float | None, str]:
    """The time of one call without waiting for late ranks, and how it was found: msprof's transit time
    (median over the ranks), or the fastest rank's mean kernel time where several ranks' traces are in (the
    rank that arrived last waited least); None with one rank's kernel time, which includes its waiting."""
    transit = [num(e, M.TRANSIT_MS) / num(e, M.CALLS) for e in edges
               if num(e, M.TRANSIT_MS) is not None and num(e, M.CALLS)]
    if transit:
        return round(median(transit) * 1000, 6), f"transit time (waiting excluded), the median of {len(transit)} ranks"
    kernel = [num(e, M.DURATION_MS) for e in edges if num(e, M.DURATION_MS) is not None]
    if len(kernel) >= 2:
        return round(min(kernel) * 1000, 6), (f"the fastest of {len(kernel)} ranks' mean kernel time (the rank that "
                                              "arrived last waited least)")
    return None, ""


def _at_most(severity: str, cap: str) -> str:
    return max(severity, cap, key=LEVELS.index)


def _slow_ops(scope: Scope, collectives: list[Entity], t: dict[str, Any]) -> list[dict[str, Any]]:
    """AllReduce/AllGather over the latency threshold, judged as far as the trace allows: on the transfer
    time without waiting where known; only for messages small enough that latency, not bandwidth, sets the
    time; at most P1 when one rank's kernel time (waiting included) is all there is, at most P2 without sizes."""
    latency, bound = t["latency_us"], t["latency_bound_bytes"]
    out = []
    for c in collectives:
        mean = num(c, M.DURATION_MS)
        if c.attrs.get("op") not in LATENCY_OPS or mean is None:
            continue
        edges = _rank_edges(scope, c)
        message = _message_bytes(c, edges)
        transfer, basis = _transfer_us(edges)
        us = transfer if transfer is not None else round(mean * 1000, 6)
        crossed = latency.severity(us)
        if crossed is None or (message is not None and message > bound):
            continue  # a large message's time grows with its size: judged by bandwidth, not latency
        severity, caveat = crossed, ""
        if message is None:
            severity = _at_most(crossed, "notice")
            caveat = ("the trace gives no message sizes (PyTorch records In/Out msg nelems and dtype in the NCCL "
                      "kernels' args), and a kernel's time includes waiting for the other ranks: at most P2")
        elif transfer is None:
            severity = _at_most(crossed, "warning")
            caveat = "one rank's kernel time, waiting for the other ranks included: at most P1"
        out.append({"collective": c, "us": us, "mean_us": round(mean * 1000, 6), "message": message, "basis": basis,
                    "severity": severity, "crossed": crossed, "caveat": caveat})
    return out


def _slow_link(scope: Scope, t: dict[str, Any]) -> Verdict:
    collectives = scope.graph.entities(T.COLLECTIVE)
    if not collectives:
        return not_evaluated("no collectives in this graph (import a job's training traces with witty-profiler "
                             "import-trace)")
    outliers, compared = _link_outliers(scope, t)
    latency = t["latency_us"]
    slow_ops = _slow_ops(scope, collectives, t)
    if not outliers and not slow_ops:
        timed = [c for c in collectives if c.attrs.get("op") in LATENCY_OPS and num(c, M.DURATION_MS) is not None]
        return clear(f"{ev.counted(len(collectives), 'collectives')}; {ev.counted(compared, 'link groups')} of "
                     f"{int(t['min_peers'])} or more ranks compared (transfers of 1 MB or more), no rank's bandwidth "
                     f"an outlier; {ev.counted(len(timed), 'AllReduce/AllGather')} under "
                     f"{ev.fmt(latency.limit(), 'us')} per call or with messages over "
                     f"{ev.fmt(t['latency_bound_bytes'])} bytes (bandwidth-bound)")
    items: list[Evidence] = []
    sentences, subjects = [], []
    for o in sorted(outliers, key=lambda o: (-o["slowdown"], o["edge"].id))[:ev.MAX_SUBJECTS]:
        edge, c = o["edge"], scope.graph.entity(o["collective"])
        subjects += [edge.source, o["collective"]]
        what = f"{c.attrs.get('op', '?')} of group {c.attrs.get('group', '?')}" if c else ev.short(o["collective"])
        sentences.append(f"{ev.short(edge.source)} over {o['link']} in {what}: {ev.fmt(o['value'], 'GB/s')} vs the "
                         f"peers' median {ev.fmt(o['median'], 'GB/s')} ({ev.fmt(o['slowdown'])}x slower)")
        items.append(ev.edge(edge.id, "bandwidth slowdown vs peers", o["slowdown"], "ratio", levels=t["slowdown"],
                             severity=o["severity"],
                             note=f"{M.BANDWIDTH_GBYTES_PER_S} {ev.fmt(o['value'], 'GB/s')}; the {o['peers']} peers' "
                                  f"median {ev.fmt(o['median'], 'GB/s')}, MAD {ev.fmt(o['mad'], 'GB/s')}, robust z "
                                  f"{'inf' if o['z'] == float('inf') else ev.fmt(round(o['z'], 1))} (> "
                                  f"{ev.fmt(t['robust_z'])}); {ev.fmt(num(edge, M.TRANSIT_BYTES))} bytes in "
                                  f"{ev.fmt(num(edge, M.TRANSIT_MS), 'ms')}"))
    if len(outliers) > ev.MAX_SUBJECTS:
        items.append(ev.more(len(outliers) - ev.MAX_SUBJECTS, "slow links"))
    for o in slow_ops:
        c = o["collective"]
        subjects.append(c.id)
        size = f" of {ev.fmt(o['message'])} bytes" if o["message"] is not None else ""
        judged = f"takes {ev.fmt(o['us'], 'us')} per call ({o['basis']})" if o["basis"] else \
            f"takes {ev.fmt(o['us'], 'us')} on average"
        sentences.append(f"{c.attrs.get('op')}{size} of group {c.attrs.get('group', '?')} {judged} over "
                         f"{ev.fmt(num(c, M.CALLS))} calls" + (f" ({o['caveat']})" if o["caveat"] else ""))
        waiting = o["mean_us"] - o["us"]
        items.append(ev.entity(c.id, "transfer time per call" if o["basis"] else "mean duration", o["us"], "us",
                               levels=latency, severity=o["severity"], bound=(">", latency.limit(o["crossed"])),
                               note=f"{M.DURATION_MS} {ev.fmt(num(c, M.DURATION_MS), 'ms')}, p95 "
                                    f"{ev.fmt(num(c, M.DURATION_MS + '_p95'), 'ms')}, max "
                                    f"{ev.fmt(num(c, M.DURATION_MS + '_max'), 'ms')}"
                                    + (f"; waiting {ev.fmt(round(waiting, 1), 'us')} per call on average"
                                       if o["basis"] and waiting > 0 else "")
                                    + (f"; message {ev.fmt(o['message'])} bytes (at most "
                                       f"{ev.fmt(t['latency_bound_bytes'])}: latency-bound)"
                                       if o["message"] is not None else "; message size unknown")))
    severity = worst(*(o["severity"] for o in outliers), *(o["severity"] for o in slow_ops))
    return finding(severity or "warning", "Slow collective links: " + "; ".join(sentences) + ".", items,
                   subjects=subjects, related=["control.slow_rank", "network.congestion", "network.rdma_bottleneck",
                                               "interconnect.nvlink_contention"])


SLOW_LINK = Pattern(
    id="network.slow_link", layer=4, title="Slow collective link (traces)",
    why="A rank whose transfers over one link type (RDMA, HCCS, PCIe, NVLink) run slower than its peers' in the "
        "same collective points at a bad link, a congested path or a wrong route; every rank of the group waits for "
        "it. A small AllReduce or AllGather (latency-bound) taking over 200 us a call indicates network congestion "
        "(the seed article's rule); the time judged is the transfer without waiting for late ranks where the traces "
        "tell them apart (msprof's transit time, or several ranks' Kineto traces). A collective's kernel time alone "
        "grows with its message and includes waiting for the other ranks, so without message sizes the rule gives "
        "P2 at most, and with one rank's kernel time P1 at most.",
    metrics=("takes_part.bandwidth_gbytes_per_s", "takes_part.transit_bytes", "takes_part.transit_ms",
             "takes_part.duration_ms", "collective.duration_ms", "collective.calls", "collective.message_bytes"),
    thresholds=(Threshold("slowdown", "ratio", "above", "the peers' median bandwidth over a rank's, per collective "
                          "and link type (transfers of 1 MB or more)", critical=2, warning=1.5),
                Threshold("latency_us", "us", "above", "time of one AllReduce or AllGather call of a latency-bound "
                          "message (the transfer without waiting where known, else the mean duration)",
                          critical=1000, warning=200)),
    params=(Param("robust_z", 3.5, "ratio", "the least robust z-score 0.6745 (median - bandwidth) / MAD of the peers "
                  "(Iglewicz-Hoaglin): a rank within its peers' own spread is not an outlier"),
            Param("min_peers", 3, "ranks", "the least ranks of a collective with transfers over one link type to "
                  "compare: with two, neither is the odd one"),
            Param("latency_bound_bytes", 1_000_000, "bytes", "messages of this size or less are judged by the "
                  "latency rule: on a 100 GB/s bus their transfer takes about 10-20 us, the order of NCCL's own "
                  "per-call latency (nccl-tests' busbw = algbw x 2(n-1)/n), so their time is set by latency; a "
                  "larger message's time grows with its size and is judged by bandwidth against the peers")),
    evidence="Each rank and link type whose bandwidth is an outlier in its collective (eight at most, the slowest "
             "first): its bandwidth, the peers' median and MAD, the robust z-score, bytes and transit time; each "
             "AllReduce/AllGather over the latency threshold with the time judged and how it was found, its mean, p95 "
             "and max duration, the waiting per call and its message size (or that it is unknown).",
    recommendations=(
        "Check the named rank's link of that type: port counters and errors (network.rdma_bottleneck, ibstat, "
        "hccn_tool), NVLink/HCCS state (interconnect.nvlink_contention), PCIe link width.",
        "For slow AllReduce/AllGather everywhere: look for congestion (PFC/ECN, oversubscribed uplinks), and "
        "bucket small collectives together.",
    ),
    needs="training traces with collectives: witty-profiler import-trace",
    check=_slow_link)
