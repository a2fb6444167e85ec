"""A local OpenSSH server for the cluster fan-out tests: sshd on a free loopback port, as the user running
the tests, with its own host key and one key pair for the client; and an ssh config that names each test
host as an alias of 127.0.0.1, so that `ssh node-a` reaches it. Skips where sshd or ssh-keygen is missing
or sshd cannot start (a non-root user without a privilege separation directory, say)."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local_sshd(folder: Path, aliases: list[str], dead: list[str] = ()) -> Iterator[Path]:
    """Start sshd; yield an ssh config file in which each alias reaches it and each `dead` alias reaches a
    port nobody listens on. Stops sshd afterwards."""
    sshd = shutil.which("sshd") or next((p for p in ("/usr/sbin/sshd", "/usr/bin/sshd") if os.path.exists(p)), None)
    keygen = shutil.which("ssh-keygen")
    if not sshd or not keygen or not shutil.which("ssh"):
        pytest.skip("OpenSSH server or client not installed")
    folder.mkdir(parents=True, exist_ok=True)
    for key in ("host_key", "user_key"):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key)], check=True)
    (folder / "authorized_keys").write_text((folder / "user_key.pub").read_text())
    os.chmod(folder / "authorized_keys", 0o600)
    port = _free_port()
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPasswordAuthentication no\n"
        f"KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n"
        f"PidFile {folder / 'sshd.pid'}\n")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)  # the privilege separation directory
    log = open(folder / "sshd.log", "wb")
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(folder / "sshd_config")], stdout=log, stderr=log)
    try:
        for _ in range(100):
            if proc.poll() is not None:
                pytest.skip(f"sshd did not start: {(folder / 'sshd.log').read_text()[-300:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        common = (f"  User {getpass.getuser()}\n  IdentityFile {folder / 'user_key'}\n  IdentitiesOnly yes\n"
                  "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
        config = "".join(f"Host {a}\n  HostName 127.0.0.1\n  Port {port}\n{common}" for a in aliases)
        config += "".join(f"Host {a}\n  HostName 127.0.0.1\n  Port {_free_port()}\n{common}" for a in dead)
        (folder / "ssh_config").write_text(config)
        yield folder / "ssh_config"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
