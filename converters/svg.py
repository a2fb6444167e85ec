"""A host's topology as an SVG picture, for people: the NUMA nodes with their CPUs (in ranges), the
accelerators and NICs on their nodes, the workload's processes with lines to the devices they use and
to where they run, and the IPC between processes.

A line from a process to its device is green when the process runs and keeps its pages on the
device's NUMA node, red when it runs or keeps its pages elsewhere, grey when the graph does not say.
A process without a device gets a grey line to the node it runs on, and a dashed orange one to the
node that holds most of its pages when that is another node.

Every element that shows an entity carries the entity's id (``data-entity``) and an HTML id made
from it (`element_id`), so that a report can link a finding's evidence to the picture
(`Picture.elements_of`). The layout depends only on the graph (ids in order, no randomness): the
same graph gives the same bytes. Every string taken from the graph is escaped: process names and
command lines are whatever the host's processes chose.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape

from witty_profiler.converters.svglayout import build_scene
from witty_profiler.converters.svgscene import CITED, Box, Scene
from witty_profiler.topology import Graph
from witty_profiler.topology.ids import process_of_thread
from witty_profiler.topology.query import GraphQuery
from witty_profiler.topology.vocabulary import E, T

FONT = "font-family=\"DejaVu Sans, Arial, Helvetica, sans-serif\""
# entities drawn as the processes they hold: the edge type from a member to them
_MEMBERS = {T.CGROUP: E.IN_CGROUP, T.CONTAINER: E.IN_CONTAINER, T.TCP_CONNECTION: E.OWNS_CONNECTION,
            T.SOCKET: E.HAS_SOCKET}
_PLACEMENT_EDGES = {E.RUNS_ON, E.ALLOCATES_ON, E.ALLOWED_ON}
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_.:-]")


def element_id(eid: str) -> str:
    """The HTML id of the element showing an entity or an edge: 'wp-' and the id, with every character
    that an HTML id or a URL fragment could misread written as ~hex~ ('|' separates the parts of an edge
    id, and ids come from the host). No two ids give the same element id: '~' itself is written so."""
    return "wp-" + _UNSAFE_ID.sub(lambda m: f"~{ord(m[0]):x}~", eid)


@dataclass
class Picture:
    host: str
    svg: str
    shown: dict[str, str] = field(default_factory=dict)  # entity or edge id -> id of the element showing it

    def elements_of(self, graph: Graph, ids: Iterable[str]) -> list[str]:
        """The element ids that show what `ids` name, in order, each once: an entity drawn, else what
        stands for it (a thread's process, a CPU's range, a folded process's fold, the processes of a
        cgroup), an edge drawn, else its two ends (the process alone for the edges that say where it
        runs or keeps its pages). Ids of other hosts or of nothing drawn give nothing."""
        found: dict[str, None] = {}
        for eid in ids:
            for element in self._element_of(graph, eid):
                found[element] = None
        return list(found)

    def _element_of(self, graph: Graph, eid: str) -> list[str]:
        if eid in self.shown:
            return [self.shown[eid]]
        edge = graph.edge(eid)
        if edge is not None:  # where a process runs or keeps pages: the process (every node would light up)
            ends = (edge.source,) if edge.type in _PLACEMENT_EDGES else (edge.source, edge.target)
            return [x for end in ends for x in self._entity_element(graph, end)]
        return self._entity_element(graph, eid)

    def _entity_element(self, graph: Graph, eid: str) -> list[str]:
        if eid in self.shown:
            return [self.shown[eid]]
        entity = graph.entity(eid)
        if entity is not None and entity.type == T.THREAD:
            owner = self.shown.get(process_of_thread(eid))
            return [owner] if owner else []
        members = _MEMBERS.get(entity.type) if entity is not None else None
        if members:  # a cgroup, a container, a connection, a legacy socket: the processes drawn in it
            q = GraphQuery.of(graph)
            holders = [e.source for e in q.in_edges(eid, members)]
            return [x for h in holders if h != eid for x in self._entity_element(graph, h)]
        return []


def topology_svg(graph: Graph, host: str, workload: Iterable[str] = (), cited: Iterable[str] = ()) -> Picture:
    """The picture of one host of `graph`. `workload`: ids of the processes a diagnosis is about (drawn
    first, each with its placement lines); `cited`: ids that findings cite (drawn even when not in the
    workload, and outlined)."""
    scene = build_scene(graph, host, frozenset(workload), frozenset(cited))
    picture = Picture(host=host, svg="")
    picture.svg = _render(scene, picture.shown, frozenset(cited))
    return picture


# -- drawing ------------------------------------------------------------------------------------
def _attr(value: object) -> str:
    return escape(str(value), quote=True)


def _text(x: float, y: float, text: str, size: int = 11, anchor: str = "start", weight: str = "normal",
          fill: str = "#222") -> str:
    return (f'<text x="{x:g}" y="{y:g}" font-size="{size}" text-anchor="{anchor}" font-weight="{weight}" '
            f'fill="{fill}">{escape(text)}</text>')


def _group_open(eid: str, kind: str, title: str, cited: frozenset[str], extra: str = "",
                related: list[str] | None = None) -> str:
    classes = f"ent {kind}" + (" cited" if eid in cited else "") + (f" {extra}" if extra else "")
    also = f' data-related="{_attr(" ".join(element_id(r) for r in related))}"' if related else ""
    return (f'<g id="{_attr(element_id(eid))}" class="{classes}" data-entity="{_attr(eid)}"{also}>'
            f"<title>{escape(title)}</title>")


def _box(box: Box, cited: frozenset[str], shown: dict[str, str]) -> str:
    shown[box.eid] = element_id(box.eid)
    for alias in box.aliases:
        shown.setdefault(alias, element_id(box.eid))
    parts = [_group_open(box.eid, box.kind, box.title, cited, box.extra_class, box.related),
             f'<rect x="{box.x:g}" y="{box.y:g}" width="{box.w:g}" height="{box.h:g}" rx="{box.radius:g}" '
             f'fill="{box.fill}" ' + (f'stroke="{CITED}" stroke-width="2"/>' if box.eid in cited
                                      else f'stroke="{box.stroke}" stroke-width="1"/>')]
    if box.bar is not None:  # CPU or device utilisation, 0-100 %, inside the bottom edge
        share = min(max(box.bar, 0.0), 100.0) / 100
        parts.append(f'<rect class="bar" x="{box.x + 1:g}" y="{box.y + box.h - 4:g}" width="{(box.w - 2) * share:.1f}" '
                     f'height="3" fill="{_bar_colour(box.bar)}"/>')
    for i, line in enumerate(box.lines):
        size = 10 if i else box.font
        parts.append(_text(box.x + box.w / 2 if box.centre else box.x + 6, box.y + 13 + 12 * i, line, size,
                           "middle" if box.centre else "start", "bold" if i == 0 and box.bold else "normal"))
    parts.append("</g>")
    return "".join(parts)


def _bar_colour(util: float) -> str:
    return "#43a047" if util < 50 else "#fb8c00" if util < 85 else "#e53935"


def _render(scene: Scene, shown: dict[str, str], cited: frozenset[str]) -> str:
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="topology" width="{scene.width:g}" '
           f'height="{scene.height:g}" viewBox="0 0 {scene.width:g} {scene.height:g}" {FONT} '
           f'aria-label="{_attr("topology of " + scene.host)}" data-host="{_attr(scene.host)}">']
    out.append(f'<rect class="bg" x="0" y="0" width="{scene.width:g}" height="{scene.height:g}" fill="#ffffff"/>')
    if scene.banner is not None:
        out.append(_box(scene.banner, cited, shown))
    for node in scene.nodes:
        out.append(_box(node.box, cited, shown))
        for chip in node.chips:
            out.append(_box(chip, cited, shown))
        for device in node.devices:
            out.append(_box(device, cited, shown))
    # lines under the process boxes, over the node boxes
    out.append('<g class="lines" fill="none">')
    for line in scene.lines:
        shown.setdefault(line.eid, element_id(line.eid))
        for alias in line.aliases:
            shown.setdefault(alias, element_id(line.eid))
        dash = ' stroke-dasharray="5 4"' if line.dashed else ""
        out.append(_group_open(line.eid, f"link {line.kind}", line.title, cited)
                   + f'<path d="{line.path}" stroke="{line.colour}" stroke-width="{line.width:g}"{dash} '
                   f'stroke-opacity="0.85"/></g>')
    out.append("</g>")
    out.extend(_box(box, cited, shown) for row in scene.processes for box in row.boxes)
    out.extend(_legend(scene))
    out.append("</svg>")
    return "".join(out)


def _legend(scene: Scene) -> list[str]:
    out = ['<g class="legend">']
    for item in scene.legend:
        dash = ' stroke-dasharray="5 4"' if item.dashed else ""
        if item.outline:
            out.append(f'<rect x="{item.x:g}" y="{item.y - 10:g}" width="22" height="12" rx="2" fill="#ffffff" '
                       f'stroke="{item.colour}" stroke-width="2"/>')
        else:
            out.append(f'<line x1="{item.x:g}" y1="{item.y - 4:g}" x2="{item.x + 22:g}" y2="{item.y - 4:g}" '
                       f'stroke="{item.colour}" stroke-width="3"{dash}/>')
        out.append(_text(item.x + 27, item.y, item.label, 10, fill="#444"))
    out.append("</g>")
    return out
