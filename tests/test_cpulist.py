"""The kernel's CPU list and mask formats (topology.cpulist), as collectors, the legacy reader and
the readers of a graph (diagnosis and views) read them."""

from __future__ import annotations

import os

import pytest

from witty_profiler.collectors.lib import procfs
from witty_profiler.topology.cpulist import cpu_set as attr_cpus
from witty_profiler.topology.cpulist import format_cpulist, parse_cpulist, parse_cpumask
from witty_profiler.topology.legacy.values import LegacyValueError, cpu_list


def test_cpulist_round_trip():
    assert procfs.parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert procfs.format_cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert procfs.parse_cpulist("") == [] and procfs.format_cpulist([]) == ""


def test_sysfs_lists_and_masks():
    assert parse_cpulist("0-3,8-9") == [0, 1, 2, 3, 8, 9] and parse_cpulist("") == []
    # local_cpus: 32-bit words, most significant first; CPUs 48-63 and 0-15
    assert parse_cpumask("0000ffff,0000ffff") == list(range(16)) + list(range(32, 48))
    assert parse_cpumask("ffff0000,00000000,0000ffff") == list(range(16)) + list(range(80, 96))
    assert format_cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"


def test_this_hosts_lists_read_back():
    own = sorted(os.sched_getaffinity(0))
    with open("/sys/devices/system/cpu/online") as f:
        online = parse_cpulist(f.read())
    assert set(own) <= set(online) and parse_cpulist(format_cpulist(own)) == own


def test_hand_written_lists_come_back_sorted_once():
    assert parse_cpulist("8, 0-3 ,2") == [0, 1, 2, 3, 8] and parse_cpulist(None) == []
    assert format_cpulist({5, 1, 2, 3}) == "1-3,5"


@pytest.mark.parametrize("text, problem", [("0-x", "cannot read CPU/node list '0-x'"), ("+3", "cannot read"),
                                           ("5-", "cannot read"), ("3-1", "impossible range '3-1'"),
                                           ("0-999999999", "impossible range")])
def test_lists_the_kernel_would_not_write_are_refused(text, problem):
    with pytest.raises(ValueError, match="^" + problem.replace("+", r"\+")):
        parse_cpulist(text)
    with pytest.raises(LegacyValueError, match=r"^edges\[3\]\.cpus_allowed_list: " + problem.replace("+", r"\+")):
        cpu_list(text, "edges[3].cpus_allowed_list")
    assert attr_cpus(text) == set()


def test_legacy_values_that_are_not_lists_name_the_field_once():
    with pytest.raises(LegacyValueError) as caught:
        cpu_list({"a": 1}, "nodes[0].cpu_set")
    assert str(caught.value) == "nodes[0].cpu_set: expected a string, found an object"


def test_graph_attributes_in_every_spelling():
    assert attr_cpus("0-2,8") == {0, 1, 2, 8} and attr_cpus([3, "4"]) == {3, 4} and attr_cpus(7) == {7}
    assert attr_cpus(None) == attr_cpus("") == attr_cpus(["x"]) == attr_cpus(True) == set()
