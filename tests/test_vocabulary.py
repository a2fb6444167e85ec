"""The name constants T, E and M and the tables of topology.vocabulary describe the same names."""

from __future__ import annotations

import pytest

from witty_profiler.topology.vocabulary import EDGE_TYPES, ENTITY_TYPES, IPC_EDGES, METRICS, E, M, T


def constants(cls) -> dict[str, str]:
    return {name: value for name, value in vars(cls).items() if name.isupper()}


@pytest.mark.parametrize(("cls", "table"), [(T, ENTITY_TYPES), (E, EDGE_TYPES), (M, METRICS)],
                         ids=["T-ENTITY_TYPES", "E-EDGE_TYPES", "M-METRICS"])
def test_every_constant_is_in_its_table_and_every_entry_has_its_constant(cls, table):
    values = constants(cls)
    assert sorted(values.values()) == sorted(table)
    assert len(set(values.values())) == len(values)


@pytest.mark.parametrize("cls", [T, E, M])
def test_every_constant_is_its_value_upper_cased(cls):
    for name, value in constants(cls).items():
        assert type(value) is str, name
        assert value == name.lower() and name == value.upper(), name


def test_metric_definitions_carry_their_own_names():
    assert all(metric.name == name for name, metric in METRICS.items())


def test_ipc_edges_are_edge_types():
    assert set(IPC_EDGES) <= set(EDGE_TYPES)
    assert E.IPC in IPC_EDGES and M.IPC == E.IPC == "ipc"
