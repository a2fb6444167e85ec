"""Reading 500 hosts x 1 h at a 15 s step from a real Prometheus: wall time, peak memory, requests and
bytes of the Prometheus source, against reading the same answers whole, measured in the same run.

Writes an OpenMetrics file of HOSTS node_exporter-like hosts over one hour at 15 s (the series the source
reads, with node_exporter's and dcgm-exporter's names and labels: per-CPU node_cpu_seconds_total in 8
modes for --cpus CPUs, memory, vmstat, PSI, 4 disks, 4 NICs (counters and state), TCP, load, node_uname_info; 8 GPUs of
DCGM_FI_* fields on every 4th host), backfills it with `promtool tsdb create-blocks-from openmetrics`
into a temporary TSDB, deletes the file and starts Debian's Prometheus on that TSDB on a loopback port.
Then, for each host count (racks of 50 hosts selected by --match), in a fresh process each so that the
peak RSS (ru_maxrss) is the reading's own, Python included:
  streamed   collect_window, what `collect --prometheus` runs: answers read as a stream, batches by budget
  whole      the same source and batches, each answer read whole (urllib, json.loads): the old reading
  whole-50   the same, in batches of 50 hosts whatever their series (the old fixed batches)
  raw        only the streamed run's queries, each fetched and json.loads'ed whole, nothing folded
Everything lives under one temporary directory, removed at the end; or under --data DIR, kept, and a
later run with the same --data, host count and --cpus reuses its TSDB (--backfill-only: stop there).
The variants of a host count run --rounds times (default 1), interleaved, the order reversed every other
round; after each host count one line gives every variant's wall time and peak RSS as the median of its
per-round ratios to the raw variant's (the baseline; the first variant's otherwise), with their range.
Usage: python benchmarks/prometheus_scale.py [--hosts 50,100,500] [--cpus 64] [--budgets 10000] [--rounds 1] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PROMETHEUS, PROMTOOL = "/usr/bin/prometheus", "/usr/bin/promtool"
STEP = 15

MODES = {"user": 0.30, "nice": 0.01, "system": 0.08, "idle": 0.55, "iowait": 0.03, "irq": 0.005,
         "softirq": 0.015, "steal": 0.01}  # seconds per second of each mode
GPU_SHARE = 4  # every 4th host has GPUs
GPUS = 8
RACK = 50  # hosts of a rack label: the smaller runs select racks with --match


@dataclass
class Shape:
    hosts: int
    cpus: int = 64
    disks: int = 4
    nics: int = 4

    def series_per_host(self, gpu: bool) -> int:
        node = self.cpus * len(MODES) + 4 + 3 + 5 + 7 * self.disks + 13 * self.nics + 2 + 2
        return node + (GPUS * 12 if gpu else 0)


def _series(shape: Shape, h: int, rng: random.Random) -> list[tuple[str, float, float, bool]]:
    """(name{labels}, first value, growth per second, counter?) of one host."""
    host = f"node{h:04d}"
    node = f'instance="{host}:9100",job="node",rack="r{h // RACK:02d}"'
    out: list[tuple[str, float, float, bool]] = [
        (f'node_uname_info{{{node},nodename="{host}",release="6.1.0-28-amd64",sysname="Linux"}}', 1, 0, False),
        (f"node_load1{{{node}}}", shape.cpus * 0.4, shape.cpus * 0.1, False)]
    for cpu in range(shape.cpus):
        for mode, share in MODES.items():
            out.append((f'node_cpu_seconds_total{{cpu="{cpu}",{node},mode="{mode}"}}', 1e5 * share, share, True))
    for name, value in (("MemTotal", 5.4e11), ("MemAvailable", 3.1e11), ("SwapTotal", 8.6e9), ("SwapFree", 8.5e9)):
        out.append((f"node_memory_{name}_bytes{{{node}}}", value, value * 0.01, False))
    for name, rate in (("pgmajfault", 3.0), ("pswpin", 0.2), ("pswpout", 0.4)):
        out.append((f"node_vmstat_{name}{{{node}}}", 1e6, rate, True))
    for name, rate in (("cpu_waiting", 0.05), ("io_waiting", 0.02), ("io_stalled", 0.01),
                       ("memory_waiting", 0.001), ("memory_stalled", 0.0005)):
        out.append((f"node_pressure_{name}_seconds_total{{{node}}}", 1e4, rate, True))
    for d in range(shape.disks):
        dev = f'device="nvme{d}n1"'
        for name, rate in (("read_bytes", 2e8), ("written_bytes", 9e7), ("reads_completed", 1500),
                           ("writes_completed", 700), ("io_time_seconds", 0.4), ("read_time_seconds", 0.3),
                           ("write_time_seconds", 0.5)):
            out.append((f"node_disk_{name}_total{{{dev},{node}}}", 1e9, rate, True))
    for n in range(shape.nics):
        dev = f'device="{"eth" if n < 2 else "ib"}{n}"'
        for name, rate in (("receive_bytes", 1.2e9), ("transmit_bytes", 9e8), ("receive_packets", 9e5),
                           ("transmit_packets", 7e5), ("receive_drop", 0.5), ("transmit_drop", 0.1),
                           ("receive_errs", 0.01), ("transmit_errs", 0.0)):
            out.append((f"node_network_{name}_total{{{dev},{node}}}", 1e12, rate, True))
        out.append((f"node_network_speed_bytes{{{dev},{node}}}", 1.25e10 if n < 2 else 5e10, 0, False))
        out.append((f"node_network_mtu_bytes{{{dev},{node}}}", 1500 if n < 2 else 4092, 0, False))
        out.append((f"node_network_address_assign_type{{{dev},{node}}}", 0, 0, False))
        out.append((f"node_network_protocol_type{{{dev},{node}}}", 1 if n < 2 else 32, 0, False))
        out.append((f'node_network_info{{address="02:42:ac:11:{h % 256:02x}:{n:02x}",broadcast="ff:ff:ff:ff:ff:ff",'
                    f'{dev},duplex="full",ifalias="",{node},operstate="up"}}', 1, 0, False))
    for name, rate in (("OutSegs", 2e5), ("RetransSegs", 20)):
        out.append((f"node_netstat_Tcp_{name}{{{node}}}", 1e10, rate, True))
    if h % GPU_SHARE == 0:
        dcgm = f'instance="{host}:9400",job="dcgm",Hostname="{host}",modelName="NVIDIA H100 80GB HBM3",' \
               'DCGM_FI_DRIVER_VERSION="535.129.03"'
        for g in range(GPUS):
            labels = f'gpu="{g}",UUID="GPU-{h:08x}-{g:04x}-4000-8000-{rng.getrandbits(48):012x}",' \
                     f'pci_bus_id="00000000:{0x18 + 0x10 * g:02X}:00.0",device="nvidia{g}",{dcgm}'
            for name, value, swing in (("GPU_UTIL", 90, 8), ("MEM_COPY_UTIL", 40, 10), ("SM_CLOCK", 1980, 30),
                                       ("MEM_CLOCK", 2619, 0), ("POWER_USAGE", 610, 40), ("GPU_TEMP", 62, 3),
                                       ("FB_USED", 71000, 500), ("FB_FREE", 10000, 500), ("XID_ERRORS", 0, 0),
                                       ("CLOCK_THROTTLE_REASONS", 0, 0)):
                out.append((f"DCGM_FI_DEV_{name}{{{labels}}}", value, swing, False))
            for name, rate in (("PCIE_TX_BYTES", 2e9), ("PCIE_RX_BYTES", 3e9)):
                out.append((f"DCGM_FI_PROF_{name}{{{labels}}}", rate, rate * 0.1, False))
    return out


def write(out: IO[str], shape: Shape, start: int, end: int, step: int, seed: int = 1) -> int:
    """Writes the file; returns the number of samples."""
    rng = random.Random(seed)
    series = [s for h in range(shape.hosts) for s in _series(shape, h, rng)]
    names = [s[0] + " " for s in series]
    values = [float(s[1]) for s in series]
    growth = [(s[2], s[3]) for s in series]
    samples = 0
    for t in range(start, end + 1, step):
        lines = []
        for i, (rate, counter) in enumerate(growth):
            if counter:
                values[i] += rate * step * (0.5 + rng.random())
                v = values[i]
            else:
                v = values[i] + rate * (rng.random() - 0.5) * 2 if rate else values[i]
            lines.append(f"{names[i]}{v:.12g} {t}\n")
        out.write("".join(lines))
        samples += len(lines)
    out.write("# EOF\n")
    return samples



CHILD = """
import json, math, resource, sys, time, urllib.parse, urllib.request
from witty_profiler.sources import promapi, prometheus
url, start, end, match, variant, budget, queries = sys.argv[1:8]
start, end, budget = float(start), float(end), int(budget)

