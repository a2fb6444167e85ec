"""Where everything of the topology picture goes (converters.svg draws it).

NUMA nodes are boxes in a grid of at most four columns, in node order; a node holds its CPUs as
ranges (at most 16 chips, however many CPUs it has), then its accelerators, then its NICs and RDMA
ports. Devices whose node is not known get a box of their own after the nodes. Processes are rows
of boxes under the grid: the workload's first (ordered by the node they run on, then id), then the
processes that the findings cite or that talk to the workload, then one box that folds the rest
with their count. Nothing here depends on anything but the graph, so the layout is stable.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from witty_profiler.converters.render import pct, size
from witty_profiler.topology import Entity, Graph
from witty_profiler.topology.cpulist import cpu_set, format_cpulist
from witty_profiler.topology.ids import cpu_id, host_of
from witty_profiler.topology.placement import Placement
from witty_profiler.topology.query import GraphQuery, num
from witty_profiler.topology.vocabulary import IPC_EDGES, E, M, T

MARGIN, GAP = 16, 18
NODE_W, COLUMNS = 330, 4
CHIPS_MAX, CHIPS_PER_ROW, CHIP_H = 12, 6, 18
DEVICE_W, DEVICE_H, DEVICES_PER_ROW = 74, 40, 4
NIC_H, NICS_MAX = 28, 8
PROC_W, PROC_H, PROC_GAP = 150, 40, 12
WORKLOAD_MAX, OTHERS_MAX = 64, 12
CHAR_W = 6.2  # mean width of an 11 px sans-serif character, to cut labels before they overflow
LEGEND_ROW = 18
BANNER_H = 22

# line colours by placement, the same in the picture and its legend
LOCAL, REMOTE, UNKNOWN, MEMORY, IPC = "#2e7d32", "#c62828", "#8a8a8a", "#ef6c00", "#6a1b9a"


@dataclass
class Box:
    eid: str
    kind: str
    x: float
    y: float
    w: float
    h: float
    lines: list[str]
    title: str
    fill: str = "#ffffff"
    stroke: str = "#607d8b"
    radius: float = 4
    centre: bool = True
    bold: bool = False
    extra_class: str = ""
    font: int = 11  # px, of the first line; the others are 10 px
    bar: float | None = None  # a utilisation (%) drawn as a bar along the bottom edge
    aliases: list[str] = field(default_factory=list)  # other ids this box stands for (CPUs of a range, folded processes)

    @property
    def top(self) -> tuple[float, float]:
        return self.x + self.w / 2, self.y

    @property
    def bottom(self) -> tuple[float, float]:
        return self.x + self.w / 2, self.y + self.h


@dataclass
class NodeView:
    number: int | None  # None: the box of devices whose node is not known
    box: Box
    chips: list[Box] = field(default_factory=list)
    devices: list[Box] = field(default_factory=list)


@dataclass
class Line:
    eid: str
    kind: str  # local, remote, unknown, runs, memory, ipc
    path: str
    colour: str
    title: str
    dashed: bool = False
    width: float = 2.0
    aliases: list[str] = field(default_factory=list)


@dataclass
class ProcessRow:
    boxes: list[Box]


@dataclass
class LegendItem:
    x: float
    y: float
    colour: str
    dashed: bool
    label: str


@dataclass
class Scene:
    host: str
    width: float
    height: float
    banner: Box | None
    nodes: list[NodeView]
    lines: list[Line]
    processes: list[ProcessRow]
    legend: list[LegendItem]


LEGEND = [(LOCAL, False, "device local: the process runs and keeps its memory on the device's node"),
          (REMOTE, False, "device remote: the process runs or keeps memory elsewhere"),
          (UNKNOWN, False, "runs on (or not known)"), (MEMORY, True, "most memory on another node"),
          (IPC, False, "IPC")]


def fit(text: str, width: float) -> str:
    """`text` cut to what fits in `width` pixels, with an ellipsis when cut."""
    room = max(3, int(width / CHAR_W))
    return text if len(text) <= room else text[: room - 1] + "\u2026"


def build_scene(graph: Graph, host: str, workload: frozenset[str], cited: frozenset[str]) -> Scene:
    q = GraphQuery.of(graph)
    numbers = sorted(q.numa_nodes(host))
    columns = max(1, min(COLUMNS, len(numbers) + (1 if _unplaced(q, host, numbers) else 0)))
    width = max(MARGIN * 2 + columns * NODE_W + (columns - 1) * GAP, MARGIN * 2 + 6 * (PROC_W + PROC_GAP))
    banner = _banner(graph, host, width)
    nodes = _node_views(q, host, numbers, columns, MARGIN + (BANNER_H + 10 if banner else 0))
    grid_bottom = max((n.box.y + n.box.h for n in nodes), default=MARGIN)
    per_row = max(1, int((width - 2 * MARGIN + PROC_GAP) // (PROC_W + PROC_GAP)))
    boxes = _process_boxes(q, host, workload, cited)
    rows: list[ProcessRow] = []
    y = grid_bottom + 70
    for start in range(0, len(boxes), per_row):
        row = boxes[start:start + per_row]
        for i, box in enumerate(row):
            box.x, box.y = MARGIN + i * (PROC_W + PROC_GAP), y
        rows.append(ProcessRow(row))
        y += PROC_H + 46
    lines = _placement_lines(q, host, nodes, rows, workload) + _ipc_lines(q, host, rows)
    legend = _legend(width, (y if rows else grid_bottom + 30) + 10)
    height = legend[-1].y + 12
    return Scene(host, width, height, banner, nodes, lines, rows, legend)


def _legend(width: float, y: float) -> list[LegendItem]:
    """The legend's items left to right, wrapped to the picture's width."""
    items, x = [], float(MARGIN)
    for colour, dashed, label in LEGEND:
        w = 40 + 6.0 * len(label)
        if x + w > width - MARGIN and x > MARGIN:
            x, y = float(MARGIN), y + LEGEND_ROW
        items.append(LegendItem(x, y, colour, dashed, label))
        x += w
    return items


def _banner(graph: Graph, host: str, width: float) -> Box | None:
    """The host itself, across the top: what the host-wide findings (CPU saturation, iowait, memory
    pressure) cite."""
    entity = graph.entity(f"host:{host}")
    if entity is None:
        return None
    facts = [f"host {host}"]
    for metric, text in ((M.CPU_UTIL_PCT, "CPUs {} busy"), (M.CPU_IOWAIT_PCT, "iowait {}"),
                         (M.PSI_CPU_SOME_PCT, "CPU pressure {}"), (M.PSI_MEMORY_SOME_PCT, "memory pressure {}")):
        value = num(entity, metric)
        if value is not None:
            facts.append(text.format(pct(value)))
    load = num(entity, M.LOAD1)
    if load is not None:
        facts.append(f"load {load:.2f}")
    text = " \u00b7 ".join(facts)
    return Box(entity.id, "host", MARGIN, MARGIN, width - 2 * MARGIN, BANNER_H, [fit(text, width - 2 * MARGIN - 12)],
               text, fill="#eceff1", stroke="#546e7a", centre=False, bold=True, bar=num(entity, M.CPU_UTIL_PCT))


# -- NUMA nodes, CPUs, devices --------------------------------------------------------------------
def _cpus_of(q: GraphQuery, node: Entity) -> list[int]:
    cpus = cpu_set(node.attrs.get("cpus"))
    if not cpus:
        cpus = {int(c.id.rsplit(":", 1)[-1]) for c in q.targets(node.id, E.HAS_CPU) if c.id.rsplit(":", 1)[-1].isdigit()}
    return sorted(cpus)


def _devices_by_node(q: GraphQuery, host: str) -> dict[int | None, tuple[list[Entity], list[Entity]]]:
    """node (None: unknown) -> (accelerators, NICs, RDMA ports and disks), each in id order."""
    found: dict[int | None, tuple[list[Entity], list[Entity]]] = defaultdict(lambda: ([], []))
    for kinds, slot in (((T.GPU, T.NPU), 0), ((T.NIC, T.RDMA_PORT, T.BLOCK_DEVICE), 1)):
        for kind in kinds:
            for device in q.graph.entities(kind):
                if host_of(device.id) == host:
                    found[q.device_node(device)[0]][slot].append(device)
    return found


def _unplaced(q: GraphQuery, host: str, numbers: list[int]) -> bool:
    return any(node not in numbers for node in _devices_by_node(q, host))


def _node_views(q: GraphQuery, host: str, numbers: list[int], columns: int, top: float) -> list[NodeView]:
    devices = _devices_by_node(q, host)
    views: list[NodeView] = []
    homeless = [n for n in devices if n not in numbers]
    for number in [*numbers, *([None] if homeless else [])]:
        if number is None:
            accel = [d for n in homeless for d in devices[n][0]]
            nics = [d for n in homeless for d in devices[n][1]]
            views.append(_node_view(q, host, None, [], accel, nics))
        else:
            node = q.numa_nodes(host)[number]
            views.append(_node_view(q, host, number, _cpus_of(q, node), *devices.get(number, ([], []))))
    # grid: rows as tall as their tallest box
    y = top
    for start in range(0, len(views), columns):
        row = views[start:start + columns]
        for i, view in enumerate(row):
            _move(view, MARGIN + i * (NODE_W + GAP), y)
        y += max(v.box.h for v in row) + GAP
    return views


def _move(view: NodeView, x: float, y: float) -> None:
    for box in [view.box, *view.chips, *view.devices]:
        box.x += x
        box.y += y


def _node_view(q: GraphQuery, host: str, number: int | None, cpus: list[int], accel: list[Entity],
               nics: list[Entity]) -> NodeView:
    """A node's box and its contents, at (0, 0): _move puts it in the grid."""
    graph = q.graph
    chips = _cpu_chips(graph, host, cpus)
    y = 24 + (math.ceil(len(chips) / CHIPS_PER_ROW) * (CHIP_H + 4) + 4 if chips else 0)
    boxes: list[Box] = []
    for i, device in enumerate(accel):
        col, row = i % DEVICES_PER_ROW, i // DEVICES_PER_ROW
        boxes.append(_device_box(device, 8 + col * (DEVICE_W + 6), y + row * (DEVICE_H + 6)))
    if accel:
        y += math.ceil(len(accel) / DEVICES_PER_ROW) * (DEVICE_H + 6)
    shown = nics[:NICS_MAX]
    for i, nic in enumerate(shown):
        col, row = i % DEVICES_PER_ROW, i // DEVICES_PER_ROW
        boxes.append(_nic_box(nic, 8 + col * (DEVICE_W + 6), y + row * (NIC_H + 6)))
    if shown:
        y += math.ceil(len(shown) / DEVICES_PER_ROW) * (NIC_H + 6)
    if len(nics) > len(shown):
        rest = nics[len(shown):]
        boxes.append(Box(f"fold:{host}:nics:{number}", "fold", 8, y, NODE_W - 16, 18,
                         [f"+{len(rest)} more NICs and disks"], ", ".join(n.id for n in rest[:50]), fill="#f5f5f5",
                         stroke="#bdbdbd", aliases=[n.id for n in rest]))
        y += 24
    if number is None:
        box = Box(f"no_numa_node:{host}", "numa unknown", 0, 0, NODE_W, y + 4,
                  ["devices on no known NUMA node"], "the kernel reports no NUMA node for these devices",
                  fill="#fafafa", stroke="#9e9e9e", centre=False, bold=True)
        return NodeView(None, box, [], boxes)
    node = q.numa_nodes(host)[number]
    facts = [f"{len(cpus)} CPUs"]
    total = num(node, M.MEM_TOTAL_BYTES)
    if total is not None:
        facts.append(size(total))
    used = num(node, M.MEM_USED_PCT)
    if used is not None:
        facts.append(f"{pct(used)} used")
    box = Box(node.id, "numa", 0, 0, NODE_W, max(y + 4, 40), [fit(f"NUMA {number} \u00b7 " + " \u00b7 ".join(facts),
              NODE_W - 12)], f"NUMA node {number}: CPUs {format_cpulist(cpus) or 'unknown'}; "
              + ", ".join(facts), fill="#f3f6fa", stroke="#546e7a", centre=False, bold=True, radius=6)
    return NodeView(number, box, chips, boxes)


