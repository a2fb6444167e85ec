"""IPC topology: which process talks to which, through pipes, unix sockets, local TCP, shared
memory and SysV message queues, as process -> process edges.

Read at the start and the end of the window (the reads are expensive: every fd of every process,
the socket tables, and at the end /proc/PID/maps of each process holding shared memory), and edges
are drawn from the end state. Volumes where
the kernel keeps them: TCP bytes acked/received over the window (tcp_info), bytes queued in
pipes, unix sockets, TCP connections (both ends' receive and send queues) and message queues at
the end plus their growth over the window, and for sockets which end the queue waits for
(``queued_toward``). Pipes and shared memory have no byte counters. Connections opened and
closed inside the window are not seen.
"""

from __future__ import annotations

import fcntl
import os
import termios
import time
from pathlib import Path

from witty_profiler.collectors.base import Collector, register
from witty_profiler.collectors.lib import fdscan, sockdiag
from witty_profiler.collectors.lib.procfs import read_bytes
from witty_profiler.topology import Graph
from witty_profiler.topology.ids import entity_id, process_id
from witty_profiler.topology.lazy import LazyPattern
from witty_profiler.topology.models import Fields
from witty_profiler.topology.vocabulary import E, M, T

PAIRWISE_LIMIT = 16  # above this many sharers of one shm object, draw a star instead of all pairs


class Snapshot(Fields):
    _FIELDS = ("taken_at", "fds", "pipes", "pipe_queued", "unix", "tcp", "shm_maps", "sysv_shm", "sysv_msg",
               "problems")

    def __init__(self, taken_at: float, fds: fdscan.FdTable, pipes: dict[int, dict[int, str]] | None = None,
                 pipe_queued: dict[int, int] | None = None, unix: list[sockdiag.UnixSock] | None = None,
                 tcp: list[sockdiag.TcpSock] | None = None, shm_maps: dict[str, set[int]] | None = None,
                 sysv_shm: list[dict[str, int]] | None = None, sysv_msg: list[dict[str, int]] | None = None,
                 problems: list[str] | None = None) -> None:
        self.taken_at = taken_at
        self.fds = fds
        self.pipes = {} if pipes is None else pipes  # inode -> pid -> 'r'|'w'|'rw'
        self.pipe_queued = {} if pipe_queued is None else pipe_queued  # inode -> bytes
        self.unix = unix
        self.tcp = tcp
        self.shm_maps = {} if shm_maps is None else shm_maps  # '/dev/shm/x' or 'sysv:<shmid>' -> pids
        self.sysv_shm = [] if sysv_shm is None else sysv_shm
        self.sysv_msg = [] if sysv_msg is None else sysv_msg
        self.problems = [] if problems is None else problems


# -- pure parsers -------------------------------------------------------------------------
def parse_sysvipc(text: str) -> list[dict[str, int]]:
    """/proc/sysvipc/{shm,msg,sem}: a header line of column names, then one row of integers per object."""
    lines = text.splitlines()
    if not lines:
        return []
    names = lines[0].split()
    rows = []
    for line in lines[1:]:
        values = line.split()
        if len(values) >= len(names):
            rows.append({n: int(v) for n, v in zip(names, values)})
    return rows


def ipc_key(key: int) -> str:
    """A SysV IPC key as ipcs shows it (/proc/sysvipc prints it as a signed int)."""
    return f"0x{key & 0xFFFFFFFF:08x}"


_MAPS_SHM = LazyPattern(globals(), "_MAPS_SHM",
                        r"^\S+\s+\S+\s+\S+\s+\S+\s+(\d+)\s+(/dev/shm/\S.*?|/SYSV[0-9a-fA-F]{8})(?: \(deleted\))?$")


def parse_maps_shm(text: str) -> set[str]:
    """Shared memory objects a process maps: '/dev/shm/<name>' paths and 'sysv:<shmid>' segments."""
    found = set()
    for line in text.splitlines():
        if "/dev/shm/" not in line and "/SYSV" not in line:
            continue
        m = _MAPS_SHM.match(line)
        if m:
            inode, path = m.groups()
            found.add(f"sysv:{inode}" if path.startswith("/SYSV") else path)
    return found


