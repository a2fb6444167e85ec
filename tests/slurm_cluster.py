"""A real three-node Slurm cluster on this one host, for tests of the Slurm fan-out.

Debian's slurm-wlm and munge: one slurmctld and three slurmd (`slurmd -N n1` ...), each node on its
own port of 127.0.0.1, with a private munged. Everything (key, socket, conf, state, spool, logs)
lives in one temporary folder, and the ports are free ones picked at start, so a run neither needs
nor disturbs a system munge or Slurm. The daemons run in the foreground as our children; `stop()`
cancels the jobs, ends the daemons and then kills every process that still carries this cluster's
marker in its environment (slurmstepd and task processes outlive their slurmd by design).
Starting takes about two seconds.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "squeue", "sinfo", "scontrol", "scancel")
MARKER = "WITTY_SLURM_CLUSTER"  # in the environment of every process of the cluster: what stop() sweeps

# Why each option:
#   SlurmUser/SlurmdUser=root   the tests run as root; no slurm account is needed
#   AuthInfo=socket=            clients and daemons reach the private munged, not /run/munge
#   ProctrackType=linuxproc     tracks a step's processes by parentage: no cgroup setup on the host
#   TaskPlugin=task/none        no CPU binding: three "nodes" share the same few real CPUs
#   SelectType=cons_tres+CR_CPU jobs are given CPUs, not whole nodes, so jobs can sit side by side
#   OverSubscribe=FORCE:4       a job may land on CPUs another job holds (even one that asked for
#                               every CPU or --exclusive): `srun --nodelist` fan-out never queues
#   ReturnToService=1           a node an admin set DOWN stays down until resume() (with 2 it came
#                               back at once, since its slurmd still answers)
#   JobRequeue=0                a job hit by a DOWN node ends instead of coming back as PENDING
#   SlurmdTimeout/...=10        a stopped slurmd is noticed in seconds, not minutes
#   MailProg=/bin/true          Debian's default mail program is absent; slurmctld logs an error
#   NodeHostname=<this host>    slurmd -N nK accepts that name as its own; NodeAddr/Port reach it
#   CPUs=<real count>           more than the host has would drain the node at registration
CONF = """\
ClusterName=witty
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
StateSaveLocation={root}/state
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmdSpoolDir={root}/spool/%n
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=1
JobRequeue=0
SlurmctldTimeout=10
SlurmdTimeout=10
MailProg=/bin/true
{nodes}
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""
NODE = "NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={cpus} RealMemory=1000"


class SlurmClusterError(RuntimeError):
    pass


