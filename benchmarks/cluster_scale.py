"""Cluster scale: `diagnose_cluster` over a directory of N host graphs (default 1,000 hosts of about
2,000 entities each), against baselines measured in the same run.

Each host graph is benchmarks/synthetic.py's training host under its own name (ids, meta.hosts), with
the same window, and its 8 trainer processes made ranks of one Slurm job spread over all the hosts
(attrs rank, local_rank, world_size, job; member_of edges to job:slurm:4242, as `collect --job` writes
them) with alike CPU and run-queue figures. One host is a straggler (one rank with half the CPU and a
long run-queue wait) and one is odd (a NIC trained at 25 Gb/s where its peers have 100 Gb/s): the
summary must name both.

Measured, each in a fresh process (so that each peak RSS is its own):
  cluster   diagnose_cluster(files) with the default workers: wall, parent peak RSS (ru_maxrss of the
            process), children's peak RSS (RUSAGE_CHILDREN once the pool and its fork server are gone),
            the largest sum of the process tree's RSS (sampled), digest bytes per host, summary tokens;
            then the same over N/10 of the hosts, for the parent's growth with the host count;
  one       host_digest(one file) in-process (load, diagnose, digest: what a worker does per host):
            time x N is the serial estimate; the process's peak RSS;
  merge     the RSS growth of merge_hosts over 50 host graphs, per host: x N is what a parent holding
            every graph would need.

The time figures are ratios to the serial estimate measured in the same run: `one` and `cluster` run
--rounds times (default 3), interleaved (the order reversed every other round), and each round's
cluster wall (and CPU) time is set against that round's serial estimate; the table gives the median
of the per-round ratios and their range, beside the baseline's own time.

    python3 -m benchmarks.cluster_scale [--hosts N] [--entities E] [--keep DIR] [--workers W] [--rounds R] [--json FILE]

Generation runs in worker processes (about 0.75 MB of JSON per 2,000-entity host); --keep DIR keeps
the graphs there and reuses them when DIR already holds the same set.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
JOB = "job:slurm:4242"
RANKS_PER_HOST = 8
MERGED_HOSTS = 50
STAMP = "bench-stamp.txt"  # not *.json: `cluster diagnose DIR` reads every *.json as a host graph
GENERATOR_VERSION = 1


def host_name(index: int) -> str:
    return f"node{index:04d}"


def special_hosts(hosts: int) -> tuple[int, int]:
    """(straggler, odd) host indexes: multiples of 10, so that every 10th host (the scaling check) has them."""
    return hosts * 37 // 1000 * 10, hosts * 73 // 1000 * 10


def host_graph(index: int, hosts: int, entities: int):
    """One host of the job: synthetic.py's host named node<index>, its trainers ranks of JOB."""
    from benchmarks.synthetic import synthetic_graph
    from witty_profiler.topology.vocabulary import E, T
    name = host_name(index)
    g = synthetic_graph(entities, seed=1000 + index, host=name)
    rnd = random.Random(index)
    straggler, odd = special_hosts(hosts)
    world = hosts * RANKS_PER_HOST
    g.entity_of(T.JOB, JOB, {"scheduler": "slurm", "job_id": JOB.rsplit(":", 1)[1], "world_size": world,
                             "master_addr": host_name(0)})
    trainers = sorted((p for p in g.entities(T.PROCESS) if p.attrs.get("role") == "trainer"),
                      key=lambda p: p.attrs["rank"])
    for local, p in enumerate(trainers):
        rank = index * RANKS_PER_HOST + local
        p.attrs.update({"rank": rank, "local_rank": local, "world_size": world, "job": JOB,
                        "master_addr": host_name(0)})
        p.metrics["cpu_util_pct"] = round(rnd.uniform(94, 100), 1)  # ranks of one job work alike
        p.metrics["runqueue_wait_pct"] = round(rnd.uniform(0.5, 3), 2)
        if index == straggler and local == 3:
            p.metrics["cpu_util_pct"], p.metrics["runqueue_wait_pct"] = 48.0, 45.0
        g.edge_of(E.MEMBER_OF, p.id, JOB, {"rank": rank, "local_rank": local})
    for i, nic in enumerate(g.entities(T.NIC)):
        nic.attrs["pci_address"] = f"0000:{0x3b + i:02x}:00.0"  # a physical NIC: a fact peers share
        if index == odd and i == 1:
            nic.attrs["speed_mbps"] = 25_000
    return g


