"""RDMA queue pairs from iproute2's `rdma -j res show qp` (the kernel's RDMA netlink resource tracker).

One JSON object per QP: ``ifname`` (the RDMA device, e.g. mlx5_0), ``port``, ``lqpn``, ``rqpn``,
``type`` (RC, UC, UD, SMI, GSI, XRC_INI...), ``state`` (RESET, INIT, RTR, RTS, SQD, SQE, ERR),
``pid`` and ``comm`` for a user process's QP, ``comm`` alone for a kernel module's (ib_core's
management QPs, ib_ipoib, rdma_cm users such as NFS over RDMA). A QP just made, before it was
bound to a port, has no ``port``: it is left out (it belongs to no port yet, and lives milliseconds).

Read at both ends of the window: per port and per process the QPs at the end by state and type,
those in an error state (ERR, SQE: the peer vanished, a retry limit was hit), and the QPs created
and destroyed during the window (connection churn). A job has hundreds or thousands of QPs, so
they are counted, not made entities: a `uses_rdma` edge from each process to each port it holds
QPs on carries its counts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter, defaultdict

from witty_profiler.collectors.base import Collector, Context, register
from witty_profiler.topology import Graph
from witty_profiler.topology.ids import entity_id, process_id
from witty_profiler.topology.vocabulary import E, M, T

ERROR_STATES = ("ERR", "SQE")


def parse_qps(text: str) -> list[dict]:
    """`rdma -j res show qp` output: its QPs as dicts (keys as rdma prints them)."""
    data = json.loads(text) if text.strip() else []
    if not isinstance(data, list):
        raise ValueError("expected a JSON array")
    return [q for q in data if isinstance(q, dict) and "lqpn" in q and "ifname" in q and "port" in q]


def qp_key(q: dict) -> tuple[str, int, int]:
    return q["ifname"], int(q["port"]), int(q["lqpn"])


@register
class RdmaQpCollector(Collector):
    name = "rdma_qp"
    reads = "rdma -j res show qp (the kernel's RDMA resource tracker)"
    needs = "iproute2's rdma and an RDMA device"

    def __init__(self, ctx: Context, rdma: str | None = None) -> None:
        super().__init__(ctx)
        self.rdma = rdma or shutil.which("rdma")
        self.first: dict[tuple, dict] | None = None
        self.failed: str | None = None

    def _read(self) -> dict[tuple, dict] | None:
        if not self.rdma:
            self.failed = "rdma (iproute2) not found on PATH"
            return None
        base = self.ctx.sys / "class" / "infiniband"
        if not base.is_dir():
            self.failed = f"no RDMA devices: {base} does not exist (no InfiniBand/RoCE HCA or ib_core not loaded)"
            return None
        try:
            out = subprocess.run([self.rdma, "-j", "res", "show", "qp"], capture_output=True, text=True, timeout=20,
                                 env={**os.environ, "LC_ALL": "C"})
        except (OSError, subprocess.TimeoutExpired) as e:
            self.failed = f"rdma -j res show qp failed: {e}"
            return None
        if out.returncode != 0:
            self.failed = f"rdma -j res show qp exited {out.returncode}: {(out.stderr + out.stdout).strip()[:160]}"
            return None
        try:
            return {qp_key(q): q for q in parse_qps(out.stdout)}
        except (ValueError, KeyError, TypeError) as e:
            self.failed = f"rdma -j res show qp printed what this version cannot read: {e}"
            return None

    def start(self) -> None:
        self.first = self._read()

    def finish(self) -> Graph:
        last = self._read() if self.failed is None else None
        if last is None:
            return self.unavailable(self.failed or "rdma -j res show qp gave nothing")
        first = self.first if self.first is not None else last  # a one-shot round: no churn
        g = self.fragment()
        host = self.ctx.host
        ports: dict[tuple[str, int], list[dict]] = defaultdict(list)
        for q in last.values():
            ports[(q["ifname"], int(q["port"]))].append(q)
        created = Counter((k[0], k[1]) for k in last.keys() - first.keys())
        destroyed = Counter((k[0], k[1]) for k in first.keys() - last.keys())
        for dev, port in sorted(ports.keys() | destroyed.keys()):
            qps = ports.get((dev, port), [])
            port_id = entity_id(T.RDMA_PORT, host, dev, port)
            kernel = Counter(q.get("comm", "?") for q in qps if "pid" not in q)
            g.entity_of(T.RDMA_PORT, port_id, {"device": dev, "port": port,
                                               "qp_states": dict(sorted(Counter(q["state"] for q in qps).items())),
                                               "kernel_qps": dict(sorted(kernel.items()))},
                        {**_counts(qps), M.QPS_CREATED_TOTAL: created[(dev, port)],
                         M.QPS_DESTROYED_TOTAL: destroyed[(dev, port)]})
            by_pid: dict[int, list[dict]] = defaultdict(list)
            for q in qps:
                if "pid" in q:
                    by_pid[int(q["pid"])].append(q)
            for pid, own in sorted(by_pid.items()):
                g.edge_of(E.USES_RDMA, process_id(host, pid), port_id,
                          {"pid": pid, "comm": own[0].get("comm"),
                           "qp_states": dict(sorted(Counter(q["state"] for q in own).items())),
                           "qp_types": dict(sorted(Counter(q["type"] for q in own).items()))},
                          _counts(own))
        return g


def _counts(qps: list[dict]) -> dict[str, int]:
    return {M.QPS: len(qps), M.QPS_ERROR: sum(q.get("state") in ERROR_STATES for q in qps)}
