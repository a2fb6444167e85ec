"""Layer 2, memory: pressure, faults and swapping, who holds the memory, and where it lives."""

from __future__ import annotations

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.render import Block, Column, Table, num, pct, rate, size
from witty_profiler.converters.views.common import coverage, has_any, ID, NAME, ROLE, findings_block, legend, neg, rank
from witty_profiler.converters.views.folds import fold_query, per_type_query

LAYER = "memory"
NUMBER = 2
TITLE = "memory (layer 2)"


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
    v = e.metrics.get("numa_pages_total")
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
        ID, Column("total", lambda h: size(h.metrics.get("mem_total_bytes"))),
        Column("available", lambda h: size(h.metrics.get("mem_available_bytes"))),
        Column("used%", lambda h: pct(h.metrics.get("mem_used_pct"))),
        Column("swap_used", lambda h: _of(size(m("swap_used_bytes")(h)), size(m("swap_total_bytes")(h)))),
        Column("swap_in/out", lambda h: _pair(m("swap_in_pages_per_s")(h), m("swap_out_pages_per_s")(h), "pg/s")),
        Column("majflt", lambda h: rate(h.metrics.get("major_faults_per_s"))),
        Column("psi_some/full", lambda h: _pair(m("psi_memory_some_pct")(h), m("psi_memory_full_pct")(h), "%")),
    ], hosts, "hosts", fold_query(ctx, "host", hosts), pinned, weight=0.5))
    nodes, pinned = rank(ctx.numa_nodes, lambda n: 0, cited, ctx)
    out.append(Table("numa nodes", [
        ID, Column("total", lambda n: size(n.metrics.get("mem_total_bytes"))),
        Column("free", lambda n: size(n.metrics.get("mem_free_bytes"))),
        Column("used%", lambda n: pct(n.metrics.get("mem_used_pct"))),
        Column("hit/s", lambda n: rate(n.metrics.get("numa_hit_per_s"))),
        Column("miss/s", lambda n: rate(n.metrics.get("numa_miss_per_s"))),
        Column("remote_alloc%", lambda n: pct(n.metrics.get("numa_remote_alloc_pct"))),
        Column("hit_pages_since_boot", lambda n: num(n.metrics.get("numa_hit"))),
        Column("miss_pages_since_boot", lambda n: num(n.metrics.get("numa_miss"))),
    ], nodes, "numa nodes", fold_query(ctx, "numa_node", nodes), pinned, weight=0.7))
    procs, pinned = rank(ctx.graph.entities("process"), lambda p: (neg(p.metrics.get("rss_bytes")), neg(_pages_total(p))),
                         cited, ctx)
    out.append(Table("processes, workload first, then by memory", [
        ID, NAME, ROLE, Column("rss", lambda p: size(p.metrics.get("rss_bytes"))),
        Column("majflt", lambda p: rate(p.metrics.get("major_faults_per_s"))),
        Column("remote%", lambda p: pct(p.metrics.get("numa_remote_pages_pct"))),
        Column("coloc%", lambda p: pct(p.metrics.get("cpu_mem_colocation_pct"))),
        Column("pages_total", lambda p: num(_pages_total(p))),
        Column("pages_by_node", lambda p: pages_cell(pages_by_node(ctx, p)), left=True),
    ], procs, "processes", fold_query(ctx, "process", procs, top="rss_bytes"), pinned, weight=1.5))
    devices = [d for d in ctx.query.accelerators() if has_any(d, ("memory_used_bytes", "memory_total_bytes",
                                                          "mem_bw_util_pct")) or d.id in cited]
    devices, pinned = rank(devices, lambda d: neg(d.metrics.get("memory_used_pct")), cited, ctx,
                           workload=lambda d: any(e.source in ctx.workload_ids
                                                  for e in ctx.query.in_edges(d.id, "uses_device")))
    out.append(Table("device memory", [
        ID, Column("used", lambda d: size(d.metrics.get("memory_used_bytes"))),
        Column("total", lambda d: size(d.metrics.get("memory_total_bytes"))),
        Column("used%", lambda d: pct(d.metrics.get("memory_used_pct"))),
        Column("hbm_bw%", lambda d: pct(d.metrics.get("mem_bw_util_pct"))),
    ], devices, "accelerators", per_type_query(ctx, devices, "memory_used_pct"), pinned))
    groups = [c for c in ctx.graph.entities("cgroup") if c.metrics.get("memory_limit_bytes") is not None
              or c.id in cited]
    groups, pinned = rank(groups, lambda c: neg(c.metrics.get("memory_usage_bytes")), cited, ctx)
    out.append(Table("cgroups with a memory limit", [
        ID, Column("usage", lambda c: size(c.metrics.get("memory_usage_bytes"))),
        Column("limit", lambda c: size(c.metrics.get("memory_limit_bytes"))),
        Column("psi_some", lambda c: pct(c.metrics.get("psi_memory_some_pct"))),
    ], groups, "cgroups", fold_query(ctx, "cgroup", groups, where="memory_limit_bytes>0"), pinned, weight=0.5))
    return out


def _of(a: str, b: str) -> str:
    return "" if a == "-" else f"{a}/{b}"


def _pair(a, b, unit: str) -> str:
    if a is None and b is None:
        return ""
    return f"{num(a)}/{num(b)}{unit}"