def _generate_chunk(job: tuple[str, list[int], int, int]) -> int:
    from witty_profiler.topology import dump_graph
    directory, indexes, hosts, entities = job
    for i in indexes:
        dump_graph(host_graph(i, hosts, entities), Path(directory) / f"{host_name(i)}.json")
    return len(indexes)


def generate(directory: Path, hosts: int, entities: int, workers: int) -> dict[str, Any]:
    stamp = f"hosts={hosts} entities={entities} generator={GENERATOR_VERSION}\n"
    files = [directory / f"{host_name(i)}.json" for i in range(hosts)]
    if (directory / STAMP).is_file() and (directory / STAMP).read_text() == stamp and all(f.is_file() for f in files):
        return {"reused": True, "seconds": 0.0, **disk_use(files)}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / STAMP).unlink(missing_ok=True)
    start = time.perf_counter()
    chunks = [(str(directory), list(range(i, min(i + 25, hosts))), hosts, entities) for i in range(0, hosts, 25)]
    with ProcessPoolExecutor(workers) as pool:
        done = sum(pool.map(_generate_chunk, chunks))
    assert done == hosts
    (directory / STAMP).write_text(stamp)
    return {"reused": False, "seconds": time.perf_counter() - start, **disk_use(files)}


def disk_use(files: list[Path]) -> dict[str, Any]:
    stats = [f.stat() for f in files]
    return {"files": len(files), "bytes": sum(s.st_size for s in stats),
            "disk_bytes": sum(s.st_blocks * 512 for s in stats)}


# -- measurements, each in a fresh process -------------------------------------------------------
def _status_kib(field: str, pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _machine_cpu() -> tuple[float, float]:
    """(CPU seconds every process of the machine used, seconds stolen by the hypervisor) since boot."""
    with open("/proc/stat") as handle:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, handle.readline().split()[1:9])
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, steal / tick


def _mib(kib: float) -> float:
    return kib / 1024


