"""The names of the views: the summary, one per diagnosis layer (with the diagnosis' layer number),
and all of them together."""

LAYER_NUMBERS = {"compute": 1, "memory": 2, "interconnect": 3, "network": 4, "storage": 5, "control": 6,
                 "dataplane": 7}
LAYERS = tuple(LAYER_NUMBERS)
LAYER_VIEWS = ("summary", *LAYERS, "all")
