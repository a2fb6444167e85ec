"""Collect every host of a cluster into a directory: the hosts named one way (ssh targets, a Slurm job or
node list, a kubectl label selector, the URLs of running services), the launcher that way implies (or, for
services, a window pulled from each), DIR/<host>.json and the manifest. `witty-profiler cluster collect`
and the MCP server's collect both call `collect_cluster`."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from witty_profiler.cluster import fanout
from witty_profiler.cluster.fanout import HostResult, Manifest
from witty_profiler.topology.errors import InputError

if TYPE_CHECKING:
    from witty_profiler.cluster.services import Pick

Progress = Callable[[HostResult, int, int], None]  # (result, hosts done, hosts in all)


@dataclass
class Target:
    """Which hosts: exactly one way (hosts and hostfile together count as one, ssh; so do services and
    services_file)."""

    hosts: list[str] = field(default_factory=list)  # ssh targets: host, user@host, alias
    hostfile: str | None = None
    slurm_job: str | None = None
    slurm_nodes: str | None = None
    kubectl_selector: str | None = None
    namespace: str = "witty-profiler"
    container: str | None = None
    services: list[str] = field(default_factory=list)  # base URLs of `witty-profiler serve`
    services_file: str | None = None
    pick: "Pick | None" = None  # which window of each service (default the latest)

    def way(self) -> str:
        chosen = [name for name in ("slurm_job", "slurm_nodes", "hosts", "hostfile", "kubectl_selector", "services",
                                    "services_file") if getattr(self, name)]
        if not chosen or (len(chosen) > 1 and set(chosen) not in ({"hosts", "hostfile"},
                                                                  {"services", "services_file"})):
            raise InputError("name the hosts one way: a Slurm job, a Slurm node list, ssh hosts, a kubectl "
                             "label selector, or services")
        return {"hosts": "ssh", "hostfile": "ssh", "services_file": "services"}.get(chosen[0], chosen[0])

    def service_urls(self) -> list[str]:
        from witty_profiler.cluster.services import parse_services
        return parse_services(self.services, self.services_file)

    def check(self) -> str:
        """`way()`, and what can be checked without running anything: ssh targets that are options or give no
        file name, a selector or namespace that kubectl would take for an option."""
        way = self.way()
        if way == "ssh":
            from witty_profiler.cluster import ssh
            ssh.ssh_runs(ssh.parse_hosts(",".join(self.hosts), self.hostfile), 1.0, 1.0)
        if way == "services":
            self.service_urls()
        elif self.pick is not None and (self.pick.at is not None or self.pick.start is not None):
            raise InputError("a time or span picks a window of running services: it needs services")
        if way == "kubectl_selector" and ((self.kubectl_selector or "").startswith("-")
                                          or self.namespace.startswith("-")):
            raise InputError(f"bad label selector or namespace {self.kubectl_selector!r} / {self.namespace!r}: "
                             "e.g. app=witty-profiler in namespace witty-profiler")
        return way


@dataclass
class Launch:
    """How the hosts are reached and what runs there."""

    remote_command: str = "witty-profiler"
    ssh_options: list[str] = field(default_factory=list)
    ssh_config: str | None = None
    kubectl: str = "kubectl"
    parallel: int = 32
    timeout_s: float | None = None  # per host; default the window plus fanout.GRACE_S (services: their own)
    service_token: str | None = field(default=None, repr=False)  # the services' bearer token
    max_window_bytes: int | None = None  # a service's window; default services.MAX_WINDOW_MB


def deadline(target: Target, duration_s: float, launch: Launch) -> float:
    """How long the whole collection may take: waves of `parallel` hosts, each within its per-host deadline
    (Slurm runs every node in one step; a selector's pods are not known before they are listed)."""
    way = target.way()
    if way == "services":
        from witty_profiler.cluster.services import SERVICE_DEADLINE_S
        per_service = launch.timeout_s if launch.timeout_s is not None else SERVICE_DEADLINE_S
        return per_service * math.ceil(len(target.service_urls()) / max(1, launch.parallel)) + 30.0
    per_host = launch.timeout_s if launch.timeout_s is not None else duration_s + fanout.GRACE_S
    waves = math.ceil(len(target.hosts) / max(1, launch.parallel)) if way == "ssh" and target.hosts else 1
    return per_host * max(1, waves) + 30.0  # listing nodes or pods, the manifest


def collect_cluster(target: Target, directory: Path, duration_s: float, interval_s: float = 1.0,
                    job: str | None = None, collectors: str | None = None, launch: Launch | None = None,
                    progress: Progress | None = None, announce: Callable[[str], None] | None = None,
                    stop: threading.Event | None = None) -> Manifest:
    """Run the launcher of `target`'s way into `directory` (already prepared: new or empty) and write the
    manifest. `progress` is told of each host as it ends; `announce` what is about to be run. Setting `stop`
    cancels the collection: every launcher process (srun, ssh, kubectl) and what it started is ended (a
    service's transfer is given up), the hosts without a graph by then are 'cancelled', and the manifest
    says so (`Manifest.cancelled`). Services are not collected but asked for a window they have: the
    manifest's duration_s is then the longest window pulled."""
    launch = launch or Launch()
    way = target.check()
    started = fanout.now()
    done = [0]

    def told(total: int) -> Callable[[HostResult], None]:
        def one(result: HostResult) -> None:
            done[0] += 1
            if progress:
                progress(result, done[0], total)
        return one

    with fanout.Launched(stop) as launched:
        if way in ("slurm_job", "slurm_nodes"):
            from witty_profiler.cluster import slurm
            nodes = slurm.job_nodes(target.slurm_job) if target.slurm_job else slurm.expand(target.slurm_nodes or "")
            label = f"slurm job {target.slurm_job}" if target.slurm_job else f"slurm nodes {target.slurm_nodes}"
            usable, skipped = slurm.usable_nodes(nodes, in_job=bool(target.slurm_job))
            if announce:
                left_out = f"; {len(skipped)} of {len(nodes)} skipped" if skipped else ""
                announce(f"collecting {len(usable)} nodes through srun ({duration_s:g} s window{left_out})")
            tell = told(len(nodes))
            for r in skipped:
                tell(r)
            results = skipped
            if usable:
                step = slurm.run_step(usable, directory, duration_s, interval_s, target.slurm_job or job,
                                      launch.remote_command, collectors, launch.timeout_s, launched)
                for r in step:  # srun returns every node at once
                    tell(r)
                results = sorted(skipped + step, key=lambda r: r.host)
        elif way == "kubectl_selector":
            from witty_profiler.cluster import kube
            selector = target.kubectl_selector or ""
            pods, skipped = kube.list_pods(selector, target.namespace, launch.kubectl)
            runs = kube.kube_runs(pods, target.namespace, duration_s, interval_s, target.container, launch.kubectl,
                                  launch.remote_command, job, collectors)
            label = f"kubectl -l {selector} -n {target.namespace}"
            tell = told(len(runs) + len(skipped))
            for r in skipped:
                tell(r)
            results = skipped + fanout.run_hosts(runs, directory, duration_s, launch.parallel, launch.timeout_s, tell,
                                                 launched)
        elif way == "services":
            from witty_profiler.cluster import services
            from witty_profiler.cluster.services import Pick
            urls = target.service_urls()
            pick = target.pick or Pick()
            label = f"services: {pick.describe()}"
            if announce:
                announce(f"pulling {pick.describe()} of {len(urls)} services")
            max_bytes = launch.max_window_bytes or services.MAX_WINDOW_MB << 20
            results, duration_s = services.pull(urls, directory, pick, launch.service_token, launch.parallel,
                                                launch.timeout_s, max_bytes, told(len(urls)), launched.stop)
        else:
            from witty_profiler.cluster import ssh
            names = ssh.parse_hosts(",".join(target.hosts), target.hostfile)
            runs = ssh.ssh_runs(names, duration_s, interval_s, launch.remote_command, job, collectors,
                                launch.ssh_options, launch.ssh_config)
            label = "ssh"
            results = fanout.run_hosts(runs, directory, duration_s, launch.parallel, launch.timeout_s,
                                       told(len(runs)), launched)
        cancelled = launched.cancelled
    manifest = Manifest(label, started, duration_s, results, cancelled=cancelled)
    fanout.write_manifest(directory, manifest)
    return manifest
