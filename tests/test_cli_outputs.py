"""Files the user has are never overwritten without --force, and never by their own command's output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from witty_profiler.topology import dump_graph

from diagnosis_graphs import host, new_graph, process

pytestmark = pytest.mark.slow


def small_native_graph(path: Path) -> None:
    g = new_graph()
    host(g, cpu_util_pct=12.0)
    process(g, 10, "train", cpu_util_pct=80.0)
    dump_graph(g, path)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "witty_profiler", *args], capture_output=True, text=True, cwd=cwd)


def one_error_line(proc: subprocess.CompletedProcess, fragment: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", [
    ["diagnose", "g.json", "-o", "out.txt"],
    ["convert", "g.json", "--layer", "summary", "-o", "out.txt"],
    ["compare", "g.json", "g.json", "-o", "out.txt"],
])
def test_existing_output_needs_force(tmp_path, command):
    small_native_graph(tmp_path / "g.json")
    (tmp_path / "out.txt").write_text("the user's notes\n")
    one_error_line(cli(*command, cwd=tmp_path), "pass --force")
    assert (tmp_path / "out.txt").read_text() == "the user's notes\n"
    forced = cli(*command, "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "out.txt").read_text() != "the user's notes\n"


@pytest.mark.parametrize("command", [
    ["diagnose", "g.json", "-o", "g.json", "--force"],
    ["convert", "g.json", "-o", "./g.json", "--force"],
    ["compare", "g.json", "g.json", "-o", "g.json", "--force"],
])
def test_an_input_is_never_the_output(tmp_path, command):
    small_native_graph(tmp_path / "g.json")
    before = (tmp_path / "g.json").read_bytes()
    one_error_line(cli(*command, cwd=tmp_path), "also an input")
    assert (tmp_path / "g.json").read_bytes() == before


def test_view_tool_keeps_an_existing_report(tmp_path):
    small_native_graph(tmp_path / "g.json")
    (tmp_path / "report.md").write_text("keep me\n")
    proc = subprocess.run([sys.executable, "-m", "witty_profiler.tools.view", "g.json", "--analyze", "--output",
                           "report.md"], capture_output=True, text=True, cwd=tmp_path)
    one_error_line(proc, "pass --force")
    assert (tmp_path / "report.md").read_text() == "keep me\n"


def test_collect_refuses_an_existing_named_file_before_the_window(tmp_path):
    (tmp_path / "mine.json").write_text("{}")
    proc = cli("collect", "--duration", "30", "-o", "mine.json", cwd=tmp_path)
    one_error_line(proc, "pass --force")
    assert (tmp_path / "mine.json").read_text() == "{}"