# -- reading ------------------------------------------------------------------------------
def _pipe_queued(proc: Path, pid: int, fd: int) -> int | None:
    """Bytes waiting in a pipe: FIONREAD on a fresh read end opened through /proc (no data is taken)."""
    try:
        fdno = os.open(f"{proc}/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return int.from_bytes(fcntl.ioctl(fdno, termios.FIONREAD, b"\0\0\0\0"), "little")
    except OSError:
        return None
    finally:
        os.close(fdno)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _read_maps_shm(path: str) -> set[str]:
    """parse_maps_shm of /proc/PID/maps, read as bytes: most processes map no shared memory, and
    one search of the whole text finds that without decoding or splitting it."""
    raw = read_bytes(path)
    if raw is None or (b"/dev/shm/" not in raw and b"/SYSV" not in raw):
        return set()
    return parse_maps_shm(raw.decode("utf-8", "replace"))


def snapshot(proc: Path, cache: dict, phase: str, maps: bool = True) -> Snapshot:
    """What the IPC edges are drawn from. maps=False leaves out the shared memory mappings (every
    /proc/PID/maps, the most expensive read): the edges use only the end's, so the start skips them."""
    snap = Snapshot(taken_at=time.monotonic(), fds=fdscan.shared_scan(proc, cache, phase))
    for inode, holders in snap.fds.inodes("pipe").items():
        if len(holders) < 2:
            continue  # a pipe within one process links no two processes
        for pid, fds in holders.items():
            modes = {fdscan.access_mode(proc, pid, fd) for fd in fds} - {None}
            mode = "rw" if "rw" in modes or modes >= {"r", "w"} else next(iter(modes), None)
            if mode:
                snap.pipes.setdefault(inode, {})[pid] = mode
        if len({p for p, m in snap.pipes.get(inode, {}).items()}) >= 2:
            pid, fds = next(iter(holders.items()))
            queued = _pipe_queued(proc, pid, fds[0])
            if queued is not None:
                snap.pipe_queued[inode] = queued
    snap.unix, problem = sockdiag.unix_table()
    if problem:
        snap.problems.append(problem)
    snap.tcp, problem = sockdiag.shared_tcp_table(cache, phase)
    if problem:
        snap.problems.append(problem)
    snap.sysv_shm = parse_sysvipc(_read(f"{proc}/sysvipc/shm") or "")
    snap.sysv_msg = parse_sysvipc(_read(f"{proc}/sysvipc/msg") or "")
    if maps:
        resident = _resident_shmem(cache, snap.sysv_shm)
        for pid, fds in snap.fds.links.items():
            objects = {t.removesuffix(" (deleted)") for t in fds.values() if t.startswith("/dev/shm/")}
            if resident.get(pid) != 0:
                objects |= _read_maps_shm(f"{proc}/{pid}/maps")
            for key in objects:
                snap.shm_maps.setdefault(key, set()).add(pid)
    return snap


def _resident_shmem(cache: dict, sysv_shm: list[dict]) -> dict[int, int | None]:
    """pid -> kB of shared memory it holds resident (RssShmem, as the process collector read it at the
    window's end): a process with none maps no /dev/shm file that carries data, and its maps, the most
    expensive read of the window, are left unread. A SysV segment is attached without touching it
    (its users hold no page until they use it): while any is attached, every process's maps are read."""
    if any((row.get("nattch") or 0) > 0 for row in sysv_shm):
        return {}
    return cache.get("rss_shmem_kb") or {}


# -- edges --------------------------------------------------------------------------------
class _Edges:
    """Accumulates process -> process edges of one type, summing the channels they aggregate."""

    def __init__(self, host: str, scope: set[int] | None) -> None:
        self.host, self.scope = host, scope
        self.found: dict[tuple, dict] = {}

    def add(self, kind: str, src: int, dst: int, attrs: dict, metrics: dict, qualifier: str | None = None,
            toward: tuple[int, int] | None = None) -> None:
        """`toward`: of the bytes queued on this channel, (those waiting for dst to read them,
        those waiting for src), where a socket carries data both ways."""
        if src == dst or (self.scope is not None and src not in self.scope and dst not in self.scope):
            return
        edge = self.found.setdefault((kind, src, dst, qualifier), {"attrs": dict(attrs), "metrics": {M.CHANNELS: 0}})
        edge["metrics"][M.CHANNELS] += 1
        for name, value in metrics.items():
            if value is not None:
                edge["metrics"][name] = edge["metrics"].get(name, 0) + value
        if toward is not None:
            before = edge.get("toward", (0, 0))
            edge["toward"] = (before[0] + toward[0], before[1] + toward[1])

    def into(self, graph: Graph, proc: Path) -> None:
        """Add the edges and a minimal entity for each process they touch (no dangling edges when the
        process collector is off or scoped differently; its fuller entity merges over this one)."""
        ends = sorted({pid for _, src, dst, _ in self.found for pid in (src, dst)})
        for pid in ends:
            name = fdscan.comm(proc, pid)
            graph.entity_of(T.PROCESS, process_id(self.host, pid), {"pid": pid, **({"name": name} if name else {})})
        for (kind, src, dst, qualifier), edge in sorted(self.found.items(), key=lambda kv: str(kv[0])):
            attrs = edge["attrs"]
            to_target, to_source = edge.get("toward", (0, 0))
            if to_target or to_source:  # the end that reads too slowly, where bytes wait
                attrs["queued_toward"] = ("target" if to_target > to_source else "source" if to_source > to_target
                                          else "both")
            graph.edge_of(kind, process_id(self.host, src), process_id(self.host, dst), attrs, edge["metrics"],
                          qualifier)


def _growth(end: int | None, start: int | None, seconds: float) -> float | None:
    if end is None or start is None or seconds <= 0:
        return None
    return round((end - start) / seconds, 3)


def pipe_edges(edges: _Edges, end: Snapshot, start: Snapshot | None, seconds: float) -> None:
    for inode, holders in sorted(end.pipes.items()):
        writers = [p for p, m in holders.items() if "w" in m]
        readers = [p for p, m in holders.items() if "r" in m]
        queued = end.pipe_queued.get(inode)
        growth = _growth(queued, start.pipe_queued.get(inode) if start else None, seconds)
        for w in writers:
            for r in readers:
                direction = "writer_to_reader" if holders[w] == "w" and holders[r] == "r" else "unknown"
                edges.add(E.PIPE, w, r, {"inode": inode, "direction": direction},
                          {M.QUEUED_BYTES: queued, M.QUEUED_BYTES_GROWTH_PER_S: growth})


def unix_edges(edges: _Edges, end: Snapshot, start: Snapshot | None, seconds: float) -> None:
    if end.unix is None:
        return
    owners = end.fds.inodes("socket")
    by_inode = {s.inode: s for s in end.unix}
    before = {s.inode: s.rqueue for s in (start.unix or [])} if start else {}
    for sock in end.unix:
        peer = by_inode.get(sock.peer) if sock.peer else None
        if peer is None or sock.inode > peer.inode or sock.inode not in owners or peer.inode not in owners:
            continue
        # The accepting (server) end carries the bound path; the connecting end has none.
        client, server, direction = sock, peer, "client_to_server"
        if bool(sock.name) == bool(peer.name):
            direction = "unordered"
        elif sock.name:
            client, server = peer, sock
        queued = (client.rqueue or 0) + (server.rqueue or 0)
        queued_before = None
        if client.inode in before and server.inode in before:
            queued_before = (before[client.inode] or 0) + (before[server.inode] or 0)
        attrs = {"inode": client.inode, "peer_inode": server.inode, "direction": direction}
        if server.name:
            attrs["path"] = server.name
        for a in sorted(owners[client.inode]):
            for b in sorted(owners[server.inode]):
                src, dst = (a, b) if direction != "unordered" or a < b else (b, a)
                # a socket's receive queue holds what its owner has not read yet
                toward = (server.rqueue or 0, client.rqueue or 0)
                edges.add(E.UNIX_SOCKET, src, dst, attrs,
                          {M.QUEUED_BYTES: queued, M.QUEUED_BYTES_GROWTH_PER_S: _growth(queued, queued_before, seconds)},
                          toward=toward if src == a else toward[::-1])


def _listening(socks: list[sockdiag.TcpSock]) -> set[tuple[str, int]]:
    return {s.local for s in socks if s.state == "LISTEN"}


def _is_server(sock: sockdiag.TcpSock, listening: set[tuple[str, int]]) -> bool:
    host, port = sock.local
    return any((h, port) in listening for h in (host, "0.0.0.0", "::", "*"))


def client_side(sock: sockdiag.TcpSock, peer: sockdiag.TcpSock, listening: set[tuple[str, int]]) -> tuple[bool, str]:
    """Whether `sock` is the connecting end: the other end's port is listening, else the higher (ephemeral) port."""
    mine, theirs = _is_server(sock, listening), _is_server(peer, listening)
    if mine != theirs:
        return theirs, "client_to_server"
    return sock.local[1] > peer.local[1], "guessed_from_ports"


def tcp_edges(edges: _Edges, end: Snapshot, start: Snapshot | None, seconds: float) -> None:
    if end.tcp is None:
        return
    owners = end.fds.inodes("socket")
    established = {(s.local, s.remote): s for s in end.tcp if s.state == "ESTAB"}
    listening = _listening(end.tcp)
    before = {s.cookie: s for s in (start.tcp or [])} if start else {}
    for (local, remote), sock in sorted(established.items()):
        peer = established.get((remote, local))
        if peer is None:
            continue  # the other end is not on this host
        is_client, direction = client_side(sock, peer, listening)
        if not is_client:
            continue  # each pair is drawn once, from its client end
        client_pids = owners.get(sock.inode, {}) or ({sock.pid: []} if sock.pid else {})
        server_pids = owners.get(peer.inode, {}) or ({peer.pid: []} if peer.pid else {})
        sent, received = _tcp_window_bytes(sock, before.get(sock.cookie) if sock.cookie else None)
        toward = _tcp_unread(sock, peer)
        queued = sum(toward)
        growth = _growth(queued, _tcp_queued_before(sock, peer, before) if start and start.tcp is not None
                         else None, seconds)
        attrs = {"client": sockdiag.endpoint(local), "server": sockdiag.endpoint(remote), "direction": direction}
        for a in sorted(client_pids):
            for b in sorted(server_pids):
                edges.add(E.TCP, a, b, attrs, {M.BYTES_SENT_TOTAL: sent, M.BYTES_RECEIVED_TOTAL: received,
                                               M.BYTES_PER_S: round((sent + received) / seconds, 3)
                                               if seconds > 0 and sent is not None and received is not None else None,
                                               M.QUEUED_BYTES: queued, M.QUEUED_BYTES_GROWTH_PER_S: growth},
                          toward=toward)


def _tcp_queued_before(sock: sockdiag.TcpSock, peer: sockdiag.TcpSock,
                       before: dict[int, sockdiag.TcpSock]) -> int | None:
    """The bytes queued in this connection at the start of the window (`before`: the start's
    table by socket cookie): 0 for one opened in the window (neither end in that table), None
    where the table cannot tell."""
    if not sock.cookie or not peer.cookie:
        return None
    ends = [before.get(sock.cookie), before.get(peer.cookie)]
    if ends[0] is None and ends[1] is None:
        return 0
    if ends[0] is None or ends[1] is None:
        return None
    return sum(_tcp_unread(ends[0], ends[1]))


def _tcp_unread(client: sockdiag.TcpSock, server: sockdiag.TcpSock) -> tuple[int, int]:
    """(bytes the client wrote that the server has not read, the same the other way). They wait in
    the writer's send queue (unsent, or sent and not yet acknowledged) and in the reader's receive
    queue; the bytes received but not yet acknowledged (a delayed ACK) are in both, and tcp_info
    counts them: received by the reader less acknowledged to the writer (whose count includes the
    SYN on the connecting end)."""
    def unread(writer: sockdiag.TcpSock, reader: sockdiag.TcpSock, syn: int) -> int:
        queued = writer.wqueue + reader.rqueue
        if writer.bytes_acked is not None and reader.bytes_received is not None:
            queued -= max(0, reader.bytes_received - max(writer.bytes_acked - syn, 0))
        return max(queued, 0)
    return unread(client, server, 1), unread(server, client, 0)


def _tcp_window_bytes(sock: sockdiag.TcpSock, old: sockdiag.TcpSock | None) -> tuple[int | None, int | None]:
    """Bytes over the window; a connection not seen at the start was opened in it (its SYN is acked too)."""
    if sock.bytes_acked is None or sock.bytes_received is None:
        return None, None
    if old is not None and old.bytes_acked is not None and old.bytes_received is not None:
        return sock.bytes_acked - old.bytes_acked, sock.bytes_received - old.bytes_received
    return max(sock.bytes_acked - 1, 0), sock.bytes_received


def shm_edges(edges: _Edges, graph: Graph, host: str, end: Snapshot) -> None:
    segments = {f"sysv:{row['shmid']}": row for row in end.sysv_shm if "shmid" in row}
    for key, pids in sorted(end.shm_maps.items()):
        if len(pids) < 2 or (edges.scope is not None and not pids & edges.scope):
            continue
        row = segments.get(key, {})
        attrs: dict = {"path": key} if key.startswith("/dev/shm/") else {
            "shmid": row.get("shmid"), "key": ipc_key(row.get("key", 0)), "creator_pid": row.get("cpid")}
        size = row.get("size") if row else _size(key)
        if size is not None:
            attrs["size_bytes"] = size
        shm_id = entity_id(T.SHARED_MEMORY, host, key)
        graph.entity_of(T.SHARED_MEMORY, shm_id, attrs)
        for pid in sorted(pids):
            graph.entity_of(T.PROCESS, process_id(host, pid), {"pid": pid})
            graph.edge_of(E.USES_SHM, process_id(host, pid), shm_id)
        ordered = sorted(pids)
        creator = row.get("cpid")
        if creator in pids:
            pairs = [(creator, p, "creator_to_user") for p in ordered if p != creator]
        elif len(ordered) <= PAIRWISE_LIMIT:
            pairs = [(a, b, "unordered") for i, a in enumerate(ordered) for b in ordered[i + 1:]]
        else:
            pairs = [(ordered[0], p, "unordered") for p in ordered[1:]]
        for a, b, direction in pairs:
            edges.add(E.SHM, a, b, {"path": key, "direction": direction}, {}, qualifier=key)


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def msg_edges(edges: _Edges, proc: Path, end: Snapshot, start: Snapshot | None, seconds: float) -> None:
    before = {row["msqid"]: row.get("cbytes") for row in (start.sysv_msg if start else [])}
    for row in end.sysv_msg:
        sender, receiver = row.get("lspid", 0), row.get("lrpid", 0)
        if not sender or not receiver or not all(os.path.exists(f"{proc}/{p}") for p in (sender, receiver)):
            continue
        edges.add(E.MSG_QUEUE, sender, receiver,
                  {"msqid": row["msqid"], "key": ipc_key(row["key"]), "messages": row.get("qnum")},
                  {M.QUEUED_BYTES: row.get("cbytes"),
                   M.QUEUED_BYTES_GROWTH_PER_S: _growth(row.get("cbytes"), before.get(row["msqid"]), seconds)},
                  qualifier=str(row["msqid"]))


@register
class IpcCollector(Collector):
    name = "ipc"
    reads = ("/proc/PID/fd, /proc/PID/maps, sock_diag (unix, TCP), /proc/sysvipc: pipes, sockets, shared memory, "
             "message queues")
    needs = "any user; root sees other users' processes"

    def start(self) -> None:
        self._start = snapshot(self.ctx.proc, self.ctx.cache, "start", maps=False)

    def finish(self) -> Graph:
        start = getattr(self, "_start", None)
        end = snapshot(self.ctx.proc, self.ctx.cache, "end")
        seconds = end.taken_at - start.taken_at if start else 0.0
        graph = self.fragment()
        edges = _Edges(self.ctx.host, self.ctx.pids)
        pipe_edges(edges, end, start, seconds)
        unix_edges(edges, end, start, seconds)
        tcp_edges(edges, end, start, seconds)
        msg_edges(edges, self.ctx.proc, end, start, seconds)
        shm_edges(edges, graph, self.ctx.host, end)
        edges.into(graph, self.ctx.proc)
        for problem in end.problems:
            self.partial(problem)
        if end.fds.denied:
            self.partial(f"fds of {end.fds.denied} processes unreadable (run as root to see all IPC)")
        return graph
