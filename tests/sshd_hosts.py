"""Hosts behind a real OpenSSH server on loopback, for the ssh fan-out tests.

Each host is an sshd in its own PID namespace with its own /proc (`unshare --pid --fork --mount-proc`):
what a session on host h2 starts, and what a collect on h2 sees, are that host's processes only, as on
separate machines (the file systems, /sys and cgroups stay shared). The client reaches the hosts
through an ssh config file (aliases, ports, a key made for the test), as users reach theirs.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SshHosts:
    def __init__(self, root: Path, names: list[str]) -> None:
        self.root, self.names = root, names
        self.config = root / "ssh_config"
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        key, host_key = self.root / "id", self.root / "host_key"
        for path in (key, host_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
        (self.root / "authorized_keys").write_text(Path(f"{key}.pub").read_text())
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        client = []
        for name in self.names:
            port = _free_port()
            config = self.root / f"sshd_{name}"
            config.write_text("\n".join([
                f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}",
                f"AuthorizedKeysFile {self.root / 'authorized_keys'}", f"PidFile {self.root / name}.pid",
                "UsePAM no", "StrictModes no", "PermitRootLogin prohibit-password", "PasswordAuthentication no",
                "KbdInteractiveAuthentication no"]) + "\n")
            log = open(self.root / f"{name}.log", "w")
            # --kill-child: when unshare goes, sshd (the namespace's first process) goes, and with it every
            # process of that host
            self.procs.append(subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", SSHD,
                                                "-D", "-e", "-f", str(config)], stdout=log, stderr=log))
            client += [f"Host {name}", "  HostName 127.0.0.1", f"  Port {port}", "  User root",
                       f"  IdentityFile {key}", "  IdentitiesOnly yes", "  StrictHostKeyChecking no",
                       "  UserKnownHostsFile /dev/null", "  LogLevel ERROR"]
        # a host nobody answers for: its port is closed
        client += ["Host unreachable", "  HostName 127.0.0.1", f"  Port {_free_port()}", "  User root",
                   f"  IdentityFile {key}", "  LogLevel ERROR"]
        self.config.write_text("\n".join(client) + "\n")
        deadline = time.monotonic() + 20
        for name in self.names:
            while self.ssh(name, "true", check=False).returncode != 0:
                if time.monotonic() > deadline:
                    logs = (self.root / f"{name}.log").read_text()[-2000:]
                    raise RuntimeError(f"sshd for {name} did not come up:\n{logs}")
                time.sleep(0.2)

    def ssh(self, host: str, command: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", "-F", str(self.config), "-o", "BatchMode=yes", host, command],
                              capture_output=True, text=True, check=check, timeout=timeout)

    def stop(self) -> None:
        # unshare waits for its child whatever signal it gets but SIGKILL, which (--kill-child) takes the
        # child, the namespace's first process, with it: and the kernel then ends every process of the host
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()


@pytest.fixture(scope="module")
def ssh_hosts(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the loopback sshd hosts need root (PID namespaces, sshd)")
    for tool in (SSHD, "ssh", "ssh-keygen", "unshare"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (openssh-server, openssh-client, util-linux)")
    hosts = SshHosts(tmp_path_factory.mktemp("sshd"), ["h1", "h2", "h3"])
    try:
        hosts.start()
        yield hosts
    finally:
        hosts.stop()