def _descendants(pid: int) -> list[int]:
    """Children, grandchildren... through /proc/PID/task/TID/children (no scan of every process)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as handle:
                    kids = [int(k) for k in handle.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


class TreeSampler:
    """The largest sum of RSS over this process and its descendants, and each descendant's own peak,
    sampled every `period` seconds by a thread that reads a few /proc files per process."""

    def __init__(self, period: float = 0.2) -> None:
        self.period, self.peak_sum_kib, self.child_peak_kib = period, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "TreeSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            total = _status_kib("VmRSS")
            for child in _descendants(os.getpid()):
                try:
                    total += _status_kib("VmRSS", child)
                    self.child_peak_kib = max(self.child_peak_kib, _status_kib("VmHWM", child))
                except OSError:
                    continue
            self.peak_sum_kib = max(self.peak_sum_kib, total)
            self._stop.wait(self.period)


def phase_cluster(files: list[str], workers: int | None, straggler: str, odd: str) -> dict[str, Any]:
    import multiprocessing.forkserver

    from witty_profiler.converters.tokens import count_tokens
    from witty_profiler.diagnosis.cluster import diagnose_cluster
    from witty_profiler.diagnosis.cluster_report import summary
    from witty_profiler.diagnosis.matcher import diagnose_hosts
    count_tokens("warm up")  # the tokenizer's tables are loaded before the baseline, not during the run
    before_kib = _status_kib("VmRSS")
    machine_before = _machine_cpu()
    with TreeSampler() as sampler:
        start, start_cpu = time.perf_counter(), time.process_time()
        result = diagnose_cluster(files, workers=workers)
        wall, parent_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    parent_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    multiprocessing.forkserver._forkserver._stop()  # reaps the fork server, which reaped the workers
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    machine = [b - a for a, b in zip(machine_before, _machine_cpu())]
    start, start_cpu = time.perf_counter(), time.process_time()
    diagnose_hosts(result.hosts)
    cross_s, cross_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    text = summary(result, "DIR")
    digest_bytes = [len(json.dumps(h)) for h in result.hosts]
    tracemalloc.start()
    copied = json.loads(json.dumps(result.hosts))  # the digests as the parent holds them: Python objects
    digests_in_memory = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del copied
    cross = {f.pattern: f.description for f in result.cross.findings}
    return {
        "hosts": len(result.hosts), "failed": len(result.failed), "workers": workers or os.cpu_count(),
        "wall_s": wall, "cross_host_s": cross_s, "cross_host_cpu_s": cross_cpu,
        "cpu_s": parent_cpu + children.ru_utime + children.ru_stime, "parent_cpu_s": parent_cpu,
        "machine_busy_cpu_s": machine[0], "machine_steal_s": machine[1],
        "parent_before_mib": _mib(before_kib), "parent_peak_mib": _mib(parent_kib),
        "children_peak_mib": _mib(children.ru_maxrss), "children_peak_sampled_mib": _mib(sampler.child_peak_kib),
        "digests_in_memory_mib": digests_in_memory / 2 ** 20,
        "tree_peak_sum_mib": _mib(sampler.peak_sum_kib),
        "digest_bytes_mean": statistics.mean(digest_bytes), "digest_bytes_max": max(digest_bytes),
        "digest_bytes_total": sum(digest_bytes),
        "summary_tokens": count_tokens(text), "summary": text,
        "cross_findings": sorted(cross),
        "straggler_found": straggler in cross.get("control.straggler_host", ""),
        "odd_found": odd in cross.get("network.odd_host", ""),
        "straggler_in_summary": straggler in text, "odd_in_summary": odd in text,
        "hosts_with_findings": sum(1 for h in result.hosts if any(h["counts"].values())),
    }


def phase_one(files: list[str]) -> dict[str, Any]:
    from witty_profiler.diagnosis.cluster import host_digest
    from witty_profiler.topology import load_graph
    from witty_profiler.diagnosis.matcher import diagnose
    before_kib = _status_kib("VmRSS")
    start = time.perf_counter()
    host_digest(files[0])  # the first one pays the lazy imports, as each worker does once
    first = time.perf_counter() - start
    times, cpus, loads, diagnoses = [], [], [], []
    for path in files[1:]:
        start, start_cpu = time.perf_counter(), time.process_time()
        host_digest(path)
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)
        start = time.perf_counter()
        graph = load_graph(path)
        loads.append(time.perf_counter() - start)
        start = time.perf_counter()
        diagnose(graph)
        diagnoses.append(time.perf_counter() - start)
        del graph
    return {"first_s": first, "host_s": statistics.median(times), "host_cpu_s": statistics.median(cpus),
            "load_s": statistics.median(loads),
            "diagnose_s": statistics.median(diagnoses), "runs": len(times),
            "before_mib": _mib(before_kib), "peak_mib": _mib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)}


def phase_merge(files: list[str]) -> dict[str, Any]:
    import gc

    from witty_profiler.topology import load_graph
    from witty_profiler.topology.hosts import merge_hosts
    load_graph(files[-1])  # imports and first-use tables before the baseline
    gc.collect()
    before_kib = _status_kib("VmRSS")
    start = time.perf_counter()
    merged = merge_hosts((f, load_graph(f)) for f in files)
    seconds = time.perf_counter() - start
    gc.collect()
    after_kib = _status_kib("VmRSS")
    return {"hosts": len(files), "entities": merged.entity_count(), "edges": merged.edge_count(),
            "seconds": seconds, "before_mib": _mib(before_kib), "after_mib": _mib(after_kib),
            "peak_mib": _mib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss),
            "per_host_mib": _mib(after_kib - before_kib) / len(files)}


def run_phase(name: str, files: list[Path], extra: list[str] = ()) -> dict[str, Any]:
    """A phase in a fresh interpreter: its peak RSS is its own. Files go through a list file."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write("\n".join(map(str, files)))
    try:
        done = subprocess.run([sys.executable, "-m", "benchmarks.cluster_scale", "--phase", name,
                               "--files", handle.name, *extra], cwd=ROOT, capture_output=True, text=True)
    finally:
        os.unlink(handle.name)
    if done.returncode != 0:
        raise SystemExit(f"phase {name} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the run -----------------------------------------------------------------------------------------
def machine_line() -> str:
    from benchmarks.timing import machine
    return machine()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--entities", type=int, default=2000, help="entities per host graph (about)")
    ap.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it (reused when it holds the same set)")
    ap.add_argument("--workers", type=int, help="diagnose_cluster's workers (default: its own, one per CPU)")
    ap.add_argument("--json", metavar="FILE", default="cluster-scale.json", help="figures (default cluster-scale.json)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the one-host baseline and the cluster")
    ap.add_argument("--phase", choices=["cluster", "one", "merge"], help=argparse.SUPPRESS)
    ap.add_argument("--files", help=argparse.SUPPRESS)
    ap.add_argument("--straggler", default="", help=argparse.SUPPRESS)
    ap.add_argument("--odd", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        files = Path(args.files).read_text().split("\n")
        found = {"cluster": lambda: phase_cluster(files, args.workers, args.straggler, args.odd),
                 "one": lambda: phase_one(files), "merge": lambda: phase_merge(files)}[args.phase]()
        print(json.dumps(found))
        return 0
    if args.hosts < 40:
        ap.error("--hosts: at least 40 (the scaling check diagnoses every 10th host, through the pool)")
    cpus = os.cpu_count() or 1
    directory = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="cluster-scale-"))
    straggler_i, odd_i = special_hosts(args.hosts)
    names = ["--straggler", host_name(straggler_i), "--odd", host_name(odd_i)]
    workers = ["--workers", str(args.workers)] if args.workers else []
    figures: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": f"{platform.machine()}, {cpus} CPUs, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2 ** 30:.0f} GiB, Python {platform.python_version()}",
        "machine_line": machine_line(),
        "load_average_start": os.getloadavg(), "cpus": cpus, "hosts": args.hosts, "entities": args.entities,
        "straggler": host_name(straggler_i), "odd": host_name(odd_i)}
    try:
        print(f"generating {args.hosts} host graphs of ~{args.entities} entities into {directory} ...", flush=True)
        figures["generate"] = generate(directory, args.hosts, args.entities, cpus)
        files = [directory / f"{host_name(i)}.json" for i in range(args.hosts)]
        print(f"  {figures['generate']}", flush=True)
        figures["merge"] = run_phase("merge", files[:MERGED_HOSTS])
        figures["cluster_tenth"] = run_phase("cluster", files[::10], names + workers)
        figures["rounds"] = []
        for r in range(args.rounds):
            done = {}
            for phase in ("one", "cluster") if r % 2 == 0 else ("cluster", "one"):
                print(f"  round {r + 1}: {phase}", flush=True)
                # one: 50 hosts timed, each round (this VM's speed varies by +-30 % minute to minute)
                done[phase] = run_phase("one", files[:51]) if phase == "one" else run_phase("cluster", files,
                                                                                            names + workers)
            figures["rounds"].append(done)
        figures["one"], figures["cluster"] = figures["rounds"][0]["one"], figures["rounds"][0]["cluster"]
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    figures["load_average_end"] = os.getloadavg()
    c, one, merge = figures["cluster"], figures["one"], figures["merge"]
    n = args.hosts
    serial = one["host_s"] * n
    all_graphs = merge["per_host_mib"] * n
    from benchmarks.timing import Ratio
    rounds = figures["rounds"]
    wall = Ratio([r["cluster"]["wall_s"] for r in rounds], [r["one"]["host_s"] * n for r in rounds])
    cpu = Ratio([r["cluster"]["cpu_s"] for r in rounds], [r["one"]["host_cpu_s"] * n for r in rounds])
    figures["ratios"] = {
        "wall_vs_serial_estimate": c["wall_s"] / serial,
        "cpu_vs_serial_cpu_estimate": c["cpu_s"] / (one["host_cpu_s"] * n),
        "wall_vs_serial_estimate_rounds": wall.text(), "serial_estimate_rounds": wall.base_text(1, "s"),
        "cluster_wall_rounds": wall.time_text(1, "s"),
        "cpu_vs_serial_cpu_estimate_rounds": cpu.text(), "serial_cpu_estimate_rounds": cpu.base_text(1, "s"),
        "parent_peak_vs_all_graphs_estimate": c["parent_peak_mib"] / all_graphs,
        "parent_peak_vs_one_host_in_process": c["parent_peak_mib"] / one["peak_mib"],
        "parent_growth_n_vs_tenth": (c["parent_peak_mib"] - c["parent_before_mib"])
        / max(figures["cluster_tenth"]["parent_peak_mib"] - figures["cluster_tenth"]["parent_before_mib"], 1e-9),
    }
    Path(args.json).write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    print(figures["machine_line"], f"; load average at the end: {' '.join(f'{x:.2f}' for x in figures['load_average_end'])}")
    print(table(figures))
    print(f"\nsummary for {n} hosts ({c['summary_tokens']} tokens):\n{c['summary']}")
    print(f"figures in {args.json}")
    ok = c["straggler_found"] and c["odd_found"] and c["straggler_in_summary"] and c["odd_in_summary"] \
        and c["summary_tokens"] < 500 and c["failed"] == 0
    return 0 if ok else 1