def _cpu_chips(graph: Graph, host: str, cpus: list[int]) -> list[Box]:
    """CPUs in at most CHIPS_MAX consecutive groups, each coloured by its mean utilisation when known.
    A group holds a power of two CPUs, so that groups do not straddle the kernel's usual ranges (the
    SMT siblings of 0-63 are 128-191: a group of 16 is 0-15 or 128-143, never 56-63,128-135)."""
    if not cpus:
        return []
    per_chip = 1
    while len(cpus) > per_chip * CHIPS_MAX:
        per_chip *= 2
    chip_w = (NODE_W - 16 - (CHIPS_PER_ROW - 1) * 3) / CHIPS_PER_ROW
    chips = []
    for i, start in enumerate(range(0, len(cpus), per_chip)):
        group = cpus[start:start + per_chip]
        ids = [cpu_id(host, c) for c in group]
        utils = [u for u in (num(graph.entity(i), M.CPU_UTIL_PCT) for i in ids) if u is not None]
        mean = sum(utils) / len(utils) if utils else None
        label = format_cpulist(group)
        title = f"CPUs {label}" + (f": {pct(mean)} busy on average over the window" if mean is not None else "")
        col, row = i % CHIPS_PER_ROW, i // CHIPS_PER_ROW
        chips.append(Box(f"cpus:{host}:{label}", "cpus", 8 + col * (chip_w + 3), 24 + row * (CHIP_H + 4), chip_w,
                         CHIP_H, [fit(label, chip_w - 2)], title, fill=_heat(mean), stroke="#90a4ae", radius=2,
                         font=10, aliases=ids))
    return chips


