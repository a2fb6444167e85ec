"""Kubernetes fan-out: `kubectl exec` into each pod of the witty-profiler DaemonSet (deploy/kubernetes/),
one per node, and run collect there with the node's name as the host."""

from __future__ import annotations

import shlex

from witty_profiler.cluster.fanout import HostResult, HostRun, ask, collect_args, watched
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.ids import check_host_name

_PODS = "{range .items[*]}{.metadata.name}{\"\\t\"}{.spec.nodeName}{\"\\t\"}{.status.phase}{\"\\n\"}{end}"


def list_pods(selector: str, namespace: str, kubectl: str = "kubectl",
              timeout_s: float = 30.0) -> tuple[list[tuple[str, str]], list[HostResult]]:
    """(pod, node) of the running pods that the label selector picks; pods not running are reported."""
    argv = [kubectl, "get", "pods", "-n", namespace, "-l", selector, "-o", f"jsonpath={_PODS}"]
    listing = ask(argv, "install kubectl or give --kubectl PATH", timeout_s)
    pods, skipped = [], []
    for line in listing.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or not parts[0]:
            continue
        pod, node, phase = parts[:3]
        if phase != "Running":
            skipped.append(HostResult(node or pod, "skipped", f"pod {pod} is {phase}"))
        else:
            pods.append((pod, node or pod))
    if not pods and not skipped:
        raise InputError(f"no pod matches -l {selector} in namespace {namespace}; is the DaemonSet of "
                         "deploy/kubernetes/ applied?")
    return pods, skipped


def kube_runs(pods: list[tuple[str, str]], namespace: str, duration_s: float, interval_s: float,
              container: str | None = None, kubectl: str = "kubectl", remote_command: str = "witty-profiler",
              job: str | None = None, collectors: str | None = None) -> list[HostRun]:
    runs = []
    for pod, node in pods:
        check_host_name(node)
        # no -t: a terminal would turn the graph's newlines into CRLF and mix stderr into it; -i: the command's
        # stdin is held open from here, and the shell around it ends it when that closes (a process that exec
        # started is not ended when kubectl goes: a cancelled fan-out would leave it collecting)
        argv = [kubectl, "exec", "-i", "-n", namespace, pod]
        if container:
            argv += ["-c", container]
        command = [*shlex.split(remote_command), *collect_args(duration_s, interval_s, node, job, collectors)]
        runs.append(HostRun(node, argv + ["--", *watched(command)], hold_stdin=True))
    return runs
