"""The bulk paths that read and rank large graphs give what the item-by-item paths give: the same graph or
the same one-line error for any document, the same members of a workload, the same ranking, the same
fold requests."""

from __future__ import annotations

import copy
import json
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from witty_profiler.converters.render import Ranked
from witty_profiler.topology import Graph, Meta, dumps_graph, loads_graph
from witty_profiler.topology import validate
from witty_profiler.topology.errors import GraphFormatError
from witty_profiler.topology.ids import process_of_thread, threads_of_processes


def _doc() -> dict:
    g = Graph(Meta(hosts=["h1"], source="live"))
    g.entity_of("host", "host:h1", {"name": "h1"}, {"cpu_util_pct": 97.0, "load1": 3})
    g.entity_of("process", "process:h1:10", {"pid": 10, "name": "python3", "rank": 0, "cpus_allowed": "0-3"},
                {"cpu_util_pct": 99.0, "runqueue_wait_pct": None})
    g.entity_of("thread", "thread:h1:10:11", {"tid": 11, "pid": 10}, {"cpu_util_pct": 50})
    g.entity_of("numa_node", "numa_node:h1:0", {"node": 0, "distances": {"0": 10}}, {})
    g.edge_of("runs_on", "process:h1:10", "numa_node:h1:0", {}, {"runtime_share_pct": 100.0})
    g.edge_of("has_thread", "process:h1:10", "thread:h1:10:11")
    return json.loads(dumps_graph(g))


DOC = _doc()
ODD = st.sampled_from([None, True, 1, -1, 2.5, 1e19, -1e19, "x", "", [], [0, 1], [-1], ["0"], {}, {"a": 1},
                       "process:h1:10", "host:h1", "numa_node:h1:0"])


def _outcome(doc: dict, bulk: bool) -> str:
    """The graph the document reads as (its bytes), or the error it gives, with or without the bulk path."""
    with pytest.MonkeyPatch.context() as m:
        if not bulk:
            m.setattr(validate, "bulk_records", lambda items, links: None)
        try:
            return dumps_graph(validate.graph_of(copy.deepcopy(doc), "g.json", finite=True))
        except GraphFormatError as exc:
            return f"error: {exc}"



def test_the_records_of_the_bulk_path_are_those_of_the_item_path():
    """Made without __init__: equal records, each with an `extra` of its own, made where it is first read."""
    bulk = validate.graph_of(copy.deepcopy(DOC), "g.json", finite=True)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(validate, "bulk_records", lambda items, links: None)
        each = validate.graph_of(copy.deepcopy(DOC), "g.json", finite=True)
    assert bulk.entities() == each.entities() and bulk.edges() == each.edges()
    first, second = bulk.entities()[:2]
    first.extra["note"] = 1
    assert first.extra == {"note": 1} and second.extra == {} and bulk.edges()[0].extra == {}
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        first.nope  # noqa: B018

def _places(doc: dict) -> list[tuple]:
    """(list, index, field) of every field of every item, and (list, index, None) for a whole item."""
    out = []
    for key in ("entities", "edges"):
        for i, item in enumerate(doc[key]):
            out.append((key, i, None))
            for field, value in item.items():
                out.append((key, i, field))
                if isinstance(value, dict):
                    out += [(key, i, (field, name)) for name in value]
    return out


PLACES = _places(DOC)


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from(PLACES), ODD, st.booleans()), min_size=1, max_size=3))
def test_the_bulk_check_reads_any_document_as_the_item_by_item_check(changes):
    doc = copy.deepcopy(DOC)
    for (key, i, field), value, remove in changes:
        if field is None:
            doc[key][i] = value if not remove else doc[key][i - 1]  # a whole item replaced, or a duplicate
        elif not isinstance(doc[key][i], dict):
            continue
        elif isinstance(field, tuple):
            parent = doc[key][i].get(field[0])
            if isinstance(parent, dict):
                parent.pop(field[1], None) if remove else parent.__setitem__(field[1], value)
        elif remove:
            doc[key][i].pop(field, None)
        else:
            doc[key][i][field] = value
    assert _outcome(doc, True) == _outcome(doc, False)


@pytest.mark.parametrize("change", [
    lambda d: d["entities"][1]["attrs"].update(cpus_allowed=[0, 1, 2]),  # a list of CPUs: looked at item by item
    lambda d: d["entities"][1]["attrs"].update(cpus_allowed=[0, -1]),
    lambda d: d["entities"][1].update(note="kept"),  # a field this version does not know
    lambda d: d["edges"][0].pop("attrs"),  # a field left out
    lambda d: d["entities"].append(dict(d["entities"][0])),  # an id given twice
    lambda d: d["edges"][0].update(target="numa_node:h1:9"),
    lambda d: d["entities"][2]["metrics"].update(cpu_util_pct=2e18),
    lambda d: d["entities"][2]["metrics"].update(cpu_util_pct=True),
    lambda d: d["entities"][2]["attrs"].update(tid="11"),
])
def test_each_kind_of_problem_gives_what_the_item_by_item_check_gives(change):
    doc = copy.deepcopy(DOC)
    change(doc)
    assert _outcome(doc, True) == _outcome(doc, False)


