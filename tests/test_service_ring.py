"""The ring of windows on disk: count and size caps, kept windows out of its reach, restart."""

import pytest

from witty_profiler.service.ring import FindingBrief, Ring, UnknownWindow
from witty_profiler.topology import Graph


def window(started: str, processes: int = 3) -> Graph:
    g = Graph()
    g.meta.source, g.meta.hosts, g.meta.started_at, g.meta.duration_s, g.meta.interval_s = \
        "live", ["n1"], started, 60.0, 10.0
    for pid in range(1, processes + 1):
        g.entity_of("process", f"process:n1:{pid}", {"name": f"p{pid}" * 10}, {"rss_bytes": pid})
    return g


def stamp(i: int) -> str:
    return f"2026-12-03T10:{i // 60:02d}:{i % 60:02d}.000Z"


def on_disk(ring: Ring) -> int:
    return sum(p.stat().st_size for shelf in (ring.ring, ring.kept) for p in shelf.folder.iterdir())


def test_the_count_cap_drops_the_oldest(tmp_path):
    ring = Ring(tmp_path, ring_windows=3, ring_max_bytes=10**9, kept_windows=5, kept_max_bytes=10**9)
    told: list[str] = []
    ring.on_evict.append(told.append)  # the workspace forgets what it cached of them
    ids = [ring.add(window(stamp(i)), []).window_id for i in range(7)]
    assert told == ids[:4]
    assert [r.window_id for r in ring.records()] == ids[:-4:-1]
    assert ring.evicted == 4
    assert sorted(p.name for p in (tmp_path / "ring").iterdir()) == sorted(
        [f"{i}.json" for i in ids[-3:]] + [f"{i}.window.json" for i in ids[-3:]])
    with pytest.raises(UnknownWindow, match="left the ring"):
        ring.record(ids[0])
    assert ring.graph_record(ids[0]) is None and ring.graph_record(ids[-1]).graph_id == ids[-1]


def test_the_size_cap_holds_whatever_the_count(tmp_path):
    one = Ring(tmp_path / "probe", 10, 10**9, 1, 10**9).add(window(stamp(0), 50), []).bytes
    ring = Ring(tmp_path / "r", ring_windows=100, ring_max_bytes=int(one * 2.5), kept_windows=1, kept_max_bytes=10**9)
    for i in range(10):
        ring.add(window(stamp(i), 50), [])
        assert on_disk(ring) <= int(one * 2.5)
    assert ring.usage()["ring"]["windows"] == 2


def test_a_kept_window_leaves_the_ring_and_outlives_it(tmp_path):
    ring = Ring(tmp_path, ring_windows=2, ring_max_bytes=10**9, kept_windows=2, kept_max_bytes=10**9)
    first = ring.add(window(stamp(0)), [FindingBrief(pattern="compute.cpu_saturation", priority="P0", title="t")])
    kept = ring.keep(first.window_id, "pattern compute.cpu_saturation")
    assert kept.kept and kept.kept_reason == "pattern compute.cpu_saturation"
    for i in range(1, 6):
        ring.add(window(stamp(i)), [])
    assert ring.record(first.window_id).kept
    assert ring.read_graph(first.window_id)[0].entity_count() == 3
    assert (tmp_path / "kept" / f"{first.window_id}.json").exists()
    assert not (tmp_path / "ring" / f"{first.window_id}.json").exists()
    # the kept windows have their own cap
    for i in range(6, 9):
        ring.keep(ring.add(window(stamp(i)), []).window_id, "on demand")
    assert ring.usage()["kept"]["windows"] == 2 and first.window_id not in {r.window_id for r in ring.records()}


def test_a_restarted_ring_finds_its_windows_and_enforces_smaller_caps(tmp_path):
    ring = Ring(tmp_path, 10, 10**9, 10, 10**9)
    ids = [ring.add(window(stamp(i)), []).window_id for i in range(5)]
    ring.keep(ids[1], "on demand")
    (tmp_path / "ring" / ".half.json.tmp123").write_text("{")  # what a crash leaves
    again = Ring(tmp_path, 2, 10**9, 10, 10**9)
    assert [r.window_id for r in again.records()] == [ids[4], ids[3], ids[1]]
    assert again.record(ids[1]).kept
    assert not (tmp_path / "ring" / ".half.json.tmp123").exists()


def test_ids_are_unique_within_a_second_and_unknown_ids_say_why(tmp_path):
    ring = Ring(tmp_path, 10, 10**9, 10, 10**9)
    a, b = ring.add(window(stamp(0)), []), ring.add(window(stamp(0)), [])
    assert a.window_id == "w-20261203T100000Z" and b.window_id == "w-20261203T100000Z-2"
    with pytest.raises(UnknownWindow, match="not a window id"):
        ring.record("../../etc/passwd")


def test_a_window_is_kept_where_a_pattern_starts_firing_not_while_it_lasts(tmp_path):
    from witty_profiler.service.config import ServiceConfig
    from witty_profiler.service.monitor import Monitor

    def brief(pattern: str, priority: str = "P0") -> FindingBrief:
        return FindingBrief(pattern=pattern, priority=priority, title=pattern)

    config = ServiceConfig()
    config.diagnosis.trigger_priority = "P1"
    monitor = Monitor(config, Ring(tmp_path, 5, 10**9, 5, 10**9), workspace=None)
    assert monitor.fired([brief("compute.cpu_saturation"), brief("memory.x", "P2")]) == ["compute.cpu_saturation"]
    assert monitor.fired([brief("compute.cpu_saturation")]) == []  # still firing: not kept again
    assert monitor.fired([brief("compute.cpu_saturation"), brief("storage.y", "P1")]) == ["storage.y"]
    assert monitor.fired([]) == []
    assert monitor.fired([brief("compute.cpu_saturation")]) == ["compute.cpu_saturation"]  # fired again
    config.diagnosis.trigger_patterns = ["storage.y"]
    assert monitor.fired([brief("compute.z"), brief("storage.y")]) == ["storage.y"]
    config.diagnosis.trigger_priority = "off"
    assert monitor.fired([brief("storage.q")]) == []


def test_a_keep_that_fails_leaves_the_window_in_the_ring(tmp_path):
    ring = Ring(tmp_path, ring_windows=3, ring_max_bytes=10**9, kept_windows=5, kept_max_bytes=10**9)
    ids = [ring.add(window(stamp(i)), []).window_id for i in range(2)]
    with pytest.raises(ValueError):  # a reason no UTF-8 writer takes (the REST route replaces it before this)
        ring.keep(ids[0], "spike \ud800")
    assert [r.window_id for r in ring.records()] == ids[::-1] and not ring.record(ids[0]).kept
    assert sorted(p.name for p in (tmp_path / "ring").iterdir()) == sorted(
        [f"{i}.json" for i in ids] + [f"{i}.window.json" for i in ids])
    assert list((tmp_path / "kept").iterdir()) == []
    assert ring.read_bytes(ids[0])  # still served
    assert ring.keep(ids[0], "spike").kept  # and kept once asked right
    assert [r.window_id for r in Ring(tmp_path, 3, 10**9, 5, 10**9).records()] == ids[::-1]
