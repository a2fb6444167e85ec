"""What the rdma_qp collector costs as a host's queue pairs grow, against reading the same output.

A large training host holds thousands of QPs (NCCL: ranks x peers x channels x QPs per connection).
For N QPs in `rdma -j res show qp`'s format (8 HCAs, 64 processes, the kernel's management QPs), a
stand-in `rdma` prints a recorded output as the real tool would; each row compares:

  baseline   two runs of the stand-in and `json.loads` of their output (what any reader pays)
  collector  RdmaQpCollector start + finish on the same two outputs (parse, diff, count, graph)

The real tool's netlink dump is not included (no RDMA here): it is the same for both columns. The two
are timed (wall clock) in the same rounds, interleaved; the ratio is the median of the per-round ratios
with their range, beside the baseline's own time.

    python3 benchmarks/rdma_qp_scale.py [--qps 1000 10000 50000] [--runs 7]

Prints a Markdown table (paste it into BENCHMARKS.md with the date and the machine).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from witty_profiler.collectors.base import Context  # noqa: E402
from witty_profiler.collectors.rdma_qp import RdmaQpCollector  # noqa: E402

from benchmarks.timing import Ratio, load, machine, ratio  # noqa: E402

STAND_IN = """#!/bin/sh
n=$(( $(cat "$DIR/calls" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$DIR/calls"
cat "$DIR/qp.$(( (n - 1) % 2 + 1 )).json"
"""


def qps_json(n: int, churn: int) -> str:
    """n user RC QPs over 8 HCAs and 64 processes plus each HCA's SMI/GSI QPs; `churn` QPs renumbered."""
    out = []
    for dev in range(8):
        for lqpn, kind in ((0, "SMI"), (1, "GSI")):
            out.append({"ifindex": dev, "ifname": f"mlx5_{dev}", "port": 1, "lqpn": lqpn, "type": kind,
                        "state": "RTS", "sq-psn": 0, "comm": "ib_core"})
    for k in range(n):
        dev, pid = k % 8, 50000 + k % 64
        lqpn = 100 + k // 8 + (10**6 if k < churn else 0)
        out.append({"ifindex": dev, "ifname": f"mlx5_{dev}", "port": 1, "lqpn": lqpn, "rqpn": lqpn + 7, "type": "RC",
                    "state": "RTS" if k % 997 else "ERR", "rq-psn": 3 * k, "sq-psn": 5 * k,
                    "path-mig-state": "MIGRATED", "pdn": 3, "pid": pid, "comm": "pt_main_thread"})
    return json.dumps(out, separators=(",", ":")) + "\n"


def measure(n: int, runs: int) -> tuple[Ratio, int]:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "qp.1.json").write_text(qps_json(n, 0))
        (d / "qp.2.json").write_text(qps_json(n, max(1, n // 100)))
        tool = d / "rdma"
        tool.write_text(STAND_IN.replace("$DIR", str(d)))
        tool.chmod(0o755)
        (d / "sys" / "class" / "infiniband").mkdir(parents=True)

        def baseline() -> None:
            for _ in range(2):
                json.loads(subprocess.run([str(tool)], capture_output=True, text=True, check=True).stdout)

        def collector() -> None:
            c = RdmaQpCollector(Context(host="bench", sys=d / "sys"), rdma=str(tool))
            c.start()
            graph = c.finish()
            assert c.status.status == "ok" and graph.entities("rdma_port")

        size = (d / "qp.2.json").stat().st_size
        return ratio(collector, baseline, runs), size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qps", type=int, nargs="+", default=[1000, 10000, 50000])
    ap.add_argument("--runs", type=int, default=7, help="interleaved rounds")
    args = ap.parse_args(argv)
    print(f"{machine()}; {args.runs} interleaved rounds, wall clock")
    print()
    print("| QPs | output | baseline (2 runs + json.loads) | collector (start + finish) / baseline |")
    print("|---:|---:|---:|---:|")
    for n in args.qps:
        r, size = measure(n, args.runs)
        print(f"| {n:,} | {size / 2**20:.1f} MiB | {r.base_text(digits=0)} | {r.text()} |", flush=True)
    print(f"load average at the end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
