"""A stand-in `kubectl` for the kubectl fan-out tests (no Kubernetes cluster runs here): it answers `get pods`
with three pods of the DaemonSet (wp-a on node-a and wp-b on node-b running, wp-c on node-c pending) and runs
`exec`'s command on this host, as the pod would on its node (in a session of its own that outlives kubectl, its
stdin forwarded only with -i); each call is logged as a JSON line to calls.jsonl beside it."""

from __future__ import annotations

import sys
from pathlib import Path

FAKE = """#!{py}
import json, os, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:2] == ["get", "pods"]:
    assert args[args.index("-n") + 1] == "witty-profiler" and args[args.index("-l") + 1] == "app=wp"
    sys.stdout.write("wp-a\\tnode-a\\tRunning\\nwp-b\\tnode-b\\tRunning\\nwp-c\\tnode-c\\tPending\\n")
elif args[0] == "exec":
    # as a container runtime does: the command runs in a session of its own, apart from kubectl, and is not
    # ended when kubectl goes; its stdin is kubectl's stdin (forwarded) only with -i, its output forwarded
    import subprocess, threading
    command = args[args.index("--") + 1:]
    stdin = subprocess.PIPE if "-i" in args[:args.index("--")] else subprocess.DEVNULL
    child = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, start_new_session=True)
    def forward():
        while data := os.read(0, 65536):
            child.stdin.write(data)
            child.stdin.flush()
        child.stdin.close()  # kubectl's stdin closed: so is the command's
    if child.stdin is not None:
        threading.Thread(target=forward, daemon=True).start()
    while data := child.stdout.read1(65536):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    sys.exit(child.wait())
"""


def fake_kubectl(folder: Path) -> str:
    """Write the stand-in into `folder`; its path (pods selected by app=wp in namespace witty-profiler)."""
    kubectl = folder / "kubectl"
    kubectl.write_text(FAKE.format(py=sys.executable, log=str(folder / "calls.jsonl")))
    kubectl.chmod(0o755)
    return str(kubectl)
