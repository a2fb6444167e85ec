"""`convert --layer all --max-tokens 8000` and `info` of a large graph against `json.load` of the same file.

    python3 benchmarks/graph_ratios.py [--entities 100000] [--rounds 7] [--shape startup|scale]
                                       [--before DIR]   # also the checkout DIR (an older one), same rounds

Each command is a fresh process (what a user or an assistant waits for), run in interleaved rounds:
every round runs each command once, in a rotating order, and gives one ratio per command against the
`python3 -c "import json; json.load(open(F))"` of the same round, so that the load of a shared machine
weighs on both sides alike. Prints the median ratio with its spread over the rounds (min-max), the
baseline's own median and spread, and the peak RSS of each command (the largest over the rounds,
from wait4: each run's own). Goal: each ratio <= 1.5x.

The graph: --shape startup is benchmarks/synthetic.py's host of --entities entities (the one
benchmarks/startup.py uses, about 35 MiB at 100,000); --shape scale is benchmarks/graph_scale.py's
four hosts with 300,000 edges (78 MiB). It is written by a child process, before any round.
--before DIR runs the same commands with DIR first on PYTHONPATH (a checkout of another revision,
e.g. `git archive HEAD~3 | tar -x -C DIR`), in the same rounds.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
_SCALE = ("import sys; sys.path.insert(0, 'benchmarks'); from graph_scale import synthetic; "
          "from witty_profiler.topology import dump_graph; dump_graph(synthetic({n}, 300000), {path!r})")


def build(shape: str, entities: int, path: Path) -> None:
    if shape == "startup":
        cmd = [PY, "-m", "benchmarks.synthetic", str(entities), "-o", str(path)]
    else:
        cmd = [PY, "-c", _SCALE.format(n=entities, path=str(path))]
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)


def once(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(seconds, peak RSS in MiB) of one fresh process, away from any checkout (python -m looks in the
    working directory first)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            cwd=tempfile.gettempdir())
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode(errors='replace')[-500:]}")
    proc.stderr.close()
    return wall, usage.ru_maxrss / 1024


def commands(graph: Path, before: Path | None) -> dict[str, tuple[list[str], dict[str, str]]]:
    cli = [PY, "-m", "witty_profiler"]
    convert = [*cli, "convert", "--layer", "all", "--max-tokens", "8000", str(graph)]
    info = [*cli, "info", str(graph)]
    found = {"json.load": ([PY, "-c", f"import json; json.load(open({str(graph)!r}))"], ENV),
             "convert": (convert, ENV), "info": (info, ENV)}
    if before is not None:
        old = {**ENV, "PYTHONPATH": str(before)}
        found.update({"convert (before)": (convert, old), "info (before)": (info, old)})
    return found


def spread(values: list[float], scale: float = 1.0, unit: str = "x") -> str:
    return (f"{statistics.median(values) * scale:.2f}{unit} ({min(values) * scale:.2f}-"
            f"{max(values) * scale:.2f})")


def measure(cmds: dict[str, tuple[list[str], dict[str, str]]], rounds: int) -> tuple[dict, dict]:
    for cmd, env in cmds.values():  # a first run of each, not counted: the page cache, the bytecode
        once(cmd, env)
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    peaks: dict[str, float] = dict.fromkeys(cmds, 0.0)
    order = list(cmds)
    for r in range(rounds):
        for name in order[r % len(order):] + order[:r % len(order)]:
            wall, peak = once(*cmds[name])
            walls[name].append(wall)
            peaks[name] = max(peaks[name], peak)
    return walls, peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--shape", choices=("startup", "scale"), default="startup")
    parser.add_argument("--before", type=Path, help="another checkout, measured in the same rounds")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="witty-ratios-"))
    try:
        graph = tmp / "graph.json"
        build(args.shape, args.entities, graph)
        size = graph.stat().st_size / 2**20
        walls, peaks = measure(commands(graph, args.before and args.before.resolve()), args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}: nproc {os.cpu_count()}, "
          f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.2f}; --shape {args.shape}, "
          f"{args.entities:,} entities, {size:.0f} MiB; {args.rounds} interleaved rounds\n")
    base = walls["json.load"]
    print("| command | wall | against json.load, median (min-max) | peak RSS |")
    print("|---|---:|---:|---:|")
    for name, values in walls.items():
        against = "baseline" if name == "json.load" else spread([w / b for w, b in zip(values, base)])
        print(f"| {name} | {spread(values, 1000, ' ms')} | {against} | {peaks[name]:.0f} MiB |")


if __name__ == "__main__":
    main()
