"""The state directory against a local user who can write into it (SECURITY.md): a link planted among the
windows is never served, read or deleted through; a record naming a window outside the ring deletes
nothing; a link planted as the lock file is not truncated; another user's files, or files others may write,
stop the start (one line, exit 2); windows are 0600 in 0700 folders whatever the umask.

The numbered cases start a real `witty-profiler serve`, as tests/test_service.py does. The tests run as
root, which no permission check stops: the ownership rule is shown with files given to another uid."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
from pathlib import Path

import pytest
from test_service import REPO, free_port, serve_command, service, wait_for

from witty_profiler.service.ring import FindingBrief, Ring, UnknownWindow
from witty_profiler.service.statedir import UnsafeState
from witty_profiler.topology import Graph

OTHER_UID = 65534  # nobody
SECRET = "root:$6$not-for-the-api$0123456789abcdef:19000:0:99999:7:::\n"
FUTURE_ID = "w-20990101T000000Z"  # would be the latest window, were it taken


def record(window_id: str, nbytes: int = 100, started_at: str = "2099-01-01T00:00:00Z") -> str:
    return json.dumps({"window_id": window_id, "started_at": started_at, "duration_s": 60.0, "interval_s": 10.0,
                       "hosts": ["n1"], "entity_count": 1, "edge_count": 0, "bytes": nbytes, "findings": []})


def window(started: str = "2026-12-03T10:00:00.000Z") -> Graph:
    g = Graph()
    g.meta.source, g.meta.hosts, g.meta.started_at, g.meta.duration_s, g.meta.interval_s = \
        "live", ["n1"], started, 60.0, 10.0
    g.entity_of("process", "process:n1:1", {"name": "p1"}, {"rss_bytes": 1})
    return g


def state_with_ring(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    (state / "ring").mkdir(parents=True)
    state.chmod(0o700)
    (state / "ring").chmod(0o700)
    return state


def refused(state: Path, *extra: str) -> subprocess.CompletedProcess:
    """`serve` on `state`, expected to stop before serving."""
    done = subprocess.run(serve_command(state, free_port(), *extra), cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line
    return done


def stderr_of(client) -> str:
    client.proc.wait(timeout=60)
    return client.proc.stderr.read()


# -- 1. a window that is a link to a file outside the state directory ----------------------------------
@pytest.mark.live
@pytest.mark.slow
def test_1_a_window_linked_to_a_secret_is_never_served_nor_deleted_through(tmp_path):
    shadow = tmp_path / "shadow"
    shadow.write_text(SECRET)
    state = state_with_ring(tmp_path)
    link = state / "ring" / f"{FUTURE_ID}.json"
    link.symlink_to(shadow)
    (state / "ring" / f"{FUTURE_ID}.window.json").write_text(record(FUTURE_ID))
    with service(state, "--stopped", "--ring-windows", "2") as c:
        latest = c.get("/api/v1/graphs/latest")  # the linked window would be the latest: it is no window
        assert "not-for-the-api" not in latest.text and latest.status_code == 409
        answer = c.get(f"/api/v1/graphs/{FUTURE_ID}")
        assert "not-for-the-api" not in answer.text and answer.status_code == 404
        assert c.get("/api/v1/graphs").json()["windows"] == []
        c.post("/api/v1/start")
        wait_for(c, 3)  # the ring evicts: the link is not among what it removes
        latest = c.get("/api/v1/graphs/latest")
        assert latest.status_code == 200 and latest.json()["format"] == "witty-graph"
        assert FUTURE_ID not in [w["window_id"] for w in c.get("/api/v1/graphs").json()["windows"]]
    assert link.is_symlink() and shadow.read_text() == SECRET
    assert f"{link}: a symbolic link, not a regular file: skipped" in stderr_of(c)


@pytest.mark.live
@pytest.mark.slow
def test_1_a_window_replaced_by_a_link_while_the_service_runs_is_not_served(tmp_path):
    shadow = tmp_path / "shadow"
    shadow.write_text(SECRET)
    state = tmp_path / "state"
    with service(state) as c:
        wait_for(c, 1)
        c.post("/api/v1/stop")
        window_id = c.get("/api/v1/status").json()["latest_window"]
        graph = state / "ring" / f"{window_id}.json"
        graph.unlink()
        graph.symlink_to(shadow)
        answer = c.get(f"/api/v1/graphs/{window_id}")
        assert answer.status_code == 404 and "refused" in answer.json()["error"]
        assert "not-for-the-api" not in answer.text
    assert f"{graph}: a symbolic link: not served" in stderr_of(c)


def test_a_link_or_a_fifo_among_the_windows_is_skipped_with_a_warning(tmp_path, caplog):
    shadow = tmp_path / "shadow"
    shadow.write_text(SECRET)
    state = state_with_ring(tmp_path)
    linked, fifo = "w-20990101T000000Z", "w-20990101T000001Z"
    (state / "ring" / f"{linked}.json").symlink_to(shadow)
    (state / "ring" / f"{linked}.window.json").write_text(record(linked))
    os.mkfifo(state / "ring" / f"{fifo}.json")
    (state / "ring" / f"{fifo}.window.json").write_text(record(fifo))
    (state / "ring" / "w-20990101T000002Z.window.json").symlink_to(shadow)  # a link as the record too
    with caplog.at_level(logging.WARNING, "witty-profiler.service"):
        ring = Ring(state, 1, 10, 1, 10)  # caps that evict whatever is listed
    assert ring.records() == []
    warned = [r.getMessage() for r in caplog.records]
    assert f"{state / 'ring' / linked}.json: a symbolic link, not a regular file: skipped" in "\n".join(warned)
    assert any("a FIFO, not a regular file: skipped" in w for w in warned)
    assert all("\n" not in w for w in warned)  # one line each
    assert (state / "ring" / f"{linked}.json").is_symlink() and shadow.read_text() == SECRET
    assert stat.S_ISFIFO(os.lstat(state / "ring" / f"{fifo}.json").st_mode)
    with pytest.raises(UnknownWindow):
        ring.read_bytes(linked)


# -- 2. a record whose window id climbs out of the ring -------------------------------------------------
@pytest.mark.live
@pytest.mark.slow
def test_2_a_record_naming_a_window_outside_the_ring_deletes_nothing(tmp_path):
    state = state_with_ring(tmp_path)
    victims = [tmp_path / "victim.json", tmp_path / "victim.window.json"]
    for victim in victims:
        victim.write_text("keep me")
    huge = 10**15  # over any cap: the start-up eviction would take it first
    (state / "ring" / "w-20260101T000000Z.window.json").write_text(record("../../victim", huge))
    (state / "ring" / "w-20260101T000000Z.json").write_text("{}")
    (state / "ring" / "..%2f..%2fvictim.window.json").write_text(record("../../victim", huge))
    with service(state, "--stopped") as c:
        assert c.get("/api/v1/graphs").json()["windows"] == []
    assert all(v.read_text() == "keep me" for v in victims)
    log = stderr_of(c)
    assert "window_id '../../victim' is not a window id: ignored" in log
    assert "..%2f..%2fvictim.window.json: not named after a window id: ignored" in log


def test_a_record_naming_another_window_of_the_ring_is_ignored(tmp_path, caplog):
    ring = Ring(tmp_path, 10, 10**9, 10, 10**9)
    real = ring.add(window(), []).window_id
    ring.home.close()
    forged = tmp_path / "ring" / "w-20260101T000000Z.window.json"
    forged.write_text(record(real, 10**15, "2026-01-01T00:00:00Z"))  # evicting it would delete `real`
    (tmp_path / "ring" / "w-20260101T000000Z.json").write_text("{}")
    with caplog.at_level(logging.WARNING, "witty-profiler.service"):
        again = Ring(tmp_path, 10, 10**6, 10, 10**9)
    assert [r.window_id for r in again.records()] == [real]
    assert f"names window {real}, not its own: ignored" in caplog.text
    assert again.read_graph(real)[0].entity_count() == 1


def test_a_record_says_nothing_of_the_size_on_disk(tmp_path):
    ring = Ring(tmp_path, 10, 10**9, 10, 10**9)
    first = ring.add(window(), [])
    second = ring.add(window("2026-12-03T10:00:01.000Z"), [])
    sidecar = tmp_path / "ring" / f"{first.window_id}.window.json"
    forged = json.loads(sidecar.read_text())
    forged["bytes"] = 10**9
    sidecar.write_text(json.dumps(forged))
    again = Ring(tmp_path, 10, 10**6, 10, 10**9)  # the forged size would evict both
    assert {r.window_id for r in again.records()} == {first.window_id, second.window_id}
    assert again.record(first.window_id).bytes < 10**5


# -- 3. the lock file as a link -----------------------------------------------------------------------
@pytest.mark.live
@pytest.mark.slow
def test_3_a_lock_file_linked_elsewhere_is_refused_and_its_target_left_whole(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = tmp_path / "precious"
    target.write_text("precious content\n")
    (state / "service.lock").symlink_to(target)
    done = refused(state)
    assert f"{state / 'service.lock'}: is a symbolic link" in done.stderr
    assert target.read_text() == "precious content\n"
    dangling = tmp_path / "would-be-created"
    (state / "service.lock").unlink()
    (state / "service.lock").symlink_to(dangling)
    refused(state)
    assert not dangling.exists()  # O_NOFOLLOW | O_CREAT: not created through the link either


# -- 4. ownership and modes -------------------------------------------------------------------------
def prepared(tmp_path: Path) -> Path:
    """A state directory as a service leaves it: a window in the ring, one kept, the lock."""
    ring = Ring(tmp_path / "state", 10, 10**9, 10, 10**9)
    ring.add(window(), [])
    ring.keep(ring.add(window("2026-12-03T10:00:01.000Z"), []).window_id, "on demand")
    ring.home.close()
    (tmp_path / "state" / "service.lock").write_text("")
    (tmp_path / "state" / "service.lock").chmod(0o600)
    return tmp_path / "state"


def a_window_file(state: Path) -> Path:
    return next(p for p in sorted((state / "ring").iterdir()) if p.name.endswith(".window.json"))


CHANGES = {
    "the state directory, another user's": (lambda s: s, lambda p: os.chown(p, OTHER_UID, -1),
                                            f"owned by uid {OTHER_UID}, not by the service's user"),
    "the state directory, group-writable": (lambda s: s, lambda p: p.chmod(0o770), "writable by group or others"),
    "the state directory, world-writable": (lambda s: s, lambda p: p.chmod(0o1777), "writable by group or others"),
    "ring/, another user's": (lambda s: s / "ring", lambda p: os.chown(p, OTHER_UID, -1), f"owned by uid {OTHER_UID}"),
    "kept/, world-writable": (lambda s: s / "kept", lambda p: p.chmod(0o707), "writable by group or others"),
    "a window, another user's": (a_window_file, lambda p: os.chown(p, OTHER_UID, -1), f"owned by uid {OTHER_UID}"),
    "a window, world-writable": (a_window_file, lambda p: p.chmod(0o666), "writable by group or others (mode 0666)"),
    "the lock, another user's": (lambda s: s / "service.lock", lambda p: os.chown(p, OTHER_UID, -1),
                                 f"owned by uid {OTHER_UID}"),
    "another file, another user's": (lambda s: s / "notes.txt", lambda p: (p.write_text("x"),
                                                                          os.chown(p, OTHER_UID, -1)),
                                     f"owned by uid {OTHER_UID}"),
}


@pytest.mark.live
@pytest.mark.slow
@pytest.mark.parametrize("case", list(CHANGES))
def test_4_another_users_file_or_one_others_may_write_stops_the_start(tmp_path, case):
    where, change, says = CHANGES[case]
    state = prepared(tmp_path)
    target = where(state)
    change(target)
    done = refused(state)
    assert done.stderr.startswith(f"witty-profiler: error: {target}: {says}"), done.stderr
    for name in os.listdir(state / "ring"):  # nothing was removed or rewritten on the way
        assert (state / "ring" / name).stat().st_size > 0


def test_4_the_ring_alone_refuses_another_users_window(tmp_path):
    state = prepared(tmp_path)
    os.chown(a_window_file(state), OTHER_UID, -1)
    with pytest.raises(UnsafeState, match=f"owned by uid {OTHER_UID}"):
        Ring(state, 10, 10**9, 10, 10**9)


@pytest.mark.live
@pytest.mark.slow
def test_windows_are_0600_in_0700_folders_whatever_the_umask(tmp_path):
    state = tmp_path / "made" / "state"
    old = os.umask(0)  # the service inherits it: the modes must not come from the umask
    try:
        with service(state, "--ring-windows", "3") as c:
            wait_for(c, 1)
            c.post("/api/v1/trigger", json={"reason": "mode check"})
            wait_for(c, 2)
    finally:
        os.umask(old)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE(state.parent.stat().st_mode) == 0o755  # created missing: not writable by others either
    for folder in ("ring", "kept"):
        assert stat.S_IMODE((state / folder).stat().st_mode) == 0o700
    files = [p for folder in ("ring", "kept") for p in (state / folder).iterdir()]
    assert len([p for p in files if p.name.endswith(".window.json")]) >= 2
    assert {oct(stat.S_IMODE(p.lstat().st_mode)) for p in files} == {oct(0o600)}
    assert stat.S_IMODE((state / "service.lock").stat().st_mode) == 0o600


def test_an_older_rings_folders_are_tightened_and_its_windows_served(tmp_path):
    ring = Ring(tmp_path, 10, 10**9, 10, 10**9)
    first = ring.add(window(), []).window_id
    ring.home.close()
    for folder in ("ring", "kept"):
        (tmp_path / folder).chmod(0o755)  # as an older service left them; its 0644 files are still taken
    for p in (tmp_path / "ring").iterdir():
        p.chmod(0o644)
    again = Ring(tmp_path, 10, 10**9, 10, 10**9)
    assert stat.S_IMODE((tmp_path / "ring").stat().st_mode) == 0o700
    assert again.read_graph(first)[0].entity_count() == 1


def test_the_ring_writes_0600_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        ring = Ring(tmp_path / "state", 10, 10**9, 10, 10**9)
        window_id = ring.add(window(), [FindingBrief(pattern="p", priority="P0", title="t")]).window_id
        ring.keep(window_id, "on demand")
        ring.add(window("2026-12-03T10:00:01.000Z"), [])
    finally:
        os.umask(old)
    state = tmp_path / "state"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    modes = {p.relative_to(state).as_posix(): stat.S_IMODE(p.lstat().st_mode)
             for folder in ("ring", "kept") for p in (state / folder).iterdir()}
    assert len(modes) == 4 and set(modes.values()) == {0o600}, modes


def test_ids_the_ring_does_not_make_are_no_file_names(tmp_path):
    ring = Ring(tmp_path, 10, 10**9, 10, 10**9)
    for bad in ("../../etc/passwd", "w-20261203T100000Z\n", "w-２０２６1203T100000Z", "w-20261203T100000Z/../x"):
        with pytest.raises(UnknownWindow, match="not a window id"):
            ring.read_bytes(bad)
        assert ring.graph_record(bad) is None
    # a start time that is no time does not make the id
    odd = window("../../x")
    assert ring.add(odd, []).window_id.startswith("w-") and not list(tmp_path.glob("*.json"))
