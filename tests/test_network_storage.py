"""The network and storage collectors: live against traffic and I/O this test makes (a veth pair
into a network namespace of its own, a loopback TCP transfer, a file written and synced), and
their parsers on /proc and `ss` text recorded on a real host."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from witty_profiler.collectors import network, storage
from witty_profiler.collectors.base import Context
from witty_profiler.collectors.lib import sockdiag
from witty_profiler.topology.ids import host_id, process_id

FRAMES, PAYLOAD = 200, 1000
ETH_P_EXPERIMENTAL = 0x88B5  # IEEE 802 local experimental ethertype: no stack handles it, nothing is routed
SEND_FRAMES = """
import socket, sys
ifname, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((ifname, 0))
mac = open(f'/sys/class/net/{ifname}/address').read().strip()
frame = b'\\xff' * 6 + bytes.fromhex(mac.replace(':', '')) + (0x88B5).to_bytes(2, 'big') + b'w' * size
for _ in range(count):
    s.send(frame)
"""


def run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


@pytest.fixture
def veth():
    """A veth pair: one end here, its peer in a namespace this test creates; no addresses anywhere."""
    if os.geteuid() != 0:
        pytest.skip("creating a network namespace and a veth pair needs root")
    if not shutil.which("ip"):
        pytest.skip("`ip` (iproute2) is not installed")
    tag = os.getpid() % 100000
    ns, here, there = f"witty-test-{tag}", f"wtn{tag}a", f"wtn{tag}b"
    try:
        run("ip", "netns", "add", ns)
        run("ip", "link", "add", here, "type", "veth", "peer", "name", there, "netns", ns)
    except subprocess.CalledProcessError as exc:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        pytest.skip(f"cannot create a namespace with a veth pair here: {exc.stderr.decode().strip()}")
    try:
        # no IPv6 autoconfiguration chatter on either end: the only frames are the test's
        ipv6 = Path(f"/proc/sys/net/ipv6/conf/{here}/disable_ipv6")
        if ipv6.exists():
            ipv6.write_text("1")
        subprocess.run(["ip", "netns", "exec", ns, "sh", "-c",
                        f"test ! -e /proc/sys/net/ipv6/conf/{there} || echo 1 > /proc/sys/net/ipv6/conf/{there}/disable_ipv6"],
                       check=True, capture_output=True, timeout=30)
        run("ip", "link", "set", here, "up")
        run("ip", "netns", "exec", ns, "ip", "link", "set", there, "up")
        yield ns, here, there
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.live
def test_veth_traffic_shows_as_nic_rates(veth):
    ns, here, there = veth
    collector = network.NetworkCollector(Context(duration_s=1.0, interval_s=0.5))
    began = time.monotonic()
    collector.start()
    # frames into our end from the namespace (rx here), and out of our end into it (tx here)
    run("ip", "netns", "exec", ns, sys.executable, "-c", SEND_FRAMES, there, str(FRAMES), str(PAYLOAD))
    collector.sample()
    run(sys.executable, "-c", SEND_FRAMES, here, str(FRAMES // 2), str(PAYLOAD))
    graph = collector.finish()
    window = time.monotonic() - began  # the series span at most this long

    nic = graph.entity(f"nic:{collector.ctx.host}:{here}")
    assert nic is not None and nic.attrs["virtual"] is True
    m = nic.metrics
    assert m["rx_bytes_per_s"] * window >= FRAMES * PAYLOAD
    assert m["tx_bytes_per_s"] * window >= FRAMES // 2 * PAYLOAD
    assert m["rx_packets_per_s"] * window >= FRAMES
    # the frames counted are the test's: 14 bytes of Ethernet header + the payload each
    assert m["rx_bytes_per_s"] / m["rx_packets_per_s"] == pytest.approx(PAYLOAD + 14, rel=0.02)
    assert m["rx_bytes_per_s_max"] >= m["rx_bytes_per_s"]
    assert m["rx_errors_per_s"] == 0
    assert graph.entity(f"nic:{collector.ctx.host}:lo").attrs["virtual"] is True


@pytest.mark.live
def test_loopback_tcp_connection_state():
    received = 250_000
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    client = socket.create_connection(srv.getsockname())
    server, _ = srv.accept()
    local, remote = client.getsockname(), srv.getsockname()
    try:
        collector = network.NetworkCollector(Context(duration_s=1.0, interval_s=1.0, pids={os.getpid()}))
        collector.start()
        client.sendall(b"t" * received)
        got = 0
        while got < received:
            got += len(server.recv(1 << 16))
        deadline = time.monotonic() + 5  # the last ACK may be a delayed one
        while time.monotonic() < deadline and not any(
                s.local == local and (s.bytes_acked or 0) > received for s in sockdiag.tcp_sockets()):
            time.sleep(0.01)
        graph = collector.finish()
    finally:
        client.close(), server.close(), srv.close()

    host = collector.ctx.host
    cid = f"tcp_connection:{host}:{sockdiag.endpoint(local)}:{sockdiag.endpoint(remote)}"
    conn = graph.entity(cid)
    assert conn is not None, sorted(e.id for e in graph.entities("tcp_connection"))
    assert conn.attrs["state"] == "ESTAB" and conn.attrs["remote_is_local"] is True
    assert conn.attrs["pid"] == os.getpid()
    assert received <= conn.metrics["bytes_sent_total"] < received * 1.01
    assert conn.metrics["bytes_received_total"] == 0
    assert conn.metrics["rtt_us"] > 0 and conn.metrics["retrans_total"] == 0
    owners = [e.source for e in graph.edges("owns_connection") if e.target == cid]
    assert owners == [process_id(host, os.getpid())]
    tcp = graph.entity(host_id(host)).metrics
    assert tcp["tcp_out_segs_per_s"] > 0 and tcp["tcp_retrans_pct"] >= 0


# -- storage --------------------------------------------------------------------------------
def _disk_of(path: str) -> str | None:
    st = os.stat(path)
    link = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    return link.resolve().name.replace("!", "/") if link.exists() else None


@pytest.mark.live
def test_synced_writes_show_on_their_disk():
    directory = "/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir()
    disk = _disk_of(directory)
    if disk is None:
        pytest.skip(f"{directory} is not on a block device (tmpfs or overlay): no disk to watch")
    size = 8 << 20
    collector = storage.StorageCollector(Context(duration_s=1.0, interval_s=0.5))
    began = time.monotonic()
    collector.start()
    with tempfile.NamedTemporaryFile(dir=directory, prefix="witty-io-") as f:
        for _ in range(2):
            f.write(os.urandom(size // 2))
            f.flush()
            os.fsync(f.fileno())
            collector.sample()
    graph = collector.finish()
    window = time.monotonic() - began

    dev = graph.entity(f"block_device:{collector.ctx.host}:{disk}")
    assert dev is not None, [e.id for e in graph.entities("block_device")]
    m = dev.metrics
    assert m["write_bytes_per_s"] * window >= size * 0.9
    # The kernel counts busy time in whole jiffies, from a request's start to its end: requests that
    # a fast (e.g. host-cached virtual) disk completes within one tick add nothing, so a few synced
    # writes may show IOPS with 0 % utilisation.
    assert m["write_iops"] > 0 and m["disk_util_pct"] >= 0 and m["await_ms"] >= 0
    assert m["write_bytes_per_s_max"] >= m["write_bytes_per_s"]
    idle_loops = [e.id for e in graph.entities("block_device") if e.attrs["name"].startswith("loop")
                  and not (e.metrics.get("read_iops") or e.metrics.get("write_iops"))]
    assert idle_loops == []


# -- parsers on recorded text ----------------------------------------------------------------
NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    3193      29    0    0    0     0          0         0     3193      29    0    0    0     0       0          0
  ifb0:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
  eth0: 13909991     585    0    3    0     0          0         0    66317     540    0    1    0     0       0          0
"""
SNMP = """Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates OutTransmits
Ip: 2 64 4454 0 0 0 0 0 4454 3559 0 0 0 0 0 0 0 0 0 3559
IcmpMsg: InType3
IcmpMsg: 1
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 40 9 0 0 0 4418 3539 0 0 48 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 35 0 0 36 0 0 0 0 0
"""
DISKSTATS = """   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
 254       0 vda 23090 8634 1568194 8363 1600 7243 329680 1465 0 3312 10512 3278 68 42384 647 52 36
 253       0 zram0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
"""
SS_TINPH = """ESTAB 0      0      127.0.0.1:59161 127.0.0.1:38192 users:(("python3",pid=17096,fd=5))
\t bbr wscale:10,10 rto:200 rtt:0.026/0.013 ato:40 mss:32768 pmtu:65535 rcvmss:32741 advmss:65483 cwnd:10 bytes_received:70000 segs_out:2 segs_in:5 data_segs_in:3 bbr:(bw:0bps,mrtt:0.026) send 100824615385bps lastsnd:56 lastrcv:56 lastack:56 pacing_rate 288141767440bps delivered:1 app_limited rcv_space:65483 rcv_ssthresh:94833 minrtt:0.026 snd_wnd:65536
ESTAB 0      0      127.0.0.1:38192 127.0.0.1:59161 users:(("python3",pid=17096,fd=4))
\t bbr wscale:10,10 rto:204 rtt:0.044/0.025 mss:47616 pmtu:65535 rcvmss:536 advmss:65483 cwnd:13 bytes_sent:70000 bytes_acked:70001 segs_out:5 segs_in:3 data_segs_out:3 bbr:(bw:34629807856bps,mrtt:0.017,pacing_gain:2.88672,cwnd_gain:2.88672) send 112546909091bps lastsnd:60 lastrcv:60 lastack:60 pacing_rate 146774764592bps delivery_rate 34629818176bps delivered:4 rcv_space:65495 rcv_ssthresh:65495 minrtt:0.017 snd_wnd:95232
"""
SS_TANIEH = """LISTEN 0      128    127.0.0.1:59161   0.0.0.0:*     ino:19741 sk:32 cgroup:/ <->
\t bbr cwnd:10
ESTAB  0      0      127.0.0.1:38192 127.0.0.1:59161 ino:19742 sk:31 cgroup:/ <->
\t ts sack bbr wscale:10,10 rto:204 rtt:0.044/0.025 mss:47616 pmtu:65535 rcvmss:536 advmss:65483 cwnd:13 bytes_sent:70000 bytes_acked:70001 segs_out:5 segs_in:3 data_segs_out:3 retrans:0/2 send 112546909091bps delivered:4
"""


