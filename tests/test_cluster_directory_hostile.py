"""A cluster directory someone else wrote: a manifest and graph files of every wrong shape are read with
one line each (never a traceback), and a host's words reach the terminal with their control characters
escaped."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from witty_profiler.cluster.fanout import HostResult, read_manifest
from witty_profiler.topology.errors import InputError

REPO = __import__("pathlib").Path(__file__).resolve().parents[1]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "witty_profiler", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def _graph(hosts) -> str:
    return json.dumps({"format": "witty-graph", "schema_version": 1, "meta": {"hosts": hosts}, "entities": [],
                       "edges": []})


def test_a_hostile_directory_is_listed_and_diagnosed(tmp_path):
    (tmp_path / "cluster.json").write_text(json.dumps({"hosts": {
        "a\x1b[2J": {"status": "failed", "reason": "boom\r\x1b[31mALL GOOD\nforged line \ud800"},
        "b": [1], "c": None}}))
    (tmp_path / "objhost.json").write_text(_graph([{"a": 1}]))
    (tmp_path / "deep.json").write_text("[" * 100_000)
    (tmp_path / "half.json").write_text("{")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "ok.json").write_text(_graph(["ok"]))
    for args in (("cluster", "hosts", str(tmp_path)), ("cluster", "diagnose", str(tmp_path)),
                 ("cluster", "diagnose", str(tmp_path), "--format", "json")):
        done = _cli(*args)
        assert done.returncode in (0, 1), (args, done.stderr)  # 1: findings; never 2+ for a readable directory
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr, (args, done.stderr)
        assert "\x1b" not in done.stdout and "\r" not in done.stdout, args
    listed = _cli("cluster", "hosts", str(tmp_path)).stdout
    assert "\\x1b[31mALL GOOD\\x0aforged line" in listed


@pytest.mark.parametrize("text, words", [("[" * 100_000, "not a readable manifest"), ("{", "not a readable manifest")])
def test_a_manifest_that_is_not_json_is_one_line(tmp_path, text, words):
    (tmp_path / "cluster.json").write_text(text)
    with pytest.raises(InputError, match=words):
        read_manifest(tmp_path)


def test_a_hosts_stderr_is_kept_printable():
    result = HostResult("n1", "failed", "exit 2: \x1b]0;pwned\x07 done\r")
    assert result.reason == "exit 2: \\x1b]0;pwned\\x07 done\\x0d"
