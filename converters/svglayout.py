"""Where everything of the topology picture goes (converters.svg draws it).

The host across the top; NUMA nodes as boxes in a grid of at most four columns, in node order, each
holding its CPUs as ranges (at most CHIPS_MAX chips, however many CPUs it has), then its
accelerators, then its NICs, RDMA ports and disks; devices whose node is not known in a box of their
own after the nodes; the processes under the grid (converters.svgprocesses); the legend. Nothing here
depends on anything but the graph, so the layout is stable.
"""

from __future__ import annotations

import math
from collections import defaultdict

from witty_profiler.converters.render import pct, size
from witty_profiler.converters.svgprocesses import arrange_processes, ipc_lines, placement_lines
from witty_profiler.converters.svgscene import (BANNER_H, CHIP_H, CHIPS_MAX, CHIPS_PER_ROW, COLUMNS, DEVICE_H,
                                                DEVICE_W, DEVICES_PER_ROW, GAP, LEGEND, LEGEND_ROW, MARGIN, NIC_H,
                                                NICS_MAX, NODE_W, PROC_GAP, PROC_W, CITED, Box, LegendItem, NodeView,
                                                Scene, fit)
from witty_profiler.topology import Entity, Graph
from witty_profiler.topology.cpulist import cpu_set, format_cpulist
from witty_profiler.topology.ids import cpu_id, host_of
from witty_profiler.topology.query import GraphQuery, num
from witty_profiler.topology.vocabulary import E, M, T


def build_scene(graph: Graph, host: str, workload: frozenset[str], cited: frozenset[str]) -> Scene:
    q = GraphQuery.of(graph)
    numbers = sorted(q.numa_nodes(host))
    columns = max(1, min(COLUMNS, len(numbers) + (1 if _unplaced(q, host, numbers) else 0)))
    # as wide as the grid of nodes, or as 4 to 8 process boxes side by side, whichever is wider
    boxes = min(8, max(4, 1 + sum(1 for p in workload if host_of(p) == host)))
    width = max(MARGIN * 2 + columns * NODE_W + (columns - 1) * GAP, MARGIN * 2 + boxes * (PROC_W + PROC_GAP))
    node_w = (width - 2 * MARGIN - (columns - 1) * GAP) / columns  # fewer nodes than columns: wider boxes
    banner = _banner(graph, host, width)
    nodes = _node_views(q, host, numbers, columns, node_w, MARGIN + (BANNER_H + 10 if banner else 0))
    grid_bottom = max((n.box.y + n.box.h for n in nodes), default=MARGIN)
    rows, y = arrange_processes(q, host, workload, cited, width, grid_bottom + 70)
    lines = placement_lines(q, host, nodes, rows, workload) + ipc_lines(q, host, rows)
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
    label = "cited by a finding"
    if x + 40 + 6.0 * len(label) > width - MARGIN:
        x, y = float(MARGIN), y + LEGEND_ROW
    items.append(LegendItem(x, y, CITED, False, label, outline=True))
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


def _node_views(q: GraphQuery, host: str, numbers: list[int], columns: int, node_w: float, top: float
                ) -> list[NodeView]:
    devices = _devices_by_node(q, host)
    views: list[NodeView] = []
    homeless = [n for n in devices if n not in numbers]
    for number in [*numbers, *([None] if homeless else [])]:
        if number is None:
            accel = [d for n in homeless for d in devices[n][0]]
            nics = [d for n in homeless for d in devices[n][1]]
            views.append(_node_view(q, host, node_w, None, [], accel, nics))
        else:
            node = q.numa_nodes(host)[number]
            views.append(_node_view(q, host, node_w, number, _cpus_of(q, node), *devices.get(number, ([], []))))
    # grid: rows as tall as their tallest box
    y = top
    for start in range(0, len(views), columns):
        row = views[start:start + columns]
        for i, view in enumerate(row):
            _move(view, MARGIN + i * (node_w + GAP), y)
        y += max(v.box.h for v in row) + GAP
    return views


def _move(view: NodeView, x: float, y: float) -> None:
    for box in [view.box, *view.chips, *view.devices]:
        box.x += x
        box.y += y


def _node_view(q: GraphQuery, host: str, node_w: float, number: int | None, cpus: list[int], accel: list[Entity],
               nics: list[Entity]) -> NodeView:
    """A node's box and its contents, at (0, 0): _move puts it in the grid."""
    graph = q.graph
    chips = _cpu_chips(graph, host, cpus, node_w)
    per_row = max(DEVICES_PER_ROW, int((node_w - 10) // (DEVICE_W + 6)))
    y = 24 + (math.ceil(len(chips) / CHIPS_PER_ROW) * (CHIP_H + 4) + 4 if chips else 0)
    boxes: list[Box] = []
    for i, device in enumerate(accel):
        col, row = i % per_row, i // per_row
        boxes.append(_device_box(device, 8 + col * (DEVICE_W + 6), y + row * (DEVICE_H + 6)))
    if accel:
        y += math.ceil(len(accel) / per_row) * (DEVICE_H + 6)
    shown = nics[:NICS_MAX]
    for i, nic in enumerate(shown):
        col, row = i % per_row, i // per_row
        boxes.append(_nic_box(nic, 8 + col * (DEVICE_W + 6), y + row * (NIC_H + 6)))
    if shown:
        y += math.ceil(len(shown) / per_row) * (NIC_H + 6)
    if len(nics) > len(shown):
        rest = nics[len(shown):]
        boxes.append(Box(f"fold:{host}:nics:{number}", "fold", 8, y, node_w - 16, 18,
                         [f"+{len(rest)} more NICs and disks"], ", ".join(n.id for n in rest[:50]), fill="#f5f5f5",
                         stroke="#bdbdbd", aliases=[n.id for n in rest]))
        y += 24
    if number is None:
        box = Box(f"no_numa_node:{host}", "numa unknown", 0, 0, node_w, y + 4,
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
    box = Box(node.id, "numa", 0, 0, node_w, max(y + 4, 40), [fit(f"NUMA {number} \u00b7 " + " \u00b7 ".join(facts),
              node_w - 12)], f"NUMA node {number}: CPUs {format_cpulist(cpus) or 'unknown'}; "
              + ", ".join(facts), fill="#f3f6fa", stroke="#546e7a", centre=False, bold=True, radius=6)
    return NodeView(number, box, chips, boxes)


def _cpu_chips(graph: Graph, host: str, cpus: list[int], node_w: float) -> list[Box]:
    """CPUs in at most CHIPS_MAX consecutive groups, each coloured by its mean utilisation when known.
    A group holds a power of two CPUs, so that groups do not straddle the kernel's usual ranges (the
    SMT siblings of 0-63 are 128-191: a group of 16 is 0-15 or 128-143, never 56-63,128-135)."""
    if not cpus:
        return []
    per_chip = 1
    while len(cpus) > per_chip * CHIPS_MAX:
        per_chip *= 2
    chip_w = (min(node_w, 2 * NODE_W) - 16 - (CHIPS_PER_ROW - 1) * 3) / CHIPS_PER_ROW
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