def missing_requirements() -> str | None:
    """Why this host cannot run the cluster, or None."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"  # the daemons live in sbin
    missing = [b for b in DAEMONS + CLIENTS if shutil.which(b, path=path) is None]
    if missing:
        return f"Slurm/munge binaries not found: {', '.join(missing)} (apt install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "a local Slurm cluster needs root (slurmd runs tasks as their user)"
    return None


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now: held open together so they are distinct."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class SlurmCluster:
    def __init__(self, root: Path | str, nodes: int = 3, start_timeout: float = 60.0):
        self.root = Path(root)
        self.nodes = [f"n{i}" for i in range(1, nodes + 1)]
        self.start_timeout = start_timeout
        self.conf = self.root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
        self.env = {**os.environ, "PATH": path, "SLURM_CONF": str(self.conf), MARKER: str(self.root)}

    # -- life cycle

    def start(self) -> None:
        """Write key and conf, start munged, slurmctld and the slurmds, wait until all nodes are
        idle. On any failure the daemons are stopped and SlurmClusterError carries the log tails."""
        try:
            self._write_files()
            self._spawn("munged", "-F", f"--socket={self.root}/munge/munge.socket",
                        f"--key-file={self.root}/key/munge.key", f"--pid-file={self.root}/run/munged.pid",
                        f"--log-file={self.root}/log/munged.log", f"--seed-file={self.root}/run/munged.seed")
            self.wait_for(lambda: (self.root / "munge/munge.socket").exists(), 10, "munged socket")
            self._spawn("slurmctld", "-D", "-f", str(self.conf))
            for node in self.nodes:
                self._spawn("slurmd", "-D", "-f", str(self.conf), "-N", node)
            self.wait_for(lambda: self.states() == dict.fromkeys(self.nodes, "idle"), self.start_timeout, "all nodes idle")
        except BaseException as exc:
            states = self.states() if self.conf.exists() else {}
            tails = self.log_tails()
            self.stop()
            raise SlurmClusterError(f"local Slurm cluster did not start: {exc}; node states {states}\n{tails}") from exc

    def stop(self) -> None:
        """Cancel all jobs, end the daemons, kill what is left. Safe to call twice or after a
        failed start."""
        if any(p.poll() is None for p in self.procs) and self.conf.exists():
            self.run("scancel", "--full", "--user=root", check=False, timeout=10)
            try:
                self.wait_for(lambda: not self.run("squeue", "-h", "-o", "%i", check=False).stdout.strip(), 10, "")
            except (SlurmClusterError, subprocess.SubprocessError):
                pass  # the sweep below ends what the cancel did not
        for p in reversed(self.procs):  # slurmds before slurmctld before munged
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self.procs.clear()
        self._sweep()

    def _sweep(self) -> None:
        """SIGKILL every process whose environment names this cluster (slurmstepd, tasks, srun)."""
        marker = f"{MARKER}={self.root}\0".encode()
        for _ in range(3):
            found = False
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit() or int(entry.name) == os.getpid():
                    continue
                try:
                    if marker in (entry / "environ").read_bytes() + b"\0":
                        os.kill(int(entry.name), signal.SIGKILL)
                        found = True
                except (OSError, ValueError):
                    continue
            if not found:
                return
            time.sleep(0.2)

    def _write_files(self) -> None:
        # munged wants the socket's folders searchable by all and the key's folder private
        self.root.chmod(0o755)
        for sub in ("munge", "state", "run", "log", *(f"spool/{n}" for n in self.nodes)):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        key_dir = self.root / "key"
        key_dir.mkdir(mode=0o700, exist_ok=True)
        key = key_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        host = socket.gethostname().split(".")[0]
        ctld_port, *ports = free_ports(1 + len(self.nodes))
        nodes = "\n".join(NODE.format(name=n, host=host, port=p, cpus=os.cpu_count() or 1)
                          for n, p in zip(self.nodes, ports))
        self.conf.write_text(CONF.format(host=host, ctld_port=ctld_port, root=self.root, nodes=nodes))

    def _spawn(self, *args: str) -> None:
        name = args[0] + (f"-{args[-1]}" if args[0] == "slurmd" else "")
        out = open(self.root / "log" / f"{name}.out", "ab")
        with out:  # the child keeps its own descriptor
            self.procs.append(subprocess.Popen(args, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, start_new_session=True))

    def wait_for(self, ready, timeout: float, what: str) -> None:
        """Poll ready() until true; fails early when a daemon has died."""
        deadline = time.monotonic() + timeout
        while True:
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead:
                raise SlurmClusterError(f"{', '.join(dead)} exited while waiting for {what}")
            if ready():
                return
            if time.monotonic() > deadline:
                raise SlurmClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.2)

    def log_tails(self, lines: int = 15) -> str:
        """The last lines of each daemon's (and job's) output. The daemons run in the foreground,
        so their stderr (*.out) holds what their *.log holds, and also errors from before the log opened."""
        parts = []
        for log in sorted((self.root / "log").glob("*.out")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            if tail:
                parts.append(f"--- {log}\n" + "\n".join(tail))
        return "\n".join(parts)

    # -- commands

    def run(self, *args: str, check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster, output captured as text."""
        done = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=timeout, **kw)
        if check and done.returncode:
            raise SlurmClusterError(f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
        return done

    def states(self) -> dict[str, str]:
        """Node name to its short sinfo state (idle, alloc, mix, down, down*, ...)."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False, timeout=10).stdout
        return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)

    def job_state(self, jobid: str) -> str:
        """RUNNING, PENDING, COMPLETING, NODE_FAIL, ...; "" once the job has left squeue."""
        return self.run("squeue", "-h", "-t", "all", "-j", jobid, "-o", "%T", check=False).stdout.strip()

    def steps(self, jobid: str) -> list[str]:
        """The job's running steps, "12.0" ..., without its batch step."""
        out = self.run("squeue", "-h", "-s", "-j", jobid, "-o", "%i", check=False).stdout.split()
        return [s for s in out if not s.endswith((".batch", ".extern"))]

    def submit(self, wrap: str, nodes: int = 3, *extra: str, steps: int = 0, timeout: float = 30) -> str:
        """sbatch --wrap on `nodes` nodes; returns the job id once the job is RUNNING and `steps`
        of its steps run (a wrap that starts srun: until then, a step that joins the job may get
        step id 0 itself)."""
        jobid = self.run("sbatch", "--parsable", f"-N{nodes}", f"--output={self.root}/log/job-%j.out",
                         *extra, "--wrap", wrap).stdout.strip().split(";")[0]
        self.wait_for(lambda: self.job_state(jobid) == "RUNNING" and len(self.steps(jobid)) >= steps,
                      timeout, f"job {jobid} running with {steps} step(s)")
        return jobid

    def cancel(self, jobid: str, timeout: float = 30) -> None:
        self.run("scancel", jobid)
        self.wait_for(lambda: self.job_state(jobid) in ("", "COMPLETED", "CANCELLED"), timeout, f"job {jobid} gone")

    def down(self, node: str, reason: str = "test") -> None:
        self.run("scontrol", "update", f"nodename={node}", "state=down", f"reason={reason}")

    def resume(self, node: str, timeout: float = 30) -> None:
        self.run("scontrol", "update", f"nodename={node}", "state=resume")
        # idle, or mix/alloc where a job shares it; not down, drain, drng or *-suffixed (not responding)
        self.wait_for(lambda: self.states().get(node) in ("idle", "mix", "alloc"), timeout, f"{node} back up")


@pytest.fixture(scope="module")
def slurm_cluster():
    """A started SlurmCluster for one test module; skipped where the host cannot run one."""
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    # under /tmp, not pytest's tmp_path: its 0700 parents fail munged's socket check, and the
    # socket path must stay under the 108-byte limit of a unix socket
    cluster = SlurmCluster(tempfile.mkdtemp(prefix="witty-slurm-"))
    try:
        cluster.start()  # stops what it started if it fails, and says why with the log tails
        yield cluster
    except SlurmClusterError as exc:
        pytest.fail(str(exc), pytrace=False)
    finally:
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)
