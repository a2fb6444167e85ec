"""The service over a long run: its CPU, memory and disk while it monitors a busy host.

Starts a helper process holding THREADS sleeping Python threads (the host then has that many more
threads for the collectors to read), then the service (`witty-profiler serve`, its default window and
interval unless given) on a free loopback port with its own state directory. With --idle-minutes the
service first runs stopped (serving, not collecting): the baseline of the same process. Then it
collects for --minutes. Every --sample seconds it records the service's CPU time (user + system, from
/proc/PID/stat), its RSS and the size of its state directory, and asks GET /api/v1/status; each sample
is a JSON line in --out as it is taken, so a run cut short keeps what it measured. At the end: SIGTERM,
the exit code, and a JSON summary on stdout:

    cpu_pct_of_one_core   CPU seconds / wall seconds while collecting, x100 (goal: < 1)
    idle_cpu_pct          the same while stopped (the baseline), and the ratio; with --rounds N, the idle
                          and collecting phases alternate N times (POST /api/v1/stop between rounds; the
                          window it ends is waited for and counted in its collecting phase) and the ratio
                          is the median of the per-round ratios with their range
    rss_max_mib, rss_drift_mib   the largest RSS; the mean of the last quarter minus the second quarter's
    disk_max_mib vs cap_mib      the state directory's largest size against ring_max_mb + kept_max_mb

Usage: python3 benchmarks/service_soak.py [--minutes 60] [--idle-minutes 5] [--rounds 1] [--threads 2000] [--sample 60]
       [--window S] [--interval S] [--scope-holder] [--out /tmp/soak.jsonl] [-- more serve options]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")
HOLDER = """
import sys, threading
threading.stack_size(64 * 1024)
stop = threading.Event()
for _ in range(int(sys.argv[1])):
    threading.Thread(target=stop.wait, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def dir_mib(path: Path) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total / (1024 * 1024)


def api(port: int, path: str, method: str = "GET") -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def wait_up(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"the service exited with {proc.returncode} before it answered")
        try:
            api(port, "/api/v1/status")
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("the service did not answer within a minute")


def phase(name: str, seconds: float, every: float, pid: int, port: int, state: Path, out) -> list[dict]:
    samples, t0, c0 = [], time.monotonic(), cpu_s(pid)
    last_t, last_c = t0, c0
    while time.monotonic() - t0 < seconds:
        time.sleep(min(every, max(0.0, seconds - (time.monotonic() - t0))))
        now, cpu = time.monotonic(), cpu_s(pid)
        status = api(port, "/api/v1/status")
        sample = {"phase": name, "t_s": round(now - t0, 1), "cpu_s": round(cpu - c0, 3),
                  "interval_cpu_pct": round(100 * (cpu - last_c) / (now - last_t), 3), "rss_mib": round(rss_mib(pid), 1),
                  "disk_mib": round(dir_mib(state), 2), "windows_done": status["monitor"]["windows_done"],
                  "windows_failed": status["monitor"]["windows_failed"], "ring": status["storage"]["ring"]["windows"],
                  "kept": status["storage"]["kept"]["windows"], "evicted": status["evicted_windows"],
                  "loadavg": os.getloadavg()[0]}
        last_t, last_c = now, cpu
        samples.append(sample)
        out.write(json.dumps(sample) + "\n")
        out.flush()
    return samples


def stop_and_settle(port: int, pid: int, run: list[dict]) -> None:
    """POST /api/v1/stop and wait until the window it ended is stored; its time and CPU go to the
    collecting phase that made it (`run`), not to the idle phase after it."""
    t, c = time.monotonic(), cpu_s(pid)
    api(port, "/api/v1/stop", "POST")
    deadline = time.monotonic() + 300
    while api(port, "/api/v1/status")["monitor"]["window_in_progress_since"] is not None:
        if time.monotonic() > deadline:
            raise SystemExit("the window in progress did not end within 5 minutes of the stop")
        time.sleep(0.2)
    run[-1]["t_s"] = round(run[-1]["t_s"] + time.monotonic() - t, 1)
    run[-1]["cpu_s"] = round(run[-1]["cpu_s"] + cpu_s(pid) - c, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--idle-minutes", type=float, default=0.0)
    ap.add_argument("--rounds", type=int, default=1, help="idle and collecting phases, alternated this many times")
    ap.add_argument("--threads", type=int, default=2000)
    ap.add_argument("--sample", type=float, default=60.0, help="seconds between samples")
    ap.add_argument("--window", type=float)
    ap.add_argument("--interval", type=float)
    ap.add_argument("--scope-holder", action="store_true", help="serve with --pid HOLDER: its threads are then "
                    "the workload, each read every sample (the worst case), not an idle process read every 5th")
    ap.add_argument("--out", default="/tmp/witty-service-soak.jsonl")
    ap.add_argument("serve_args", nargs="*", help="more `witty-profiler serve` options, after --")
    args = ap.parse_args()

    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(args.threads)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    host_threads = sum(1 for _ in Path("/proc").glob("[0-9]*/task/[0-9]*"))
    port = free_port()
    state = Path(tempfile.mkdtemp(prefix="witty-soak-"))
    cmd = [sys.executable, "-m", "witty_profiler", "serve", "--listen", f"127.0.0.1:{port}", "--state-dir", str(state)]
    cmd += ["--window", str(args.window)] if args.window else []
    cmd += ["--interval", str(args.interval)] if args.interval else []
    cmd += ["--stopped"] if args.idle_minutes else []
    cmd += ["--pid", str(holder.pid)] if args.scope_holder else []
    cmd += args.serve_args
    service = subprocess.Popen(cmd, cwd=REPO)
    sys.path.insert(0, str(REPO))
    from benchmarks.timing import machine
    summary: dict = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
                     "host_threads": host_threads, "command": " ".join(cmd[1:])}
    try:
        wait_up(port, service)
        config = api(port, "/api/v1/status")
        idles, runs = [], []
        with open(args.out, "w") as out:
            for r in range(args.rounds):
                if r:
                    stop_and_settle(port, service.pid, runs[-1])
                if args.idle_minutes:
                    idles.append(phase("idle", args.idle_minutes * 60, args.sample, service.pid, port, state, out))
                    api(port, "/api/v1/start", "POST")
                runs.append(phase("collecting", args.minutes * 60, args.sample, service.pid, port, state, out))
            if args.rounds > 1:  # every round's last window ends the same way
                stop_and_settle(port, service.pid, runs[-1])
        run = [s for r in runs for s in r]
        if idles:
            idle_s, idle_cpu = sum(i[-1]["t_s"] for i in idles), sum(i[-1]["cpu_s"] for i in idles)
            summary["idle_cpu_pct"] = round(100 * idle_cpu / idle_s, 3)
        storage = config["storage"]
        cap = (storage["ring"]["max_bytes"] + storage["kept"]["max_bytes"]) / (1024 * 1024)
        n = len(run)
        second = [s["rss_mib"] for s in run[n // 4: n // 2]] or [run[0]["rss_mib"]]
        last = [s["rss_mib"] for s in run[3 * n // 4:]] or [run[-1]["rss_mib"]]
        summary.update({
            "window_s": config["monitor"]["window_s"], "interval_s": config["monitor"]["interval_s"],
            "collecting_s": sum(r[-1]["t_s"] for r in runs), "windows_done": run[-1]["windows_done"],
            "windows_failed": run[-1]["windows_failed"], "evicted": run[-1]["evicted"],
            "cpu_pct_of_one_core": round(100 * sum(r[-1]["cpu_s"] for r in runs) / sum(r[-1]["t_s"] for r in runs), 3),
            "interval_cpu_pct_max": max(s["interval_cpu_pct"] for s in run),
            "rss_max_mib": max(s["rss_mib"] for s in run),
            "rss_drift_mib": round(sum(last) / len(last) - sum(second) / len(second), 1),
            "disk_max_mib": max(s["disk_mib"] for s in run), "cap_mib": cap,
            "loadavg_mean": round(sum(s["loadavg"] for s in run) / n, 2)})
        if "idle_cpu_pct" in summary and summary["idle_cpu_pct"] > 0:
            summary["collecting_vs_idle"] = round(summary["cpu_pct_of_one_core"] / summary["idle_cpu_pct"], 1)
        if len(idles) > 1 and all(i[-1]["cpu_s"] > 0 for i in idles):
            sys.path.insert(0, str(REPO))
            from benchmarks.timing import Ratio
            pct = Ratio([r[-1]["cpu_s"] / r[-1]["t_s"] for r in runs], [i[-1]["cpu_s"] / i[-1]["t_s"] for i in idles])
            summary["collecting_vs_idle_rounds"] = pct.text()
            summary["idle_cpu_pct_rounds"] = pct.base_text(100, "%", 3)
            summary["cpu_pct_rounds"] = pct.time_text(100, "%", 3)
    finally:
        service.send_signal(signal.SIGTERM)
        try:
            summary["exit_code"] = service.wait(timeout=120)
        except subprocess.TimeoutExpired:
            service.kill()
            summary["exit_code"] = "killed after 120 s"
        holder.kill()
        summary["state_dir"] = str(state)
        print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
