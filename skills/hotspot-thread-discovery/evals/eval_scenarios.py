"""Live Python workloads the hotspot evals create for real: one process (or several) whose hot code is
a named function, optionally beside idle or busy sibling threads. Each process names itself
(PR_SET_NAME) so the view shows which is which; the runner gets the pids by role.

Stack sampling needs root and py-spy for Python frames (bcc adds native frames); where this host lacks
them the scenario raises ScenarioUnavailable and the harness skips the case."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

FIXES: dict = {}  # no before/after cases here

# the hot functions are named as a training job's would be; the module is hs_job (the file name)
JOB = '''
import ctypes, sys, threading, time
role, busy, idle = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ctypes.CDLL(None).prctl(15, ("hs-" + role).encode(), 0, 0, 0)
def decode_image(n):
    total = 0
    for i in range(n):
        total += (i * 7919) % 97
    return total
def tokenize(text):
    ids = []
    for word in text.split():
        ids.append(hash(word) % 50000)
    return ids
def load_batch():
    while True:
        decode_image(200000)
def train_loop():
    line = "the quick brown fox jumps over the lazy dog " * 50
    while True:
        tokenize(line)
def sleeper():
    while True:
        time.sleep(0.5)
target = {"loader": load_batch, "trainer": train_loop}[role.split("-")[0]]
for _ in range(idle):
    threading.Thread(target=sleeper, daemon=True).start()
for _ in range(busy - 1):
    threading.Thread(target=target, daemon=True).start()
target()
'''


class ScenarioUnavailable(Exception):
    """This host cannot run the scenario."""


def _pyspy() -> bool:
    return bool(shutil.which("py-spy")) or (Path(sys.executable).parent / "py-spy").is_file()


def _favoured() -> None:
    """Run the workload at nice -10 (the scenario runs as root): on a small shared host other work would
    otherwise keep its busy thread under the 90 % of a core compute.hot_thread looks for."""
    os.nice(-10)


@contextmanager
def run(spec: dict) -> Iterator[dict[str, list[int]]]:
    """spec: role (loader|trainer), processes (how many), busy (busy threads each), idle (idle threads each)."""
    if os.geteuid() != 0:
        raise ScenarioUnavailable("stack sampling needs root")
    if not _pyspy():
        raise ScenarioUnavailable("py-spy is not installed (pip install 'witty-profiler[stacks]')")
    role = spec.get("role", "loader")
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"witty-hotspot-{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "hs_job.py"
    script.write_text(JOB)
    procs: list[subprocess.Popen] = []
    try:
        for i in range(spec.get("processes", 1)):
            procs.append(subprocess.Popen([sys.executable, str(script), f"{role}-{i}", str(spec.get("busy", 1)),
                                           str(spec.get("idle", 0))], cwd=folder,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          preexec_fn=_favoured))
        time.sleep(spec.get("warmup_s", 0.5))
        yield {role: [p.pid for p in procs]}
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)