class WholeBody(promapi.PrometheusAPI):
    def range_series(self, query, start, end, step):
        params = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                         "step": f"{step:g}"})
        t = time.perf_counter()
        with urllib.request.urlopen(f"{self.base}/api/v1/query_range?{params}", timeout=600) as response:
            body = response.read()
        doc = json.loads(body)
        self.stats.requests += 1
        self.stats.bytes += len(body)
        self.stats.seconds += time.perf_counter() - t
        self.stats.queries.append(query)
        for item in doc["data"]["result"]:
            values = [(float(t), float(v)) for t, v in item["values"]]
            values = [(t, v) for t, v in values if not math.isnan(v)]
            self.stats.series += 1
            self.stats.points += len(values)
            yield item["metric"], values

began = time.perf_counter()
out = {}
if variant == "raw":
    size = 0
    for query in json.load(open(queries)):
        step = end - start if query.startswith("count by (instance) ({__name__") else 15  # the budget's count
        params = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                         "step": f"{step:g}"})
        with urllib.request.urlopen(f"{url}/api/v1/query_range?{params}", timeout=600) as response:
            body = response.read()
        size += len(body)
        doc = json.loads(body)
        del body, doc
    out = {"bytes": size}
else:
    prometheus.SERIES_BUDGET = budget if variant != "whole-50" else 10 ** 9  # whole-50: 50 hosts a batch
    api = (WholeBody if variant.startswith("whole") else promapi.PrometheusAPI)(url, timeout_s=600)
    most = 50 if variant == "whole-50" else prometheus.BATCH_HOSTS
    source = prometheus.NodeSource(api, start, end, step=15.0, match=match, batch_hosts=most)
    g = source.build()
    s = api.stats
    if variant == "streamed":
        json.dump(s.queries, open(queries, "w"))
    out = {"requests": s.requests, "batches": len(source.batches), "largest_batch": max(source.batches),
           "series": s.series, "points": s.points, "bytes": s.bytes, "http_s": round(s.seconds, 2),
           "entities": g.entity_count(), "status": g.meta.collectors["prometheus.node"].status}
