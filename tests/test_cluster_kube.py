"""The kubectl fan-out. No Kubernetes cluster runs here, so `kubectl` is a stand-in script
(tests/fake_kubectl.py) that answers `get pods` with the DaemonSet's pods and runs `exec`'s command on
this host, as the pod would on its node: what is checked is our side (the pod listing, the exec command
line, the graphs kept, a pod that is not running, the exit codes, Ctrl-C); the manifest itself is
validated against Kubernetes' schemas in test_deploy_kubernetes.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from fake_kubectl import fake_kubectl
from marked_processes import KEY, kill_marked, new_mark, wait_for, wait_gone

pytestmark = [pytest.mark.live, pytest.mark.slow]


def test_kubectl_fan_out_runs_collect_in_each_running_pod(tmp_path):
    kubectl = fake_kubectl(tmp_path)
    log = tmp_path / "calls.jsonl"
    out = tmp_path / "graphs"
    done = subprocess.run([sys.executable, "-m", "witty_profiler", "cluster", "collect", "--kubectl-selector", "app=wp",
                           "--kubectl", kubectl, "--remote-command", f"{sys.executable} -m witty_profiler",
                           "--duration", "1", "--collectors", "process,cpu", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr  # graphs of some hosts, not of every one (node-c's pod is pending)
    hosts = json.loads((out / "cluster.json").read_text())["hosts"]
    assert {h: r["status"] for h, r in hosts.items()} == {"node-a": "ok", "node-b": "ok", "node-c": "skipped"}
    assert hosts["node-c"]["reason"] == "pod wp-c is Pending"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    execs = sorted(c for c in calls if c[0] == "exec")
    # no -t (a terminal would mangle the graph); -i: the command's stdin is watched (see the Ctrl-C test); the
    # node's name is the host's name
    assert [c[:5] for c in execs] == [["exec", "-i", "-n", "witty-profiler", "wp-a"],
                                      ["exec", "-i", "-n", "witty-profiler", "wp-b"]]
    assert all("-t" not in c for c in execs) and all(c[c.index("--") + 1:][:2] == ["sh", "-c"] for c in execs)
    assert execs[0][execs[0].index("--host") + 1] == "node-a"
    graph = json.loads((out / "node-a.json").read_text())
    assert graph["meta"]["hosts"] == ["node-a"]


def test_ctrl_c_ends_every_kubectl_exec_and_what_it_started(tmp_path):
    """Ctrl-C while each pod's command runs: every kubectl exec is ended, and with it the command in the pod
    and the child it started (a session of their own that kubectl's end does not reach: the shell around the
    command sees its stdin close), the manifest names the hosts cancelled, exit 130."""
    mark, out = new_mark(), tmp_path / "graphs"
    # each "pod" runs a shell that waits for a child of its own: two processes per pod, neither of them ever done
    remote = f"env {KEY}={mark} sh -c 'sleep 600 & wait'"
    cli = subprocess.Popen([sys.executable, "-m", "witty_profiler", "cluster", "collect", "--kubectl-selector",
                            "app=wp", "--kubectl", fake_kubectl(tmp_path), "--remote-command", remote, "--duration",
                            "100", "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(mark, 4)  # node-a's and node-b's shell and sleep
        cli.send_signal(signal.SIGINT)
        _, stderr = cli.communicate(timeout=30)
        left = wait_gone(mark, 10)
    finally:
        cli.kill()
        kill_marked(mark)
    assert left == [], f"still running after Ctrl-C: {left}"
    assert cli.returncode == 130, stderr
    assert "cancelled" in stderr and stderr.rstrip().endswith("witty-profiler: interrupted")
    manifest = json.loads((out / "cluster.json").read_text())
    assert manifest["cancelled"] is True
    assert {h: r["status"] for h, r in manifest["hosts"].items()} == {
        "node-a": "cancelled", "node-b": "cancelled", "node-c": "skipped"}


def test_no_host_gave_a_graph_exits_4(tmp_path):
    done = subprocess.run([sys.executable, "-m", "witty_profiler", "cluster", "collect", "--kubectl-selector", "app=wp",
                           "--kubectl", fake_kubectl(tmp_path), "--remote-command", "/nonexistent/witty-profiler",
                           "--duration", "1", "-o", str(tmp_path / "graphs")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 4, done.stderr
    assert "wrote 0 of 3 host graphs" in done.stderr
    hosts = json.loads((tmp_path / "graphs" / "cluster.json").read_text())["hosts"]
    assert {h: r["status"] for h, r in hosts.items()} == {"node-a": "failed", "node-b": "failed", "node-c": "skipped"}


def test_a_host_without_a_process_of_the_job_is_noted(tmp_path):
    job = "no-such-run"
    done = subprocess.run([sys.executable, "-m", "witty_profiler", "cluster", "collect", "--kubectl-selector", "app=wp",
                           "--kubectl", fake_kubectl(tmp_path), "--remote-command",
                           f"{sys.executable} -m witty_profiler", "--job", job, "--duration", "0.5", "--interval", "0.25", "--collectors", "process", "-o",
                           str(tmp_path / "graphs")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    hosts = json.loads((tmp_path / "graphs" / "cluster.json").read_text())["hosts"]
    assert hosts["node-a"] == {**hosts["node-a"], "status": "ok", "reason": f"no process of job {job} on this host"}
    assert "node-b: ok (" in done.stderr and f"no process of job {job} on this host" in done.stderr
