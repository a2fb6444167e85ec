"""The HTML report in a real headless browser (tests/browser.py: Debian's chromium through Playwright):
it loads with no console error, no request but the file itself and no dialog, its pictures hold one
element per device and per workload process, and each finding's links land on existing elements of
the picture and light them up when clicked. Graphs: the real 8-NPU vLLM sample, and a window
collected here from real processes (busy loops, a pipe, a process that names itself with markup)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from witty_profiler import collect, diagnose
from witty_profiler.converters.svgscene import WORKLOAD_MAX
from witty_profiler.app.htmlreport import render_html
from witty_profiler.topology import load_graph

import browser as chrome

pytestmark = pytest.mark.slow

HOSTILE = "<script>alert(1)</script>"
BUSY = "while True: pass"
# names itself (comm, 15 bytes) with markup, then writes to a pipe between bursts of work
PRODUCER = ("import ctypes, sys, time\n"
            "ctypes.CDLL(None).prctl(15, b'<script>alert(1)</script>', 0, 0, 0)\n"
            "while True:\n"
            "    t = time.time()\n"
            "    while time.time() - t < 0.2: pass\n"
            "    sys.stdout.buffer.write(b'x'); sys.stdout.flush()\n")
CONSUMER = "import sys\nwhile sys.stdin.buffer.read(1): pass\n"
COLLECTORS = ["process", "cpu", "pressure", "memory", "ipc", "numa", "pci", "network"]


@pytest.fixture(scope="module")
def browser():
    why = chrome.missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"the browser tests must run in CI: {why}")
        pytest.skip(why)
    with chrome.chromium() as b:
        yield b


def _clean_load(seen: chrome.Opened) -> None:
    assert seen.errors == []
    assert seen.requests == [seen.url]
    assert seen.dialogs == []


def _check_links(page) -> int:
    """Every element with data-cites names only ids of the page's SVG; each finding has some; clicking
    each finding's button, then one evidence link, highlights exactly what it names. Returns the
    number of findings checked."""
    findings = page.locator("article.finding")
    for i in range(findings.count()):
        finding = findings.nth(i)
        pattern = finding.get_attribute("data-pattern")
        for target in (finding.locator("button.show"), finding.locator("a.cite").first):
            assert target.count() == 1, pattern
            cites = target.get_attribute("data-cites").split()
            assert cites, pattern
            missing = page.evaluate("ids => ids.filter(id => { const e = document.getElementById(id); "
                                    "return !e || !e.closest('svg'); })", cites)
            assert missing == [], (pattern, missing)
            target.click()
            lit = page.evaluate("Array.from(document.querySelectorAll('svg .hl')).map(e => e.id)")
            assert sorted(lit) == sorted(cites), pattern
    return findings.count()


def test_the_8_npu_sample_in_a_browser(browser, vllm_sample_path, tmp_path):
    graph = load_graph(vllm_sample_path)
    report = diagnose(graph)
    path = tmp_path / "report.html"
    path.write_text(render_html(graph, report), encoding="utf-8")
    with chrome.opened(browser, path) as seen:
        page = seen.page
        assert page.locator('svg.topology g[data-entity^="npu:"]').count() == 8
        workers = sorted(page.eval_on_selector_all("svg.topology g.process.workload",
                                                   "els => els.map(e => e.dataset.entity)"))
        assert workers == sorted(p.id for p in graph.entities("process") if p.attrs.get("ai") is True)
        assert _check_links(page) == len(report.findings) >= 2
        # clicking a worker in the picture names it and the findings that cite it
        mismatch = next(f for f in report.findings if f.pattern == "interconnect.device_numa_mismatch")
        worker = next(i for i in mismatch.subjects if i.startswith("process:"))
        page.click(f'svg.topology g[data-entity="{worker}"]')
        picked = page.text_content("figure.host p.picked")
        assert picked.startswith("python3 (pid ") and mismatch.title in picked, picked
        # and lights it with its line and its NPU
        line, npu = next((e.id, e.target) for e in graph.edges("uses_device") if e.source == worker)
        lit = page.eval_on_selector_all("svg .hl", "els => els.map(e => e.dataset.entity)")
        assert sorted(lit) == sorted([worker, line, npu])
        # the picture is drawn, not just present: the lines of the mismatch have a length
        length = page.evaluate("document.querySelector('svg g.link.remote path').getTotalLength()")
        assert length > 50
        shot = tmp_path / "shot.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        _clean_load(seen)


@pytest.mark.live
def test_a_live_window_in_a_browser(browser, tmp_path):
    # more busy loops than CPUs (a saturation finding), but no more than the picture draws one by one
    n = min((os.cpu_count() or 1) * 2 + 1, WORKLOAD_MAX - 2)
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(n)]
    producer = subprocess.Popen([HOSTILE, "-c", PRODUCER], executable=sys.executable, stdout=subprocess.PIPE)
    consumer = subprocess.Popen([sys.executable, "-c", CONSUMER], stdin=producer.stdout, stdout=subprocess.DEVNULL)
    producer.stdout.close()
    procs = [*busy, producer, consumer]
    pids = [p.pid for p in procs]
    try:
        time.sleep(0.3)
        graph = collect(2.5, 0.5, pids=pids, collectors=COLLECTORS)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
    report = diagnose(graph, pids=pids)
    assert report.findings, report.coverage  # the consumer waits on its producer: a data-plane finding at least
    host = graph.meta.hosts[0]
    path = tmp_path / "live.html"
    path.write_text(render_html(graph, report), encoding="utf-8")
    with chrome.opened(browser, path) as seen:
        page = seen.page
        drawn = set(page.eval_on_selector_all("svg.topology g.process.workload", "els => els.map(e => e.dataset.entity)"))
        assert drawn == {f"process:{host}:{pid}" for pid in pids}
        nodes = page.locator('svg.topology g[data-entity^="numa_node:"]').count()
        assert nodes == len(graph.entities("numa_node")) >= 1
        nics = {d.id for d in graph.entities("nic")}
        shown = set(page.eval_on_selector_all('svg.topology g[data-entity^="nic:"]', "els => els.map(e => e.dataset.entity)"))
        folded = page.locator('svg.topology g[data-entity^="fold:"][data-entity*=":nics:"]').count()
        assert shown == nics or (folded and shown < nics)
        pipe = page.eval_on_selector_all("svg.topology g.link.ipc title", "els => els.map(e => e.textContent)")
        assert any("pipe" in t for t in pipe), pipe
        title = page.text_content(f'svg.topology g[data-entity="process:{host}:{producer.pid}"] title')
        assert "<script>alert(1" in title  # shown as text, never run
        assert _check_links(page) == len(report.findings)
        _clean_load(seen)