out.update(wall_s=round(time.perf_counter() - began, 2),
           peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))
print(json.dumps(out))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backfill(work: Path, shape: Shape, start: int) -> dict:
    data = work / "samples.om"
    began = time.perf_counter()
    with open(data, "w") as f:
        samples = write(f, shape, start, start + 3600, STEP)
    written = time.perf_counter() - began
    size = data.stat().st_size
    began = time.perf_counter()
    subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "-q", str(data), str(work / "tsdb")],
                   check=True, stdout=subprocess.DEVNULL)
    data.unlink()
    return {"samples": samples, "file_bytes": size, "write_s": round(written, 1),
            "backfill_s": round(time.perf_counter() - began, 1)}


def serve(work: Path) -> tuple[subprocess.Popen, str]:
    config = work / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n")  # no scrape jobs: the backfilled blocks only
    port = _free_port()
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={work / 'tsdb'}",
                             "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}",
                             "--query.max-samples=50000000", "--query.timeout=10m"],
                            stdout=subprocess.DEVNULL, stderr=open(work / "prometheus.log", "w"))
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    sys.exit(f"Prometheus did not get ready: see {work / 'prometheus.log'}")


def measure(url: str, start: int, hosts: int, variant: str, budget: int, queries: Path) -> dict:
    racks = "|".join(f"r{r:02d}" for r in range((hosts + RACK - 1) // RACK))
    match = f'{{job="node", rack=~"{racks}"}}'
    done = subprocess.run([sys.executable, "-c", CHILD, url, str(start), str(start + 3600), match, variant, str(budget),
                           str(queries)], capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        return {"hosts": hosts, "variant": variant, "error": done.stderr.strip().splitlines()[-1:]}
    return {"hosts": hosts, "variant": variant, "budget": budget, **json.loads(done.stdout)}


def ratios(rows: dict[tuple[str, int], list[dict]]) -> dict[str, str]:
    """Each variant's wall time and peak RSS against the raw variant's (else the first's), round by round."""
    from benchmarks.timing import Ratio
    base = next((r for (v, _), r in rows.items() if v == "raw"), next(iter(rows.values())))
    out = {}
    if any("error" in r for r in base):
        return {"ratios": "the baseline failed in a round"}
    for (variant, budget), mine in rows.items():
        if any("error" in r for r in mine):
            continue
        wall = Ratio([r["wall_s"] for r in mine], [r["wall_s"] for r in base])
        rss = Ratio([r["peak_rss_mib"] for r in mine], [r["peak_rss_mib"] for r in base])
        out[f"{variant}/{budget}"] = (f"wall {wall.time_text(1, 's', 1)}, {wall.text()}; peak RSS "
                                      f"{rss.time_text(1, 'MiB', 0)}, {rss.text()}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="50,100,500")
    parser.add_argument("--cpus", type=int, default=64)
    parser.add_argument("--budgets", default="10000", help="series budgets of the streamed runs")
    parser.add_argument("--variants", default="streamed,whole,whole-50,raw")
    parser.add_argument("--workdir", default=tempfile.gettempdir())
    parser.add_argument("--data", help="a directory that keeps the TSDB between runs")
    parser.add_argument("--backfill-only", action="store_true")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds of the variants")
    args = parser.parse_args()
    counts = [int(h) for h in args.hosts.split(",")]
    budgets = [int(b) for b in args.budgets.split(",")]
    shape = Shape(max(counts), args.cpus)
    per_host = (shape.series_per_host(False) * (GPU_SHARE - 1) + shape.series_per_host(True)) / GPU_SHARE
    need = int(shape.hosts * per_host * (3600 / STEP + 1) * 110)  # bytes of the OpenMetrics file, about
    free = shutil.disk_usage(args.workdir).free
    if free < 1.5 * need:
        sys.exit(f"{args.workdir} has {free / 2**30:.1f} GiB free; the data file needs about {need / 2**30:.1f} GiB")
    from benchmarks.timing import machine
    print(f"# {machine()}; {shape.hosts} hosts x {args.cpus} CPUs, about {per_host:.0f} series a host", file=sys.stderr)
    work = Path(args.data) if args.data else Path(tempfile.mkdtemp(prefix="prom-scale-", dir=args.workdir))
    kept = work / "data.json"
    proc = None
    try:
        made = json.loads(kept.read_text()) if kept.exists() else {}
        if made.get("hosts") != shape.hosts or made.get("cpus") != args.cpus:
            shutil.rmtree(work / "tsdb", ignore_errors=True)
            work.mkdir(parents=True, exist_ok=True)
            start = int(time.time()) // 3600 * 3600 - 3 * 3600
            made = {"hosts": shape.hosts, "cpus": args.cpus, "start": start, **backfill(work, shape, start)}
            kept.write_text(json.dumps(made))
        print(json.dumps({"data": made}), flush=True)
        if args.backfill_only:
            return
        start = made["start"]
        proc, url = serve(work)
        runs = [(v, b) for v in args.variants.split(",") for b in (budgets if v == "streamed" else budgets[:1])]
        for hosts in counts:
            rows: dict[tuple[str, int], list[dict]] = {run: [] for run in runs}
            for r in range(args.rounds):
                # the raw variant replays the queries the streamed one wrote: streamed comes first in round 0
                order = runs if r % 2 == 0 else list(reversed(runs))
                for variant, budget in order:
                    row = measure(url, start, hosts, variant, budget, work / f"queries-{hosts}.json")
                    rows[variant, budget].append(row)
                    print(json.dumps({"round": r, **row}), flush=True)
            print(json.dumps({"hosts": hosts, **ratios(rows)}), flush=True)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        from benchmarks.timing import load
        print(f"# load average at the end: {load()}", file=sys.stderr)
        if not args.data:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
