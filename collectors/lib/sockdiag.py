"""Socket tables from the kernel: a small NETLINK_SOCK_DIAG client, and parsers of `ss` output.

sock_diag is what `ss` itself uses: one netlink dump returns every socket of a family with its
inode, queues and (for TCP) its `struct tcp_info`, without a process spawn and without parsing
text. Cost: one syscall round trip per ~30 sockets, a few milliseconds for thousands of sockets.
The owner of a socket is not in the dump; collectors.fdscan maps socket inodes to processes.
`ss -tanieH` / `ss -xaH` are the fallbacks where a netlink family is missing (unix_diag or
inet_diag not built); their parsers are pure and tested on recorded output.
"""

from __future__ import annotations

import errno
import ipaddress
import re
import socket
import struct
import subprocess
import time

from witty_profiler.topology.lazy import LazyPattern
from witty_profiler.topology.models import Fields

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300

UDIAG_SHOW_NAME, UDIAG_SHOW_PEER, UDIAG_SHOW_RQLEN = 0x1, 0x4, 0x10
UNIX_DIAG_NAME, UNIX_DIAG_PEER, UNIX_DIAG_RQLEN = 0, 2, 4
INET_DIAG_INFO = 2

TCP_STATES = {1: "ESTAB", 2: "SYN-SENT", 3: "SYN-RECV", 4: "FIN-WAIT-1", 5: "FIN-WAIT-2", 6: "TIME-WAIT",
              7: "UNCONN", 8: "CLOSE-WAIT", 9: "LAST-ACK", 10: "LISTEN", 11: "CLOSING"}
TCP_LISTEN = 10

_NLMSG = struct.Struct("=IHHII")
_RTATTR = struct.Struct("=HH")


class SockDiagError(OSError):
    """The kernel refused the dump (family not built, no netlink, ...)."""


class UnixSock(Fields):
    _FIELDS = ("inode", "peer", "name", "rqueue", "state")

    def __init__(self, inode: int, peer: int | None, name: str | None, rqueue: int | None, state: int = 0) -> None:
        self.inode = inode
        self.peer = peer
        self.name = name
        self.rqueue = rqueue  # bytes waiting to be read on this end (stream) or datagrams
        self.state = state


class TcpSock(Fields):
    _FIELDS = ("local", "remote", "state", "inode", "cookie", "rqueue", "wqueue", "rtt_us", "rtt_var_us",
               "total_retrans", "bytes_acked", "bytes_received", "pid", "extra")

    def __init__(self, local: tuple[str, int], remote: tuple[str, int], state: str, inode: int, cookie: int,
                 rqueue: int = 0, wqueue: int = 0, rtt_us: int | None = None, rtt_var_us: int | None = None,
                 total_retrans: int | None = None, bytes_acked: int | None = None,
                 bytes_received: int | None = None, pid: int | None = None,
                 extra: dict[str, int] | None = None) -> None:
        self.local = local
        self.remote = remote
        self.state = state
        self.inode = inode
        self.cookie = cookie
        self.rqueue = rqueue
        self.wqueue = wqueue
        self.rtt_us = rtt_us
        self.rtt_var_us = rtt_var_us
        self.total_retrans = total_retrans
        self.bytes_acked = bytes_acked
        self.bytes_received = bytes_received
        self.pid = pid  # only from `ss -p`
        self.extra = {} if extra is None else extra


def endpoint(addr: tuple[str, int]) -> str:
    """'127.0.0.1:80' or '[::1]:80'."""
    host, port = addr
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_local_address(host: str) -> bool:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_loopback


