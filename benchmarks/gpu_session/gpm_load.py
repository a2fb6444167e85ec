"""A GPU load with a known shape, for checking NVML GPM figures against what the load itself measures
(benchmarks/gpu_session/gpm.sh).

  --phase tensor   BF16 matrix products (8192 x 8192 by default): the tensor cores busy, HBM lightly
                   used. GPM should show high tensor_active_pct / tensor_hmma_active_pct.
  --phase memory   copies between two large buffers (4 GiB each by default): bound by HBM bandwidth.
                   GPM's hbm_bw_util_pct should be near achieved bytes/s / the board's peak.

It prints READY once warmed up, then at the end one line of JSON with what it achieved: TFLOP/s
(2 n^3 per product) or GB/s (each copy reads and writes its bytes). On a host without torch and
CUDA it runs the same loops with numpy on the CPU (--backend numpy, chosen automatically), so that
gpm.sh can be checked end to end on any machine.

    python3 benchmarks/gpu_session/gpm_load.py --phase memory --seconds 30
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def torch_loop(phase: str, size: int, buffer_gib: float):
    import torch

    if not torch.cuda.is_available():
        return None
    device = torch.device("cuda")
    if phase == "tensor":
        a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
        b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
        out = torch.empty_like(a)

        def step() -> float:
            torch.matmul(a, b, out=out)
            return 2.0 * size ** 3  # floating-point operations
    else:
        n = int(buffer_gib * 2**30) // 2  # bf16 elements
        src = torch.ones(n, device=device, dtype=torch.bfloat16)
        dst = torch.empty_like(src)

        def step() -> float:
            dst.copy_(src)
            return 2.0 * n * 2  # bytes read and written
    name = torch.cuda.get_device_name(device)
    return step, torch.cuda.synchronize, f"cuda ({name}), torch {torch.__version__}"


def numpy_loop(phase: str, size: int, buffer_gib: float):
    import numpy as np

    if phase == "tensor":
        size = min(size, 1024)  # a CPU takes seconds for 8192^3
        a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
        b = a.T.copy()
        out = np.empty_like(a)

        def step() -> float:
            np.matmul(a, b, out=out)
            return 2.0 * size ** 3
    else:
        n = int(min(buffer_gib, 0.25) * 2**30) // 4
        src = np.ones(n, dtype=np.float32)
        dst = np.empty_like(src)

        def step() -> float:
            np.copyto(dst, src)
            return 2.0 * n * 4
    return step, lambda: None, f"cpu, numpy {np.__version__}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase", choices=("tensor", "memory"), required=True)
    ap.add_argument("--seconds", type=float, default=30.0, help="run this long after warming up (default 30)")
    ap.add_argument("--size", type=int, default=8192, help="matrix side for --phase tensor (default 8192)")
    ap.add_argument("--buffer-gib", type=float, default=4.0, help="buffer size for --phase memory (default 4)")
    ap.add_argument("--backend", choices=("auto", "torch", "numpy"), default="auto")
    args = ap.parse_args(argv)

    loop = None
    if args.backend in ("auto", "torch"):
        try:
            loop = torch_loop(args.phase, args.size, args.buffer_gib)
        except ImportError:
            loop = None
        if loop is None and args.backend == "torch":
            print("gpm_load: torch with CUDA is needed for --backend torch", file=sys.stderr)
            return 2
    if loop is None:
        loop = numpy_loop(args.phase, args.size, args.buffer_gib)
    step, sync, where = loop
    print(f"{args.phase} load on {where}", flush=True)
    for _ in range(3):  # warm-up: kernels chosen, memory touched
        step()
    sync()
    print("READY", flush=True)

    started = time.monotonic()
    done, steps = 0.0, 0
    while time.monotonic() - started < args.seconds:
        for _ in range(10):  # queue work ahead; synchronise only to read the clock
            done += step()
            steps += 1
        sync()
    elapsed = time.monotonic() - started
    result = {"phase": args.phase, "where": where, "steps": steps, "seconds": round(elapsed, 2)}
    if args.phase == "tensor":
        result["tflops"] = round(done / elapsed / 1e12, 2)
    else:
        result["gbytes_per_s"] = round(done / elapsed / 1e9, 1)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
