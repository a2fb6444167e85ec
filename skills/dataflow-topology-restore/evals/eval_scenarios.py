"""Live pipelines the flow evals create for real: three processes, producer -> transform ->
consumer, over pipes, a unix socket pair or local TCP, with one stage made slow (CPU-bound). Each
stage names itself (PR_SET_NAME) so the view shows which is which; the runner gets the pids by role."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Iterator

FIXES: dict = {}  # no before/after cases here

STAGE = '''
import ctypes, hashlib, socket, sys
role, slow, via = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
ctypes.CDLL(None).prctl(15, ("wf-" + role).encode(), 0, 0, 0)
def work(data):
    if slow:
        for _ in range(3000):
            data = hashlib.sha256(data).digest()
    return data
inp = sys.stdin.buffer
out = sys.stdout.buffer
if via != "pipe" and role != "producer":  # the input end is a socket fd handed over as stdin
    inp = socket.socket(fileno=0).makefile("rb")
if via != "pipe" and role != "consumer":
    out = socket.socket(fileno=1).makefile("wb")
if role == "producer":
    line = b"x" * 200 + b"\\n"
    while True:
        out.write(work(line) if slow else line)
        if slow: out.flush()
for line in inp:
    r = work(line)
    if role == "transform":
        out.write(r.hex().encode() + b"\\n" if slow else line)
        out.flush()
'''


class ScenarioUnavailable(Exception):
    """This host cannot run the scenario."""


def _pair(via: str):
    if via == "unix":
        return socket.socketpair()
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    server.close()
    return client, accepted


@contextmanager
def run(spec: dict) -> Iterator[dict[str, list[int]]]:
    via, slow = spec.get("via", "pipe"), spec.get("slow", "transform")
    roles = ("producer", "transform", "consumer")
    procs: list[subprocess.Popen] = []
    try:
        previous = subprocess.DEVNULL
        for role in roles:
            if role == "consumer":
                out, keep = subprocess.DEVNULL, None
            elif via == "pipe":
                out, keep = subprocess.PIPE, None
            else:
                keep = _pair(via)  # (write end for this stage, read end for the next)
                out = keep[0].fileno()
            p = subprocess.Popen([sys.executable, "-c", STAGE, role, "1" if role == slow else "0", via],
                                 stdin=previous, stdout=out, stderr=subprocess.DEVNULL)
            procs.append(p)
            if hasattr(previous, "close"):
                previous.close()  # only the stages hold the ends
            if keep is None:
                previous = p.stdout if via == "pipe" and role != "consumer" else subprocess.DEVNULL
            else:
                keep[0].close()
                previous = keep[1]
        time.sleep(spec.get("warmup_s", 1.0))  # the queues in front of the slow stage fill up
        yield {role: [p.pid] for role, p in zip(roles, procs)}
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=10)