def _heat(util: float | None) -> str:
    if util is None:
        return "#eceff1"
    for limit, colour in ((25, "#dcedc8"), (50, "#fff59d"), (75, "#ffcc80")):
        if util < limit:
            return colour
    return "#ef9a9a"


def _device_box(device: Entity, x: float, y: float) -> Box:
    a = device.attrs
    kind = "GPU" if device.type == T.GPU else "NPU"
    index = a.get("index")
    label = f"{kind}{index}" if index is not None else kind
    pci = str(a.get("pci_address") or device.id.split(":", 2)[-1])
    util, mem = num(device, M.UTIL_PCT), num(device, M.MEMORY_USED_PCT)
    second = f"{pct(util)} busy" if util is not None else pci.removeprefix("0000:")
    title = f"{label} {a.get('name') or ''} at {pci}".replace("  ", " ")
    if util is not None:
        title += f"; busy {pct(util)}"
    if mem is not None:
        title += f"; memory used {pct(mem)}"
    return Box(device.id, f"device {device.type}", x, y, DEVICE_W, DEVICE_H, [fit(label, DEVICE_W - 4),
               fit(second, DEVICE_W - 4)], title, fill="#e8f5e9" if device.type == T.GPU else "#e3f2fd",
               stroke="#37474f", bold=True, bar=util)


