"""train.py's input pipeline without torch, to check run.sh on a host without torch or GPU.

Forked workers, named pt_data_worker like PyTorch's DataLoader workers, burn --burn-ms of CPU per
batch and hand each batch (bytes) to the trainer through a pipe; the trainer only waits for them.
RANK/WORLD_SIZE in the environment make the trainer an AI process for the collectors, as libtorch
in its mappings does for train.py. Same options and output (READY, a JSON line at the end).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import sys
import time
from multiprocessing import get_context

PR_SET_NAME = 15


def _name(title: bytes) -> None:
    try:
        ctypes.CDLL(None).prctl(PR_SET_NAME, ctypes.c_char_p(title), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the name only matters to the collectors


def worker(conn, burn_s: float, sleep_s: float, batch_bytes: int) -> None:
    _name(b"pt_data_worker")
    index = 0
    while True:
        deadline = time.thread_time() + burn_s
        acc = 0.0
        while time.thread_time() < deadline:
            for k in range(2000):
                acc += math.sqrt(k + index)
        if sleep_s:
            time.sleep(sleep_s)
        try:
            conn.send_bytes(bytes(batch_bytes))
        except (BrokenPipeError, EOFError, OSError):
            return
        index += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--burn-ms", type=float, default=200.0)
    ap.add_argument("--sleep-ms", type=float, default=10.0)
    args = ap.parse_args(argv)
    if "RANK" not in os.environ:  # /proc/PID/environ shows the environment a process started with
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "RANK": "0", "WORLD_SIZE": "1"})
    ctx = get_context("fork")
    pipes, procs = [], []
    for _ in range(max(1, args.workers)):
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=worker, args=(child, args.burn_ms / 1000, args.sleep_ms / 1000, 1 << 20), daemon=True)
        p.start()
        pipes.append(parent)
        procs.append(p)
    print(f"device none (stub), {len(procs)} workers x {args.burn_ms:g} ms CPU + {args.sleep_ms:g} ms sleep per batch",
          flush=True)
    started = time.monotonic()
    steps, waited = 0, 0.0
    while time.monotonic() - started < args.seconds:
        t0 = time.monotonic()
        pipes[steps % len(pipes)].recv_bytes()
        waited += time.monotonic() - t0
        steps += 1
        if steps == 1:
            print("READY", flush=True)
    elapsed = time.monotonic() - started
    for p in procs:
        p.terminate()
    print(json.dumps({"device": "none", "steps": steps, "seconds": round(elapsed, 2),
                      "batches_per_s": round(steps / elapsed, 2), "input_wait_pct": round(100 * waited / elapsed, 1),
                      "workers": len(procs), "burn_ms": args.burn_ms, "sleep_ms": args.sleep_ms}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
