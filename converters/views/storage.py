"""Layer 5, storage: does the workload wait for disks, and which disks and processes are busy?"""

from __future__ import annotations

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.render import Block, Column, Table, duration_ms, num, pct, rate, size
from witty_profiler.converters.views.common import ID, NAME, ROLE, coverage, findings_block, legend, neg, rank
from witty_profiler.converters.views.folds import fold_query
from witty_profiler.topology.vocabulary import M, T

LAYER = "storage"


def _io(e) -> float | None:
    r, w = e.metrics.get(M.READ_BYTES_PER_S), e.metrics.get(M.WRITE_BYTES_PER_S)
    if r is None and w is None:
        return None
    return (r or 0) + (w or 0)


def blocks(ctx: GraphContext) -> list[Block]:
    cited = ctx.cited(LAYER)
    out: list[Block] = [legend(ctx, "util% = share of the window with I/O in flight; await = mean time per I/O"),
                        *findings_block(ctx, LAYER),
                        coverage(ctx, LAYER)]
    hosts, pinned = rank(ctx.hosts, lambda h: 0, cited, ctx)
    out.append(Table("host", [
        ID, Column("iowait%", lambda h: pct(h.metrics.get(M.CPU_IOWAIT_PCT))),
        Column("psi_io_some%", lambda h: pct(h.metrics.get(M.PSI_IO_SOME_PCT))),
        Column("psi_io_full%", lambda h: pct(h.metrics.get(M.PSI_IO_FULL_PCT))),
        Column("read", lambda h: size(h.metrics.get(M.READ_BYTES_PER_S), per_s=True)),
        Column("write", lambda h: size(h.metrics.get(M.WRITE_BYTES_PER_S), per_s=True)),
    ], hosts, "hosts", fold_query(ctx, T.HOST, hosts), pinned, weight=0.5))
    disks, pinned = rank(ctx.graph.entities(T.BLOCK_DEVICE), lambda d: (neg(d.metrics.get(M.DISK_UTIL_PCT)), neg(_io(d))),
                         cited, ctx, workload=lambda d: False)
    out.append(Table("disks, busiest first", [
        ID, Column("util%", lambda d: pct(d.metrics.get(M.DISK_UTIL_PCT))),
        Column("await", lambda d: duration_ms(d.metrics.get(M.AWAIT_MS))),
        Column("read", lambda d: size(d.metrics.get(M.READ_BYTES_PER_S), per_s=True)),
        Column("write", lambda d: size(d.metrics.get(M.WRITE_BYTES_PER_S), per_s=True)),
        Column("r_iops", lambda d: rate(d.metrics.get(M.READ_IOPS))),
        Column("w_iops", lambda d: rate(d.metrics.get(M.WRITE_IOPS))),
    ], disks, "disks", fold_query(ctx, T.BLOCK_DEVICE, disks, top=M.DISK_UTIL_PCT), pinned))
    procs = [p for p in ctx.graph.entities(T.PROCESS) if (_io(p) or 0) > 0 or p.id in cited]
    procs, pinned = rank(procs, lambda p: neg(_io(p)), cited, ctx)
    out.append(Table("processes doing I/O, workload first, then by bytes", [
        ID, NAME, ROLE, Column("read", lambda p: size(p.metrics.get(M.READ_BYTES_PER_S), per_s=True)),
        Column("write", lambda p: size(p.metrics.get(M.WRITE_BYTES_PER_S), per_s=True)),
        Column("write_burst", lambda p: f"{num(p.metrics[M.WRITE_BURST_S])}s"
               if p.metrics.get(M.WRITE_BURST_S) is not None else ""),
    ], procs, "processes", fold_query(ctx, T.PROCESS, procs, top=M.WRITE_BYTES_PER_S), pinned, weight=1.5))
    return out
