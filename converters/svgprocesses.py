"""The processes of the topology picture: which are drawn, where, and their lines.

The workload is drawn one box per process (up to WORKLOAD_MAX): each device user heads a column
with the processes it started (its loaders, its workers) under it, the columns in the order of
their devices' NUMA nodes, so that the lines to the devices stay short and what talks to each other
sits together; when the columns do not fit, the same order flows in rows. The rest of the workload,
the processes that the findings cite or that talk to the workload, and one box folding every other
process with their count follow in rows. A process's line to its device says whether it runs and
keeps its memory on the device's node; IPC is drawn as arcs between the boxes.
"""

from __future__ import annotations

from collections import defaultdict

from witty_profiler.converters.render import pct
from witty_profiler.converters.svgscene import (IPC, LOCAL, MARGIN, MEMORY, OTHERS_MAX, PROC_GAP, PROC_H, PROC_W,
                                                REMOTE, ROW_GAP, UNKNOWN, WORKLOAD_MAX, Box, Line, NodeView,
                                                ProcessRow, fit)
from witty_profiler.topology import Entity
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.placement import Placement
from witty_profiler.topology.query import GraphQuery, num
from witty_profiler.topology.vocabulary import IPC_EDGES, E, M, T


def _ipc_peers(q: GraphQuery, host: str, ids: frozenset[str]) -> list[str]:
    """Processes of `host` that talk to any of `ids` over IPC (or legacy socket flows), in id order."""
    peers: set[str] = set()
    for a, b, _ in _ipc_pairs(q, host):
        if a in ids and b not in ids:
            peers.add(b)
        elif b in ids and a not in ids:
            peers.add(a)
    return sorted(peers)


def _ipc_pairs(q: GraphQuery, host: str) -> list[tuple[str, str, str]]:
    """(process, process, edge id) for every IPC edge of `host`, and for every legacy flow from a thread
    to a socket that another process's thread holds."""
    def key() -> list[tuple[str, str, str]]:
        pairs = []
        for kind in IPC_EDGES:
            for edge in q.graph.edges(kind):
                if host_of(edge.source) == host and edge.source != edge.target:
                    pairs.append((edge.source, edge.target, edge.id))
        for edge in q.graph.edges(E.SENDS_TO):
            if host_of(edge.source) != host:
                continue
            sender = _process_of(q, edge.source)
            for holder in q.in_edges(edge.target, E.HAS_SOCKET):
                owner = _process_of(q, holder.source)
                if sender and owner and sender != owner:
                    pairs.append((sender, owner, edge.id))
        return pairs
    return q.graph.derived(f"svg-ipc:{host}", key)


def _process_of(q: GraphQuery, eid: str) -> str | None:
    entity = q.graph.entity(eid)
    if entity is None:
        return None
    return eid if entity.type == T.PROCESS else q.process_of(entity) if entity.type == T.THREAD else None


def _main_nodes(p: Placement) -> tuple[int | None, int | None]:
    """(node it mostly runs on, node holding most of its pages); the run node falls back to the one node
    its CPU mask allows."""
    run = Placement.main_node(p.runtime)
    if run is None and len(p.allowed_nodes) == 1:
        run = p.allowed_nodes[0]
    return run, Placement.main_node(p.pages)


