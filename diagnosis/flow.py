"""The data and control flow of a workload: which process feeds which, over what, and which stage
limits the rest.

A flow is a connected set of processes linked by IPC (pipes, unix and TCP sockets, shared memory,
message queues), with the shared memory objects, RDMA ports and accelerators its processes use.
Its stages are in feeding order: writer before reader along a pipe, client before server along a
TCP connection; the other kinds carry data both ways and do not order their ends.

The limiting stage is named only from what the window measured, with the reason:

- ``backlog``: the reader of a queue holding at least ``MIN_BACKLOG`` bytes at the end of the window
  (the stage its writer waits on, as `dataplane.ipc_backlog` reads a queue: a socket's queued_toward,
  else the target) whose own output queues hold less: the stage the others wait on;
- ``busiest``: else the stage running or waiting for a CPU the largest share of the window
  (`diagnosis.rules.runnable_pct`), when that is at least ``BUSY_PCT`` of one core.

Where neither holds, no stage is named and the reason says what was missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from witty_profiler.diagnosis.evidence import fmt
from witty_profiler.diagnosis.patterns.dataplane import QUEUED_KINDS
from witty_profiler.diagnosis.rules import runnable_pct
from witty_profiler.topology import Edge, Entity
from witty_profiler.topology.query import GraphQuery
from witty_profiler.topology.vocabulary import IPC_EDGES, E, M, T

MIN_BACKLOG = 4096  # bytes queued in front of a stage for it to count as waited on
BUSY_PCT = 50.0  # % of one core, running or runnable, for the busiest stage to count as the limit
ORDERED = {E.PIPE, E.TCP}  # the kinds whose two ends have a feeding order
RESOURCE_EDGES = (E.USES_SHM, E.USES_RDMA, E.USES_DEVICE)


@dataclass
class Link:
    """One edge of a flow: process -> process (IPC) or process -> resource (shm, rdma, device)."""

    edge: Edge
    ordered: bool  # writer -> reader / client -> server; False: both ways

    @property
    def kind(self) -> str:
        return self.edge.type


@dataclass
class Limit:
    stage: Entity | None
    basis: str  # backlog | busiest | none
    why: str  # what was measured, in words
    busiest: Entity | None = None  # the busiest stage, where it is not the limit itself


@dataclass
class Flow:
    number: int
    stages: list[Entity]  # feeding order
    links: list[Link]  # process -> process
    resources: list[Entity] = field(default_factory=list)
    uses: list[Link] = field(default_factory=list)  # process -> resource
    limit: Limit | None = None
    in_workload: bool = False

    def order(self, entity_id: str) -> int:
        return next((i for i, s in enumerate(self.stages, 1) if s.id == entity_id), 0)


def queued(edge: Edge) -> float | None:
    value = edge.metrics.get(M.QUEUED_BYTES)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def readers(edge: Edge) -> list[str]:
    """The ends the queued bytes of an edge wait for (dataplane.ipc_backlog's reading)."""
    toward = edge.attrs.get("queued_toward")
    if toward == "source":
        return [edge.source]
    if toward == "both":
        return [edge.source, edge.target]
    return [edge.target]


def is_ordered(edge: Edge) -> bool:
    return edge.type in ORDERED and edge.attrs.get("direction") != "unknown"


def flows(query: GraphQuery, workload: Iterable[Entity] = ()) -> list[Flow]:
    """The flows of a graph: those of the workload's processes (with the peers they talk to), else,
    without a workload, of every process with an IPC or device edge. Most relevant first: the
    workload's, then those with a limiting stage, then by queued bytes, CPU and size."""
    graph = query.graph
    seeds = {p.id for p in workload}
    links: dict[str, Link] = {}
    for kind in IPC_EDGES:
        for e in graph.edges(kind):
            if e.source == e.target or (seeds and e.source not in seeds and e.target not in seeds):
                continue
            ends = (graph.entity(e.source), graph.entity(e.target))
            if all(x is not None and x.type == T.PROCESS for x in ends):
                links[e.id] = Link(e, is_ordered(e))
    members: set[str] = set(seeds) if seeds else set()
    for link in links.values():
        members.update((link.edge.source, link.edge.target))
    uses: dict[str, list[Link]] = {}
    for kind in RESOURCE_EDGES:
        for e in graph.edges(kind):
            if (e.source in members or (not seeds and graph.entity(e.target) is not None)) \
                    and graph.entity(e.source) is not None and graph.entity(e.source).type == T.PROCESS:
                uses.setdefault(e.source, []).append(Link(e, True))
                members.add(e.source)
    # connected components over IPC links (resources do not join processes into one flow)
    parent = {m: m for m in members}

    def root(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for link in links.values():
        a, b = root(link.edge.source), root(link.edge.target)
        if a != b:
            parent[max(a, b)] = min(a, b)
    groups: dict[str, list[str]] = {}
    for m in sorted(members):
        groups.setdefault(root(m), []).append(m)
    by_group: dict[str, list[Link]] = {}
    for link in links.values():
        by_group.setdefault(root(link.edge.source), []).append(link)
    out = []
    for key, ids in groups.items():
        stages = [graph.entity(i) for i in ids]
        stages = [s for s in stages if s is not None]
        own = sorted(by_group.get(key, []), key=lambda link: link.edge.id)
        used = sorted((u for i in ids for u in uses.get(i, [])), key=lambda u: u.edge.id)
        resources = list({u.edge.target: graph.entity(u.edge.target) for u in used
                          if graph.entity(u.edge.target) is not None}.values())
        if not own and not used:
            continue  # a workload process that talks to nobody and uses no device: no flow
        flow = Flow(0, _feeding_order(stages, own), own, resources, used, in_workload=bool(seeds & set(ids)))
        flow.limit = limit_of(flow)
        out.append(flow)
    out.sort(key=_relevance)
    for n, flow in enumerate(out, 1):
        flow.number = n
    return out


def _relevance(flow: Flow) -> tuple:
    backlog = sum(queued(link.edge) or 0.0 for link in flow.links)
    cpu = max((runnable_pct(s) or 0.0 for s in flow.stages), default=0.0)
    return (not flow.in_workload, flow.limit is None or flow.limit.stage is None, -backlog, -cpu,
            -len(flow.stages), flow.stages[0].id if flow.stages else "")


def _pid(entity: Entity) -> tuple[int, str]:
    pid = entity.attrs.get("pid")
    return (pid if isinstance(pid, int) else 1 << 62, entity.id)


def _feeding_order(stages: list[Entity], links: list[Link]) -> list[Entity]:
    """Writers before readers (Kahn's order); a cycle is broken at the stage with the fewest
    unplaced feeders, the lowest pid first."""
    feeders: dict[str, set[str]] = {s.id: set() for s in stages}
    for link in links:
        if link.ordered and link.edge.source in feeders and link.edge.target in feeders:
            feeders[link.edge.target].add(link.edge.source)
    placed: list[Entity] = []
    left = {s.id: s for s in stages}
    while left:
        done = {p.id for p in placed}
        best = min(left.values(), key=lambda s: (len(feeders[s.id] - done), _pid(s)))
        placed.append(left.pop(best.id))
    return placed


def limit_of(flow: Flow) -> Limit | None:
    """The stage that limits a flow of two or more stages, from measured backlog and CPU only."""
    if len(flow.stages) < 2:
        return None
    ids = {s.id: s for s in flow.stages}
    waiting: dict[str, float] = {}  # stage -> bytes queued for it to read
    backed: dict[str, float] = {}  # stage -> bytes it wrote that wait for a reader
    measured = False
    for link in flow.links:
        if link.kind not in QUEUED_KINDS or queued(link.edge) is None:
            continue
        measured = True
        q = queued(link.edge) or 0.0
        for r in readers(link.edge):
            waiting[r] = waiting.get(r, 0.0) + q
            for w in (link.edge.source, link.edge.target):
                if w != r:
                    backed[w] = backed.get(w, 0.0) + q
    busy = sorted(((runnable_pct(s), s) for s in flow.stages if runnable_pct(s) is not None),
                  key=lambda x: (-x[0], _pid(x[1])))
    top = busy[0] if busy else None
    candidates = [(q, i) for i, q in waiting.items() if i in ids and q >= MIN_BACKLOG
                  and backed.get(i, 0.0) < MIN_BACKLOG]
    if candidates:
        q, sid = max(candidates, key=lambda x: (x[0], -_pid(ids[x[1]])[0]))
        stage = ids[sid]
        out = backed.get(sid)
        why = (f"{_size(q)} queued for it to read at the end of the window, its own output "
               + (f"{_size(out)} queued" if out is not None else "not queued (no measured queue after it)")
               + ": the stages before it wait on it")
        cpu = runnable_pct(stage)
        if cpu is not None:
            why += f"; it ran or was runnable {cpu:.0f} % of one core"
        other = top[1] if top is not None and top[1].id != sid and top[0] >= BUSY_PCT else None
        return Limit(stage, "backlog", why, busiest=other)
    if top is not None and top[0] >= BUSY_PCT:
        nxt = f", next {_label(busy[1][1])} {busy[1][0]:.0f} %" if len(busy) > 1 else ""
        return Limit(top[1], "busiest", f"running or runnable {top[0]:.0f} % of one core{nxt}; "
                                        + ("no queue holds a backlog" if measured else "no queue depths measured"))
    parts = [f"no queue holds {_size(MIN_BACKLOG)} or more" if measured else "no queue depths measured",
             f"no stage busy {BUSY_PCT:.0f} % of one core or more" if busy else "no CPU use measured"]
    return Limit(None, "none", "; ".join(parts))


def _size(value: float | None) -> str:
    value = float(value or 0.0)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            return fmt(value / scale, unit)
    return fmt(value, "bytes")


def _label(entity: Entity) -> str:
    name = entity.attrs.get("name")
    pid = entity.attrs.get("pid")
    return f"{name or '?'}({pid if pid is not None else entity.id})"