# -- netlink ------------------------------------------------------------------------------
def _dump(request: bytes) -> list[bytes]:
    """Send one SOCK_DIAG_BY_FAMILY dump request; return the payload of every answer message."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    except OSError as exc:
        raise SockDiagError(exc.errno, f"netlink sock_diag socket: {exc.strerror}") from exc
    with sock:
        sock.sendto(_NLMSG.pack(_NLMSG.size + len(request), SOCK_DIAG_BY_FAMILY,
                                NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + request, (0, 0))
        out: list[bytes] = []
        while True:
            data = sock.recv(1 << 16)
            if not data:
                return out
            offset = 0
            while offset + _NLMSG.size <= len(data):
                length, kind, _, _, _ = _NLMSG.unpack_from(data, offset)
                if length < _NLMSG.size:
                    return out
                if kind == NLMSG_DONE:
                    return out
                if kind == NLMSG_ERROR:
                    (err,) = struct.unpack_from("=i", data, offset + _NLMSG.size)
                    if err:
                        raise SockDiagError(-err, f"sock_diag dump refused: {errno.errorcode.get(-err, err)}")
                    return out
                out.append(data[offset + _NLMSG.size: offset + length])
                offset += (length + 3) & ~3


def _attrs(payload: bytes, offset: int) -> dict[int, bytes]:
    found: dict[int, bytes] = {}
    while offset + _RTATTR.size <= len(payload):
        length, kind = _RTATTR.unpack_from(payload, offset)
        if length < _RTATTR.size:
            break
        found[kind] = payload[offset + _RTATTR.size: offset + length]
        offset += (length + 3) & ~3
    return found


def unix_sockets() -> list[UnixSock]:
    """Every unix socket of this network namespace with its peer inode, bound name and receive queue."""
    request = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0,
                          UDIAG_SHOW_NAME | UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN, 0xFFFFFFFF, 0xFFFFFFFF)
    socks = []
    for msg in _dump(request):
        _family, _type, state, _pad, inode = struct.unpack_from("=BBBBI", msg)
        attrs = _attrs(msg, 16)
        peer = struct.unpack("=I", attrs[UNIX_DIAG_PEER][:4])[0] if UNIX_DIAG_PEER in attrs else None
        name = attrs.get(UNIX_DIAG_NAME)
        rq = struct.unpack("=II", attrs[UNIX_DIAG_RQLEN][:8])[0] if UNIX_DIAG_RQLEN in attrs else None
        socks.append(UnixSock(inode, peer or None, _unix_name(name), rq, state))
    return socks


def _unix_name(raw: bytes | None) -> str | None:
    if not raw:
        return None
    if raw[0] == 0:  # abstract namespace, shown as ss shows it
        return "@" + raw[1:].decode(errors="replace")
    return raw.rstrip(b"\0").decode(errors="replace")


# struct tcp_info (linux/tcp.h): offsets of the fields we read; older kernels send a shorter struct.
_TCPI = {"rtt_us": (68, "I"), "rtt_var_us": (72, "I"), "total_retrans": (100, "I"),
         "bytes_acked": (120, "Q"), "bytes_received": (128, "Q")}


def parse_tcp_info(info: bytes) -> dict[str, int]:
    values = {}
    for name, (offset, fmt) in _TCPI.items():
        size = struct.calcsize("=" + fmt)
        if len(info) >= offset + size:
            values[name] = struct.unpack_from("=" + fmt, info, offset)[0]
    return values


def _inet_addr(family: int, raw: bytes) -> str:
    return socket.inet_ntop(family, raw[:4] if family == socket.AF_INET else raw[:16])


def tcp_sockets(with_info: bool = True) -> list[TcpSock]:
    """Every TCP socket (IPv4 and IPv6) of this network namespace, with tcp_info where asked."""
    socks = []
    for family in (socket.AF_INET, socket.AF_INET6):
        ext = 1 << (INET_DIAG_INFO - 1) if with_info else 0
        request = struct.pack("=BBBxI", family, socket.IPPROTO_TCP, ext, 0xFFFFFFFF) + bytes(48)
        try:
            answers = _dump(request)
        except SockDiagError:
            if family == socket.AF_INET:
                raise
            continue  # a kernel booted with ipv6.disable=1 has no IPv6 sockets to list
        for msg in answers:
            _fam, state, _timer, _retrans = struct.unpack_from("=BBBB", msg)
            sport, dport = struct.unpack_from("!HH", msg, 4)
            src, dst = msg[8:24], msg[24:40]
            cookie = struct.unpack_from("=Q", msg, 44)[0]
            _expires, rqueue, wqueue, _uid, inode = struct.unpack_from("=IIIII", msg, 52)
            sock = TcpSock(local=(_inet_addr(family, src), sport), remote=(_inet_addr(family, dst), dport),
                           state=TCP_STATES.get(state, str(state)), inode=inode, cookie=cookie,
                           rqueue=rqueue, wqueue=wqueue)
            info = _attrs(msg, 72).get(INET_DIAG_INFO)
            if info:
                for key, value in parse_tcp_info(info).items():
                    setattr(sock, key, value)
            socks.append(sock)
    return socks


# -- ss fallback --------------------------------------------------------------------------
_ADDR = LazyPattern(globals(), "_ADDR", r"^(.*):([0-9]+|\*)$")
_PID = LazyPattern(globals(), "_PID", r"pid=(\d+)")


def _split_addr(text: str) -> tuple[str, int]:
    m = _ADDR.match(text)
    if not m:
        return text, 0
    host = m.group(1).strip("[]")
    host = host.split("%")[0]  # 'fe80::1%eth0'
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    return host, 0 if m.group(2) == "*" else int(m.group(2))


def parse_ss_tcp(text: str) -> list[TcpSock]:
    """Parse `ss -tinpH` (or `-taniepH`): a socket line, then an indented line of tcp_info fields."""
    socks: list[TcpSock] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            parts = line.split()
            if len(parts) < 5:
                continue
            state, rq, wq, local, remote = parts[:5]
            rest = " ".join(parts[5:])
            inode = re.search(r"ino:(\d+)", rest)
            cookie = re.search(r"sk:([0-9a-f]+)", rest)
            pid = _PID.search(rest)
            socks.append(TcpSock(local=_split_addr(local), remote=_split_addr(remote), state=state,
                                 inode=int(inode.group(1)) if inode else 0,
                                 cookie=int(cookie.group(1), 16) if cookie else 0,
                                 rqueue=int(rq), wqueue=int(wq), pid=int(pid.group(1)) if pid else None))
        elif socks:
            _parse_ss_info(line, socks[-1])
    return socks


def _parse_ss_info(line: str, sock: TcpSock) -> None:
    rtt = re.search(r"\brtt:([\d.]+)/([\d.]+)", line)
    if rtt:  # ss prints milliseconds
        sock.rtt_us = round(float(rtt.group(1)) * 1000)
        sock.rtt_var_us = round(float(rtt.group(2)) * 1000)
    for key, attr in (("bytes_acked", "bytes_acked"), ("bytes_received", "bytes_received")):
        m = re.search(rf"\b{key}:(\d+)", line)
        if m:
            setattr(sock, attr, int(m.group(1)))
    retrans = re.search(r"\bretrans:\d+/(\d+)", line)
    sock.total_retrans = int(retrans.group(1)) if retrans else 0


def parse_ss_unix(text: str) -> list[UnixSock]:
    """Parse `ss -xaH`: netid, state, Recv-Q, Send-Q, local name (or '*') and inode, peer name and inode."""
    states = {name: num for num, name in TCP_STATES.items()}
    socks = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8 or not parts[-1].isdigit() or not parts[-3].isdigit():
            continue
        name = " ".join(parts[4:-3])
        peer = int(parts[-1])
        socks.append(UnixSock(inode=int(parts[-3]), peer=peer or None, name=None if name == "*" else name,
                              rqueue=int(parts[2]) if parts[2].isdigit() else None, state=states.get(parts[1], 0)))
    return socks


def unix_table() -> tuple[list[UnixSock] | None, str | None]:
    """Unix sockets with their peers by sock_diag, else by `ss -xaH`; (None, why) when neither works."""
    try:
        return unix_sockets(), None
    except OSError as exc:
        try:
            out = subprocess.run(["ss", "-xaH"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return None, (f"unix socket peers unavailable (sock_diag: {exc}; load the unix_diag module "
                          "or install iproute2 for `ss`)")
        return parse_ss_unix(out), None


def tcp_table() -> tuple[list[TcpSock] | None, str | None]:
    """The TCP table by sock_diag, else by `ss -tanieH`; (None, why) when neither works."""
    try:
        return tcp_sockets(), None
    except OSError as exc:
        try:
            out = subprocess.run(["ss", "-tanieH"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return None, f"TCP table unavailable (sock_diag: {exc}; `ss` not runnable: install iproute2)"
        return parse_ss_tcp(out), None


MAX_AGE_S = 0.5


def shared_tcp_table(cache: dict, phase: str) -> tuple[list[TcpSock] | None, str | None]:
    """The TCP table of one phase ('start' or 'end') of the round, shared by the collectors that
    read it then (IPC and network); dumped again if the cached one is older than MAX_AGE_S."""
    key = f"sockdiag:tcp:{phase}"
    cached = cache.get(key)
    if cached is None or time.monotonic() - cached[0] > MAX_AGE_S:
        cached = (time.monotonic(), *tcp_table())
        cache[key] = cached
    return cached[1], cached[2]