def arrange_processes(q: GraphQuery, host: str, workload: frozenset[str], cited: frozenset[str], width: float,
                      top: float) -> tuple[list[ProcessRow], float]:
    """The process boxes placed from `top` down within `width`, in rows; and the y under the last row."""
    groups, tail = _process_boxes(q, host, workload, cited)
    per_row = max(1, int((width - 2 * MARGIN + PROC_GAP) // (PROC_W + PROC_GAP)))
    rows: list[ProcessRow] = []
    y = top
    if groups and len(groups) <= per_row and max(len(g) for g in groups) > 1:
        # a column per device user and the processes it started
        for depth in range(max(len(g) for g in groups)):
            row = [g[depth] for g in groups if depth < len(g)]
            for i, group in enumerate(groups):
                if depth < len(group):
                    group[depth].x, group[depth].y = MARGIN + i * (PROC_W + PROC_GAP), y
            rows.append(ProcessRow(row))
            y += PROC_H + ROW_GAP
    else:
        tail = [b for g in groups for b in g] + tail
    for start in range(0, len(tail), per_row):
        row = tail[start:start + per_row]
        for i, box in enumerate(row):
            box.x, box.y = MARGIN + i * (PROC_W + PROC_GAP), y
        rows.append(ProcessRow(row))
        y += PROC_H + ROW_GAP
    return rows, y


def _process_boxes(q: GraphQuery, host: str, workload: frozenset[str], cited: frozenset[str]
                   ) -> tuple[list[list[Box]], list[Box]]:
    """(groups: a device user of the workload and the workload processes it started, each; the rest:
    workload processes in no group, the fold of the workload beyond WORKLOAD_MAX, the other processes
    drawn, the fold of all the others)."""
    processes = [p for p in q.graph.entities(T.PROCESS) if host_of(p.id) == host]
    ordered = _groups(q, [p for p in processes if p.id in workload])
    groups: list[list[Box]] = []
    tail: list[Box] = []
    drawn: list[Entity] = []
    for key, members in ordered:
        room = WORKLOAD_MAX - len(drawn)
        members = members[:max(room, 0)]
        drawn += members
        boxes = [_process_box(q, p, True) for p in members]
        if key is not None and boxes:
            groups.append(boxes)
        else:
            tail += boxes
    mine = [p for _, members in ordered for p in members]
    if len(mine) > len(drawn):
        ids = {p.id for p in drawn}
        rest = [p for p in mine if p.id not in ids]
        tail.append(_fold(host, "workload", rest, f"+{len(rest)} workload processes"))
    others = [p for p in processes if p.id not in workload]
    if workload:
        wanted = set(_ipc_peers(q, host, frozenset(p.id for p in drawn))) | {p.id for p in others if p.id in cited}
    else:  # no workload: the busiest processes of the host, and those cited
        busy = sorted(others, key=lambda p: (-(num(p, M.CPU_UTIL_PCT) or 0.0), p.id))[:OTHERS_MAX]
        wanted = {p.id for p in busy} | {p.id for p in others if p.id in cited}
    extra = [p for p in others if p.id in wanted][:OTHERS_MAX]
    tail += [_process_box(q, p, False) for p in extra]
    shown = {p.id for p in extra}
    folded = [p for p in others if p.id not in shown]
    if folded:
        tail.append(_fold(host, "others", folded, f"+{len(folded)} other processes"))
    return groups, tail


def _groups(q: GraphQuery, processes: list[Entity]) -> list[tuple[str | None, list[Entity]]]:
    """The workload in groups: each device user with the processes it started (its loaders, workers:
    descendants whose nearest device-using ancestor it is), the groups in the order of their devices'
    NUMA nodes; then the processes of no group (key None), by the node they run on."""
    ids = {p.id for p in processes}

    def node(p: Entity) -> int:
        for _, device in q.devices_of(p):
            found = q.device_node(device)[0]
            if found is not None:
                return found
        run = _main_nodes(q.placement(p))[0]
        return run if run is not None else 1 << 20

    users = sorted((p for p in processes if q.devices_of(p)), key=lambda p: (node(p), p.id))
    members: dict[str, list[Entity]] = {u.id: [u] for u in users}

    def anchor(p: Entity) -> str | None:
        """The nearest device user among p's ancestors in the workload."""
        seen, current = {p.id}, q.parent_of(p)
        while current is not None and current.id in ids and current.id not in seen:
            if current.id in members:
                return current.id
            seen.add(current.id)
            current = q.parent_of(current)
        return None

    loose = []
    for p in processes:
        if p.id in members:
            continue
        owner = anchor(p)
        if owner is None:
            loose.append(p)
        else:
            members[owner].append(p)
    loose.sort(key=lambda p: (node(p), p.id))
    return [(u.id, members[u.id]) for u in users] + ([(None, loose)] if loose else [])


def _fold(host: str, what: str, processes: list[Entity], label: str) -> Box:
    names = sorted({str(p.attrs.get("name") or "?") for p in processes})
    title = f"{label}, folded: " + ", ".join(names[:30]) + (" \u2026" if len(names) > 30 else "")
    return Box(f"fold:{host}:{what}", "fold", 0, 0, PROC_W, PROC_H, [label, "(not drawn one by one)"], title,
               fill="#f5f5f5", stroke="#bdbdbd", aliases=[p.id for p in processes])


def _process_box(q: GraphQuery, p: Entity, in_workload: bool) -> Box:
    a = p.attrs
    name = str(a.get("name") or "?")
    pid = a.get("pid", p.id.rsplit(":", 1)[-1])
    run, mem = _main_nodes(q.placement(p))
    second = f"pid {pid}" + (f" \u00b7 {a['role']}" if a.get("role") else "")
    util = num(p, M.CPU_UTIL_PCT)
    title = f"{name} (pid {pid})" + (f", {a['role']}" if a.get("role") else "")
    if util is not None:
        title += f"; CPU {pct(util)}"
    title += f"; runs on NUMA {run if run is not None else '?'}, most pages on NUMA {mem if mem is not None else '?'}"
    if a.get("cpus_allowed"):
        title += f"; CPUs allowed {a['cpus_allowed']}"
    if a.get("cmdline"):
        title += f"\n{str(a['cmdline'])[:300]}"
    return Box(p.id, "process", 0, 0, PROC_W, PROC_H, [fit(name, PROC_W - 6), fit(second, PROC_W - 6)], title,
               fill="#ede7f6" if in_workload else "#fafafa", stroke="#5e35b1" if in_workload else "#9e9e9e",
               bold=in_workload, extra_class="workload" if in_workload else "", bar=util,
               aliases=[t.id for t in q.threads_of(p)])


# -- lines ------------------------------------------------------------------------------------------


def _curve(a: tuple[float, float], b: tuple[float, float]) -> str:
    (x1, y1), (x2, y2) = a, b
    mid = (y1 + y2) / 2
    return f"M{x1:.1f} {y1:.1f} C{x1:.1f} {mid:.1f} {x2:.1f} {mid:.1f} {x2:.1f} {y2:.1f}"


def placement_lines(q: GraphQuery, host: str, nodes: list[NodeView], rows: list[ProcessRow],
                     workload: frozenset[str]) -> list[Line]:
    node_box = {v.number: v.box for v in nodes if v.number is not None}
    device_box = {d.eid: d for v in nodes for d in v.devices}
    lines: list[Line] = []
    for row in rows:
        for box in row.boxes:
            if box.eid not in workload:
                continue
            process = q.graph.entity(box.eid)
            placement = q.placement(process)
            run, mem = _main_nodes(placement)
            used = [(e, d) for e, d in q.devices_of(process) if d.id in device_box]
            for edge, device in used:
                node = q.device_node(device)[0]
                kind = _device_placement(run, mem, node)
                colour = {"local": LOCAL, "remote": REMOTE}.get(kind, UNKNOWN)
                title = (f"{box.lines[0]} uses {device_box[device.id].lines[0]} on NUMA "
                         f"{node if node is not None else '?'}; runs on NUMA {run if run is not None else '?'}, "
                         f"most pages on NUMA {mem if mem is not None else '?'}: {kind}")
                lines.append(Line(edge.id, kind, _curve(box.top, device_box[device.id].bottom), colour, title,
                                  width=2.5))
                box.related += [edge.id, device.id]
            if used:
                continue
            if run in node_box:
                runs_on = [e.id for e in q.out_edges(process.id, E.RUNS_ON)]
                lines.append(Line(f"runs:{process.id}", "runs", _curve(box.top, node_box[run].bottom), UNKNOWN,
                                  f"{box.lines[0]} runs on NUMA {run}", width=1.5, aliases=runs_on))
                box.related += [f"runs:{process.id}", node_box[run].eid]
            if mem in node_box and mem != run:
                allocates = [e.id for e in q.out_edges(process.id, E.ALLOCATES_ON)]
                lines.append(Line(f"memory:{process.id}", "memory", _curve(box.top, node_box[mem].bottom), MEMORY,
                                  f"{box.lines[0]} keeps most of its pages on NUMA {mem}", dashed=True, width=1.5,
                                  aliases=allocates))
                box.related += [f"memory:{process.id}", node_box[mem].eid]
    return lines


def _device_placement(run: int | None, mem: int | None, device_node: int | None) -> str:
    """local: runs and keeps its pages on the device's node (what is known of both); remote: either
    is elsewhere; unknown: neither or the device's node is not known."""
    known = [n for n in (run, mem) if n is not None]
    if device_node is None or not known:
        return "unknown"
    return "local" if all(n == device_node for n in known) else "remote"


def ipc_lines(q: GraphQuery, host: str, rows: list[ProcessRow]) -> list[Line]:
    """One arc per pair of drawn boxes that talk, with every edge it stands for."""
    box_of: dict[str, Box] = {}
    for row in rows:
        for box in row.boxes:
            box_of[box.eid] = box
            for alias in box.aliases:
                box_of.setdefault(alias, box)
    pairs: dict[tuple[str, str], list[str]] = defaultdict(list)
    kinds: dict[tuple[str, str], set[str]] = defaultdict(set)
    for a, b, eid in _ipc_pairs(q, host):
        ba, bb = box_of.get(a), box_of.get(b)
        if ba is None or bb is None or ba is bb:
            continue
        pair = (min(ba.eid, bb.eid), max(ba.eid, bb.eid))
        pairs[pair].append(eid)
        kinds[pair].add(eid.split("|", 1)[0])
    lines = []
    for (a, b), eids in sorted(pairs.items()):
        ba, bb = box_of[a], box_of[b]
        if ba.y == bb.y:  # side by side: an arc under the row
            (x1, y1), (x2, y2) = ba.bottom, bb.bottom
            dip = y1 + 14 + min(22.0, abs(x2 - x1) / 40)
            path = f"M{x1:.1f} {y1:.1f} C{x1:.1f} {dip:.1f} {x2:.1f} {dip:.1f} {x2:.1f} {y2:.1f}"
        elif ba.x == bb.x:  # one above the other in a column: an arc along its right side, wider when further
            x = ba.x + ba.w
            y1, y2 = ba.y + ba.h / 2, bb.y + bb.h / 2
            bulge = x + 8 + 4 * min(3.0, abs(y2 - y1) / (PROC_H + ROW_GAP))
            path = f"M{x:.1f} {y1:.1f} C{bulge:.1f} {y1:.1f} {bulge:.1f} {y2:.1f} {x:.1f} {y2:.1f}"
        else:  # from the bottom of the upper box to the top of the lower one
            upper, lower = (ba, bb) if ba.y < bb.y else (bb, ba)
            path = _curve(upper.bottom, lower.top)
        what = ", ".join(sorted("socket flow" if k == E.SENDS_TO else k for k in kinds[(a, b)]))
        title = f"{ba.lines[0]} \u2194 {bb.lines[0]}: {what} ({len(eids)} {'edge' if len(eids) == 1 else 'edges'})"
        lines.append(Line(f"ipc:{a}:{b}", "ipc", path, IPC, title, width=2.0, aliases=eids))
        ba.related += [f"ipc:{a}:{b}", bb.eid]
        bb.related += [f"ipc:{a}:{b}", ba.eid]
    return lines
