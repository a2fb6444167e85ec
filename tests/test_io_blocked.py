"""process.io_blocked_pct: the share of the window a process's main thread was blocked on block I/O,
from delay accounting (/proc/PID/stat field 42), reported only where the kernel counts it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from witty_profiler.collectors.engine import run_window
from witty_profiler.collectors.lib.procfs import blkio_ticks, delay_accounting, parse_stat
from witty_profiler.topology.vocabulary import M

KNOB = Path("/proc/sys/kernel/task_delayacct")
WRITER = """
import os, sys
with open(sys.argv[1], "wb") as f:
    while True:
        f.seek(0)
        f.write(b"x" * (8 << 20))
        f.flush()
        os.fsync(f.fileno())
"""


def test_field_42_of_a_stat_line_with_spaces_and_parentheses_in_the_name():
    fields = " ".join(str(n) for n in range(3, 53)).split()
    fields[0] = "S"
    line = f"123 (a (b) c) {' '.join(fields)}\n"
    assert blkio_ticks(line.encode()) == 42 and parse_stat(line).blkio == 42
    assert blkio_ticks(b"123 (short) S 1 2") is None
    assert blkio_ticks(Path("/proc/self/stat").read_bytes()) is not None


def test_the_kernel_switch_is_read(tmp_path):
    knob = tmp_path / "kernel" / "task_delayacct"
    knob.parent.mkdir()
    knob.write_text("0\n")
    assert delay_accounting(str(tmp_path)) is False
    knob.write_text("1\n")
    assert delay_accounting(str(tmp_path)) is True
    knob.unlink()  # before Linux 5.14 there is no switch: on wherever built in
    assert delay_accounting(str(tmp_path)) is True


def _window_of_a_writer(tmp_path) -> dict:
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "data.bin")])
    try:
        time.sleep(0.3)
        graph = run_window(duration_s=1.5, interval_s=0.5, collectors=["process"], pids=[writer.pid])
    finally:
        writer.kill()
        writer.wait()
    return graph.entity(f"process:{graph.meta.hosts[0]}:{writer.pid}").metrics


@pytest.mark.live
def test_a_process_that_fsyncs_is_blocked_on_io_and_nothing_is_said_without_delay_accounting(tmp_path):
    if not KNOB.exists() or not os.access(KNOB, os.W_OK):
        pytest.skip(f"{KNOB} is absent or not writable here (needs root on Linux 5.14+)")
    before = KNOB.read_text().strip()
    try:
        KNOB.write_text("1")
        on = _window_of_a_writer(tmp_path)
        KNOB.write_text("0")
        off = _window_of_a_writer(tmp_path)
    finally:
        KNOB.write_text(before)
    assert on[M.WRITE_BYTES_PER_S] > 1e6 and 0 < on[M.IO_BLOCKED_PCT] <= 100
    assert M.IO_BLOCKED_PCT not in off  # the counter stays 0 with accounting off: not a measured 0 %
