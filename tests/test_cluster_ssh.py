"""The ssh fan-out against real OpenSSH servers on loopback (tests/sshd_hosts.py: three hosts, each
in its own PID namespace): a job of three ranks, one held back by a CPU quota, found by one command;
hosts that cannot be reached or lack the tool are named with the reason and the rest diagnosed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cgroup_v1 import CPU_V1
from marked_processes import KEY, kill_marked, new_mark, wait_for, wait_gone
from sshd_hosts import ssh_hosts  # noqa: F401 - the fixture

pytestmark = [pytest.mark.live, pytest.mark.slow]

PY = sys.executable
RANK = """
import os, sys
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        f.write(str(os.getpid()))  # this host's pid: the kernel reads it in the writer's namespace
while True:
    pass
"""


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "witty_profiler", *args], capture_output=True, text=True, timeout=timeout)


def test_ssh_job_straggler_is_named(ssh_hosts, tmp_path):  # noqa: F811
    if not (CPU_V1 / "cpu.cfs_quota_us").exists():
        pytest.skip(f"no cgroup v1 cpu controller at {CPU_V1}")
    group = CPU_V1 / f"witty-ssh-slow-{os.getpid()}"
    group.mkdir()
    (group / "cpu.cfs_quota_us").write_text("20000")  # 0.2 of a core (period 100 ms)
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    try:
        for rank, host in enumerate(ssh_hosts.names):
            slow = f" {group}/cgroup.procs" if host == "h2" else ""
            ssh_hosts.ssh(host, f"env RANK={rank} WORLD_SIZE=3 MASTER_ADDR=h1 MASTER_PORT=29500 "
                                f"TORCHELASTIC_RUN_ID=run7 nohup {PY} {script}{slow} >/dev/null 2>&1 &")
        time.sleep(1.0)
        out = tmp_path / "graphs"
        done = cli("cluster", "collect", "--hosts", "h1,h2,h3", "--ssh-config", str(ssh_hosts.config),
                   "--remote-command", f"{PY} -m witty_profiler", "--job", "run7", "--duration", "3",
                   "--collectors", "process,cpu,cgroup", "-o", str(out), "--diagnose", "--format", "json")
    finally:
        for host in ssh_hosts.names:
            ssh_hosts.ssh(host, f"pkill -f {script}", check=False)
        time.sleep(0.3)
        group.rmdir()
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {h["host"]: [r["rank"] for r in h["ranks"]] for h in report["hosts"]} == {"h1": [0], "h2": [1], "h3": [2]}
    assert {r["job"] for h in report["hosts"] for r in h["ranks"]} == {"job:torchelastic:run7"}
    assert report["windows_apart"] == []  # collected in parallel: one window
    straggler = next(f for f in report["findings"] if f["pattern"] == "control.straggler_host")
    assert "host:h2" in straggler["subjects"] and "rank 1" in straggler["description"]
    assert straggler["evidence"][0]["metric"] == "throttled_periods_pct deviation from peers"


def test_unreachable_host_and_missing_tool_are_reported(ssh_hosts, tmp_path):  # noqa: F811
    out = tmp_path / "graphs"
    done = cli("cluster", "collect", "--hosts", "h1,unreachable,h3", "--ssh-config", str(ssh_hosts.config),
               "--remote-command", f"{PY} -m witty_profiler", "--duration", "1", "--collectors", "process,cpu",
               "-o", str(out), "--diagnose", "--format", "summary")
    assert done.returncode == 3, done.stderr  # some hosts gave a graph, not every one
    hosts = json.loads((out / "cluster.json").read_text())["hosts"]
    assert hosts["h1"]["status"] == hosts["h3"]["status"] == "ok"
    assert hosts["unreachable"]["status"] == "failed"
    assert "connection failed" in hosts["unreachable"]["reason"] and "refused" in hosts["unreachable"]["reason"]
    assert "# Cluster: 2 hosts diagnosed, 1 without a graph" in done.stdout and "unreachable" in done.stdout
    missing = cli("cluster", "collect", "--hosts", "h1", "--ssh-config", str(ssh_hosts.config), "--remote-command",
                  "/nonexistent/witty-profiler", "--duration", "1", "-o", str(tmp_path / "none"))
    assert missing.returncode == 4, missing.stderr  # no host gave a graph
    reason = json.loads((tmp_path / "none" / "cluster.json").read_text())["hosts"]["h1"]
    assert reason["status"] == "failed" and "not installed" in reason["reason"]
    slow = cli("cluster", "collect", "--hosts", "h1", "--ssh-config", str(ssh_hosts.config), "--remote-command",
               f"{PY} -m witty_profiler", "--duration", "5", "--timeout", "1", "-o", str(tmp_path / "late"))
    late = json.loads((tmp_path / "late" / "cluster.json").read_text())["hosts"]["h1"]
    assert slow.returncode == 4 and late["status"] == "timeout" and "after 1 s" in late["reason"]


def test_ctrl_c_ends_every_ssh_client(ssh_hosts, tmp_path):  # noqa: F811
    """Ctrl-C while the hosts' commands run: the ssh clients (each leading its own process group) are ended,
    and with them the commands on the hosts; the manifest names the hosts cancelled, exit 130."""
    mark, out = new_mark(), tmp_path / "graphs"
    cmd = subprocess.Popen([PY, "-m", "witty_profiler", "cluster", "collect", "--hosts", "h1,h2", "--ssh-config",
                            str(ssh_hosts.config), "--remote-command", "sh -c 'sleep 600'", "--duration", "100", "-o",
                            str(out)], env={**os.environ, KEY: mark}, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for(mark, 3)  # the CLI and two ssh clients
        time.sleep(0.5)
        cmd.send_signal(signal.SIGINT)
        _, stderr = cmd.communicate(timeout=30)
        left = wait_gone(mark, 10)
        # and on the hosts: the remote shell saw its stdin close with the ssh client and ended the command
        deadline, remote = time.monotonic() + 15, ["?"]
        while remote and time.monotonic() < deadline:
            remote = subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True, text=True).stdout.split()
            time.sleep(0.3)
    finally:
        cmd.kill()
        kill_marked(mark)
        for host in ("h1", "h2"):
            ssh_hosts.ssh(host, "pkill -x sleep", check=False)
    assert left == [], f"still running after Ctrl-C: {left}"
    assert remote == [], f"the hosts' commands still run after Ctrl-C: {remote}"
    assert cmd.returncode == 130, stderr
    hosts = json.loads((out / "cluster.json").read_text())["hosts"]
    assert {h: r["status"] for h, r in hosts.items()} == {"h1": "cancelled", "h2": "cancelled"}


def test_a_directory_with_graphs_is_not_overwritten(tmp_path):
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "mine.json").write_text("{}")
    done = cli("cluster", "collect", "--hosts", "h1", "--duration", "1", "-o", str(tmp_path / "graphs"))
    assert done.returncode == 2 and "not empty" in done.stderr and done.stderr.count("\n") == 1
    assert (tmp_path / "graphs" / "mine.json").read_text() == "{}"
