"""Layer 2, memory: pressure, faults and swapping, who holds the memory, and where it lives."""

from __future__ import annotations

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.render import Block, Column, Table, num, pct, rate, size
from witty_profiler.converters.views.common import ID, NAME, ROLE, coverage, findings_block, has_any, legend, neg, rank
from witty_profiler.converters.views.folds import fold_query, per_type_query
from witty_profiler.topology.vocabulary import E, M, T

LAYER = "memory"


def pages_by_node(ctx: GraphContext, e) -> dict[str, float]:
    """Pages of a process per NUMA node, as the diagnosis reads them (topology.placement)."""
    return {str(node): pages for node, pages in ctx.query.placement(e).pages.items()}


def pages_cell(pages: dict[str, float], top: int | None = None) -> str:
    """'6:573587 0:40779 ...': pages per NUMA node, most first (exact, as numa_maps counts them);
    with `top`, the pages on the other nodes are summed as '+N'."""
    items = sorted(((str(k), v) for k, v in pages.items() if v), key=lambda kv: (-kv[1], kv[0]))
    head = " ".join(f"{k}:{num(v)}" for k, v in items[:top])
    rest = items[top:] if top is not None else []
    return head + (f" +{num(sum(v for _, v in rest))}" if rest else "")


def _pages_total(e) -> float | None:
    v = e.metrics.get(M.NUMA_PAGES_TOTAL)
    if v is None and isinstance(e.attrs.get("numa_pages"), dict):
        v = sum(x for x in e.attrs["numa_pages"].values() if isinstance(x, (int, float)))
    return v


