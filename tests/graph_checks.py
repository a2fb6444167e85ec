"""Checks every collector fragment must pass: only names that topology.vocabulary defines."""

from __future__ import annotations

from witty_profiler.topology import Graph
from witty_profiler.topology.vocabulary import EDGE_TYPES, ENTITY_TYPES, metric_info


def assert_known_names(graph: Graph) -> None:
    for e in graph.entities():
        assert e.type in ENTITY_TYPES, e.type
        for name in e.metrics:
            assert metric_info(name) is not None, f"{e.id}: metric {name} is not in the vocabulary"
    for e in graph.edges():
        assert e.type in EDGE_TYPES, e.type
        for name in e.metrics:
            assert metric_info(name) is not None, f"{e.id}: metric {name} is not in the vocabulary"
