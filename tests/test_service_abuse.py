"""The REST service against abusive clients (SECURITY.md, "REST service: bad input and abusive clients"),
each against a real `witty-profiler serve` as tests/test_service.py starts it: what reaches no route is a
4xx with a JSON body and no traceback in the log; a body over the cap is refused without being read; slow
clients are cut at their deadline, connections over the cap are refused, the service's file descriptors
stay bounded, and it answers again after running out of them."""

from __future__ import annotations

import json
import os
import resource
import select
import socket
import time
from pathlib import Path

import pytest
from test_service import Http, service

pytestmark = [pytest.mark.live, pytest.mark.slow]


def config_file(tmp_path: Path, **server) -> str:
    path = tmp_path / "service.json"
    path.write_text(json.dumps({"server": server}))
    return str(path)


def log_of(c) -> str:
    """The service's stderr, once the `with service(...)` block has stopped it."""
    return c.proc.stderr.read()


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def json_error(answer, status: int) -> str:
    assert answer.status_code == status, (answer.status_code, answer.text)
    assert answer.headers["content-type"].startswith("application/json"), answer.headers
    return answer.json()["error"]


def raw(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send `data` on a new connection; everything the service answers until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
        return out


def answer_of(data: bytes) -> tuple[int, dict]:
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


# -- answers the routes never see: unknown routes and methods, broken HTTP ---------------------------------
def test_unknown_routes_methods_and_broken_http_are_json_4xx(tmp_path):
    with service(tmp_path / "state", "--stopped") as c:
        assert "/openapi.json" in json_error(c.get("/api/v1/nothing"), 404)
        assert "GET" in json_error(c.request("DELETE", "/api/v1/status"), 405)
        assert json_error(c.get("/api/v1/graphs/latest"), 409)
        status, body = answer_of(raw(c.port, b"NOT HTTP AT ALL\r\n\r\n"))
        assert status == 400 and "error" in body
        # headers that go on past 16 KiB (h11's cap on an incomplete head)
        status, body = answer_of(raw(c.port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 100_000))
        assert status == 400 and "error" in body
        for _ in range(50):  # a client sending garbage does not fill the log
            raw(c.port, b"\x00\x01\x02\r\n\r\n")
    log = log_of(c)
    assert "Traceback" not in log and log.count("\n") < 6, log


# -- 4. the body cap --------------------------------------------------------------------------------------
def test_a_body_over_the_cap_is_a_413_without_reading_it(tmp_path):
    with service(tmp_path / "state", "--stopped", "--config", config_file(tmp_path, max_body_mb=1)) as c:
        pid, host = c.proc.pid, f"127.0.0.1:{c.port}".encode()
        before = peak_rss_mib(pid)
        # a declared 512 MiB: refused on the headers alone, the body never sent
        status, body = answer_of(raw(c.port, b"POST /api/v1/trigger HTTP/1.1\r\nHost: " + host +
                                     b"\r\nContent-Type: application/json\r\nContent-Length: 536870912\r\n\r\n"))
        assert status == 413 and "1 MiB" in body["error"]
        # chunked, no length declared: the service stops reading at the cap and closes the connection
        sent, answer = 0, b""
        with socket.create_connection(("127.0.0.1", c.port), timeout=30) as s:
            s.sendall(b"POST /api/v1/trigger HTTP/1.1\r\nHost: " + host + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"100000\r\n" + b" " * (1 << 20) + b"\r\n"
            try:
                while sent < 512 << 20:
                    s.sendall(chunk)
                    sent += 1 << 20
            except OSError:  # reset or broken pipe: the service closed it
                pass
            try:
                while part := s.recv(65536):
                    answer += part
            except OSError:
                pass
        assert sent < 64 << 20, f"{sent >> 20} MiB went in before the service closed the connection"
        assert not answer or answer.startswith(b"HTTP/1.1 413"), answer[:200]  # or lost to the reset
        assert peak_rss_mib(pid) - before < 32, (before, peak_rss_mib(pid))
        # under the cap is read and judged as usual (nothing to keep yet: 409)
        padded = b'{"reason": "spike"}' + b" " * (1000 * 1000)
        assert c.post("/api/v1/trigger", content=padded).status_code == 409
        assert c.get("/api/v1/status").status_code == 200
    assert "Traceback" not in log_of(c)


# -- 5. slow clients, the connection cap, running out of descriptors ---------------------------------------
class Dribbler:
    """`n` connections that send a request one byte at a time, every `every_s`; what each was answered."""

    def __init__(self, port: int, n: int, head: bytes) -> None:
        self.head, self.socks, self.sent, self.answers, self.closed_at = head, [], {}, {}, {}
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.setblocking(False)
            self.socks.append(s)
            self.sent[s], self.answers[s] = 0, b""

    def open(self) -> list[socket.socket]:
        return [s for s in self.socks if s not in self.closed_at]

    def read(self, s: socket.socket) -> None:
        """What the service answered on `s`, if anything; closed when it closed the connection."""
        while True:
            try:
                data = s.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            self.answers[s] += data
            if not data:
                self.closed_at[s] = time.monotonic()
                return

    def step(self) -> None:
        readable, _, _ = select.select(self.open(), [], [], 0) if self.open() else ([], [], [])
        for s in readable:
            self.read(s)
        for s in self.open():
            try:
                s.send(self.head[self.sent[s]:self.sent[s] + 1])
                self.sent[s] += 1
            except OSError:
                self.read(s)
                self.closed_at[s] = time.monotonic()

    def statuses(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for data in self.answers.values():
            if data:
                status = int(data.split()[1])
                counts[status] = counts.get(status, 0) + 1
                assert "error" in json.loads(data.partition(b"\r\n\r\n")[2]), data
        return counts

    def close(self) -> None:
        for s in self.socks:
            s.close()


def test_300_slow_clients_are_cut_off_and_the_service_keeps_answering(tmp_path):
    cap, deadline = 50, 3
    with service(tmp_path / "state", "--stopped", "--config",
                 config_file(tmp_path, max_connections=cap, header_timeout_s=deadline, body_timeout_s=deadline)) as c:
        pid, baseline = c.proc.pid, fds(c.proc.pid)
        head = f"GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1:{c.port}\r\nX-Pad: {'a' * 200}\r\n\r\n".encode()
        start = time.monotonic()
        slow = Dribbler(c.port, 300, head)
        body = Dribbler(c.port, 5, b"")  # a head at once, then a body a byte at a time
        peak, during = fds(pid), None
        try:
            while slow.open() and time.monotonic() - start < deadline + 15:
                slow.step()
                peak = max(peak, fds(pid))
                if during is None:  # one normal client while the slow ones hold every slot: refused, not left hanging
                    during = Http(c.port).get("/api/v1/status").status_code
                time.sleep(0.5)
            cut_after = time.monotonic() - start
            assert not slow.open(), f"{len(slow.open())} slow clients still connected after {cut_after:.0f} s"
            statuses = slow.statuses()
            assert statuses.get(408, 0) >= cap - 10 and statuses.get(503, 0) >= 300 - cap - 10, statuses
            assert peak <= baseline + cap + 5, (baseline, peak)
            assert during in (200, 503)
            # once they are cut off, a normal client is answered at once
            t = time.monotonic()
            assert Http(c.port).get("/api/v1/status").status_code == 200
            assert time.monotonic() - t < 3
            # the body deadline: the head at once, then one byte of 100 every half second
            body.close()
            body = Dribbler(c.port, 5, b"")
            for s in body.socks:
                s.send(f"POST /api/v1/trigger HTTP/1.1\r\nHost: 127.0.0.1:{c.port}\r\nContent-Length: 100\r\n\r\n"
                       .encode())
            body.head = b"{" * 100
            t = time.monotonic()
            while body.open() and time.monotonic() - t < deadline + 10:
                body.step()
                time.sleep(0.5)
            assert not body.open() and body.statuses() == {408: 5}
            assert fds(pid) <= baseline + 2
        finally:
            slow.close()
            body.close()
    log = log_of(c)
    assert "Traceback" not in log and log.count("\n") < 10, log


def test_out_of_file_descriptors_the_service_logs_one_line_and_answers_again(tmp_path):
    with service(tmp_path / "state", "--stopped", "--config", config_file(tmp_path, header_timeout_s=60)) as c:
        pid = c.proc.pid
        limit = fds(pid) + 20
        try:  # as if something else had taken the descriptors: the cap (100) is above what is left
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))
        except (PermissionError, OSError) as exc:
            pytest.skip(f"cannot lower the service's open files limit here: {exc}")
        idle = [socket.create_connection(("127.0.0.1", c.port), timeout=10) for _ in range(60)]
        try:
            time.sleep(2)  # the accept loop meets EMFILE, over and over
            assert fds(pid) <= limit
        finally:
            for s in idle:
                s.close()
        t = time.monotonic()
        assert Http(c.port).get("/api/v1/status").status_code == 200
        assert time.monotonic() - t < 5
    log = log_of(c)
    assert "Traceback" not in log, log
    assert log.count("cannot accept a connection (Too many open files)") == 1, log