def blocks(ctx: GraphContext) -> list[Block]:
    cited = ctx.cited(LAYER)
    out: list[Block] = [legend(ctx, "psi: % of the window some/all tasks stalled on memory; pages = 4 KiB pages "
                                    "per NUMA node as node:pages, most first; remote% = pages away from where it ran; "
                                    "coloc% = overlap of where it ran and where its pages are"),
                        *findings_block(ctx, LAYER),
                        coverage(ctx, LAYER)]
    m = lambda name: (lambda e: e.metrics.get(name))  # noqa: E731
    hosts, pinned = rank(ctx.hosts, lambda h: 0, cited, ctx)
    out.append(Table("host", [
        ID, Column("total", lambda h: size(h.metrics.get(M.MEM_TOTAL_BYTES))),
        Column("available", lambda h: size(h.metrics.get(M.MEM_AVAILABLE_BYTES))),
        Column("used%", lambda h: pct(h.metrics.get(M.MEM_USED_PCT))),
        Column("swap_used", lambda h: _of(size(m(M.SWAP_USED_BYTES)(h)), size(m(M.SWAP_TOTAL_BYTES)(h)))),
        Column("swap_in/out", lambda h: _pair(m(M.SWAP_IN_PAGES_PER_S)(h), m(M.SWAP_OUT_PAGES_PER_S)(h), "pg/s")),
        Column("majflt", lambda h: rate(h.metrics.get(M.MAJOR_FAULTS_PER_S))),
        Column("psi_some/full", lambda h: _pair(m(M.PSI_MEMORY_SOME_PCT)(h), m(M.PSI_MEMORY_FULL_PCT)(h), "%")),
    ], hosts, "hosts", fold_query(ctx, T.HOST, hosts), pinned, weight=0.5))
    nodes, pinned = rank(ctx.numa_nodes, lambda n: 0, cited, ctx)
    out.append(Table("numa nodes", [
        ID, Column("total", lambda n: size(n.metrics.get(M.MEM_TOTAL_BYTES))),
        Column("free", lambda n: size(n.metrics.get(M.MEM_FREE_BYTES))),
        Column("used%", lambda n: pct(n.metrics.get(M.MEM_USED_PCT))),
        Column("hit/s", lambda n: rate(n.metrics.get(M.NUMA_HIT_PER_S))),
        Column("miss/s", lambda n: rate(n.metrics.get(M.NUMA_MISS_PER_S))),
        Column("remote_alloc%", lambda n: pct(n.metrics.get(M.NUMA_REMOTE_ALLOC_PCT))),
        Column("hit_pages_since_boot", lambda n: num(n.metrics.get(M.NUMA_HIT))),
        Column("miss_pages_since_boot", lambda n: num(n.metrics.get(M.NUMA_MISS))),
    ], nodes, "numa nodes", fold_query(ctx, T.NUMA_NODE, nodes), pinned, weight=0.7))
    procs, pinned = rank(ctx.graph.entities(T.PROCESS), lambda p: (neg(p.metrics.get(M.RSS_BYTES)), neg(_pages_total(p))),
                         cited, ctx)
    out.append(Table("processes, workload first, then by memory", [
        ID, NAME, ROLE, Column("rss", lambda p: size(p.metrics.get(M.RSS_BYTES))),
        Column("majflt", lambda p: rate(p.metrics.get(M.MAJOR_FAULTS_PER_S))),
        Column("remote%", lambda p: pct(p.metrics.get(M.NUMA_REMOTE_PAGES_PCT))),
        Column("coloc%", lambda p: pct(p.metrics.get(M.CPU_MEM_COLOCATION_PCT))),
        Column("pages_total", lambda p: num(_pages_total(p))),
        Column("pages_by_node", lambda p: pages_cell(pages_by_node(ctx, p)), left=True),
    ], procs, "processes", fold_query(ctx, T.PROCESS, procs, top=M.RSS_BYTES), pinned, weight=1.5))
    devices = [d for d in ctx.query.accelerators() if has_any(d, (M.MEMORY_USED_BYTES, M.MEMORY_TOTAL_BYTES,
                                                          M.MEM_BW_UTIL_PCT, M.HBM_BW_UTIL_PCT)) or d.id in cited]
    devices, pinned = rank(devices, lambda d: neg(d.metrics.get(M.MEMORY_USED_PCT)), cited, ctx,
                           workload=lambda d: any(e.source in ctx.workload_ids
                                                  for e in ctx.query.in_edges(d.id, E.USES_DEVICE)))
    out.append(Table("device memory", [
        ID, Column("used", lambda d: size(d.metrics.get(M.MEMORY_USED_BYTES))),
        Column("total", lambda d: size(d.metrics.get(M.MEMORY_TOTAL_BYTES))),
        Column("used%", lambda d: pct(d.metrics.get(M.MEMORY_USED_PCT))),
        Column("hbm_bw%", lambda d: pct(d.metrics.get(M.MEM_BW_UTIL_PCT))),
        Column("hbm_peak%", lambda d: pct(d.metrics.get(M.HBM_BW_UTIL_PCT))),
    ], devices, "accelerators", per_type_query(ctx, devices, M.MEMORY_USED_PCT), pinned))
    groups = [c for c in ctx.graph.entities(T.CGROUP) if c.metrics.get(M.MEMORY_LIMIT_BYTES) is not None
              or c.id in cited]
    groups, pinned = rank(groups, lambda c: neg(c.metrics.get(M.MEMORY_USAGE_BYTES)), cited, ctx)
    out.append(Table("cgroups with a memory limit", [
        ID, Column("usage", lambda c: size(c.metrics.get(M.MEMORY_USAGE_BYTES))),
        Column("limit", lambda c: size(c.metrics.get(M.MEMORY_LIMIT_BYTES))),
        Column("psi_some", lambda c: pct(c.metrics.get(M.PSI_MEMORY_SOME_PCT))),
    ], groups, "cgroups", fold_query(ctx, T.CGROUP, groups, where="memory_limit_bytes>0"), pinned, weight=0.5))
    return out


def _of(a: str, b: str) -> str:
    return "" if a == "-" else f"{a}/{b}"


def _pair(a, b, unit: str) -> str:
    if a is None and b is None:
        return ""
    return f"{num(a)}/{num(b)}{unit}"
