"""On-CPU stack sampling (collectors.stacks): folding, py-spy's raw output, the per-thread summary, the graph and
the compute view; then live, a C busy loop and a Python busy loop each named to their function.

The live tests need root, bcc (Debian's python3-bpfcc) and kernel headers, and py-spy for the Python one
(pip install 'witty-profiler[stacks]'); they skip saying which is missing, except where WITTY_REQUIRE_EBPF=1
makes the bcc part a failure (as .ci/run sets)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from ebpf_support import ebpf_ready

from witty_profiler.collectors.base import Context
from witty_profiler.collectors.stacks import (
    StacksCollector,
    find_pyspy,
    fold,
    folded_lines,
    leaf_and_caller,
    parse_pyspy_raw,
    python_frame,
    thread_summary,
)
from witty_profiler.converters import render_view
from witty_profiler.diagnosis import diagnose

PY = sys.executable


def test_native_frames_fold_root_first_with_kernel_frames_marked():
    assert fold(["leaf", "mid", "main"], ["do_syscall_64", "entry_SYSCALL_64"]) == \
        "main;mid;leaf;entry_SYSCALL_64_[k];do_syscall_64_[k]"
    assert fold([], ["schedule"]) == "schedule_[k]"


def test_python_frames_are_named_module_dot_function():
    assert python_frame("load (PIL/JpegImagePlugin.py:382)") == "PIL.JpegImagePlugin.load"
    assert python_frame("__getitem__ (dataset.py)") == "dataset.__getitem__"
    assert python_frame("<module> (train.py:8)") == "train.<module>"
    assert python_frame("run (torch/utils/data/__init__.py:5)") == "torch.utils.data.run"
    assert python_frame("f (<string>:1)") == "f"


def test_pyspy_raw_output_is_read_per_os_thread():
    text = ("thread (4242): MainThread;<module> (train.py:8);__getitem__ (dataset.py:3);load (PIL/JpegImagePlugin.py:3) 61\n"
            "thread (4242): MainThread;<module> (train.py:8);step (train.py:20) 39\n"
            "thread (0x7F00AA): Other;f (x.py:1) 5\n"
            "garbage\n")
    got = parse_pyspy_raw(text)
    assert list(got) == [4242]  # a thread known only by its pthread id cannot be matched to a tid
    name, counts = got[4242]
    assert name == "MainThread"
    assert counts == Counter({"train.<module>;dataset.__getitem__;PIL.JpegImagePlugin.load": 61,
                              "train.<module>;train.step": 39})


def test_a_thread_summary_names_its_hot_function_and_counts_unknown_frames():
    counts = Counter({"train.<module>;dataset.__getitem__;PIL.JpegImagePlugin.load": 50,
                      "train.<module>;other.g;dataset.__getitem__;PIL.JpegImagePlugin.load": 11,
                      "train.<module>;train.step": 30, "[unknown];x": 9})
    attrs, metrics = thread_summary(counts)
    assert attrs["hot_function"] == "PIL.JpegImagePlugin.load \u2190 dataset.__getitem__"
    assert metrics == {"stack_samples_total": 100, "hot_function_pct": 61.0, "stack_unknown_pct": 9.0}
    assert [s["pct"] for s in attrs["top_stacks"]] == [50.0, 30.0, 11.0, 9.0]
    assert attrs["top_stacks"][0]["stack"] == "train.<module>;dataset.__getitem__;PIL.JpegImagePlugin.load"
    assert leaf_and_caller("only") == "only"
    many = Counter({f"s;{i}": 1 for i in range(20)})
    assert len(thread_summary(many)[0]["top_stacks"]) == 5


def test_folded_lines_are_what_a_flame_graph_tool_reads():
    lines = folded_lines({(10, 11): ("my prog", Counter({"main;spin": 7, "main;a;b": 2}))})
    assert lines == ["my_prog-10/11;main;a;b 2", "my_prog-10/11;main;spin 7"]


def _collector(tmp_path, pids=None):
    ctx = Context(host="h1", pids=pids)
    ctx.cache["process_pids"] = {10}
    ctx.cache["stacks_out"] = str(tmp_path / "out.folded")
    c = StacksCollector(ctx)
    c.bpf, c.problem, c.pyspy, c.pyspy_problem = None, None, {}, None
    return c


def test_the_graph_gets_the_stacks_of_each_thread_and_the_view_shows_them(tmp_path):
    c = _collector(tmp_path, pids={10})
    native = {(10, 10): ("train", Counter({"main;spin_in_c": 90, "main;[unknown]": 10}))}
    python = {10: {11: ("Loader", Counter({"dataset.__getitem__;PIL.JpegImagePlugin.load": 61,
                                          "dataset.__getitem__;np.asarray": 39}))}}
    g = c._graph(native, python)
    t10, t11 = g.entity("thread:h1:10:10"), g.entity("thread:h1:10:11")
    assert t10.attrs["hot_function"] == "spin_in_c \u2190 main" and t10.attrs["stacks_from"] == "bcc"
    assert t10.metrics["stack_unknown_pct"] == 10.0
    assert t11.attrs["stacks_from"] == "py-spy" and t11.metrics["hot_function_pct"] == 61.0
    assert [e.source for e, _ in g.neighbours(t11.id, "in", "has_thread")] == ["process:h1:10"]
    assert c.status.extra["samples"] == 200 and c.status.extra["unknown_pct"] == 5.0
    assert (tmp_path / "out.folded").read_text().splitlines()[0] == "train-10/10;main;[unknown] 10"
    # the compute view: a hot thread's finding names its code, the thread table its hot function
    g.entity_of("process", "process:h1:10", {"pid": 10, "name": "train", "in_scope": True}, {"cpu_util_pct": 99.0})
    t10.metrics["cpu_util_pct"], t11.metrics["cpu_util_pct"] = 99.0, 3.0
    g.entity_of("host", "host:h1", {"name": "h1"}, {})
    text = render_view(g, "compute", diagnosis=diagnose(g)).text
    assert "hot function" in text and "spin_in_c \u2190 main (90.0%)" in text
    from witty_profiler.topology import dumps_graph, loads_graph
    back = loads_graph(dumps_graph(g))  # a graph file with stacks reads back as it was written
    assert back.entity("thread:h1:10:11").attrs["top_stacks"] == t11.attrs["top_stacks"]


def test_without_root_or_bcc_the_reason_is_in_the_status(tmp_path, monkeypatch):
    c = _collector(tmp_path)
    monkeypatch.setattr(Context, "is_root", property(lambda self: False))
    c.prepare()
    c.start()
    c.finish()
    assert c.status.status == "unavailable" and "needs root" in c.status.reason
    c = _collector(tmp_path)
    c.problem = "the bcc Python module is not installed"
    c.pyspy_problem = "py-spy is not installed (pip install 'witty-profiler[stacks]'): no Python frames"
    c.finish()
    assert c.status.status == "unavailable" and "bcc" in c.status.reason and "py-spy" in c.status.reason


def test_a_ptrace_refusal_is_said_as_such(tmp_path):
    c = _collector(tmp_path)
    c.pyspy = {10: (subprocess.Popen([PY, "-c", "import sys; sys.stderr.write('Error: Permission denied (os error 13)')"],
                                     stderr=subprocess.PIPE), str(tmp_path / "none.txt"))}
    c.pyspy[10][0].wait()
    assert c._python_stacks() == {}
    assert "ptrace denied" in c.pyspy_problem


# -- live ---------------------------------------------------------------------------------
def _bcc_ready() -> None:
    ebpf_ready("stack sampling needs root")


C_SPIN = """
#include <stdint.h>
volatile uint64_t sink;
__attribute__((noinline)) void spin_in_c(void) { for (;;) sink = sink * 6364136223846793005ULL + 1; }
int main(void) { spin_in_c(); return 0; }
"""
PY_SPIN = """
def spin_in_python():
    x = 0
    while True:
        x += 1