def test_a_list_of_cpus_reads_as_a_graph():
    """It used to pass every check and then fail the fast path's own assertion."""
    g = Graph()
    g.entity_of("process", "process:h:1", {"cpus_allowed": [0, 1]})
    assert loads_graph(dumps_graph(g)).entity("process:h:1").attrs == {"cpus_allowed": [0, 1]}
    g.entity_of("process", "process:h:2", {"cpus_allowed": [0, "1"]})
    with pytest.raises(GraphFormatError, match=r"entities\[1\].attrs.cpus_allowed: expected a list of CPU"):
        loads_graph(dumps_graph(g))


def test_threads_of_processes_is_process_of_thread():
    tids = ["thread:h:1:2", "thread:h:1", "thread:h:1:2:3", "thread:h:2:5", "process:h:1:3", "thread:h:1:",
            "thread:h:1;",
            "thread::1:2", "threadx:h:1:2", "thread:h:10:1", "thread", ""]
    for pids in ({"process:h:1", "process::1", "process:h:1:2", "process:h"}, {"process:h:10"}, set()):
        assert sorted(threads_of_processes(tids, pids)) == sorted(t for t in tids if process_of_thread(t) in pids)


@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), max_size=60), st.integers(0, 70))
def test_a_ranking_in_groups_is_the_ranking_of_the_whole(rows, read):
    """The workload's rows, then the others, each ranked by key: what one sort by (not in workload, key)
    gives, read as far as any budget reads."""
    items = [(i, value, inside) for i, (value, inside) in enumerate(rows)]
    key = lambda x: (x[1], x[0])  # noqa: E731
    ranked = Ranked([], items, key, [[x for x in items if x[2]], [x for x in items if not x[2]]])
    whole = sorted(items, key=lambda x: (not x[2], *key(x)))
    assert [ranked[i] for i in range(min(read, len(items)))] == whole[:read]
    assert sorted(ranked.unordered()) == sorted(items)


class _Row:
    def __init__(self, i: int, metrics: Any) -> None:
        self.id, self.metrics, self.type = f"thread:h:1:{i}", metrics, "thread"


class _Float(float):
    pass


VALUE = st.sampled_from([None, 0, 1.5, True, "x", _Float(2.0)])


@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "c"]), VALUE, max_size=3), max_size=12),
       st.sets(st.integers(0, 12), max_size=3))
def test_with_any_and_the_fold_check_are_the_plain_loops(rows, cited_at):
    from witty_profiler.converters.evidence import is_number
    from witty_profiler.converters.views.common import has_any, with_any
    from witty_profiler.converters.views.folds import _all_numbers
    items = [_Row(i, m) for i, m in enumerate(rows)]
    cited = {f"thread:h:1:{i}" for i in cited_at}
    for names in ((), ("a",), ("b", "c"), ("c", "a", "b")):
        assert with_any(items, names, cited) == [x for x in items if has_any(x, names) or x.id in cited]
        assert with_any(items, iter(names), cited) == with_any(items, names, cited)
    for metric in ("a", "b"):
        assert _all_numbers(items, metric) == all(is_number(x.metrics.get(metric)) for x in items)
    mapped = [_Row(i, MappingProxyType(m)) for i, m in enumerate(rows)]  # not a dict: the plain loops
    assert with_any(mapped, ("a",), cited) == [x for x in mapped if has_any(x, ("a",)) or x.id in cited]
    assert _all_numbers(mapped, "a") == all(is_number(x.metrics.get("a")) for x in mapped)


def test_convert_leaves_the_collector_as_it_found_it(tmp_path):
    """The CLI keeps the graph's objects out of the collector while it makes the view, and gives them back."""
    import gc

    from witty_profiler.cli import main
    path = tmp_path / "g.json"
    path.write_text(dumps_graph(loads_graph(json.dumps(DOC))))
    before = gc.get_freeze_count(), gc.isenabled()
    assert main(["convert", str(path), "--layer", "all", "--max-tokens", "500", "-o", str(tmp_path / "v.txt")]) == 0
    assert (gc.get_freeze_count(), gc.isenabled()) == before
    assert (tmp_path / "v.txt").read_text().startswith("# witty-profiler view: all")


@pytest.mark.parametrize("text", ["", "  \n\t", b"", b"\n"])
def test_an_empty_file_is_named_so(text):
    with pytest.raises(GraphFormatError, match="the file is empty"):
        loads_graph(text)


@pytest.mark.parametrize("value", ["0-3,8", "0-3,8", " 1 - 2 ", "3,1", "", "x", "5-2", "0-99999", "7", None, 3,
                                   [1, "2"]])
def test_a_cpu_list_read_twice_reads_the_same_and_gives_a_set_of_its_own(value):
    from witty_profiler.topology.cpulist import cpu_set, parse_cpulist
    first, second = cpu_set(value), cpu_set(value)
    assert first == second and first is not second
    if isinstance(value, str):
        try:
            expected = set(parse_cpulist(value))
        except ValueError:
            expected = set()
        assert first == expected
    first.add(1000)
    assert 1000 not in cpu_set(value)


def test_num_reads_a_metric_as_a_plain_float():
    from witty_profiler.topology.models import Entity
    from witty_profiler.topology.query import num
    e = Entity("x:h:1", "x", {}, {"a": 1.5, "b": 2, "c": True, "d": "1", "e": None, "f": _Float(2.5)})
    assert [num(e, k) for k in "abcdefg"] == [1.5, 2.0, None, None, None, 2.5, None]
    assert type(num(e, "f")) is float and num(None, "a") is None
