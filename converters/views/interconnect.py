"""Layer 3, interconnect: NUMA geometry and placement, device locality, PCIe and device links.

The placement table is the heart of it: for each workload process its device, the device's
NUMA node, where it may run (allowed CPUs -> nodes), where it ran and where its pages are, so a
reader sees a process on node 7 feeding an NPU on node 6 without opening anything else.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import attrgetter

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.render import Block, Column, Lines, Table, num, pct
from witty_profiler.converters.views.common import (
    ALLOWED,
    ID,
    compact_list,
    coverage,
    edge_ends,
    edge_label,
    findings_block,
    legend,
    neg,
    rank,
)
from witty_profiler.converters.views.folds import edge_query, fold_query, per_type_query
from witty_profiler.converters.views.memory import pages_by_node, pages_cell
from witty_profiler.topology.cpulist import cpu_set
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.query import node_number
from witty_profiler.topology.vocabulary import E, M, T

LAYER = "interconnect"
_ATTRS, _ID = attrgetter("attrs"), attrgetter("id")
# what the placement findings compute per process, shown on its placement row (its pages in pages_by_node)
PLACEMENT_VALUES = ("remote_access_pct", "remote_runtime_pct", "remote_pages_pct", M.RUNTIME_SHARE_PCT)


def _dev_nodes(ctx: GraphContext, p) -> list[int]:
    return sorted({n for _, d in ctx.query.devices_of(p) if (n := ctx.query.device_node(d)[0]) is not None})


def placement_flag(ctx: GraphContext, p) -> str:
    """'ok', or 'OFF-NODE:' and what is away from the device's node: no allowed CPU there (cpus),
    under half the pages there (pages); '' for a process without a device of known node."""
    dev = _dev_nodes(ctx, p)
    if not dev:
        return ""
    placement = ctx.query.placement(p)
    flags = []
    if placement.allowed_nodes and not set(placement.allowed_nodes) & set(dev):
        flags.append("cpus")
    share = placement.pages_on(dev)
    if share is not None and share < 50:
        flags.append(M.PAGES)
    return "OFF-NODE:" + "+".join(flags) if flags else "ok"


def blocks(ctx: GraphContext) -> list[Block]:
    cited = ctx.cited(LAYER)
    out: list[Block] = [legend(ctx, "distance: SLIT, 10 = local; pages_by_node = node:pages (4 KiB), most first, "
                                    "+N = pages on the other nodes (all in the memory view); dev_node = the device's "
                                    "NUMA node; OFF-NODE: cpus = no allowed CPU on dev_node, pages = under half the "
                                    "pages on it; tid->7:60%,3:40% = a thread's run time split across nodes, "
                                    "+N = threads not named"),
                        *findings_block(ctx, LAYER, on_rows={m: (T.PROCESS,) for m in (*PLACEMENT_VALUES, M.PAGES)}),
                        coverage(ctx, LAYER)]
    nodes = ctx.numa_nodes
    numbers = [n for n in map(node_number, nodes) if n is not None][:32]
    ranked_nodes, pinned = rank(nodes, lambda n: 0, cited, ctx, workload=lambda n: True)
    out.append(Table("numa nodes", [ID, Column("cpus", lambda n: n.attrs.get("cpus") if isinstance(
        n.attrs.get("cpus"), str) else compact_list(cpu_set(n.attrs.get("cpus"))), left=True),
        Column(f"distance_to_{compact_list(numbers)}", lambda n: _distances(ctx, n, numbers), left=True)],
        ranked_nodes, "numa nodes", fold_query(ctx, T.NUMA_NODE, ranked_nodes), pinned, weight=3.0))
    values = ctx.cited_values(LAYER)
    users = [p for p in ctx.graph.entities(T.PROCESS)
             if p.id in ctx.workload_ids or ctx.query.out_edges(p.id, E.USES_DEVICE) or p.id in cited]
    placed = {p.id for p in users}
    members = ctx.workload_members  # ctx.in_workload, without a call per thread
    # a thread kept is cited or of the workload: those few are picked from 100,000 at C speed first
    every, near = ctx.graph.entities(T.THREAD), cited | members
    threads = [t for t in compress(every, map(near.__contains__, map(_ID, every))) if t.id in cited or (
        t.id in members and (t.attrs.get("numa_runtime_ns") or ctx.query.out_edges(t.id, E.RUNS_ON)))]
    groups: dict[str, list] = {}
    # by run time, busiest first; where no thread has a run time per node every key is the same and the
    # order stays as it is, so the sort (a key for each of 100,000 threads) is left out
    timed = any(map(dict.get, map(_ATTRS, threads), repeat("numa_runtime_ns")))
    for t in sorted(threads, key=lambda t: neg(_runtime(t))) if timed else threads:
        groups.setdefault(ctx.query.process_of(t), []).append(t)
    ran = {pid: _some(ts, cited) for pid, ts in groups.items() if pid in placed}  # on the placement row
    users, pinned = rank(users, lambda p: (not ctx.query.out_edges(p.id, E.USES_DEVICE),
                                           neg(p.metrics.get(M.CPU_UTIL_PCT))), cited, ctx)
    out.append(Table("workload placement: device, cpus, pages", [
        ID, Column("devices", lambda p: ",".join(d.id for d in ctx.devices(p)), left=True),
        Column("dev_node", lambda p: ",".join(map(str, _dev_nodes(ctx, p)))),
        ALLOWED, Column("allowed_nodes", lambda p: compact_list(ctx.query.placement(p).allowed_nodes), left=True,
                        optional=True),
        Column("placement", lambda p: placement_flag(ctx, p), left=True, optional=True),
        *(Column(name, lambda p, name=name: values.get((p.id, name)), left=True) for name in PLACEMENT_VALUES),
        # a cited process shows all its nodes: the finding cites the whole distribution
        Column("pages_by_node", lambda p: pages_cell(pages_by_node(ctx, p), top=None if p.id in cited else 3),
               left=True),
        Column("threads_ran_on", lambda p: _tids(*ran[p.id]) if p.id in ran else "", left=True),
    ], users, "processes", fold_query(ctx, T.PROCESS, users, where="ai=true"), pinned, weight=2.0,
        covers=lambda p: (p.id, *(d.id for d in ctx.devices(p)), *(t.id for t in ran.get(p.id, ([],))[0])),
        label=lambda p: p.id))
    devices, pinned = rank(ctx.query.accelerators() + ctx.graph.entities(T.NIC) + ctx.graph.entities(T.RDMA_PORT),
                           lambda d: (d.type not in (T.GPU, T.NPU), d.id), cited, ctx,
                           workload=lambda d: any(e.source in ctx.workload_ids
                                                  for e in ctx.query.in_edges(d.id, E.USES_DEVICE)))
    out.append(Table("devices and their NUMA node", [
        ID, Column("idx", lambda d: num(d.attrs.get("index"))),
        Column("node", lambda d: num(ctx.query.device_node(d)[0])),
        Column("local_cpus", lambda d: d.attrs.get("cpu_affinity") or d.attrs.get("local_cpus"), left=True),
        Column("pcie", lambda d: _link(ctx, d), left=True),
        Column("pcie%", lambda d: pct(d.metrics.get(M.PCIE_UTIL_PCT))),
        Column("nvlink%", lambda d: pct(d.metrics.get(M.NVLINK_UTIL_PCT))),
        Column("users", lambda d: ",".join(e.source for e in ctx.query.in_edges(d.id, E.USES_DEVICE)), left=True),
    ], devices, "devices", per_type_query(ctx, devices), pinned, weight=1.5))
    degraded = [p for p in ctx.graph.entities(T.PCI_DEVICE) if _degraded(p.metrics) or p.id in cited]
    degraded, pinned = rank(degraded, lambda p: 0, cited, ctx, workload=lambda p: False)
    out.append(Table("PCIe links below their maximum", [
        ID, Column("class", lambda p: p.attrs.get("class"), left=True),
        Column("node", lambda p: num(p.attrs.get("numa_node"))),
        Column("link", lambda p: _link_text(p.metrics), left=True),
    ], degraded, "pci devices", fold_query(ctx, T.PCI_DEVICE, degraded), pinned, weight=0.5))
    links = ctx.graph.edges(E.DEVICE_LINK) + ctx.graph.edges(E.NEAR_NIC)
    links, pinned = rank(links, lambda e: e.attrs.get("link_type") or "", cited, ctx, workload=lambda e: False)
    out.append(Table("device links", [
        Column("source", lambda e: e.source, left=True), Column("target", lambda e: e.target, left=True),
        Column("type", lambda e: e.type, left=True), Column("link", lambda e: e.attrs.get("link_type"), left=True),
        Column("util%", lambda e: pct(e.metrics.get(M.NVLINK_UTIL_PCT))),
    ], links, "links", edge_query(ctx, links), pinned, weight=0.5,
        covers=edge_ends, label=edge_label))
    procs = [(pid, ts) for pid, ts in groups.items() if pid not in placed]
    with_cited = {pid for pid, ts in procs if pid in cited or any(t.id in cited for t in ts)}
    procs, pinned = rank(procs, lambda g: neg(sum(_runtime(t) or 0 for t in g[1])), with_cited, ctx,
                         ident=lambda g: g[0], workload=lambda g: g[0] in ctx.workload_ids)
    out.append(Table("threads of other processes: tid->node it ran on", [
        Column("process", lambda g: g[0], left=True),
        Column("threads", lambda g: _tids(g[1]), left=True),
    ], procs, "processes", fold_query(ctx, T.THREAD, threads), pinned,
        covers=lambda g: (g[0], *(t.id for t in g[1])), label=lambda g: f"{g[0]} {_tids(g[1])}"))
    if not nodes and not users:
        out.append(Lines(["no NUMA or placement data in this graph"]))
    return out


SOME_THREADS = 4  # threads a placement row names besides the cited ones (the busiest)


def _some(threads: list, cited: set[str]) -> tuple[list, int]:
    """The cited threads and the busiest others, in run-time order, and how many are left out."""
    keep = {t.id for t in threads if t.id in cited} | set([t.id for t in threads if t.id not in cited][:SOME_THREADS])
    return [t for t in threads if t.id in keep], len(threads) - len(keep)


def _tids(threads: list, rest: int = 0) -> str:
    return " ".join(f"{t.attrs.get('tid', t.id.rsplit(':', 1)[1])}->{_thread_ran_on(t) or '-'}"
                    for t in threads) + (f" +{rest}" if rest else "")


def _runtime(t) -> float | None:
    per_node = t.attrs.get("numa_runtime_ns")
    if isinstance(per_node, dict) and per_node:
        return float(sum(v for v in per_node.values() if isinstance(v, (int, float))))
    return None


def _thread_ran_on(t) -> str:
    """'7' when a thread ran on one node only, else '7:60%,3:40%'."""
    per_node = t.attrs.get("numa_runtime_ns")
    if not isinstance(per_node, dict) or not per_node:
        return ""
    total = sum(v for v in per_node.values() if isinstance(v, (int, float)))
    if not total:
        return ""
    shares = [(k, 100 * v / total) for k, v in sorted(per_node.items(), key=lambda kv: -kv[1])
              if 100 * v / total >= 0.5]
    if len(shares) == 1:
        return str(shares[0][0])
    return ",".join(f"{k}:{s:.0f}%" for k, s in shares)


def _distances(ctx: GraphContext, node, numbers: list[int]) -> str:
    host, number = host_of(node.id), node_number(node)
    return " ".join(num(ctx.query.numa_distance(host, number, k)[0] if number is not None else None)
                    for k in numbers)


def _degraded(m: dict) -> bool:
    width, wmax = m.get(M.LINK_WIDTH), m.get(M.LINK_WIDTH_MAX)
    speed, smax = m.get(M.LINK_SPEED_GTS), m.get(M.LINK_SPEED_MAX_GTS)
    return bool((width and wmax and width < wmax) or (speed and smax and speed < smax))


def _link_text(m: dict) -> str:
    speed, smax = m.get(M.LINK_SPEED_GTS), m.get(M.LINK_SPEED_MAX_GTS)
    width, wmax = m.get(M.LINK_WIDTH), m.get(M.LINK_WIDTH_MAX)
    if speed is None and width is None:
        gen, width = m.get(M.PCIE_LINK_GEN), m.get(M.PCIE_LINK_WIDTH)
        if gen is None and width is None:
            return ""
        return f"gen{num(gen)}/{num(m.get(M.PCIE_LINK_GEN_MAX))} x{num(width)}/{num(m.get(M.PCIE_LINK_WIDTH_MAX))}"
    return f"{num(speed)}/{num(smax)}GT/s x{num(width)}/{num(wmax)}"


def _link(ctx: GraphContext, d) -> str:
    text = _link_text(d.metrics)
    if text:
        return text
    for e in ctx.query.out_edges(d.id, E.PCI_FUNCTION):
        pci = ctx.graph.entity(e.target)
        if pci is not None:
            return _link_text(pci.metrics)
    return ""

