"""`witty-profiler export`: the Prometheus exposition of a window (values, labels, the series bound),
checked by promtool where it is installed, the textfile mode and, live, the HTTP endpoint."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import diagnosis_graphs as dg
from tests.converter_graphs import hand_graph
from witty_profiler import diagnose
from witty_profiler.exporter import (MAX_THREADS, TEXTFILE_MARKER, check_textfile, exposition, max_series,
                                     parse_listen, write_textfile)
from witty_profiler.topology.errors import InputError

PROMTOOL = shutil.which("promtool")


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(found, name: str, **labels: str) -> float:
    hits = [v for lab, v in found.get(name, []) if all(lab.get(k) == w for k, w in labels.items())]
    assert len(hits) == 1, (name, labels, found.get(name))
    return hits[0]


def promtool(text: str) -> subprocess.CompletedProcess:
    if PROMTOOL is None:
        pytest.skip("promtool is not installed (Debian: prometheus package; or the Prometheus release tarball)")
    return subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def hand() -> tuple[str, dict]:
    g = hand_graph()
    text = exposition(g, diagnose(g))
    return text, samples(text)


def test_process_values_are_converted_to_prometheus_units(hand):
    _, found = hand
    trainer = {"host": "n1", "pid": "100", "comm": "python3", "role": "trainer", "rank": "0"}
    assert value(found, "witty_process_cpu_utilisation_ratio", **trainer) == pytest.approx(0.35)
    assert value(found, "witty_process_runqueue_wait_ratio", **trainer) == pytest.approx(0.35)
    assert value(found, "witty_process_resident_memory_bytes", **trainer) == 12 * 2 ** 30
    assert value(found, "witty_window_seconds", host="n1") == 10.0


def test_no_label_carries_a_command_line():
    g = dg.new_graph()
    dg.process(g, 7, name="python3", attrs={"cmdline": "python3 train.py --token=s3cret"}, cpu_util_pct=50.0)
    text = exposition(g, diagnose(g))
    assert "s3cret" not in text and "train.py" not in text
    (labels, _), = samples(text)["witty_process_cpu_utilisation_ratio"]
    assert set(labels) == {"host", "pid", "comm", "role", "rank"}


def test_numa_placement_devices_and_threads():
    g = dg.new_graph()
    dg.two_numa_host(g)
    dg.process(g, 10, name="trainer", attrs={"rank": 3}, cpu_util_pct=180.0, numa_remote_pages_pct=75.0,
               cpu_mem_colocation_pct=40.0, runqueue_wait_pct=12.5)
    gpu = dg.device(g, "gpu", "0000:3b:00.0", 0, numa_node=1)
    dg.uses(g, 10, gpu)
    for tid in range(10, 20):
        dg.thread(g, 10, tid, name=f"t{tid}", cpu_util_pct=float(tid), runqueue_wait_pct=50.0)
    dg.runs_on(g, 10, 10, 0, 3e9)
    dg.runs_on(g, 10, 11, 1, 1e9)
    dg.allocates_on(g, 10, 0, 7500)
    dg.allocates_on(g, 10, 1, 2500)
    found = samples(exposition(g, diagnose(g)))
    who = {"pid": "10", "comm": "trainer", "rank": "3"}
    assert value(found, "witty_process_cpu_utilisation_ratio", **who) == pytest.approx(1.8)
    assert value(found, "witty_process_numa_remote_pages_ratio", **who) == pytest.approx(0.75)
    assert value(found, "witty_process_cpu_mem_colocation_ratio", **who) == pytest.approx(0.40)
    assert value(found, "witty_process_runqueue_wait_ratio", **who) == pytest.approx(0.125)
    assert value(found, "witty_process_device_info", pid="10", device="gpu:0000:3b:00.0", numa_node="1") == 1
    # where it runs and keeps its pages, per NUMA node: what device_numa_mismatch needs when read back
    assert value(found, "witty_process_numa_runtime_ratio", pid="10", numa_node="0") == pytest.approx(0.75)
    assert value(found, "witty_process_numa_runtime_ratio", pid="10", numa_node="1") == pytest.approx(0.25)
    assert value(found, "witty_process_numa_pages", pid="10", numa_node="0") == 7500
    assert value(found, "witty_process_numa_pages", pid="10", numa_node="1") == 2500
    # the five busiest threads only
    tids = sorted(int(lab["tid"]) for lab, _ in found["witty_thread_cpu_utilisation_ratio"])
    assert tids == [15, 16, 17, 18, 19]
    assert value(found, "witty_thread_runqueue_wait_ratio", tid="19", comm="t19") == 0.5


def test_findings_and_their_counts(hand):
    _, found = hand
    g = hand_graph()
    d = diagnose(g)
    rows = {(lab["pattern"], lab["priority"], lab["layer"], lab["host"]) for lab, v in found["witty_finding"] if v == 1}
    assert rows == {(f.pattern, f.priority, str(f.layer), "n1") for f in d.findings}
    for priority in ("P0", "P1", "P2"):
        assert value(found, "witty_findings", priority=priority) == d.counts()[priority]
    assert value(found, "witty_collector_up", collector="rdma") == 0
    assert value(found, "witty_collector_up", collector="process") == 1


def test_workload_first_then_top_consumers():
    g = dg.new_graph()
    dg.process(g, 1, name="trainer", ai=True, cpu_util_pct=1.0)
    for pid in range(2, 40):
        dg.process(g, pid, name=f"busy{pid}", ai=False, role=None, cpu_util_pct=float(pid))
    found = samples(exposition(g, None, top=3))
    pids = [lab["pid"] for lab, _ in found["witty_process_cpu_utilisation_ratio"]]
    assert pids == ["1", "39", "38"]
    assert "witty_finding" not in found  # no diagnosis given


@pytest.mark.slow
def test_cardinality_is_bounded_on_1000_processes():
    g = dg.new_graph(collectors={f"c{i}": "ok" for i in range(100)})
    dg.two_numa_host(g)
    gpus = [dg.device(g, "gpu", f"0000:{i:02x}:00.0", i, numa_node=i % 2) for i in range(32)]
    for pid in range(1000, 2000):
        dg.process(g, pid, name=f"p{pid}", ai=pid % 2 == 0, cpu_util_pct=float(pid % 97), rss_bytes=1e6,
                   runqueue_wait_pct=5.0, numa_remote_pages_pct=10.0, cpu_mem_colocation_pct=90.0)
        for tid in range(8):
            dg.thread(g, pid, pid * 100 + tid, cpu_util_pct=float(tid), runqueue_wait_pct=1.0)
        for node in range(2):
            dg.allocates_on(g, pid, node, 1000 + node)
        if pid < 1100:
            for gpu in gpus:
                dg.uses(g, pid, gpu)
    text = exposition(g, diagnose(g))
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(series) <= max_series(20)
    assert max_series(20) < 1000  # the documented bound for the defaults
    found = samples(text)
    assert len(found["witty_process_cpu_utilisation_ratio"]) == 20
    assert len(found["witty_thread_cpu_utilisation_ratio"]) == MAX_THREADS
    assert len(found["witty_collector_up"]) == 64
    assert len(exposition(g, None, top=500).splitlines()) < 2 * max_series(500)


def test_promtool_accepts_the_exposition(hand):
    text, _ = hand
    done = promtool(text)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_refuses_a_bad_exposition():
    """The check above can fail: a sample whose metric is declared twice is an error for promtool."""
    bad = ("# HELP witty_x a gauge\n# TYPE witty_x gauge\nwitty_x 1\n"
           "# HELP witty_x a gauge\n# TYPE witty_x gauge\nwitty_x{a=\"b\"} 1\n")
    done = promtool(bad)
    assert done.returncode != 0


def test_textfile_is_written_atomically_and_promtool_accepts_it(tmp_path, hand):
    text, _ = hand
    target = tmp_path / "witty.prom"
    write_textfile(check_textfile(str(target)), text)
    written = target.read_text()
    assert written.splitlines()[0] == TEXTFILE_MARKER
    assert [p.name for p in tmp_path.iterdir()] == ["witty.prom"]  # no temporary file left
    if PROMTOOL:
        done = promtool(written)
        assert done.returncode == 0, done.stdout + done.stderr
    write_textfile(check_textfile(str(target)), text)  # our own file: rewritten without --force


def test_textfile_refuses_a_foreign_file_a_wrong_name_and_a_missing_directory(tmp_path):
    foreign = tmp_path / "node.prom"
    foreign.write_text("node_custom 1\n")
    with pytest.raises(InputError, match="not written by witty-profiler"):
        check_textfile(str(foreign))
    assert check_textfile(str(foreign), force=True) == foreign
    with pytest.raises(InputError, match=r"\*\.prom"):
        check_textfile(str(tmp_path / "witty.txt"))
    with pytest.raises(InputError, match="no such directory"):
        check_textfile(str(tmp_path / "none" / "witty.prom"))
    assert foreign.read_text() == "node_custom 1\n"


def test_listen_stays_on_loopback_unless_told():
    assert parse_listen("127.0.0.1:9818") == ("127.0.0.1", 9818)
    assert parse_listen("[::1]:9818") == ("::1", 9818)
    with pytest.raises(InputError, match="--listen-public"):
        parse_listen("0.0.0.0:9818")
    assert parse_listen("0.0.0.0:9818", public=True) == ("0.0.0.0", 9818)
    with pytest.raises(InputError, match="HOST:PORT"):
        parse_listen("9818")


def _cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "witty_profiler", *args], **kw)


@pytest.mark.slow
def test_cli_textfile_refuses_a_foreign_file_before_the_window(tmp_path):
    foreign = tmp_path / "witty.prom"
    foreign.write_text("node_custom 1\n")
    done = subprocess.run([sys.executable, "-m", "witty_profiler", "export", "--textfile", str(foreign),
                           "--duration", "30"], capture_output=True, text=True, timeout=20)
    assert done.returncode == 2 and "--force" in done.stderr
    assert foreign.read_text() == "node_custom 1\n"


@pytest.mark.live
@pytest.mark.slow
def test_cli_textfile_writes_a_window_promtool_accepts(tmp_path):
    target = tmp_path / "witty.prom"
    done = subprocess.run([sys.executable, "-m", "witty_profiler", "export", "--textfile", str(target),
                           "--duration", "1", "-q"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = target.read_text()
    assert "witty_window_seconds" in text and "witty_collector_up" in text
    if PROMTOOL:
        checked = promtool(text)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


@pytest.mark.live
@pytest.mark.slow
def test_live_endpoint_serves_a_busy_process():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    port = _free_port()
    server = _cli("export", "--listen", f"127.0.0.1:{port}", "--interval", "1", "-q",
                  stderr=subprocess.PIPE, text=True)
    def used() -> float:  # the busy process's CPU seconds, as /proc says: the reference under any load
        fields = open(f"/proc/{busy.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    try:
        cpus: list[float] = []
        started, used_at_start = time.monotonic(), used()
        deadline = time.monotonic() + 60
        while len(cpus) < 2 and time.monotonic() < deadline:
            assert server.poll() is None, server.stderr.read()
            try:
                text = _scrape(port)
            except OSError:
                time.sleep(0.3)
                continue
            found = samples(text)
            hits = [v for lab, v in found.get("witty_process_cpu_utilisation_ratio", [])
                    if lab["pid"] == str(busy.pid)]
            if hits:
                cpus.append(hits[0])
                (_, window), = found["witty_window_seconds"]
                assert window == pytest.approx(1.0, abs=0.5)
            time.sleep(1.1)
        assert len(cpus) == 2, "the busy process never appeared in two scrapes"
        # a busy loop gets a whole core only on an idle host: the exporter must agree with /proc's share
        # over the same seconds (each scrape covers the last 1 s window), not with a fixed figure
        share = (used() - used_at_start) / (time.monotonic() - started)
        assert share > 0.05 and abs(sum(cpus) / len(cpus) - share) < max(0.3, share / 2), (cpus, share)
        if PROMTOOL:
            checked = promtool(text)
            assert checked.returncode == 0, checked.stdout + checked.stderr
    finally:
        server.terminate()
        busy.kill()
        server.wait(10)
        busy.wait(10)
