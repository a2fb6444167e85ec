"""The kubectl fan-out. No Kubernetes cluster runs here, so `kubectl` is a stand-in script that answers
`get pods` with the DaemonSet's pods and runs `exec`'s command on this host, as the pod would on its
node: what is checked is our side (the pod listing, the exec command line, the graphs kept, a pod that
is not running); the manifest itself is validated against Kubernetes' schemas in
test_deploy_kubernetes.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.live, pytest.mark.slow]

FAKE = """#!{py}
import json, os, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:2] == ["get", "pods"]:
    assert args[args.index("-n") + 1] == "witty-profiler" and args[args.index("-l") + 1] == "app=wp"
    sys.stdout.write("wp-a\\tnode-a\\tRunning\\nwp-b\\tnode-b\\tRunning\\nwp-c\\tnode-c\\tPending\\n")
elif args[0] == "exec":
    command = args[args.index("--") + 1:]
    os.execvp(command[0], command)
"""


def test_kubectl_fan_out_runs_collect_in_each_running_pod(tmp_path):
    log = tmp_path / "calls.jsonl"
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(FAKE.format(py=sys.executable, log=str(log)))
    kubectl.chmod(0o755)
    out = tmp_path / "graphs"
    done = subprocess.run([sys.executable, "-m", "witty_profiler", "cluster", "collect", "--kubectl-selector", "app=wp",
                           "--kubectl", str(kubectl), "--remote-command", f"{sys.executable} -m witty_profiler",
                           "--duration", "1", "--collectors", "process,cpu", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    hosts = json.loads((out / "cluster.json").read_text())["hosts"]
    assert {h: r["status"] for h, r in hosts.items()} == {"node-a": "ok", "node-b": "ok", "node-c": "skipped"}
    assert hosts["node-c"]["reason"] == "pod wp-c is Pending"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    execs = sorted(c for c in calls if c[0] == "exec")
    # no -t/-i (a terminal would mangle the graph); the node's name is the host's name
    assert [c[:4] for c in execs] == [["exec", "-n", "witty-profiler", "wp-a"], ["exec", "-n", "witty-profiler", "wp-b"]]
    assert all("-t" not in c and "-i" not in c for c in execs)
    assert execs[0][execs[0].index("--host") + 1] == "node-a"
    graph = json.loads((out / "node-a.json").read_text())
    assert graph["meta"]["hosts"] == ["node-a"]