def outer():
    spin_in_python()

outer()
"""


def _busy_c(tmp_path: Path) -> tuple[list[str], str]:
    """A C busy loop in spin_in_c (built with frame pointers), else sha256sum reading /dev/zero."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc:
        (tmp_path / "spin.c").write_text(C_SPIN)
        done = subprocess.run([cc, "-O1", "-fno-omit-frame-pointer", "-o", str(tmp_path / "spin"),
                               str(tmp_path / "spin.c")], capture_output=True)
        if done.returncode == 0:
            return [str(tmp_path / "spin")], "spin_in_c"
    return ["sha256sum", "/dev/zero"], "sha256"  # its block function: sha256_process_block* or the like


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    _bcc_ready()
    from witty_profiler.collectors.engine import run_window
    tmp = tmp_path_factory.mktemp("stacks")
    argv, function = _busy_c(tmp)
    procs = {"c": subprocess.Popen(argv), "py": subprocess.Popen([PY, "-c", PY_SPIN])}
    try:
        time.sleep(0.5)
        graph = run_window(3.0, 1.0, pids=[p.pid for p in procs.values()], collectors=["process"], stacks=True,
                           stacks_out=str(tmp / "out.folded"))
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
    return graph, {k: p.pid for k, p in procs.items()}, function, tmp / "out.folded"


