"""Fixed costs paid on every call, each against a baseline measured in the same run.

    python3 benchmarks/startup.py [--repeat 7] [--entities 100000] [--sample PATH]
                                  [--python PY --source DIR]   # another installation (an older one)
    python3 benchmarks/startup.py --ratios [--rounds 21] [--source DIR]   # the start-up ratios alone

- the start-up ratios: `witty-profiler --help` and `info` on a small graph against `python -c pass`
  (goal: <= 2x), in interleaved rounds (each round runs the three once, in a rotating order, and
  gives one ratio per command), in both bytecode modes: `compiled` runs DIR (on PYTHONPATH) with
  its bytecode written as `pip install` does; `source` runs a copy of DIR without __pycache__ under
  PYTHONDONTWRITEBYTECODE=1, so that every start compiles what it imports (the environment of the
  machines this is developed on); the standard library and the dependencies keep their bytecode in
  both. Prints the median ratio with the spread over the rounds (min-max and the middle half), and
  the baseline's own median and spread in ms;
- `witty-profiler --help` and `info` on a small graph, against `python -c pass`, as the rest below;
- `convert --layer summary` of the real legacy sample (goal: <= 0.3 s);
- `convert --layer summary` and `info` of a generated graph of --entities entities, against
  `python -c "json.load(...)"` of the same file (goals: convert <= 2x; info streams: its peak memory
  does not grow with the graph), with the peak RSS of each;
- `witty-mcp` started over stdio until it answered `initialize`, against a minimal server on the same
  SDK (one tool, nothing else imported).

Every figure is the median wall clock of --repeat runs of a fresh process (what a user or an
assistant waits for), with the bytecode of the package compiled as `pip install` does (the runs
may write it; an environment with PYTHONDONTWRITEBYTECODE would compile every module at every
start, about 0.15 s). The graphs are written by a child process, so that the peak RSS of each run
is its own. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from witty_profiler.topology import dump_graph  # noqa: E402

from converter_graphs import hand_graph  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "witty-profiler-vllm-8npu.json"
PY = sys.executable
MINIMAL_SERVER = """
from mcp.server.mcpserver import MCPServer
server = MCPServer("minimal")
@server.tool()
def ping() -> str:
    return "pong"
server.run("stdio")
"""


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
REPO = Path(__file__).resolve().parents[1]


def run(cmd: list[str], repeat: int) -> tuple[float, float]:
    """(median seconds, largest peak RSS in MiB) of running cmd `repeat` times, away from any checkout
    (python -m looks in the working directory first)."""
    walls, peaks = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV,
                                cwd=tempfile.gettempdir())
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the largest child's so far
        walls.append(time.perf_counter() - start)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
        peaks.append(usage.ru_maxrss / 1024)
    return statistics.median(walls), max(peaks)


def _once(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {done.returncode}")
    return wall


def _spread(values: list[float], scale: float = 1.0, unit: str = "x", digits: int = 2) -> str:
    """median (min-max, middle half) of values."""
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    f = f"{{:.{digits}f}}"
    return (f"{f.format(statistics.median(values) * scale)}{unit} ({f.format(min(values) * scale)}-"
            f"{f.format(max(values) * scale)}, middle half {f.format(q[0] * scale)}-{f.format(q[2] * scale)})")


def start_ratios(py: str, source: Path, small: Path, rounds: int, tmp: Path) -> list[tuple[str, str, str, str]]:
    """(mode, baseline, --help ratio, info ratio) for each bytecode mode; see the module's docstring."""
    plain = tmp / "source-copy"
    shutil.copytree(source, plain, symlinks=True, ignore=shutil.ignore_patterns(
        "__pycache__", ".git", ".venv", "build", "dist", "*.egg-info", ".pytest_cache", "tests", "benchmarks"))
    subprocess.run([py, "-m", "compileall", "-q", "-x", r"\.venv|\.git|tests|benchmarks", str(source)],
                   stdout=subprocess.DEVNULL)
    modes = {"compiled (bytecode written)": {**ENV, "PYTHONPATH": str(source)},
             "source (PYTHONDONTWRITEBYTECODE=1, no __pycache__)":
                 {**ENV, "PYTHONPATH": str(plain), "PYTHONDONTWRITEBYTECODE": "1"}}
    cmds = {"pass": [py, "-c", "pass"], "help": [py, "-m", "witty_profiler", "--help"],
            "info": [py, "-m", "witty_profiler", "info", str(small)]}
    rows = []
    for mode, env in modes.items():
        for cmd in cmds.values():  # a first run of each, not counted: the page cache, the compiled bytecode
            _once(cmd, env)
        walls: dict[str, list[float]] = {name: [] for name in cmds}
        order = list(cmds)
        for r in range(rounds):
            for name in order[r % 3:] + order[:r % 3]:
                walls[name].append(_once(cmds[name], env))
        ratios = {name: [w / b for w, b in zip(walls[name], walls["pass"])] for name in ("help", "info")}
        rows.append((mode, _spread(walls["pass"], 1000, " ms", 0), _spread(ratios["help"]), _spread(ratios["info"])))
    if any(p.name == "__pycache__" for p in plain.rglob("__pycache__")):
        raise SystemExit(f"{plain}: bytecode was written where none should be")
    return rows