def test_parse_net_dev():
    dev = network.parse_net_dev(NET_DEV)
    assert set(dev) == {"lo", "ifb0", "eth0"}
    assert dev["eth0"] == {"rx_bytes": 13909991, "rx_packets": 585, "rx_errors": 0, "rx_drops": 3,
                           "tx_bytes": 66317, "tx_packets": 540, "tx_errors": 0, "tx_drops": 1}


def test_parse_snmp():
    snmp = network.parse_snmp(SNMP)
    assert snmp["Tcp"]["OutSegs"] == 3539 and snmp["Tcp"]["RetransSegs"] == 0 and snmp["Tcp"]["MaxConn"] == -1
    assert snmp["Udp"]["OutDatagrams"] == 36 and snmp["IcmpMsg"] == {"InType3": 1}


def test_link_util():
    assert network.link_util_pct(12.5e6, 1e6, 1000) == pytest.approx(10.0)


def test_parse_diskstats():
    rows = storage.parse_diskstats(DISKSTATS)
    assert set(rows) == {"loop0", "vda", "zram0"}
    vda = rows["vda"]
    assert (vda["reads"], vda["read_sectors"], vda["writes"], vda["write_sectors"], vda["io_ms"]) == \
        (23090, 1568194, 1600, 329680, 3312)
    assert vda["ios"] == 24690 and vda["io_wait_ms"] == 8363 + 1465


