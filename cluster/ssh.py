"""SSH fan-out: `ssh HOST witty-profiler collect ... -o -` through the OpenSSH client, so that the user's
ssh config (aliases, ProxyJump, keys, ControlMaster) applies as it does to their own ssh sessions."""

from __future__ import annotations

import shlex
from pathlib import Path

from witty_profiler.cluster.fanout import HostRun, collect_args, host_name, watched
from witty_profiler.topology.errors import InputError


def parse_hosts(hosts: str | None = None, hostfile: str | None = None) -> list[str]:
    """--hosts a,b,c and/or --hostfile FILE (one host per line; '#' comments; an MPI-style 'slots=' column
    is ignored), in order, each once."""
    found: list[str] = []
    for item in (hosts or "").split(","):
        if item.strip():
            found.append(item.strip())
    if hostfile:
        path = Path(hostfile)
        if not path.is_file():
            raise InputError(f"{hostfile}: no such host file")
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            word = line.split("#", 1)[0].split()
            if word:
                found.append(word[0])
    unique = list(dict.fromkeys(found))
    if not unique:
        raise InputError("no hosts: give --hosts h1,h2 or --hostfile FILE")
    for target in unique:
        if target.startswith("-") or any(c.isspace() for c in target):
            raise InputError(f"bad host {target!r}: a host name, user@host or an ssh alias")
    return unique


def ssh_runs(targets: list[str], duration_s: float, interval_s: float, remote_command: str = "witty-profiler",
             job: str | None = None, collectors: str | None = None, ssh_options: list[str] | None = None,
             ssh_config: str | None = None, connect_timeout_s: int = 10) -> list[HostRun]:
    runs = []
    names = {}
    for target in targets:
        name = host_name(target) or target
        if "/" in name or name.strip(".") == "":
            raise InputError(f"bad host {target!r}: its graph is written to <host>.json, so it cannot hold '/'; "
                             "use a host name or an ssh alias")
        if name in names:
            raise InputError(f"{target} and {names[name]} are both host {name}: give each host once")
        names[name] = target
        argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout_s}"]
        if ssh_config:
            argv += ["-F", ssh_config]
        for option in ssh_options or []:
            argv += ["-o", option]
        remote = shlex.split(remote_command) + collect_args(duration_s, interval_s, host_name(target), job, collectors)
        # ssh hands the remote shell one string: quote each word so that nothing in it is re-parsed
        runs.append(HostRun(name, argv + ["--", target, remote_watched(remote)], hold_stdin=True))
    return runs


def remote_watched(command: list[str]) -> str:
    """The remote shell's command line (ssh hands it one string): `command`, ended when the ssh client goes
    away (fanout.watched: sshd sends no signal to a command without a terminal)."""
    return shlex.join(watched(command))