def machine() -> str:
    model = "unknown CPU"
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}: nproc {os.cpu_count()}, "
            f"{model}, Python {platform.python_version()}, load average {os.getloadavg()[0]:.2f}")


def print_ratios(rows: list[tuple[str, str, str, str]], rounds: int) -> None:
    print(f"{machine()}; {rounds} interleaved rounds\n")
    print("| bytecode | `python -c pass` | `witty-profiler --help` | `info` (small graph) |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()


def initialize(command: str, args: list[str], repeat: int) -> float:
    """Median seconds from starting a stdio server to its answer to `initialize`."""
    import mcp
    from mcp import StdioServerParameters

    async def once() -> float:
        start = time.perf_counter()
        async with mcp.Client(StdioServerParameters(command=command, args=args, env=ENV, cwd=tempfile.gettempdir())):
            return time.perf_counter() - start
    return statistics.median(asyncio.run(once()) for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--sample", type=Path, default=SAMPLE)
    parser.add_argument("--python", default=PY, help="the interpreter whose witty-profiler is measured")
    parser.add_argument("--source", type=Path, default=REPO, help="its checkout, whose bytecode is compiled")
    parser.add_argument("--ratios", action="store_true", help="only the start-up ratios, in both bytecode modes")
    parser.add_argument("--rounds", type=int, default=21, help="interleaved rounds of the start-up ratios")
    args = parser.parse_args()
    py = args.python
    tmp = Path(tempfile.mkdtemp(prefix="witty-startup-"))
    try:
        small, big = tmp / "small.json", tmp / "big.json"
        dump_graph(hand_graph(), small)
        print_ratios(start_ratios(py, args.source.resolve(), small, args.rounds, tmp), args.rounds)
        if args.ratios:
            return
        subprocess.run([PY, "-m", "benchmarks.synthetic", str(args.entities), "-o", str(big)], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([py, "-m", "compileall", "-q", "-x", r"\.venv|\.git", str(args.source)],
                       stdout=subprocess.DEVNULL)
        cli = [py, "-m", "witty_profiler"]
        rows = []
        base, _ = run([py, "-c", "pass"], args.repeat)
        rows.append(("python -c pass", base, None, "baseline"))
        for label, cmd in (("witty-profiler --help", [*cli, "--help"]),
                           (f"witty-profiler info (small graph, {small.stat().st_size // 1024} KiB)",
                            [*cli, "info", str(small)])):
            t, peak = run(cmd, args.repeat)
            rows.append((label, t, peak, f"{t / base:.2f}x python -c pass"))
        if args.sample.is_file():
            t, peak = run([*cli, "convert", str(args.sample), "--layer", "summary"], args.repeat)
            rows.append(("convert --layer summary (real legacy sample)", t, peak, f"{t:.3f} s"))
        size = f"{big.stat().st_size / 2**20:.0f} MiB"
        load, load_peak = run([py, "-c", f"import json; json.load(open({str(big)!r}))"], max(args.repeat // 2, 3))
        rows.append((f"json.load ({args.entities:,} entities, {size})", load, load_peak, "baseline"))
        for label, cmd in (("convert --layer summary", [*cli, "convert", str(big), "--layer", "summary"]),
                           ("info", [*cli, "info", str(big)])):
            t, peak = run(cmd, max(args.repeat // 2, 3))
            rows.append((f"{label} ({args.entities:,} entities)", t, peak, f"{t / load:.2f}x json.load"))
        minimal = initialize(py, ["-c", MINIMAL_SERVER], args.repeat)
        rows.append(("minimal MCP server: initialize over stdio", minimal, None, "baseline"))
        server = Path(py).with_name("witty-mcp")
        server = str(server) if server.exists() else shutil.which("witty-mcp") or "witty-mcp"
        witty = initialize(server, ["--state-dir", str(tmp / "state")], args.repeat)
        rows.append(("witty-mcp: initialize over stdio", witty, None, f"{witty / minimal:.2f}x the minimal server"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"median of {args.repeat} runs\n")
    print("| command | wall | peak RSS | against |")
    print("|---|---:|---:|---|")
    for label, t, peak, against in rows:
        print(f"| {label} | {t * 1000:.0f} ms | {'-' if peak is None else f'{peak:.0f} MiB'} | {against} |")


if __name__ == "__main__":
    main()
