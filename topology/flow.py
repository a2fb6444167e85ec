"""The data and control flow of a graph's processes: which process feeds which, over what.

A flow is a connected set of processes linked by IPC (pipes, unix and TCP sockets, shared memory,
message queues), with the shared memory objects, RDMA ports and accelerators its processes use.
Its stages are in feeding order: writer before reader along a pipe, client before server along a
TCP connection; the other kinds carry data both ways and do not order their ends. Which stage
limits a flow is a judgement: diagnosis.flow makes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from witty_profiler.topology.models import Edge, Entity, Fields
from witty_profiler.topology.query import GraphQuery, runnable_pct
from witty_profiler.topology.vocabulary import IPC_EDGES, E, M, T

QUEUED_KINDS = (E.PIPE, E.UNIX_SOCKET, E.TCP, E.MSG_QUEUE)  # the IPC kinds with a queue between writer and reader
ORDERED = {E.PIPE, E.TCP}  # the kinds whose two ends have a feeding order
RESOURCE_EDGES = (E.USES_SHM, E.USES_RDMA, E.USES_DEVICE)


class Link(Fields):  # not a dataclass: `convert` imports this module
    """One edge of a flow: process -> process (IPC) or process -> resource (shm, rdma, device)."""

    _FIELDS = ("edge", "ordered")

    def __init__(self, edge: Edge, ordered: bool) -> None:
        self.edge = edge
        self.ordered = ordered  # writer -> reader / client -> server; False: both ways

    @property
    def kind(self) -> str:
        return self.edge.type


class Flow(Fields):
    _FIELDS = ("number", "stages", "links", "resources", "uses", "limit", "in_workload")

    def __init__(self, number: int, stages: list[Entity], links: list[Link], resources: list[Entity] | None = None,
                 uses: list[Link] | None = None, limit: Any = None, in_workload: bool = False) -> None:
        self.number = number
        self.stages = stages  # feeding order
        self.links = links  # process -> process
        self.resources = [] if resources is None else resources
        self.uses = [] if uses is None else uses  # process -> resource
        self.limit = limit  # what diagnosis.flow judged limits it (a Limit), where judged
        self.in_workload = in_workload

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


def flows(query: GraphQuery, workload: Iterable[Entity] = (), judge: Callable[[Flow], Any] | None = None) -> list[Flow]:
    """The flows of a graph: those of the workload's processes (with the peers they talk to), else,
    without a workload, of every process with an IPC or device edge. Most relevant first: the
    workload's, then those with a limiting stage (where `judge` names one: diagnosis.flow.limit_of), then
    by queued bytes, CPU and size."""
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
        flow.limit = judge(flow) if judge is not None else None
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


def pid_key(entity: Entity) -> tuple[int, str]:
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
        best = min(left.values(), key=lambda s: (len(feeders[s.id] - done), pid_key(s)))
        placed.append(left.pop(best.id))
    return placed
