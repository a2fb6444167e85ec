"""Layer 7, data plane: how data moves between the processes of the pipeline, and its loaders."""

from __future__ import annotations

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.render import Block, Column, Table, num, pct, size
from witty_profiler.converters.views.common import (
    CPU,
    ID,
    NAME,
    coverage,
    edge_ends,
    edge_label,
    findings_block,
    legend,
    neg,
    rank,
)
from witty_profiler.converters.views.folds import edge_query, fold_query
from witty_profiler.topology.ids import host_of, process_id
from witty_profiler.topology.vocabulary import IPC_EDGES, E, M, T

LAYER = "dataplane"


def _volume(e) -> float | None:
    m = e.metrics
    for name in (M.BYTES_PER_S, M.BYTES_TOTAL, M.BYTES_SENT_TOTAL, M.QUEUED_BYTES):
        if m.get(name) is not None:
            v = float(m[name])
            if name == M.BYTES_SENT_TOTAL and m.get(M.BYTES_RECEIVED_TOTAL) is not None:
                v += float(m[M.BYTES_RECEIVED_TOTAL])
            return v
    return None


def _volume_cell(e) -> str:
    m = e.metrics
    parts = []
    if m.get(M.BYTES_PER_S) is not None:
        parts.append(size(m[M.BYTES_PER_S], per_s=True))
    if m.get(M.BYTES_TOTAL) is not None:
        parts.append(size(m[M.BYTES_TOTAL]))
    if m.get(M.BYTES_SENT_TOTAL) is not None or m.get(M.BYTES_RECEIVED_TOTAL) is not None:
        parts.append(f"{size(m.get(M.BYTES_SENT_TOTAL))} sent/{size(m.get(M.BYTES_RECEIVED_TOTAL))} recv")
    return " ".join(parts)


def _queue_cell(e) -> str:
    m = e.metrics
    if m.get(M.QUEUED_BYTES) is None and m.get(M.QUEUED_BYTES_GROWTH_PER_S) is None:
        return ""
    text = size(m.get(M.QUEUED_BYTES))
    if m.get(M.QUEUED_BYTES_GROWTH_PER_S):
        text += f" ({'+' if m[M.QUEUED_BYTES_GROWTH_PER_S] >= 0 else ''}{size(m[M.QUEUED_BYTES_GROWTH_PER_S], True)})"
    return text


def blocks(ctx: GraphContext) -> list[Block]:
    cited = ctx.cited(LAYER)
    out: list[Block] = [legend(ctx, "ipc: source -> target (writer -> reader, client -> server where known); "
                                    "channels = pipes/sockets folded into the edge; queued = backlog at the end"),
                        *findings_block(ctx, LAYER),
                        coverage(ctx, LAYER)]
    ipc = [e for kind in IPC_EDGES for e in ctx.graph.edges(kind)]
    ipc, pinned = rank(ipc, lambda e: (neg(_volume(e)), neg(e.metrics.get(M.QUEUED_BYTES_GROWTH_PER_S)),
                                       neg(e.metrics.get(M.QUEUED_BYTES)), neg(e.metrics.get(M.CHANNELS))), cited, ctx,
                       workload=lambda e: e.source in ctx.workload_ids or e.target in ctx.workload_ids)
    names = {p.id: p.attrs.get("name") or "" for p in ctx.graph.entities(T.PROCESS)}
    out.append(Table("IPC between processes, workload first, then by volume and backlog", [
        Column("source", lambda e: e.source, left=True),
        Column("target", lambda e: e.target, left=True),
        Column("names", lambda e: f"{names.get(e.source, '?')}->{names.get(e.target, '?')}", left=True),
        Column("via", lambda e: e.type, left=True),
        Column("channels", lambda e: num(e.metrics.get(M.CHANNELS))),
        Column("volume", _volume_cell, left=True),
        Column("queued", _queue_cell, left=True),
    ], ipc, "ipc edges", edge_query(ctx, ipc), pinned, weight=2.0,
        covers=edge_ends, label=edge_label))
    loaders = [p for p in ctx.graph.entities(T.PROCESS) if p.attrs.get("role") == "loader" or p.id in cited]
    loaders, pinned = rank(loaders, lambda p: neg(p.metrics.get(M.CPU_UTIL_PCT)), cited, ctx)
    out.append(Table("loader workers, busiest first", [
        ID, NAME, Column("parent", lambda p: process_id(host_of(p.id), p.attrs['ppid'])
                         if p.attrs.get("ppid") is not None else "", left=True), CPU,
        Column("rq_wait%", lambda p: pct(p.metrics.get(M.RUNQUEUE_WAIT_PCT))),
        Column("read", lambda p: size(p.metrics.get(M.READ_BYTES_PER_S), per_s=True)),
        Column("threads", lambda p: num(p.metrics.get(M.NUM_THREADS))),
    ], loaders, "loaders", fold_query(ctx, T.PROCESS, loaders, where="role=loader"), pinned))
    shm = ctx.graph.entities(T.SHARED_MEMORY)
    shm, pinned = rank(shm, lambda s: -len(ctx.query.in_edges(s.id, E.USES_SHM)), cited, ctx,
                       workload=lambda s: any(e.source in ctx.workload_ids for e in ctx.query.in_edges(s.id, E.USES_SHM)))
    out.append(Table("shared memory objects", [
        ID, Column("size", lambda s: size(s.attrs.get("size_bytes") or s.metrics.get("size_bytes"))),
        Column("users", lambda s: len(ctx.query.in_edges(s.id, E.USES_SHM)) or ""),
    ], shm, "shared memory objects", fold_query(ctx, T.SHARED_MEMORY, shm), pinned, weight=0.5))
    return out



