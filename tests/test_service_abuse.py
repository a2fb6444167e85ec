"""The REST service against bad input and abusive clients (SECURITY.md, "REST service: bad input and
abusive clients"), each against a real `witty-profiler serve` as tests/test_service.py starts it: every bad
input is a 4xx with a JSON body and no traceback in the log; a body over the cap is refused without being
read; slow clients are cut at their deadline, connections over the cap are refused, the service's file
descriptors stay bounded, and it answers again after running out of them."""

from __future__ import annotations

import json
import os
import resource
import select
import socket
import time
from pathlib import Path

import pytest
from test_service import Http, service, wait_for

from witty_profiler.service.routes import openapi_document, table

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


# -- 1. numbers and other query values -------------------------------------------------------------------
SUPERSCRIPT_TWO = "\u00b2"  # str.isdigit() says yes, int() says no


def test_every_query_parameter_takes_a_bad_value_as_a_400_naming_it(tmp_path):
    with service(tmp_path / "state") as c:
        latest = wait_for(c, 1)["latest_window"]
        for bad in (SUPERSCRIPT_TWO, "\u0663", "1e3", "-5", "+300", " 300", "300 ", "", "3.5", "0x10", "9" * 5000,
                    "0"):
            error = json_error(c.get(f"/api/v1/graphs/{latest}/views/summary", params={"max_tokens": bad}), 400)
            assert "max_tokens" in error, (bad, error)
        assert c.get(f"/api/v1/graphs/{latest}/views/summary", params={"max_tokens": "300"}).status_code == 200
        # every query parameter of every route in the document, whatever its type, given a value it cannot take
        probe = {"window_id": latest, "layer": "summary"}
        for api in table():
            query = [p for p in api.params if p.where == "query"]
            for param in query:
                if param.schema.get("type") == "string" and "enum" not in param.schema:
                    continue  # a window id: a bad one is an unknown window (404)
                params = {p.name: latest for p in query if p.required}
                params[param.name] = SUPERSCRIPT_TWO
                path = api.path.format(**{k: v for k, v in probe.items() if "{" + k + "}" in api.path})
                error = json_error(c.request(api.method, path, params=params), 400)
                assert param.name in error, (api.path, param.name, error)
        assert {p.name for a in table() for p in a.params if p.schema.get("type") == "integer"} == {"max_tokens"}
    assert "Traceback" not in log_of(c)


def test_the_document_gives_max_tokens_the_bounds_the_route_applies():
    doc = openapi_document(table())
    (param,) = [p for p in doc["paths"]["/api/v1/graphs/{window_id}/views/{layer}"]["get"]["parameters"]
                if p["name"] == "max_tokens"]
    assert param["schema"] == {"type": "integer", "minimum": 200, "maximum": 999_999_999}
    assert "413" in doc["paths"]["/api/v1/trigger"]["post"]["responses"]


# -- 2. and 3. bodies: nesting, a lone surrogate, and the rest of what a client can send --------------------
def test_a_deeply_nested_body_is_a_400(tmp_path):
    with service(tmp_path / "state", "--stopped") as c:
        for body in (b"[" * 100_000, b'{"reason": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", b'{"a":' * 100_000):
            assert json_error(c.post("/api/v1/trigger", content=body), 400) == "JSON nested too deeply"
        assert "must be JSON" in json_error(c.post("/api/v1/trigger", content=b'{"reason": "\xff"}'), 400)
        assert "one key" in json_error(c.post("/api/v1/trigger", json={"reason": 3}), 400)
        assert c.get("/api/v1/status").status_code == 200
    assert "Traceback" not in log_of(c)


def test_a_reason_with_a_lone_surrogate_is_kept_with_it_replaced_and_the_list_stays_whole(tmp_path):
    state = tmp_path / "state"
    with service(state) as c:
        wait_for(c, 2)
        c.post("/api/v1/stop")
        deadline = time.monotonic() + 30
        while c.get("/api/v1/status").json()["monitor"]["window_in_progress_since"]:  # the last one stored
            assert time.monotonic() < deadline
            time.sleep(0.2)
        before = [w["window_id"] for w in c.get("/api/v1/graphs").json()["windows"]]
        answer = c.post("/api/v1/trigger", content=b'{"reason": "spike \\ud800 then \\udfff\\n"}')
        assert answer.status_code == 200, answer.text
        kept = answer.json()
        assert kept["kept"] and kept["kept_reason"] == "spike \ufffd then \ufffd\u240a"
        listed = c.get("/api/v1/graphs").json()["windows"]
        assert [w["window_id"] for w in listed] == before  # none dropped
        assert [w["kept_reason"] for w in listed if w["kept"]] == [kept["kept_reason"]]
        assert c.get(f"/api/v1/graphs/{kept['window_id']}/diagnosis").status_code == 200
        on_disk = json.loads((state / "kept" / f"{kept['window_id']}.window.json").read_text(encoding="utf-8"))
        assert on_disk["kept_reason"] == kept["kept_reason"]
    assert "Traceback" not in log_of(c)
    with service(state, "--stopped") as again:  # read back after a restart
        assert [w["window_id"] for w in again.get("/api/v1/graphs").json()["windows"]] == before


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
