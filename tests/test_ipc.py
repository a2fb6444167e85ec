"""The IPC collector against real processes: a pipe, unix sockets, loopback TCP, /dev/shm and a
SysV message queue between children this test starts, plus its parsers on recorded /proc text."""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from witty_profiler.collectors import ipc
from witty_profiler.collectors.base import Context
from witty_profiler.collectors.lib import fdscan, sockdiag
from witty_profiler.topology.ids import process_id

TCP_BYTES = 300_000
PY = sys.executable
IPC_PRIVATE, IPC_RMID = 0, 0
libc = ctypes.CDLL(None, use_errno=True)


def spawn(code: str, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([PY, "-c", code, *args], text=True, **kw)


def wait_line(proc: subprocess.Popen) -> str:
    line = proc.stdout.readline().strip()
    assert line, f"child {proc.args} said nothing (rc={proc.poll()})"
    return line


HOLD = "import time; time.sleep(60)"
WRITER = "import sys, time; sys.stdout.write('x' * 1000); sys.stdout.flush(); print('ok', file=sys.stderr, flush=True); time.sleep(60)"
PAIR_END = "import socket, sys, time; s = socket.socket(fileno=int(sys.argv[1])); s.send(b'y' * 10); print('ok', flush=True); time.sleep(60)"
UNIX_SERVER = """
import socket, sys, time
srv = socket.socket(socket.AF_UNIX); srv.bind(sys.argv[1]); srv.listen()
print('ready', flush=True)
conn, _ = srv.accept(); time.sleep(60)
"""
UNIX_CLIENT = "import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print('ok', flush=True); time.sleep(60)"
TCP_SERVER = """
import socket, sys, time
srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept(); got = 0
while got < int(sys.argv[1]):
    got += len(conn.recv(65536))
print(got, flush=True); time.sleep(60)
"""
TCP_CLIENT = """
import socket, sys, time
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))
print('connected', flush=True)
sys.stdin.readline()
s.sendall(b'z' * int(sys.argv[2])); time.sleep(60)
"""
SHM_USER = """
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600); os.ftruncate(fd, 65536)
m = mmap.mmap(fd, 65536); os.close(fd); m[:4] = b'data'
print('mapped', flush=True); time.sleep(60)
"""
MSG_USER = """
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.msgsnd.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.msgrcv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long, ctypes.c_int]
libc.msgrcv.restype = ctypes.c_ssize_t
qid, role = int(sys.argv[1]), sys.argv[2]
buf = ctypes.create_string_buffer(8 + 64)
ctypes.memmove(buf, (1).to_bytes(8, 'little') + b'm' * 64, 72)
if role == 'send':
    for _ in range(3):
        assert libc.msgsnd(qid, buf, 64, 0) == 0, ctypes.get_errno()
else:
    assert libc.msgrcv(qid, buf, 64, 0, 0) == 64, ctypes.get_errno()
print('done', flush=True); time.sleep(60)
"""


def wait_acked(server_port: int, count: int, timeout_s: float = 5.0) -> None:
    """Wait until the client end has its bytes acknowledged (the last ACK may be a delayed one)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(s.remote[1] == server_port and (s.bytes_acked or 0) > count for s in sockdiag.tcp_sockets()):
            return
        time.sleep(0.01)

SYSV_SHM_USER = """
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmat.restype = ctypes.c_void_p
shmid = int(sys.argv[1]) if len(sys.argv) > 1 else libc.shmget(0, 1 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT
assert shmid >= 0, ctypes.get_errno()
assert libc.shmat(shmid, None, 0) not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
print(shmid, flush=True); time.sleep(60)
"""


@pytest.fixture(scope="module")
def world():
    """Start every pair of children, collect once around the TCP transfer, and clean up."""
    children: list[subprocess.Popen] = []
    tmp = tempfile.mkdtemp(prefix="witty-ipc-")
    shm_path = f"/dev/shm/witty-test-{os.getpid()}"
    qid = libc.msgget(IPC_PRIVATE, 0o600)
    shmid = None
    try:
        writer = spawn(WRITER, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        reader = spawn(HOLD, stdin=writer.stdout)
        writer.stdout.close()  # the test must not hold the read end itself
        children += [writer, reader]
        assert writer.stderr.readline().strip() == "ok"

        a, b = socket.socketpair()
        pair = [spawn(PAIR_END, str(s.fileno()), pass_fds=[s.fileno()], stdout=subprocess.PIPE) for s in (a, b)]
        a.close(), b.close()
        children += pair
        for p in pair:
            wait_line(p)

        path = os.path.join(tmp, "sock")
        userver = spawn(UNIX_SERVER, path, stdout=subprocess.PIPE)
        children.append(userver)
        wait_line(userver)
        uclient = spawn(UNIX_CLIENT, path, stdout=subprocess.PIPE)
        children.append(uclient)
        wait_line(uclient)

        tserver = spawn(TCP_SERVER, str(TCP_BYTES), stdout=subprocess.PIPE)
        children.append(tserver)
        port = wait_line(tserver)
        tclient = spawn(TCP_CLIENT, port, str(TCP_BYTES), stdout=subprocess.PIPE, stdin=subprocess.PIPE)
        children.append(tclient)
        wait_line(tclient)

        shm = [spawn(SHM_USER, shm_path, stdout=subprocess.PIPE) for _ in range(2)]
        children += shm
        for p in shm:
            wait_line(p)

        creator = spawn(SYSV_SHM_USER, stdout=subprocess.PIPE)
        children.append(creator)
        shmid = int(wait_line(creator))
        attacher = spawn(SYSV_SHM_USER, str(shmid), stdout=subprocess.PIPE)
        children.append(attacher)
        wait_line(attacher)

        msg = []
        if qid >= 0:
            msg = [spawn(MSG_USER, str(qid), role, stdout=subprocess.PIPE) for role in ("send", "recv")]
            children += msg
            for p in msg:
                wait_line(p)

        ctx = Context(duration_s=1.0, interval_s=1.0, pids={p.pid for p in children})
        collector = ipc.IpcCollector(ctx)
        collector.start()
        tclient.stdin.write("go\n")
        tclient.stdin.flush()
        assert int(wait_line(tserver)) >= TCP_BYTES
        wait_acked(int(port), TCP_BYTES)
        collector.sample()
        graph = collector.finish()
        yield {"graph": graph, "status": collector.status, "host": ctx.host, "writer": writer, "reader": reader,
               "pair": pair, "userver": userver, "uclient": uclient, "tserver": tserver, "tclient": tclient,
               "shm": shm, "shm_path": shm_path, "msg": msg,
               "sysv_shm": (creator, attacher, shmid)}
    finally:
        for p in children:
            p.kill()
        for p in children:
            p.wait()
        if qid >= 0:
            libc.msgctl(qid, IPC_RMID, None)
        if shmid is not None:
            libc.shmctl(shmid, IPC_RMID, None)
        Path(shm_path).unlink(missing_ok=True)
        Path(tmp, "sock").unlink(missing_ok=True)
        os.rmdir(tmp)


def edges_between(w, kind, a, b):
    src, dst = process_id(w["host"], a.pid), process_id(w["host"], b.pid)
    return [e for e in w["graph"].edges(kind) if e.source == src and e.target == dst]


@pytest.mark.live
def test_collector_is_ok(world):
    assert world["status"].status == "ok", world["status"].reason


@pytest.mark.live
def test_pipe_edge_writer_to_reader(world):
    [edge] = edges_between(world, "pipe", world["writer"], world["reader"])
    assert edge.attrs["direction"] == "writer_to_reader"
    assert edge.metrics["queued_bytes"] == 1000  # the reader never reads
    assert not edges_between(world, "pipe", world["reader"], world["writer"])


@pytest.mark.live
def test_unix_socketpair_edge(world):
    a, b = sorted(world["pair"], key=lambda p: p.pid)
    [edge] = edges_between(world, "unix_socket", a, b)
    assert edge.attrs["direction"] == "unordered"
    assert edge.metrics["queued_bytes"] == 20  # each end sent 10 bytes nobody read


@pytest.mark.live
def test_unix_path_edge_client_to_server(world):
    [edge] = edges_between(world, "unix_socket", world["uclient"], world["userver"])
    assert edge.attrs["direction"] == "client_to_server"
    assert edge.attrs["path"].endswith("/sock")
    assert not edges_between(world, "unix_socket", world["userver"], world["uclient"])


@pytest.mark.live
def test_tcp_edge_client_to_server_with_bytes(world):
    [edge] = edges_between(world, "tcp", world["tclient"], world["tserver"])
    assert edge.attrs["direction"] == "client_to_server"
    assert edge.metrics["bytes_sent_total"] >= TCP_BYTES
    assert edge.metrics["bytes_sent_total"] < TCP_BYTES * 1.01  # only this window's transfer
    assert edge.metrics["bytes_received_total"] == 0
    assert not edges_between(world, "tcp", world["tserver"], world["tclient"])


@pytest.mark.live
def test_dev_shm_mapped_by_two_processes(world):
    a, b = sorted(world["shm"], key=lambda p: p.pid)
    [edge] = edges_between(world, "shm", a, b)
    assert edge.attrs["path"] == world["shm_path"]
    shm = world["graph"].entity(f"shared_memory:{world['host']}:{world['shm_path']}")
    assert shm is not None and shm.attrs["size_bytes"] == 65536
    users = {e.source for e in world["graph"].edges("uses_shm") if e.target == shm.id}
    assert users == {process_id(world["host"], p.pid) for p in (a, b)}


@pytest.mark.live
def test_sysv_shared_memory_creator_to_user(world):
    creator, attacher, shmid = world["sysv_shm"]
    [edge] = edges_between(world, "shm", creator, attacher)
    assert edge.attrs["direction"] == "creator_to_user"
    segment = world["graph"].entity(f"shared_memory:{world['host']}:sysv:{shmid}")
    assert segment.attrs["size_bytes"] == 1 << 20 and segment.attrs["creator_pid"] == creator.pid


@pytest.mark.live
def test_sysv_message_queue_sender_to_receiver(world):
    if not world["msg"]:
        pytest.skip("msgget failed: SysV IPC not available here")
    sender, receiver = world["msg"]
    [edge] = edges_between(world, "msg_queue", sender, receiver)
    assert edge.metrics["queued_bytes"] == 2 * 64  # three sent, one received
    assert edge.attrs["messages"] == 2


@pytest.mark.live
def test_scope_keeps_only_edges_touching_it(world):
    pids = {int(e.id.split(":")[2]) for e in world["graph"].entities("process")}
    children = {p.pid for v in world.values() for p in (v if isinstance(v, (list, tuple)) else [v])
                if isinstance(p, subprocess.Popen)}
    for edge in world["graph"].edges():
        if edge.type in ("pipe", "unix_socket", "tcp", "shm", "msg_queue"):
            ends = {int(edge.source.split(":")[2]), int(edge.target.split(":")[2])}
            assert ends & children, edge.id
    assert children <= pids


@pytest.mark.live
def test_survives_processes_exiting_mid_scan():
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            subprocess.run(["true"])

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        deadline = time.monotonic() + 2.0
        for _ in range(5):  # as many as fit in about 2 s on a busy machine
            ipc.snapshot(Path("/proc"), {}, "start")
            if time.monotonic() > deadline:
                break
    finally:
        stop.set()
        thread.join()


# -- parsers on recorded text -----------------------------------------------------------
SYSVIPC_MSG = """       key      msqid perms      cbytes       qnum lspid lrpid   uid   gid  cuid  cgid      stime      rtime      ctime
         0          0   600         128          2 13021 13022     0     0     0     0 1764673941 1764673941 1764673941
"""
SYSVIPC_SHM = """       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap
1234567890          3   600               1048576 13100 13101      2     0     0     0     0 1764673950          0 1764673950                  4096                     0
"""
MAPS = """55d0c3a00000-55d0c3a28000 r--p 00000000 fe:00 1311745                    /usr/bin/python3.11
7f1b2c000000-7f1b2c010000 rw-s 00000000 00:1a 14502                      /dev/shm/witty-test-12956
7f1b2c100000-7f1b2c200000 rw-s 00000000 00:01 3                          /SYSV499602d2 (deleted)
7f1b2c300000-7f1b2c310000 rw-s 00000000 00:1a 14503                      /dev/shm/gone (deleted)
7ffd5d1e1000-7ffd5d202000 rw-p 00000000 00:00 0                          [stack]
"""


def test_parse_sysvipc():
    [row] = ipc.parse_sysvipc(SYSVIPC_MSG)
    assert (row["msqid"], row["cbytes"], row["qnum"], row["lspid"], row["lrpid"]) == (0, 128, 2, 13021, 13022)
    [seg] = ipc.parse_sysvipc(SYSVIPC_SHM)
    assert (seg["shmid"], seg["size"], seg["cpid"], seg["nattch"]) == (3, 1048576, 13100, 2)
    assert ipc.parse_sysvipc("") == []
    assert ipc.ipc_key(seg["key"]) == "0x499602d2" and ipc.ipc_key(-1) == "0xffffffff"


def test_parse_maps_shm():
    assert ipc.parse_maps_shm(MAPS) == {"/dev/shm/witty-test-12956", "sysv:3", "/dev/shm/gone"}


def test_parse_fdinfo_mode():
    assert fdscan.parse_fdinfo_mode("pos:\t0\nflags:\t02000001\nmnt_id:\t15\nino:\t14438\n") == "w"
    assert fdscan.parse_fdinfo_mode("pos:\t0\nflags:\t02000000\nmnt_id:\t15\n") == "r"
    assert fdscan.parse_fdinfo_mode("pos:\t0\nflags:\t02000002\n") == "rw"


@pytest.mark.live
def test_non_root_gives_partial_with_reason():
    """As nobody, other users' fds are unreadable: a smaller graph, status partial, and why."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to another user")
    from witty_profiler.collectors.network import NetworkCollector
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop privileges, collect, report the statuses, exit without pytest's teardown
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            found = []
            for cls in (ipc.IpcCollector, NetworkCollector):
                c = cls(Context(duration_s=0.2, interval_s=0.2))
                c.start()
                c.finish()
                found.append(f"{c.status.status}|{c.status.reason}")
            os.write(write, "\n".join(found).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        lines = f.read().splitlines()
    os.waitpid(pid, 0)
    assert len(lines) == 2, lines
    for line in lines:
        status, reason = line.split("|", 1)
        assert status == "partial" and "root" in reason, line


SS_XAH = """u_str ESTAB  0      768                            * 36423 * 36424
u_str ESTAB  100    0                              * 36421 * 36420
u_str ESTAB  7      0      /tmp/tmp3sd_0fxi/srv.sock 36424 * 36423
u_str LISTEN 0      128    /tmp/tmp3sd_0fxi/srv.sock 36422 * 0
"""


def test_parse_ss_unix():
    client, pair_end, server, listener = sockdiag.parse_ss_unix(SS_XAH)
    assert (client.inode, client.peer, client.name, client.rqueue) == (36423, 36424, None, 0)
    assert (pair_end.peer, pair_end.rqueue) == (36420, 100)
    assert (server.name, server.peer, server.rqueue) == ("/tmp/tmp3sd_0fxi/srv.sock", 36423, 7)
    assert (listener.peer, listener.state) == (None, 10)


@pytest.mark.live
def test_ss_fallback_agrees_with_sock_diag():
    if not shutil.which("ss"):
        pytest.skip("`ss` (iproute2) is not installed")
    a, b = socket.socketpair()
    try:
        a.send(b"q" * 33)
        ino_a, ino_b = os.fstat(a.fileno()).st_ino, os.fstat(b.fileno()).st_ino
        text = subprocess.run(["ss", "-xaH"], capture_output=True, text=True, timeout=10).stdout
        by_ss = {s.inode: s for s in sockdiag.parse_ss_unix(text)}
        by_netlink = {s.inode: s for s in sockdiag.unix_sockets()}
    finally:
        a.close(), b.close()
    for found in (by_ss, by_netlink):
        assert (found[ino_a].peer, found[ino_b].peer, found[ino_b].rqueue) == (ino_b, ino_a, 33)


# -- queues of TCP connections, from two socket tables ---------------------------------------------
def _tcp_snapshot(taken_at: float, client_wq: int, server_rq: int, server_wq: int = 0, client_rq: int = 0,
                  cookies: tuple[int, int] = (7, 8)) -> ipc.Snapshot:
    """A connection from pid 10 (port 40000) to pid 20 (listening on 5000), with these queues."""
    listen = sockdiag.TcpSock(local=("127.0.0.1", 5000), remote=("0.0.0.0", 0), state="LISTEN", inode=99, cookie=1)
    client = sockdiag.TcpSock(local=("127.0.0.1", 40000), remote=("127.0.0.1", 5000), state="ESTAB", inode=100,
                              cookie=cookies[0], rqueue=client_rq, wqueue=client_wq, bytes_acked=1, bytes_received=0)
    server = sockdiag.TcpSock(local=("127.0.0.1", 5000), remote=("127.0.0.1", 40000), state="ESTAB", inode=200,
                              cookie=cookies[1], rqueue=server_rq, wqueue=server_wq, bytes_acked=1, bytes_received=0)
    fds = fdscan.FdTable(links={10: {3: "socket:[100]"}, 20: {3: "socket:[99]", 4: "socket:[200]"}})
    return ipc.Snapshot(taken_at=taken_at, fds=fds, tcp=[listen, client, server])


def _tcp_edge(end: ipc.Snapshot, start: ipc.Snapshot | None, seconds: float = 2.0):
    from witty_profiler.topology import Graph
    edges = ipc._Edges("h", None)
    ipc.tcp_edges(edges, end, start, seconds)
    graph = Graph()
    edges.into(graph, Path("/nonexistent-proc"))
    [edge] = graph.edges("tcp")
    assert (edge.source, edge.target) == (process_id("h", 10), process_id("h", 20))
    return edge


def test_tcp_edge_carries_the_bytes_queued_at_both_ends_and_their_growth():
    # a fast client, a slow server: what the server has not read waits in its receive queue, and
    # once its window is full, in the client's send queue
    start = _tcp_snapshot(0.0, client_wq=100_000, server_rq=60_000)
    end = _tcp_snapshot(2.0, client_wq=1_100_000, server_rq=90_000)
    edge = _tcp_edge(end, start)
    assert edge.metrics["queued_bytes"] == 1_190_000
    assert edge.metrics["queued_bytes_growth_per_s"] == 515_000.0
    assert edge.attrs["queued_toward"] == "target"  # the server is the slow reader


def test_tcp_queue_toward_the_client_names_the_source_as_the_reader():
    start = _tcp_snapshot(0.0, client_wq=0, server_rq=0, server_wq=10_000, client_rq=5_000)
    end = _tcp_snapshot(2.0, client_wq=0, server_rq=0, server_wq=500_000, client_rq=100_000)
    edge = _tcp_edge(end, start)
    assert (edge.metrics["queued_bytes"], edge.attrs["queued_toward"]) == (600_000, "source")


def test_tcp_queue_of_a_connection_opened_in_the_window_grew_from_nothing_and_none_without_a_start():
    start = _tcp_snapshot(0.0, client_wq=0, server_rq=0, cookies=(70, 80))  # another connection
    end = _tcp_snapshot(2.0, client_wq=200_000, server_rq=100_000)
    assert _tcp_edge(end, start).metrics["queued_bytes_growth_per_s"] == 150_000.0
    edge = _tcp_edge(end, None)
    assert edge.metrics["queued_bytes"] == 300_000 and "queued_bytes_growth_per_s" not in edge.metrics


def test_an_empty_tcp_connection_has_no_reader_side():
    edge = _tcp_edge(_tcp_snapshot(2.0, 0, 0), _tcp_snapshot(0.0, 0, 0))
    assert edge.metrics["queued_bytes"] == 0 and edge.metrics["queued_bytes_growth_per_s"] == 0.0
    assert "queued_toward" not in edge.attrs


@pytest.mark.live
def test_tcp_edge_counts_the_bytes_nobody_read():
    """A client sends 200,000 bytes that the server never reads: they wait at one end or the other."""
    srv = spawn("import socket, time\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
                "print(s.getsockname()[1], flush=True)\nc, _ = s.accept(); time.sleep(60)\n", stdout=subprocess.PIPE)
    children = [srv]
    try:
        port = wait_line(srv)
        client = spawn(TCP_CLIENT, port, "200000", stdout=subprocess.PIPE, stdin=subprocess.PIPE)
        children.append(client)
        wait_line(client)
        ctx = Context(duration_s=1.0, interval_s=1.0, pids={p.pid for p in children})
        collector = ipc.IpcCollector(ctx)
        collector.start()
        client.stdin.write("go\n")
        client.stdin.flush()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # until every byte is in a queue
            queued = sum(s.rqueue + s.wqueue for s in sockdiag.tcp_sockets()
                         if s.state == "ESTAB" and int(port) in (s.local[1], s.remote[1]))
            if queued >= 200_000:
                break
            time.sleep(0.02)
        graph = collector.finish()
    finally:
        for p in children:
            p.kill()
        for p in children:
            p.wait()
    [edge] = [e for e in graph.edges("tcp") if e.source == process_id(ctx.host, client.pid)]
    assert edge.target == process_id(ctx.host, srv.pid)
    assert edge.metrics["queued_bytes"] == 200_000
    assert edge.metrics["queued_bytes_growth_per_s"] > 0 and edge.attrs["queued_toward"] == "target"


def test_bytes_received_but_not_yet_acknowledged_are_counted_once():
    # as read on loopback under a delayed ACK: 200,000 bytes sent, none read; the server holds
    # 127,973 of them, of which the client has seen 32,741 acknowledged (its count has the SYN too)
    end = _tcp_snapshot(2.0, client_wq=167_259, server_rq=127_973)
    client, server = end.tcp[1], end.tcp[2]
    client.bytes_acked, server.bytes_received = 32_742, 127_973
    assert _tcp_edge(end, None).metrics["queued_bytes"] == 200_000


@pytest.mark.live
def test_only_processes_holding_shared_memory_have_their_maps_read(monkeypatch):
    """With the process collector's RssShmem at the window's end, the maps of a process that holds no
    shared memory page are not read (the window's most expensive read); the /dev/shm users are."""
    shm_path = f"/dev/shm/witty-test-rss-{os.getpid()}"
    children = [spawn(SHM_USER, shm_path, stdout=subprocess.PIPE) for _ in range(2)]
    children.append(spawn(HOLD, stdout=subprocess.PIPE))  # maps nothing shared
    read = []
    real = ipc._read_maps_shm
    monkeypatch.setattr(ipc, "_read_maps_shm", lambda path: read.append(int(path.split("/")[-2])) or real(path))
    try:
        for p in children[:2]:
            wait_line(p)
        from witty_profiler.collectors.engine import run_window
        graph = run_window(0.3, 0.3, pids=[p.pid for p in children], collectors=["process", "ipc"])
    finally:
        for p in children:
            p.kill()
            p.wait()
        Path(shm_path).unlink(missing_ok=True)
    host = graph.meta.hosts[0]
    a, b = sorted(p.pid for p in children[:2])
    [edge] = [e for e in graph.edges("shm") if (e.source, e.target) == (process_id(host, a), process_id(host, b))]
    assert edge.attrs["path"] == shm_path
    assert {a, b} <= set(read)
    # a SysV segment attached anywhere (this module's other processes may hold one) means all maps are read
    attached = any(row["nattch"] for row in ipc.parse_sysvipc(Path("/proc/sysvipc/shm").read_text()))
    assert (children[2].pid in read) == attached


def test_any_attached_sysv_segment_means_every_maps_is_read():
    resident = {"rss_shmem_kb": {10: 0, 11: 4}}
    assert ipc._resident_shmem(resident, []) == {10: 0, 11: 4}
    assert ipc._resident_shmem(resident, [{"shmid": 3, "nattch": 0}]) == {10: 0, 11: 4}
    assert ipc._resident_shmem(resident, [{"shmid": 3, "nattch": 2}]) == {}  # attached, maybe never touched
    assert ipc._resident_shmem({}, []) == {}  # no process collector: every maps is read
