"""Layer 7, data plane: how data moves between the processes of the pipeline, and its loaders."""

from __future__ import annotations

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.render import Block, Column, Table, num, pct, size
from witty_profiler.converters.views.common import coverage, edge_ends, edge_label, CPU, ID, NAME, findings_block, legend, neg, rank
from witty_profiler.converters.views.folds import edge_query, fold_query
from witty_profiler.topology.ids import host_of, process_id
from witty_profiler.topology.vocabulary import IPC_EDGES

LAYER = "dataplane"
NUMBER = 7
TITLE = "data plane (layer 7)"


def _volume(e) -> float | None:
    m = e.metrics
    for name in ("bytes_per_s", "bytes_total", "bytes_sent_total", "queued_bytes"):
        if m.get(name) is not None:
            v = float(m[name])
            if name == "bytes_sent_total" and m.get("bytes_received_total") is not None:
                v += float(m["bytes_received_total"])
            return v
    return None


def _volume_cell(e) -> str:
    m = e.metrics
    parts = []
    if m.get("bytes_per_s") is not None:
        parts.append(size(m["bytes_per_s"], per_s=True))
    if m.get("bytes_total") is not None:
        parts.append(size(m["bytes_total"]))
    if m.get("bytes_sent_total") is not None or m.get("bytes_received_total") is not None:
        parts.append(f"{size(m.get('bytes_sent_total'))} sent/{size(m.get('bytes_received_total'))} recv")
    return " ".join(parts)


def _queue_cell(e) -> str:
    m = e.metrics
    if m.get("queued_bytes") is None and m.get("queued_bytes_growth_per_s") is None:
        return ""
    text = size(m.get("queued_bytes"))
    if m.get("queued_bytes_growth_per_s"):
        text += f" ({'+' if m['queued_bytes_growth_per_s'] >= 0 else ''}{size(m['queued_bytes_growth_per_s'], True)})"
    return text


def blocks(ctx: GraphContext) -> list[Block]:
    cited = ctx.cited(LAYER)
    out: list[Block] = [legend(ctx, "ipc: source -> target (writer -> reader, client -> server where known); "
                                    "channels = pipes/sockets folded into the edge; queued = backlog at the end"),
                        *findings_block(ctx, LAYER),
                        coverage(ctx, LAYER)]
    ipc = [e for kind in IPC_EDGES for e in ctx.graph.edges(kind)]
    ipc, pinned = rank(ipc, lambda e: (neg(_volume(e)), neg(e.metrics.get("queued_bytes_growth_per_s")),
                                       neg(e.metrics.get("queued_bytes")), neg(e.metrics.get("channels"))), cited, ctx,
                       workload=lambda e: e.source in ctx.workload_ids or e.target in ctx.workload_ids)
    names = {p.id: p.attrs.get("name") or "" for p in ctx.graph.entities("process")}
    out.append(Table("IPC between processes, workload first, then by volume and backlog", [
        Column("source", lambda e: e.source, left=True),
        Column("target", lambda e: e.target, left=True),
        Column("names", lambda e: f"{names.get(e.source, '?')}->{names.get(e.target, '?')}", left=True),
        Column("via", lambda e: e.type, left=True),
        Column("channels", lambda e: num(e.metrics.get("channels"))),
        Column("volume", _volume_cell, left=True),
        Column("queued", _queue_cell, left=True),
    ], ipc, "ipc edges", edge_query(ctx, ipc), pinned, weight=2.0,
        covers=edge_ends, label=edge_label))
    loaders = [p for p in ctx.graph.entities("process") if p.attrs.get("role") == "loader" or p.id in cited]
    loaders, pinned = rank(loaders, lambda p: neg(p.metrics.get("cpu_util_pct")), cited, ctx)
    out.append(Table("loader workers, busiest first", [
        ID, NAME, Column("parent", lambda p: process_id(host_of(p.id), p.attrs['ppid'])
                         if p.attrs.get("ppid") is not None else "", left=True), CPU,
        Column("rq_wait%", lambda p: pct(p.metrics.get("runqueue_wait_pct"))),
        Column("read", lambda p: size(p.metrics.get("read_bytes_per_s"), per_s=True)),
        Column("threads", lambda p: num(p.metrics.get("num_threads"))),
    ], loaders, "loaders", fold_query(ctx, "process", loaders, where="role=loader"), pinned))
    shm = ctx.graph.entities("shared_memory")
    shm, pinned = rank(shm, lambda s: -len(ctx.query.in_edges(s.id, "uses_shm")), cited, ctx,
                       workload=lambda s: any(e.source in ctx.workload_ids for e in ctx.query.in_edges(s.id, "uses_shm")))
    out.append(Table("shared memory objects", [
        ID, Column("size", lambda s: size(s.attrs.get("size_bytes") or s.metrics.get("size_bytes"))),
        Column("users", lambda s: len(ctx.query.in_edges(s.id, "uses_shm")) or ""),
    ], shm, "shared memory objects", fold_query(ctx, "shared_memory", shm), pinned, weight=0.5))
    return out