def _nic_box(nic: Entity, x: float, y: float) -> Box:
    """A NIC, an RDMA port or a disk: its name, and its link or disk utilisation as a bar."""
    name = str(nic.attrs.get("name") or nic.attrs.get("netdev") or nic.id.split(":", 2)[-1])
    what = {T.RDMA_PORT: "RDMA port", T.BLOCK_DEVICE: "disk"}.get(nic.type, "NIC")
    speed = num(nic, M.SPEED_MBPS)
    title = f"{what} {name}" + (f", {speed:g} Mb/s" if speed is not None and speed > 0 else "")
    util = num(nic, M.DISK_UTIL_PCT if nic.type == T.BLOCK_DEVICE else M.LINK_UTIL_PCT)
    if util is not None:
        title += f", {pct(util)} busy"
    disk = nic.type == T.BLOCK_DEVICE
    return Box(nic.id, f"{'disk' if disk else 'nic'} {nic.type}", x, y, DEVICE_W, NIC_H, [fit(name, DEVICE_W - 4)],
               title, fill="#efebe9" if disk else "#fff8e1", stroke="#8d6e63", radius=2 if disk else 4, bar=util)


# -- processes ----------------------------------------------------------------------------------------
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


def _process_boxes(q: GraphQuery, host: str, workload: frozenset[str], cited: frozenset[str]) -> list[Box]:
    processes = [p for p in q.graph.entities(T.PROCESS) if host_of(p.id) == host]
    mine = _in_tree_order(q, [p for p in processes if p.id in workload])
    drawn = mine[:WORKLOAD_MAX]
    boxes = [_process_box(q, p, True) for p in drawn]
    if len(mine) > len(drawn):
        rest = mine[len(drawn):]
        boxes.append(_fold(host, "workload", rest, f"+{len(rest)} workload processes"))
    ids = {p.id for p in drawn}
    others = [p for p in processes if p.id not in workload]
    if workload:
        wanted = set(_ipc_peers(q, host, frozenset(ids))) | {p.id for p in others if p.id in cited}
    else:  # no workload: the busiest processes of the host, and those cited
        busy = sorted(others, key=lambda p: (-(num(p, M.CPU_UTIL_PCT) or 0.0), p.id))[:OTHERS_MAX]
        wanted = {p.id for p in busy} | {p.id for p in others if p.id in cited}
    extra = [p for p in others if p.id in wanted][:OTHERS_MAX]
    boxes += [_process_box(q, p, False) for p in extra]
    folded = [p for p in others if p.id not in {e.id for e in extra}]
    if folded:
        boxes.append(_fold(host, "others", folded, f"+{len(folded)} other processes"))
    return boxes