def test_parse_ss_tinph():
    a, b = sockdiag.parse_ss_tcp(SS_TINPH)
    assert (a.local, a.remote, a.state, a.pid) == (("127.0.0.1", 59161), ("127.0.0.1", 38192), "ESTAB", 17096)
    assert (a.rtt_us, a.rtt_var_us, a.bytes_received) == (26, 13, 70000)
    assert (b.bytes_acked, b.rtt_us, b.total_retrans) == (70001, 44, 0)


def test_parse_ss_with_inodes_and_listeners():
    listen, estab = sockdiag.parse_ss_tcp(SS_TANIEH)
    assert (listen.state, listen.remote, listen.inode, listen.cookie) == ("LISTEN", ("0.0.0.0", 0), 19741, 0x32)
    assert (estab.inode, estab.total_retrans, estab.bytes_acked) == (19742, 2, 70001)


@pytest.mark.live
def test_tcp_info_offsets_match_ss():
    """The netlink reader and `ss` agree on a live connection (struct tcp_info offsets are right)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    client = socket.create_connection(srv.getsockname())
    server, _ = srv.accept()
    try:
        client.sendall(b"o" * 40000)
        got = 0
        while got < 40000:
            got += len(server.recv(1 << 16))
        port = client.getsockname()[1]
        deadline = time.monotonic() + 5  # the last ACK may be a delayed one
        while True:
            mine = [s for s in sockdiag.tcp_sockets() if s.local == ("127.0.0.1", port)]
            if time.monotonic() > deadline or (mine and mine[0].bytes_acked == 40001):
                break
            time.sleep(0.01)
        if not shutil.which("ss"):
            pytest.skip("`ss` is not installed")
        text = subprocess.run(["ss", "-tinH", f"sport = :{port}"], capture_output=True, text=True).stdout
    finally:
        client.close(), server.close(), srv.close()
    [nl] = mine
    [ss] = sockdiag.parse_ss_tcp(text)
    assert nl.bytes_acked == ss.bytes_acked == 40001
    assert nl.state == ss.state == "ESTAB"
    assert abs(nl.rtt_us - ss.rtt_us) <= 1


@pytest.mark.live
def test_through_the_engine_with_vocabulary_names_only():
    engine = pytest.importorskip("witty_profiler.collectors.engine")
    from witty_profiler.topology.vocabulary import EDGE_TYPES, ENTITY_TYPES, metric_info
    graph = engine.run_window(duration_s=1.0, interval_s=0.5, collectors=["ipc", "network", "storage"])
    for name in ("ipc", "network", "storage"):
        assert graph.meta.collectors[name].status in ("ok", "partial"), graph.meta.collectors[name]
    assert graph.entities("nic") and graph.entity(host_id(graph.meta.hosts[0])) is not None
    for item in [*graph.entities(), *graph.edges()]:
        assert item.type in ENTITY_TYPES or item.type in EDGE_TYPES, item.type
        assert [m for m in item.metrics if metric_info(m) is None] == [], item.id
    assert graph.dangling_edges() == []


def _sock(local, remote, state="ESTAB", **kw) -> sockdiag.TcpSock:
    return sockdiag.TcpSock(local=local, remote=remote, state=state, inode=1, cookie=7, **kw)


def test_connection_metrics_over_the_window():
    start = _sock(("192.0.2.1", 40000), ("192.0.2.2", 443), total_retrans=3, bytes_acked=1000, bytes_received=50)
    end = _sock(("192.0.2.1", 40000), ("192.0.2.2", 443), total_retrans=5, bytes_acked=9000, bytes_received=80,
                rtt_us=120, rtt_var_us=30)
    assert network.connection_metrics(end, start) == {"rtt_us": 120, "rtt_var_us": 30, "retrans_total": 2,
                                                      "bytes_sent_total": 8000, "bytes_received_total": 30}
    # opened inside the window: everything it carried counts
    assert network.connection_metrics(end, None)["bytes_sent_total"] == 9000


def test_client_side_of_a_local_pair():
    from witty_profiler.collectors.ipc import client_side
    client = _sock(("127.0.0.1", 5000), ("127.0.0.1", 8080))
    server = _sock(("127.0.0.1", 8080), ("127.0.0.1", 5000))
    listening = {("0.0.0.0", 8080)}
    assert client_side(client, server, listening) == (True, "client_to_server")
    assert client_side(server, client, listening) == (False, "client_to_server")
    # listener gone: the ephemeral (higher) port is the client's
    assert client_side(_sock(("127.0.0.1", 45000), ("127.0.0.1", 8080)),
                       _sock(("127.0.0.1", 8080), ("127.0.0.1", 45000)), set()) == (True, "guessed_from_ports")
