"""The names of the views, from the one list of layers (`topology.layers`): the summary, one per
diagnosis layer (with the diagnosis' layer number), and all of them together."""

from witty_profiler.topology.layers import LAYER_NUMBERS, VIEWS

LAYERS = tuple(LAYER_NUMBERS)
LAYER_VIEWS = VIEWS

__all__ = ["LAYERS", "LAYER_NUMBERS", "LAYER_VIEWS"]
