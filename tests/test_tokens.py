"""Offline token counting and `witty-profiler tokens`."""

from __future__ import annotations

import subprocess
import sys

from witty_profiler.converters.tokens import count_tokens, encoder


def test_counts_are_cl100k_and_offline():
    assert encoder() is encoder()  # loaded once
    assert count_tokens("") == 0
    assert count_tokens("hello world") == 2  # cl100k_base: "hello", " world"
    assert count_tokens("<|endoftext|>") > 1  # a special marker counts as text, never raises


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "witty_profiler", "tokens", *args], capture_output=True, text=True)


def test_tokens_command_lists_each_file_and_a_total(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("hello world")
    b.write_text("numa_node:local:6 " * 10)
    done = _cli(str(a), str(b))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[1] for line in lines] == [str(a), str(b), "total"]
    counts = [int(line.split()[0]) for line in lines]
    assert counts[0] == 2 and counts[1] == count_tokens(b.read_text()) and counts[2] == counts[0] + counts[1]


def test_tokens_command_missing_file_is_one_line_exit_2(tmp_path):
    done = _cli(str(tmp_path / "absent.json"))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no such file" in done.stderr
