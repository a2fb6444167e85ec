"""The shapes of the topology picture, placed (converters.svglayout) before they are drawn
(converters.svg): boxes with their lines of text, lines between them, the legend. Sizes in pixels."""

from __future__ import annotations

from dataclasses import dataclass, field

MARGIN, GAP = 16, 18
NODE_W, COLUMNS = 330, 4
CHIPS_MAX, CHIPS_PER_ROW, CHIP_H = 12, 6, 18
DEVICE_W, DEVICE_H, DEVICES_PER_ROW = 74, 40, 4
NIC_H, NICS_MAX = 28, 8
PROC_W, PROC_H, PROC_GAP, ROW_GAP = 150, 40, 20, 34
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
    related: list[str] = field(default_factory=list)  # what a click on it also lights: its lines, devices, peers

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
    outline: bool = False  # a box outline, not a line


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
CITED = "#c62828"  # the outline of a box that a finding cites


def fit(text: str, width: float) -> str:
    """`text` cut to what fits in `width` pixels, with an ellipsis when cut."""
    room = max(3, int(width / CHAR_W))
    return text if len(text) <= room else text[: room - 1] + "\u2026"
