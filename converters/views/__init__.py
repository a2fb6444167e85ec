"""One module per view. Each layer view module has LAYER, NUMBER, TITLE and `blocks(ctx)`."""

from __future__ import annotations

import importlib
from types import ModuleType

LAYERS = ("compute", "memory", "interconnect", "network", "storage", "control", "dataplane")
LAYER_VIEWS = ("summary", *LAYERS, "all")


def module(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")
