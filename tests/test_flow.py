"""The flow view: which process feeds which, the limiting stage, and its Mermaid drawing."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from witty_profiler.app.views import convert
from witty_profiler.converters.context import context_for
from witty_profiler.converters.hints import CliHints
from witty_profiler.converters.views.flow import mermaid, mermaid_text
from witty_profiler.diagnosis import diagnose
from witty_profiler.diagnosis.flow import judged_flows as flows
from witty_profiler.topology import Graph, load_graph
from witty_profiler.topology.models import CollectorStatus, Meta
from witty_profiler.topology.query import GraphQuery

REPO = Path(__file__).resolve().parents[1]
H = "h"


def chain_graph(names=("producer", "transformer", "consumer"), cpu=(3.0, 97.0, 1.0),
                queued=(61440, 0)) -> Graph:
    g = Graph(Meta(hosts=[H], duration_s=3.0, interval_s=1.0, source="synthetic",
                   collectors={"ipc": CollectorStatus(status="ok"), "process": CollectorStatus(status="ok")}))
    ids = []
    for k, (name, c) in enumerate(zip(names, cpu)):
        pid = 100 + k
        ids.append(f"process:{H}:{pid}")
        g.entity_of("process", ids[-1], attrs={"pid": pid, "ppid": 1, "name": name},
                    metrics={"cpu_util_pct": c})
    for k, q in enumerate(queued):
        g.edge_of("pipe", ids[k], ids[k + 1], attrs={"direction": "writer_to_reader", "inode": 10 + k},
                  metrics={"channels": 1, "queued_bytes": q, "queued_bytes_growth_per_s": 0.0})
    return g


def _mermaid(g: Graph, pids=None) -> str:
    return mermaid(context_for(g, CliHints("g.json"), diagnose(g, pids=pids)))


NODE = re.compile(r'^ {4}(n\d+)(\["[^"\n]*"\]|\{\{"[^"\n]*"\}\})$')
LINK = re.compile(r'^ {2}(n\d+) (-->|<-->)\|"[^"\n|]*"\| (n\d+)$')
OTHER = re.compile(r'^(flowchart LR| {2}subgraph f\d+\["[^"\n]*"\]| {2}end| {2}classDef limit [\w:#,-]+'
                   r'| {2}class (n\d+,)*n\d+ limit| {2}%% .*| {2}n0\["[^"\n]*"\])$')


def check_mermaid(text: str) -> tuple[set[str], list[tuple[str, str]]]:
    """Every line one of the forms the drawer writes: node ids n<k>, labels quoted with no raw quote,
    bar or newline in them; every edge between declared nodes."""
    nodes, links = set(), []
    for line in text.splitlines():
        if m := NODE.match(line):
            nodes.add(m.group(1))
        elif m := LINK.match(line):
            links.append((m.group(1), m.group(3)))
        else:
            assert OTHER.match(line), line
    assert all(a in nodes and b in nodes for a, b in links)
    return nodes, links


def test_a_chain_is_in_feeding_order_and_the_stage_waited_on_limits_it():
    g = chain_graph(names=("zz-consumer", "aa-transformer", "mm-producer")[::-1])
    (flow,) = flows(GraphQuery.of(g))
    assert [s.attrs["name"] for s in flow.stages] == ["mm-producer", "aa-transformer", "zz-consumer"]
    assert flow.limit.stage.attrs["name"] == "aa-transformer" and flow.limit.basis == "backlog"
    text = convert(g, "flow", 400).text
    assert "mm-producer(100) -pipe q 60KiB-> aa-transformer(101) -pipe q 0B-> zz-consumer(102)" in text
    assert "limiting stage: aa-transformer(101) [backlog]" in text


def test_without_a_backlog_the_busiest_stage_limits_and_without_either_none_is_claimed():
    (flow,) = flows(GraphQuery.of(chain_graph(queued=(0, 0))))
    assert flow.limit.basis == "busiest" and flow.limit.stage.attrs["name"] == "transformer"
    (flow,) = flows(GraphQuery.of(chain_graph(queued=(0, 0), cpu=(3.0, 20.0, 1.0))))
    assert flow.limit.stage is None and "no stage busy" in flow.limit.why
    text = convert(chain_graph(queued=(0, 0), cpu=(3.0, 20.0, 1.0)), "flow").text
    assert "limiting stage: not identified" in text


def test_flow_view_fits_every_budget():
    g = chain_graph()
    for budget in (200, 300, 1000, None):
        view = convert(g, "flow", budget)
        assert budget is None or view.tokens <= budget
        assert "limiting stage: transformer(101)" in view.text


def test_mermaid_of_a_chain():
    nodes, links = check_mermaid(_mermaid(chain_graph()))
    assert len(nodes) == 3 and links == [("n1", "n2"), ("n2", "n3")]
    assert "  class n2 limit" in _mermaid(chain_graph())


@pytest.mark.parametrize("name", ['a"b', "x[y]z", "line\nbreak", "p|q", "<b>#1</b>", "{{x}}", "`tick`", "a;b\\c",
                                  "end", "a\u2028b", "\x00\x1b[31m"])
def test_mermaid_labels_with_hostile_process_names_stay_one_node(name):
    g = chain_graph(names=(name, "transformer", name + "2"))
    text = _mermaid(g)
    nodes, links = check_mermaid(text)
    assert len(nodes) == 3 and len(links) == 2
    assert len(text.splitlines()) == len(_mermaid(chain_graph()).splitlines())


def test_mermaid_text_escapes_everything_outside_a_safe_set():
    assert mermaid_text('say "hi" [now]') == "say #34;hi#34; #91;now#93;"
    assert mermaid_text("a\nb\tc") == "a b c"
    assert "#" not in mermaid_text("plain-name_1.2 (x)")
    assert len(mermaid_text("x" * 500)) <= 60


def test_convert_cli_mermaid_needs_the_flow_layer(tmp_path):
    from witty_profiler.topology.io import dump_graph
    path = tmp_path / "g.json"
    dump_graph(chain_graph(), path)
    run = lambda *a: subprocess.run([sys.executable, "-m", "witty_profiler", "convert", str(path), *a],  # noqa: E731
                                    cwd=REPO, capture_output=True, text=True, timeout=120)
    done = run("--layer", "flow", "--format", "mermaid")
    assert done.returncode == 0, done.stderr
    check_mermaid(done.stdout)
    bad = run("--layer", "summary", "--format", "mermaid")
    assert bad.returncode == 2 and "--layer flow" in bad.stderr


# -- live: a real three-process pipeline with a slow middle stage ---------------------------------------
STAGE = '''
import ctypes, hashlib, sys
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)  # PR_SET_NAME: the stage's name in /proc/PID/comm
out, role = sys.stdout.buffer, sys.argv[1]
if role == "wf-producer":
    line = b"x" * 200 + b"\\n"
    while True:
        out.write(line)
for line in sys.stdin.buffer:
    if role == "wf-transform":
        h = line
        for _ in range(3000):
            h = hashlib.sha256(h).digest()
        out.write(h.hex().encode() + b"\\n")
        out.flush()
'''


@pytest.mark.live
def test_live_pipeline_flow_names_three_stages_in_order_and_the_slow_one(tmp_path):
    procs = []
    try:
        previous = subprocess.DEVNULL
        for role in ("wf-producer", "wf-transform", "wf-consumer"):
            p = subprocess.Popen([sys.executable, "-c", STAGE, role], stdin=previous,
                                 stdout=subprocess.PIPE if role != "wf-consumer" else subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            if previous is not subprocess.DEVNULL:
                previous.close()  # only the stages hold the pipe's ends
            previous = p.stdout
            procs.append(p)
        time.sleep(1.0)  # the first pipe fills up
        out = tmp_path / "g.json"
        done = subprocess.run([sys.executable, "-m", "witty_profiler", "collect", "--duration", "3", "-o", str(out)],
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        pids = [p.pid for p in procs]
        g = load_graph(out)
        text = convert(g, "flow", 1500, pids=pids, ref=str(out)).text
        chain = next(line for line in text.splitlines() if line.startswith("flow 1 "))
        where = [chain.index(f"{name}({pid})") for name, pid in zip(("wf-producer", "wf-transform", "wf-consumer"),
                                                                   pids)]
        assert where == sorted(where), chain
        assert chain.count("-pipe") == 2, chain
        assert f"limiting stage: wf-transform({pids[1]})" in text, text
        nodes, links = check_mermaid(_mermaid(g, pids))
        assert len(nodes) == 3 and len(links) == 2
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_both_skills_validate_and_install(tmp_path):
    from witty_profiler.commands.skill import SKILLS, bundled_skill, install, validate
    assert validate(REPO / "skills" / "dataflow-topology-restore") == []
    for name in SKILLS:
        assert validate(bundled_skill(name), name) == []
        target, what = install(tmp_path, name=name)
        assert what == "installed" and (target / "SKILL.md").is_file()
    assert (tmp_path / "dataflow-topology-restore" / "evals" / "run_evals.py").is_file()
