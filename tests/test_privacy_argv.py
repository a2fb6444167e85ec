"""A live process whose secret argument holds spaces: the collector redacts the arguments themselves, not
the line they make once joined (where `--password 'a b c'` reads as `--password a` and two more words)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from witty_profiler.collectors.engine import run_window
from witty_profiler.collectors.process import stored_cmdline


def test_an_argument_vector_is_redacted_word_by_word():
    argv = ("python3", "train.py", "--password", "correct horse battery", "--lr", "0.1")
    assert stored_cmdline(" ".join(argv), argv) == "python3 train.py --password <redacted> --lr 0.1"
    assert "horse" in stored_cmdline(" ".join(argv).replace("--password", "--name"), None)  # an ordinary value stays


@pytest.mark.live
def test_a_live_process_with_a_spaced_secret_keeps_none_of_it():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "--password",
                              "correct horse battery", "--note", "two words"])
    try:
        time.sleep(0.3)
        graph = run_window(duration_s=0.5, interval_s=0.5, collectors=["process"], pids=[child.pid])
    finally:
        child.kill()
        child.wait()
    stored = graph.entity(f"process:{graph.meta.hosts[0]}:{child.pid}").attrs["cmdline"]
    assert "horse" not in stored and "battery" not in stored and "<redacted>" in stored
    assert "two words" in stored
