"""Layer 4, network: NICs and RDMA ports, TCP retransmission, connections with RTT, socket flows."""

from __future__ import annotations

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.render import Block, Column, Table, duration_ms, duration_us, num, pct, rate, size
from witty_profiler.converters.views.common import (
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
from witty_profiler.converters.views.folds import edge_query, fold_query
from witty_profiler.topology.ids import host_of, process_id, process_of_thread
from witty_profiler.topology.vocabulary import E, M, T

LAYER = "network"


def blocks(ctx: GraphContext) -> list[Block]:
    cited = ctx.cited(LAYER)
    traced = "; collectives (traces): dur = one call's kernel time (mean, p95, max), bytes = message sizes " \
             "summed over the calls, GB/s = algorithm bandwidth (bytes / kernel time, not bus bandwidth)"
    out: list[Block] = [legend(ctx, "rates over the window; rtt = smoothed round trip; "
                                    "flows: bytes and packets a thread sent to a socket"
                                    + (traced if ctx.graph.entities(T.COLLECTIVE) else "")), *findings_block(ctx, LAYER),
                        coverage(ctx, LAYER)]
    hosts, pinned = rank(ctx.hosts, lambda h: 0, cited, ctx)
    out.append(Table("host TCP", [
        ID, Column("retrans%", lambda h: pct(h.metrics.get(M.TCP_RETRANS_PCT))),
        Column("out_segs", lambda h: rate(h.metrics.get(M.TCP_OUT_SEGS_PER_S))),
        Column("retrans_segs", lambda h: rate(h.metrics.get(M.TCP_RETRANS_SEGS_PER_S))),
    ], hosts, "hosts", fold_query(ctx, T.HOST, hosts), pinned, weight=0.5))
    nics, pinned = rank(ctx.graph.entities(T.NIC), lambda n: neg(n.metrics.get(M.LINK_UTIL_PCT)), cited, ctx,
                        workload=lambda n: False)
    out.append(Table("NICs, busiest first", [
        ID, Column("speed", lambda n: f"{num(n.metrics.get(M.SPEED_MBPS) or n.attrs.get('speed_mbps'))}Mb/s"
                   if (n.metrics.get(M.SPEED_MBPS) or n.attrs.get("speed_mbps")) else ""),
        Column("rx", lambda n: size(n.metrics.get(M.RX_BYTES_PER_S), per_s=True)),
        Column("tx", lambda n: size(n.metrics.get(M.TX_BYTES_PER_S), per_s=True)),
        Column("util%", lambda n: pct(n.metrics.get(M.LINK_UTIL_PCT))),
        Column("drops", lambda n: _sum_rate(n.metrics, M.RX_DROPS_PER_S, M.TX_DROPS_PER_S)),
        Column("errors", lambda n: _sum_rate(n.metrics, M.RX_ERRORS_PER_S, M.TX_ERRORS_PER_S)),
        Column("node", lambda n: num(n.attrs.get("numa_node"))),
    ], nics, "nics", fold_query(ctx, T.NIC, nics, top=M.LINK_UTIL_PCT), pinned, weight=0.8))
    ports, pinned = rank(ctx.graph.entities(T.RDMA_PORT), lambda p: neg(p.metrics.get(M.PORT_UTIL_PCT)), cited, ctx,
                         workload=lambda p: False)
    out.append(Table("RDMA ports", [
        ID, Column("state", lambda p: p.attrs.get("state"), left=True),
        Column("rate", lambda p: f"{num(p.metrics.get(M.RATE_GBPS) or p.attrs.get('rate_gbps'))}Gb/s"
               if (p.metrics.get(M.RATE_GBPS) or p.attrs.get("rate_gbps")) else ""),
        Column("rx", lambda p: size(p.metrics.get(M.PORT_RCV_BYTES_PER_S), per_s=True)),
        Column("tx", lambda p: size(p.metrics.get(M.PORT_XMIT_BYTES_PER_S), per_s=True)),
        Column("util%", lambda p: pct(p.metrics.get(M.PORT_UTIL_PCT))),
        Column("errors", lambda p: rate(p.metrics.get(M.PORT_ERRORS_PER_S))),
        Column("retrans", lambda p: rate(p.metrics.get(M.PORT_RETRANS_PER_S))),
        Column("pfc_rx", lambda p: rate(p.metrics.get(M.PFC_RX_FRAMES_PER_S))),
        Column("cnp_rx", lambda p: rate(p.metrics.get(M.CNP_RX_PACKETS_PER_S))),
        Column("qps", lambda p: num(p.metrics.get(M.QPS))),
        Column("qps_err", lambda p: num(p.metrics.get(M.QPS_ERROR))),
    ], ports, "rdma ports", fold_query(ctx, T.RDMA_PORT, ports), pinned, weight=0.8))
    owner = {e.target: e.source for e in ctx.graph.edges(E.OWNS_CONNECTION)}
    conns, pinned = rank(ctx.graph.entities(T.TCP_CONNECTION), lambda c: (neg(c.metrics.get(M.RTT_US)),
                                                                    neg(c.metrics.get(M.RETRANS_TOTAL))),
                         cited, ctx, workload=lambda c: owner.get(c.id) in ctx.workload_ids or (
                             process_id(host_of(c.id), c.attrs.get('pid')) in ctx.workload_ids))
    out.append(Table("TCP connections, workload first, then by rtt", [
        ID, Column("state", lambda c: c.attrs.get("state"), left=True),
        Column("process", lambda c: owner.get(c.id) or (f"pid {c.attrs['pid']}" if c.attrs.get("pid") else ""),
               left=True),
        Column("rtt", lambda c: duration_us(c.metrics.get(M.RTT_US))),
        Column("rtt_var", lambda c: duration_us(c.metrics.get(M.RTT_VAR_US))),
        Column("retrans", lambda c: num(c.metrics.get(M.RETRANS_TOTAL))),
        Column("sent", lambda c: size(c.metrics.get(M.BYTES_SENT_TOTAL))),
        Column("received", lambda c: size(c.metrics.get(M.BYTES_RECEIVED_TOTAL))),
    ], conns, "connections", fold_query(ctx, T.TCP_CONNECTION, conns, top=M.RTT_US), pinned))
    flows, pinned = rank(ctx.graph.edges(E.SENDS_TO), lambda e: neg(e.metrics.get(M.BYTES_TOTAL)), cited, ctx,
                         workload=lambda e: e.source in ctx.workload_ids or process_of_thread(e.source)
                         in ctx.workload_ids)
    out.append(Table("socket flows, workload first, then by bytes", [
        Column("from", lambda e: e.source, left=True), Column("to", lambda e: e.target, left=True),
        Column("bytes", lambda e: f"{num(e.metrics.get(M.BYTES_TOTAL))}B"
               if e.metrics.get(M.BYTES_TOTAL) is not None else ""),
        Column("packets", lambda e: num(e.metrics.get(M.PACKETS_TOTAL))),
        Column("rate", lambda e: size(e.metrics.get(M.BYTES_PER_S), per_s=True)),
    ], flows, "flows", edge_query(ctx, flows), pinned, weight=1.5, covers=edge_ends,
        label=edge_label))
    out.append(collective_table(ctx, cited))
    return out


def _time_in(c) -> float:
    """A collective's kernel time over the trace (calls x mean duration): the costliest first."""
    return (c.metrics.get(M.CALLS) or 0) * (c.metrics.get(M.DURATION_MS) or 0)


def collective_table(ctx: GraphContext, cited: set[str]) -> Table:
    colls, pinned = rank(ctx.graph.entities(T.COLLECTIVE), lambda c: -_time_in(c), cited, ctx,
                         workload=lambda c: False)
    ms = lambda name: lambda c: duration_ms(c.metrics.get(name))  # noqa: E731
    return Table("collectives (traces), most kernel time first", [
        ID, Column("calls", lambda c: num(c.metrics.get(M.CALLS))),
        Column("dur", ms(M.DURATION_MS)), Column("dur_p95", ms(M.DURATION_MS + "_p95"), optional=True),
        Column("dur_max", ms(M.DURATION_MS + "_max")),
        Column("bytes", lambda c: size(c.metrics.get(M.TRANSIT_BYTES))),
        Column("GB/s", lambda c: num(c.metrics.get(M.BANDWIDTH_GBYTES_PER_S))),
        Column("ranks", lambda c: compact_list(c.attrs["ranks"]) if c.attrs.get("ranks") else "", left=True,
               optional=True),
    ], colls, "collectives", fold_query(ctx, T.COLLECTIVE, colls), pinned, weight=0.8)


def _sum_rate(m: dict, a: str, b: str) -> str:
    if m.get(a) is None and m.get(b) is None:
        return ""
    return rate((m.get(a) or 0) + (m.get(b) or 0))
