"""Accuracy cases of trace and cluster inputs, run through the CLI of one or two checkouts side by side.

    python3 benchmarks/accuracy_cases.py [--before DIR] [--slurm]

Each case writes its input (PyTorch-format Kineto traces, msprof-analyze CSV/JSON, or with --slurm a
real three-node Slurm job of tests/slurm_cluster.py whose rank on n2 writes 50 MB and fsyncs each step),
runs `python3 -m witty_profiler` from this checkout (and from DIR, e.g. a `git worktree` of an older
commit: a checkout runs without installing), and prints one markdown row per case: what each said
(exit code, the finding and its priority, or the one-line error). The Slurm graphs are collected once,
with this checkout's collectors, and diagnosed by each.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
SHARED = HERE.parent / "shared" / "fixtures" / "traces"
CSV_HEADER = "Step,Type,Index,Computing,Communication(Not Overlapped),Free\n"


def kineto(path: Path, rank: int, world: int, kernel_us: float, calls: int = 18, nelems: int | None = None,
           start_us: float = 1.7e15, ranks: str = "[0, 1]") -> Path:
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 7, "tid": 7, "ts": start_us,
               "dur": 100_000}]
    for n in range(calls):
        args = {"Process Group Name": "0", "Process Group Ranks": ranks}
        if nelems is not None:
            args.update({"In msg nelems": nelems, "Out msg nelems": nelems, "dtype": "Float"})
        events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0,
                       "tid": 9, "ts": start_us + 100 + n * (kernel_us + 50), "dur": kernel_us, "args": args})
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump({"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
                   "traceEvents": events}, f)
    return path


def msprof_dir(folder: Path, csv_text: str, comm: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cluster_step_trace_time.csv").write_text(csv_text)
    if comm is not None:
        (folder / "cluster_communication.json").write_text(json.dumps(comm))
    return folder


def trace_cases(tmp: Path) -> list[tuple[str, list[Path], str]]:
    """(case, inputs, the pattern whose verdict is shown)."""
    cases = [("2: one rank, allreduce kernels of 1827 us, no message sizes",
              [kineto(tmp / "nosize.json.gz", 0, 2, 1827.0)], "network.slow_link"),
             ("2: one rank, 64 KiB allreduce of 1827 us",
              [kineto(tmp / "small.json.gz", 0, 2, 1827.0, nelems=16384)], "network.slow_link")]
    cases.append(("2: two ranks of 64 KiB allreduce, 1800 and 1100 us a call",
                  [kineto(tmp / "w0.json.gz", 0, 2, 1800.0, nelems=16384),
                   kineto(tmp / "w1.json.gz", 1, 2, 1100.0, nelems=16384)], "network.slow_link"))
    real = SHARED / "kineto" / "nccl_2rank_rank0.json.gz"
    if real.exists():
        cases.append(("2: HTA's 2-rank trace (20 MB allreduce, 3.1 ms)", [real], "network.slow_link"))
    source = SHARED / "msprof" / "cluster_step_trace_time.csv"
    if source.exists():
        lines = source.read_text().splitlines(True)
        cases += [
            ("3: msprof step file cut in the middle of a row",
             [msprof_dir(tmp / "cut-row", "".join(lines[:5]) + lines[5][:40])], "control.slow_rank"),
            ("3: msprof step file cut in the middle of a number",
             [msprof_dir(tmp / "cut-number", "".join(lines[:2]) + lines[2][:-5])], "control.slow_rank"),
            ("3: msprof step file with a negative duration",
             [msprof_dir(tmp / "negative", "".join(lines).replace(",80435.", ",-80435."))], "control.slow_rank"),
            ("3: the msprof step file as recorded", [msprof_dir(tmp / "whole", "".join(lines))], "control.slow_rank"),
        ]
    cases += [
        ("4: two rank-0 traces of different runs",
         [kineto(tmp / "a0.json.gz", 0, 2, 100.0), kineto(tmp / "b0.json.gz", 0, 2, 400.0)], "control.slow_rank"),
        ("4: rank 3 of 8 and rank 1 of 2, 9 days apart",
         [kineto(tmp / "r3.json.gz", 3, 8, 100.0, ranks="[0, 1, 2, 3, 4, 5, 6, 7]"),
          kineto(tmp / "r1.json.gz", 1, 2, 900.0, start_us=1.7e15 + 9 * 86400e6)], "control.slow_rank"),
    ]
    rows = "".join(f",rank,{r},500000,100000,{700000 if r == 6 else 400000}\n" for r in range(8))
    call = {"0": {"Communication Time Info": {"Elapse Time(ms)": 5, "Transit Time(ms)": 1, "Wait Time(ms)": 4}},
            "1": {"Communication Time Info": {"Elapse Time(ms)": 1.2, "Transit Time(ms)": 1, "Wait Time(ms)": 0.2}}}
    cases.append(("5: step times name rank 6, the vote of 2 ranks names rank 1",
                  [msprof_dir(tmp / "vote", CSV_HEADER + rows,
                              {"(0, 1)": {"s": {"hcom_allReduce__1_0@1": call, "hcom_allReduce__2_0@1": call}}})],
                  "control.slow_rank"))
    return cases


def verdict(checkout: Path, inputs: list[Path], pattern: str, tmp: Path) -> str:
    out = tmp / f"graph-{abs(hash((str(checkout), *map(str, inputs))))}.json"
    done = subprocess.run([sys.executable, "-m", "witty_profiler", "import-trace", *map(str, inputs), "-o", str(out),
                           "--force"], cwd=checkout, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return f"exit {done.returncode}: {_line(done.stderr)}"
    ranks = len([e for e in json.loads(out.read_text())["entities"] if e["type"] == "rank"])
    return f"exit 0, {ranks} ranks; " + _pattern(checkout, ["diagnose", str(out)], pattern)


def _pattern(checkout: Path, args: list[str], pattern: str) -> str:
    done = subprocess.run([sys.executable, "-m", "witty_profiler", *args, "--format", "json"], cwd=checkout,
                          capture_output=True, text=True, timeout=300)
    if done.returncode not in (0, 1):
        return f"diagnose exit {done.returncode}: {_line(done.stderr)}"
    report = json.loads(done.stdout)
    found = next((f for f in report["findings"] if f["pattern"] == pattern), None)
    on_hosts = [f"{h['host']}: {f['priority']}" for h in report.get("hosts", []) for f in h.get("findings", [])
                if f["pattern"] == pattern]
    if found is None and on_hosts:  # a host's own finding in a cluster directory
        return f"{pattern} on " + ", ".join(on_hosts)
    if found is None:
        row = next((c for c in report.get("coverage", []) if c["pattern"] == pattern), {})
        return f"{pattern} {row.get('status', '?')}"
    return f"{found['priority']} {pattern}: {_line(found['description'], 260)}"


def _line(text: str, limit: int = 200) -> str:
    text = " ".join(text.strip().splitlines()[-1:]).replace("|", "/")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def slurm_graphs(tmp: Path) -> Path:
    """Three nodes' graphs of a job whose rank on n2 writes 50 MB and fsyncs each step (collected here)."""
    sys.path.insert(0, str(HERE / "tests"))
    from slurm_cluster import SlurmCluster  # the tests' real three-node cluster
    from test_cluster_slurm_io import RANK
    root = Path(tempfile.mkdtemp(prefix="wslurm", dir="/tmp"))
    cluster = SlurmCluster(root)
    cluster.start()
    knob = Path("/proc/sys/kernel/task_delayacct")
    before = knob.read_text().strip() if knob.exists() else None
    try:
        if before == "0":
            knob.write_text("1")
        script, barrier = tmp / "rank.py", tmp / "barrier"
        script.write_text(RANK)
        barrier.mkdir()
        job = cluster.submit(f"srun --ntasks-per-node=1 bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS "
                             f"exec {sys.executable} {script} {barrier} n2'", nodes=3, steps=1)
        time.sleep(1.5)
        out = tmp / "graphs"
        subprocess.run([sys.executable, "-m", "witty_profiler", "cluster", "collect", "--slurm-job", job,
                        "--duration", "8", "--collectors", "process,cpu,cgroup,storage,pressure", "--remote-command",
                        f"{sys.executable} -m witty_profiler", "-o", str(out)], cwd=HERE, env=cluster.env,
                       capture_output=True, text=True, timeout=300, check=True)
        cluster.cancel(job)
        return out
    finally:
        if before == "0":
            knob.write_text("0")
        cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="an older checkout to run the same cases with")
    parser.add_argument("--slurm", action="store_true", help="also the I/O straggler on a real three-node Slurm")
    args = parser.parse_args()
    checkouts = ([("before", args.before.resolve())] if args.before else []) + [("after", HERE)]
    print("| case | " + " | ".join(name for name, _ in checkouts) + " |")
    print("|---" * (len(checkouts) + 1) + "|")
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        for case, inputs, pattern in trace_cases(tmp):
            print(f"| {case} | " + " | ".join(verdict(c, inputs, pattern, tmp) for _, c in checkouts) + " |")
        if args.slurm:
            graphs = slurm_graphs(tmp)
            for pattern in ("control.straggler_host", "storage.io_wait"):
                cells = [_pattern(c, ["cluster", "diagnose", str(graphs)], pattern) for _, c in checkouts]
                print(f"| 1: Slurm job, the rank on n2 writes 50 MB + fsync each step: {pattern} | "
                      + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