def table(f: dict[str, Any]) -> str:
    c, t, one, merge, gen, r = f["cluster"], f["cluster_tenth"], f["one"], f["merge"], f["generate"], f["ratios"]
    n = f["hosts"]
    rows = [
        ("generate (worker processes)", f"{gen['seconds']:.1f} s{' (reused)' if gen['reused'] else ''}; "
         f"{gen['bytes'] / 1e6:,.0f} MB of JSON, {gen['disk_bytes'] / 2 ** 20:,.0f} MiB on disk"),
        ("one host in-process: load + diagnose + digest (baseline)",
         f"{one['host_s'] * 1000:.0f} ms (load {one['load_s'] * 1000:.0f}, diagnose {one['diagnose_s'] * 1000:.0f}); "
         f"peak RSS {one['peak_mib']:.0f} MiB"),
        (f"serial estimate: {n} x one host, {len(f['rounds'])} rounds", f"{r['serial_estimate_rounds']} "
         f"({r['serial_cpu_estimate_rounds']} of CPU)"),
        (f"cluster diagnose, {c['hosts']} hosts, {c['workers']} workers", f"{r['cluster_wall_rounds']} wall: "
         f"{r['wall_vs_serial_estimate_rounds']} the serial estimate; CPU "
         f"{r['cpu_vs_serial_cpu_estimate_rounds']} (first round: parent {c['parent_cpu_s']:.1f} s)"),
        ("  CPU of the whole machine meanwhile (other work: the rest)",
         f"{c['machine_busy_cpu_s']:.1f} s of {c['wall_s'] * f['cpus']:.1f} s, other work "
         f"{c['machine_busy_cpu_s'] - c['cpu_s']:.1f} s; stolen {c['machine_steal_s']:.1f} s"),
        ("  of which the cross-host patterns (timed again alone)", f"{c['cross_host_s']:.2f} s "
                                                                  f"({c['cross_host_cpu_s']:.2f} s of CPU)"),
        ("  parent peak RSS", f"{c['parent_peak_mib']:.0f} MiB ({c['parent_before_mib']:.0f} MiB before the call)"),
        ("  children peak RSS (RUSAGE_CHILDREN; sampled)", f"{c['children_peak_mib']:.0f} MiB; "
                                                           f"{c['children_peak_sampled_mib']:.0f} MiB"),
        ("  whole tree, largest sum of RSS (sampled)", f"{c['tree_peak_sum_mib']:.0f} MiB"),
        (f"merge_hosts of {merge['hosts']} graphs in-process", f"{merge['per_host_mib']:.1f} MiB per host "
         f"({merge['entities']:,} entities, {merge['after_mib'] - merge['before_mib']:.0f} MiB, {merge['seconds']:.1f} s)"),
        (f"all {n} graphs in memory (estimate)", f"{merge['per_host_mib'] * n:,.0f} MiB; parent peak is "
                                                 f"{r['parent_peak_vs_all_graphs_estimate']:.3f}x that"),
        ("digest per host", f"{c['digest_bytes_mean']:,.0f} bytes (max {c['digest_bytes_max']:,}), "
                            f"{c['digest_bytes_total'] / 2 ** 20:.1f} MiB of JSON for {c['hosts']} hosts, "
                            f"{c['digests_in_memory_mib']:.1f} MiB as Python objects"),
        (f"parent at {t['hosts']} hosts", f"peak {t['parent_peak_mib']:.0f} MiB ({t['parent_before_mib']:.0f} before), "
         f"{t['wall_s']:.1f} s; growth at {n} / at {t['hosts']}: {r['parent_growth_n_vs_tenth']:.1f}x"),
        ("summary", f"{c['summary_tokens']} tokens; straggler {f['straggler']} "
                    f"{'named' if c['straggler_in_summary'] else 'NOT named'}, odd host {f['odd']} "
                    f"{'named' if c['odd_in_summary'] else 'NOT named'}"),
        ("cross-host findings", ", ".join(c["cross_findings"]) or "none"),
    ]
    width = max(len(a) for a, _ in rows)
    return "\n".join(f"{a.ljust(width)}  {b}" for a, b in rows)


if __name__ == "__main__":
    sys.exit(main())
