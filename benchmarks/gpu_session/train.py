"""A small training loop whose input pipeline is the bottleneck, for benchmarks/gpu_session/run.sh.

Each DataLoader worker spends --burn-ms of CPU time (pure Python, one core) and --sleep-ms asleep on
every batch before handing it over, while the model is small enough that the accelerator finishes
a step in about a millisecond. So the trainer blocks on its input most of the time, its workers are
busy, and the GPU is mostly idle: what witty-profiler should report as
dataplane.data_loading_bottleneck and compute.accelerator_idle.

    python3 benchmarks/gpu_session/train.py --seconds 60 --workers 4 --burn-ms 200

Without CUDA it trains on the CPU (same pipeline, no accelerator), so the script can be checked on
any host with torch. It prints READY after the first step and, at the end, one line of JSON with
the steps, the batches per second and the share of the time spent waiting for input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowBatches(Dataset):
    """Whole batches (the loader's batch_size is None), each costing its worker CPU time and a nap."""

    def __init__(self, batches: int, batch_size: int, side: int, classes: int, burn_ms: float, sleep_ms: float):
        self.batches, self.batch_size, self.side, self.classes = batches, batch_size, side, classes
        self.burn_s, self.sleep_s = burn_ms / 1000, sleep_ms / 1000

    def __len__(self) -> int:
        return self.batches

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        # thread CPU time, not wall time: the burn costs the same on a loaded host, it only takes longer
        deadline = time.thread_time() + self.burn_s
        acc = 0.0
        while time.thread_time() < deadline:
            for k in range(2000):
                acc += math.sqrt(k + index)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        g = torch.Generator().manual_seed(index)
        x = torch.randn(self.batch_size, 3, self.side, self.side, generator=g)
        y = torch.randint(0, self.classes, (self.batch_size,), generator=g)
        return x, y


def model(classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="train this long (default 60)")
    ap.add_argument("--workers", type=int, default=4, help="DataLoader workers (default 4)")
    ap.add_argument("--burn-ms", type=float, default=200.0, help="CPU time each worker spends per batch")
    ap.add_argument("--sleep-ms", type=float, default=10.0, help="time each worker sleeps per batch")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--side", type=int, default=64, help="image side in pixels")
    ap.add_argument("--device", default="auto", help="cuda, cpu or auto (cuda when available)")
    args = ap.parse_args(argv)

    classes = 10
    data = SlowBatches(10**7, args.batch_size, args.side, classes, args.burn_ms, args.sleep_ms)
    # fork, and the workers started before CUDA is touched: they stay children of this process (which
    # is how the collector tells loader workers from their trainer) and never inherit a CUDA context
    loader = DataLoader(data, batch_size=None, shuffle=False, num_workers=args.workers,
                        multiprocessing_context="fork" if args.workers else None,
                        persistent_workers=args.workers > 0, prefetch_factor=2 if args.workers else None)
    batches = iter(loader)

    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if args.device == "auto" else args.device))
    net = model(classes).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    print(f"device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
          + f", torch {torch.__version__}, {args.workers} workers x {args.burn_ms:g} ms CPU + "
          f"{args.sleep_ms:g} ms sleep per batch", flush=True)

    started = last_report = time.monotonic()
    steps, waited, loss = 0, 0.0, torch.zeros(())
    while time.monotonic() - started < args.seconds:
        t0 = time.monotonic()
        x, y = next(batches)
        waited += time.monotonic() - t0
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        steps += 1
        if steps == 1:
            print("READY", flush=True)
        now = time.monotonic()
        if now - last_report >= 5:
            print(f"{now - started:5.1f} s: {steps} steps, loss {loss.item():.3f}, "
                  f"{steps / (now - started):.1f} batches/s, waiting for input {100 * waited / (now - started):.0f} %",
                  flush=True)
            last_report = now
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.monotonic() - started
    print(json.dumps({"device": str(device), "steps": steps, "seconds": round(elapsed, 2),
                      "batches_per_s": round(steps / elapsed, 2), "input_wait_pct": round(100 * waited / elapsed, 1),
                      "final_loss": round(float(loss.item()), 4), "workers": args.workers,
                      "burn_ms": args.burn_ms, "sleep_ms": args.sleep_ms}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
