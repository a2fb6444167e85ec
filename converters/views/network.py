"""Layer 4, network: NICs and RDMA ports, TCP retransmission, connections with RTT, socket flows."""

from __future__ import annotations

from witty_profiler.converters.context import GraphContext
from witty_profiler.converters.render import Block, Column, Table, duration_us, num, pct, rate, size
from witty_profiler.converters.views.common import coverage, edge_ends, edge_label, ID, findings_block, legend, neg, rank
from witty_profiler.converters.views.folds import edge_query, fold_query
from witty_profiler.topology.ids import host_of, process_id, process_of_thread

LAYER = "network"
NUMBER = 4
TITLE = "network (layer 4)"


def blocks(ctx: GraphContext) -> list[Block]:
    cited = ctx.cited(LAYER)
    out: list[Block] = [legend(ctx, "rates over the window; rtt = smoothed round trip; "
                                    "flows: bytes and packets a thread sent to a socket"), *findings_block(ctx, LAYER),
                        coverage(ctx, LAYER)]
    hosts, pinned = rank(ctx.hosts, lambda h: 0, cited, ctx)
    out.append(Table("host TCP", [
        ID, Column("retrans%", lambda h: pct(h.metrics.get("tcp_retrans_pct"))),
        Column("out_segs", lambda h: rate(h.metrics.get("tcp_out_segs_per_s"))),
        Column("retrans_segs", lambda h: rate(h.metrics.get("tcp_retrans_segs_per_s"))),
    ], hosts, "hosts", fold_query(ctx, "host", hosts), pinned, weight=0.5))
    nics, pinned = rank(ctx.graph.entities("nic"), lambda n: neg(n.metrics.get("link_util_pct")), cited, ctx,
                        workload=lambda n: False)
    out.append(Table("NICs, busiest first", [
        ID, Column("speed", lambda n: f"{num(n.metrics.get('speed_mbps') or n.attrs.get('speed_mbps'))}Mb/s"
                   if (n.metrics.get("speed_mbps") or n.attrs.get("speed_mbps")) else ""),
        Column("rx", lambda n: size(n.metrics.get("rx_bytes_per_s"), per_s=True)),
        Column("tx", lambda n: size(n.metrics.get("tx_bytes_per_s"), per_s=True)),
        Column("util%", lambda n: pct(n.metrics.get("link_util_pct"))),
        Column("drops", lambda n: _sum_rate(n.metrics, "rx_drops_per_s", "tx_drops_per_s")),
        Column("errors", lambda n: _sum_rate(n.metrics, "rx_errors_per_s", "tx_errors_per_s")),
        Column("node", lambda n: num(n.attrs.get("numa_node"))),
    ], nics, "nics", fold_query(ctx, "nic", nics, top="link_util_pct"), pinned, weight=0.8))
    ports, pinned = rank(ctx.graph.entities("rdma_port"), lambda p: neg(p.metrics.get("port_util_pct")), cited, ctx,
                         workload=lambda p: False)
    out.append(Table("RDMA ports", [
        ID, Column("state", lambda p: p.attrs.get("state"), left=True),
        Column("rate", lambda p: f"{num(p.metrics.get('rate_gbps') or p.attrs.get('rate_gbps'))}Gb/s"
               if (p.metrics.get("rate_gbps") or p.attrs.get("rate_gbps")) else ""),
        Column("rx", lambda p: size(p.metrics.get("port_rcv_bytes_per_s"), per_s=True)),
        Column("tx", lambda p: size(p.metrics.get("port_xmit_bytes_per_s"), per_s=True)),
        Column("util%", lambda p: pct(p.metrics.get("port_util_pct"))),
        Column("errors", lambda p: rate(p.metrics.get("port_errors_per_s"))),
        Column("retrans", lambda p: rate(p.metrics.get("port_retrans_per_s"))),
    ], ports, "rdma ports", fold_query(ctx, "rdma_port", ports), pinned, weight=0.8))
    owner = {e.target: e.source for e in ctx.graph.edges("owns_connection")}
    conns, pinned = rank(ctx.graph.entities("tcp_connection"), lambda c: (neg(c.metrics.get("rtt_us")),
                                                                    neg(c.metrics.get("retrans_total"))),
                         cited, ctx, workload=lambda c: owner.get(c.id) in ctx.workload_ids or (
                             process_id(host_of(c.id), c.attrs.get('pid')) in ctx.workload_ids))
    out.append(Table("TCP connections, workload first, then by rtt", [
        ID, Column("state", lambda c: c.attrs.get("state"), left=True),
        Column("process", lambda c: owner.get(c.id) or (f"pid {c.attrs['pid']}" if c.attrs.get("pid") else ""),
               left=True),
        Column("rtt", lambda c: duration_us(c.metrics.get("rtt_us"))),
        Column("rtt_var", lambda c: duration_us(c.metrics.get("rtt_var_us"))),
        Column("retrans", lambda c: num(c.metrics.get("retrans_total"))),
        Column("sent", lambda c: size(c.metrics.get("bytes_sent_total"))),
        Column("received", lambda c: size(c.metrics.get("bytes_received_total"))),
    ], conns, "connections", fold_query(ctx, "tcp_connection", conns, top="rtt_us"), pinned))
    flows, pinned = rank(ctx.graph.edges("sends_to"), lambda e: neg(e.metrics.get("bytes_total")), cited, ctx,
                         workload=lambda e: e.source in ctx.workload_ids or process_of_thread(e.source)
                         in ctx.workload_ids)
    out.append(Table("socket flows, workload first, then by bytes", [
        Column("from", lambda e: e.source, left=True), Column("to", lambda e: e.target, left=True),
        Column("bytes", lambda e: f"{num(e.metrics.get('bytes_total'))}B"
               if e.metrics.get("bytes_total") is not None else ""),
        Column("packets", lambda e: num(e.metrics.get("packets_total"))),
        Column("rate", lambda e: size(e.metrics.get("bytes_per_s"), per_s=True)),
    ], flows, "flows", edge_query(ctx, flows), pinned, weight=1.5, covers=edge_ends,
        label=edge_label))
    return out


def _sum_rate(m: dict, a: str, b: str) -> str:
    if m.get(a) is None and m.get(b) is None:
        return ""
    return rate((m.get(a) or 0) + (m.get(b) or 0))