def _main_thread(graph, pid):
    return graph.entity(f"thread:{graph.meta.hosts[0]}:{pid}:{pid}")


@pytest.mark.live
def test_a_c_busy_loop_is_named_to_its_function(sampled):
    graph, pids, function, folded = sampled
    assert graph.meta.collectors["stacks"].status in ("ok", "partial"), graph.meta.collectors["stacks"]
    t = _main_thread(graph, pids["c"])
    top = t.attrs["top_stacks"][0]
    assert t.attrs["stacks_from"] == "bcc" and t.metrics["stack_samples_total"] >= 49  # 3 s at 49 Hz, ~1 core
    assert function in top["stack"].split(";")[-1] and top["pct"] >= 50, t.attrs["top_stacks"]
    assert function in t.attrs["hot_function"]
    lines = folded.read_text().splitlines()
    assert any(line.startswith(f"spin-{pids['c']}/{pids['c']};") or f"-{pids['c']}/" in line for line in lines)
    assert all(line.rsplit(" ", 1)[1].isdigit() for line in lines)


@pytest.mark.live
def test_a_python_busy_loop_is_named_to_its_function(sampled):
    if find_pyspy() is None:
        pytest.skip("py-spy is not installed (pip install 'witty-profiler[stacks]')")
    graph, pids, _, _ = sampled
    t = _main_thread(graph, pids["py"])
    assert t.attrs["stacks_from"] == "py-spy", graph.meta.collectors["stacks"]
    assert t.attrs["top_stacks"][0]["stack"].endswith("outer;__main__.spin_in_python") or \
        t.attrs["top_stacks"][0]["stack"].split(";")[-1].endswith("spin_in_python"), t.attrs["top_stacks"]
    assert t.attrs["hot_function"].startswith(tuple(f"{m}spin_in_python \u2190 " for m in ("", "__main__.", "<string>.")))
    assert t.metrics["hot_function_pct"] >= 80


def test_stacks_is_asked_for_by_the_cli_the_engine_and_mcp(tmp_path, capsys):
    from witty_profiler.collectors.engine import run_window
    from witty_profiler.mcp_server.schemas import CollectInput
    assert CollectInput(stacks=True).stacks and not CollectInput().stacks
    graph = run_window(0.5, 0.5, collectors=["cpu"], stacks=True)
    assert set(graph.meta.collectors) == {"cpu", "stacks"}  # off by default, on when asked for
    assert "stacks" not in run_window(0.5, 0.5, collectors=["cpu"]).meta.collectors
    from witty_profiler.cli import main
    assert main(["collect", "--stacks-out", "-", "-o", str(tmp_path / "g.json"), "-q", "--duration", "1"]) != 0
    assert "--stacks-out needs a file" in capsys.readouterr().err
