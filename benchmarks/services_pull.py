"""What `cluster collect --services` costs: N windows pulled from N services into a cluster directory.

    python3 -m benchmarks.services_pull [--services 10,100] [--entities 2000] [--parallel 32] [--rounds 3] [--json]

Each "service" is a path prefix (http://127.0.0.1:PORT/hNNN) of one HTTP server in a separate process that
answers as `witty-profiler serve` does: GET /api/v1/graphs (one window) and GET /api/v1/graphs/{id} (the
window's graph, benchmarks/synthetic.py's training host under the name hNNN). The server is Python's
http.server, not the service's uvicorn: what is measured is the client, `witty-profiler cluster collect
--services-file F` run as a command (its start-up included), timed from outside, with its CPU time and peak
RSS from wait4. The baseline, measured in the same run: the same command with one service (the fixed costs),
and `load_graph` of one host's file in-process (the validation each pulled window goes through). Each round
runs every count and the baseline, the order reversed every other round, with load_graph timed in the same
round; a figure is the median of the per-round ratios with their range: N services' wall time and peak RSS
against the one-service command's, and the CPU time each window adds beyond the fixed costs against
load_graph's ((CPU of N - CPU of 1) / (N - 1) / load_graph).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing import Process
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import Ratio, load, machine  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
WINDOW = "w-20261205T100000Z"


def serve(folder: str, port_file: str) -> None:
    """Serve DIR/hNNN.json as the windows of services /hNNN until killed."""
    graphs = {p.stem: p.read_bytes() for p in Path(folder).glob("h*.json")}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            name, _, rest = self.path.lstrip("/").partition("/")
            if name in graphs and rest == "api/v1/graphs":
                body = json.dumps({"windows": [{"window_id": WINDOW, "started_at": "2026-12-05T10:00:00Z",
                                                "duration_s": 10.0, "hosts": [name]}]}).encode()
            elif name in graphs and rest == f"api/v1/graphs/{WINDOW}":
                body = graphs[name]
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    Path(port_file).write_text(str(server.server_address[1]))
    server.serve_forever()


def run_cli(args: list[str]) -> dict:
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "witty_profiler", *args], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if code != 0:
        raise SystemExit(f"cluster collect exited {code}: {err}")
    return {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--services", default="10,100", help="numbers of services, comma-separated")
    parser.add_argument("--entities", type=int, default=2000, help="entities per host graph")
    parser.add_argument("--parallel", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every count and the baseline")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    counts = [int(n) for n in args.services.split(",") if int(n) > 1]
    if not counts:
        parser.error("--services: at least one count above 1 (one service is the baseline, always run)")
    from benchmarks.synthetic import synthetic_graph
    from witty_profiler.topology import dumps_graph, load_graph
    started = machine()  # the date and the load before the run
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        graphs = Path(tmp) / "graphs"
        graphs.mkdir()
        made = time.perf_counter()
        for i in range(max(counts)):
            (graphs / f"h{i:03d}.json").write_text(dumps_graph(synthetic_graph(args.entities, host=f"h{i:03d}")))
        sizes = [p.stat().st_size for p in graphs.iterdir()]
        made = time.perf_counter() - made
        port_file = Path(tmp) / "port"
        server = Process(target=serve, args=(str(graphs), str(port_file)), daemon=True)
        server.start()
        loads: list[float] = []
        try:
            while not port_file.exists() or not port_file.read_text():
                time.sleep(0.05)
            base = f"http://127.0.0.1:{port_file.read_text()}"
            for r in range(args.rounds):
                round_loads = []
                for _ in range(5):
                    t = time.perf_counter()
                    load_graph(graphs / "h000.json")
                    round_loads.append(time.perf_counter() - t)
                loads.append(statistics.median(round_loads))
                for n in [1, *counts] if r % 2 == 0 else [*reversed(counts), 1]:
                    listing = Path(tmp) / f"services-{n}.txt"
                    listing.write_text("".join(f"{base}/h{i:03d}\n" for i in range(n)))
                    out = Path(tmp) / f"out-{n}-{r}"
                    figures = run_cli(["cluster", "collect", "--services-file", str(listing), "-o", str(out), "-q",
                                       "--parallel", str(args.parallel)])
                    assert len(list(out.glob("h*.json"))) == n
                    rows.append({"round": r, "services": n, **figures,
                                 "mb": round(sum(sizes[:n]) / 1e6, 1) if n > 1 else round(sizes[0] / 1e6, 1)})
        finally:
            server.terminate()
            server.join()
    result = {"machine": started, "entities": args.entities, "graph_mb": round(statistics.mean(sizes) / 1e6, 2),
              "generated_s": round(made, 1), "load_graph_ms": [round(x * 1000, 1) for x in loads],
              "parallel": args.parallel, "runs": rows, "load_at_the_end": load()}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    by = {(r["round"], r["services"]): r for r in rows}
    one = [by[r, 1] for r in range(args.rounds)]
    wall1 = Ratio([o["wall_s"] for o in one], [o["wall_s"] for o in one])
    rss1 = Ratio([o["peak_rss_mib"] for o in one], [o["peak_rss_mib"] for o in one])
    cpu1 = Ratio([o["cpu_s"] for o in one], loads)
    print(f"{result['machine']}; {args.entities} entities per host, {result['graph_mb']} MB of JSON each; "
          f"--parallel {args.parallel}; {args.rounds} interleaved rounds; median (min-max) of the per-round ratios")
    print(f"baseline: one service {wall1.base_text(1, 's', 2)} wall, {cpu1.time_text(1, 's', 2)} CPU, peak RSS "
          f"{rss1.base_text(1, 'MiB', 0)}; load_graph of one window {cpu1.base_text(digits=1)}")
    print()
    print("| services | MB pulled | wall / one service's | CPU per added window / load_graph | peak RSS / one service's |")
    print("|---:|---:|---|---|---|")
    for n in counts:
        mine = [by[r, n] for r in range(args.rounds)]
        wall = Ratio([m["wall_s"] for m in mine], [o["wall_s"] for o in one])
        rss = Ratio([m["peak_rss_mib"] for m in mine], [o["peak_rss_mib"] for o in one])
        per_window = Ratio([(m["cpu_s"] - o["cpu_s"]) / (n - 1) for m, o in zip(mine, one)], loads)
        print(f"| {n:,} | {mine[0]['mb']:,} | {wall.text(rounds=False)} | {per_window.text(rounds=False)} | "
              f"{rss.text(rounds=False)} |")
    print(f"load average at the end: {result['load_at_the_end']}")

if __name__ == "__main__":
    main()
