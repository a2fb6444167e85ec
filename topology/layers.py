"""The seven layers of the method and the views of a graph: the one list that the diagnosis (a
pattern's layer), the converters (a view per layer), the CLI, the MCP tools and the REST routes read.

A new layer is one row here; a new view of a layer is a module in converters/views/ named after it.
"""

from __future__ import annotations

# (number, name, title), bottom up: the names are what --layer, layer= and /views/{layer} take
LAYERS: tuple[tuple[int, str, str], ...] = (
    (1, "compute", "Compute"), (2, "memory", "Memory"), (3, "interconnect", "Interconnect"),
    (4, "network", "Network"), (5, "storage", "Storage"), (6, "control", "Control Plane"),
    (7, "dataplane", "Data Plane"),
)
LAYER_NAMES: dict[int, str] = {number: name for number, name, _ in LAYERS}
LAYER_TITLES: dict[int, str] = {number: title for number, _, title in LAYERS}
LAYER_NUMBERS: dict[str, int] = {name: number for number, name, _ in LAYERS}

# the views: the summary, one per layer, the flow (which process feeds which, and the stage that
# limits it) and all the layers in one text
VIEWS: tuple[str, ...] = ("summary", *LAYER_NUMBERS, "flow", "all")


def view_title(layer: str) -> str:
    """The heading of a layer's view, e.g. 'control plane (layer 6)'."""
    number = LAYER_NUMBERS[layer]
    return f"{LAYER_TITLES[number].lower()} (layer {number})"