def _in_tree_order(q: GraphQuery, processes: list[Entity]) -> list[Entity]:
    """Device users first, in the order of their devices' NUMA nodes (so their lines stay short and
    cross no process box), then the processes they started (loaders, workers) group by group in the
    same order, then the rest by the node they run on: what talks to each other sits close."""
    ids = {p.id for p in processes}

    def node(p: Entity) -> int:
        for _, device in q.devices_of(p):
            found = q.device_node(device)[0]
            if found is not None:
                return found
        run = _main_nodes(q.placement(p))[0]
        return run if run is not None else 1 << 20

    users = sorted((p for p in processes if q.devices_of(p)), key=lambda p: (node(p), p.id))
    rank = {p.id: i for i, p in enumerate(users)}

    def anchor(p: Entity) -> int | None:
        """The rank of the nearest device user among p's ancestors in the workload."""
        seen, current = {p.id}, q.parent_of(p)
        while current is not None and current.id in ids and current.id not in seen:
            if current.id in rank:
                return rank[current.id]
            seen.add(current.id)
            current = q.parent_of(current)
        return None

    rest = [p for p in processes if p.id not in rank]
    keys = {p.id: (anchor(p), node(p)) for p in rest}
    rest.sort(key=lambda p: (keys[p.id][0] is None, keys[p.id][0] or 0, keys[p.id][1], p.id))
    return users + rest


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


def _placement_lines(q: GraphQuery, host: str, nodes: list[NodeView], rows: list[ProcessRow],
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
            if used:
                continue
            if run in node_box:
                runs_on = [e.id for e in q.out_edges(process.id, E.RUNS_ON)]
                lines.append(Line(f"runs:{process.id}", "runs", _curve(box.top, node_box[run].bottom), UNKNOWN,
                                  f"{box.lines[0]} runs on NUMA {run}", width=1.5, aliases=runs_on))
            if mem in node_box and mem != run:
                allocates = [e.id for e in q.out_edges(process.id, E.ALLOCATES_ON)]
                lines.append(Line(f"memory:{process.id}", "memory", _curve(box.top, node_box[mem].bottom), MEMORY,
                                  f"{box.lines[0]} keeps most of its pages on NUMA {mem}", dashed=True, width=1.5,
                                  aliases=allocates))
    return lines


def _device_placement(run: int | None, mem: int | None, device_node: int | None) -> str:
    """local: runs and keeps its pages on the device's node (what is known of both); remote: either
    is elsewhere; unknown: neither or the device's node is not known."""
    known = [n for n in (run, mem) if n is not None]
    if device_node is None or not known:
        return "unknown"
    return "local" if all(n == device_node for n in known) else "remote"


def _ipc_lines(q: GraphQuery, host: str, rows: list[ProcessRow]) -> list[Line]:
    """One arc per pair of drawn boxes that talk, under the boxes, with every edge it stands for."""
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
        else:  # from the bottom of the upper box to the top of the lower one
            upper, lower = (ba, bb) if ba.y < bb.y else (bb, ba)
            path = _curve(upper.bottom, lower.top)
        what = ", ".join(sorted("socket flow" if k == E.SENDS_TO else k for k in kinds[(a, b)]))
        title = f"{ba.lines[0]} \u2194 {bb.lines[0]}: {what} ({len(eids)} {'edge' if len(eids) == 1 else 'edges'})"
        lines.append(Line(f"ipc:{a}:{b}", "ipc", path, IPC, title, width=2.0, aliases=eids))
    return lines
