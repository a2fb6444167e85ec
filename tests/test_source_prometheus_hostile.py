"""The Prometheus source against a hostile or broken server (a real HTTP server in a thread): a redirect to
another origin gets no credentials, an answer too large or too slow is cut off with one line, and answers
of the right JSON with the wrong shape are one InputError naming the query and the field."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from witty_profiler.sources import promapi
from witty_profiler.sources.prometheus import collect_window
from witty_profiler.topology.errors import InputError


class _Server(http.server.BaseHTTPRequestHandler):
    """Answers as `plan(path)` says: (code, headers, body chunks, seconds between chunks)."""

    plan = staticmethod(lambda path: (404, {}, [b""], 0.0))
    seen: list[tuple[str, dict[str, str]]] = []

    def do_GET(self):  # noqa: N802
        type(self).seen.append((self.path, dict(self.headers)))
        code, headers, chunks, pause = type(self).plan(self.path)
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        try:
            for chunk in chunks:
                self.wfile.write(chunk)
                self.wfile.flush()
                if pause:
                    time.sleep(pause)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


def _serve(handler: type) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def servers():
    made = []

    def make():
        handler = type("Handler", (_Server,), {"seen": []})
        server, url = _serve(handler)
        made.append(server)
        return url, handler
    yield make
    for server in made:
        server.shutdown()
        server.server_close()


def _matrix(result) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


def test_a_redirect_to_another_origin_gets_no_token(servers):
    (url_a, a), (url_b, b) = servers(), servers()
    a.plan = staticmethod(lambda path: (302, {"Location": url_b + path}, [b""], 0.0))
    b.plan = staticmethod(lambda path: (200, {}, [_matrix([])], 0.0))
    with pytest.raises(InputError, match="no node_exporter series"):
        collect_window(url_a, 1000.0, 1600.0, auth="Bearer s3cret")
    assert a.seen and all(h.get("Authorization") == "Bearer s3cret" for _, h in a.seen)
    assert b.seen and all("Authorization" not in h for _, h in b.seen)
    # within the same origin the credentials follow the redirect
    a.seen.clear()
    a.plan = staticmethod(lambda path: (302, {"Location": "/moved" + path}, [b""], 0.0) if not path.startswith(
        "/moved") else (200, {}, [_matrix([])], 0.0))
    with pytest.raises(InputError, match="no node_exporter series"):
        collect_window(url_a, 1000.0, 1600.0, auth="Bearer s3cret")
    assert [h.get("Authorization") for _, h in a.seen][:2] == ["Bearer s3cret", "Bearer s3cret"]


def test_an_answer_over_its_cap_is_cut_off(servers, monkeypatch):
    url, h = servers()
    monkeypatch.setattr(promapi, "MAX_ANSWER_BYTES", 4 << 20)
    series = {"metric": {"instance": "h1:9100"}, "values": [[1000 + i, "1"] for i in range(10)]}
    body = _matrix([series] * 60_000)  # about 13 MB of well-formed series
    h.plan = staticmethod(lambda path: (200, {}, [body[i:i + 65536] for i in range(0, len(body), 65536)], 0.0))
    with pytest.raises(InputError, match="larger than 4 MiB: refused"):
        collect_window(url, 1000.0, 1600.0, step=60)


def test_one_enormous_value_is_refused_before_it_is_decoded(servers, monkeypatch):
    url, h = servers()
    monkeypatch.setattr(promapi, "MAX_SERIES_CHARS", 1 << 20)
    head = b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"instance":"'
    h.plan = staticmethod(lambda path: (200, {}, [head] + [b"x" * 65536] * 64, 0.0))
    with pytest.raises(InputError, match="holds a value longer than 1048576 characters: refused"):
        collect_window(url, 1000.0, 1600.0, step=60)


def test_an_answer_that_drips_is_cut_off_at_its_deadline(servers, monkeypatch):
    url, h = servers()
    monkeypatch.setattr(promapi, "ANSWER_DEADLINE_S", 1.5)
    body = _matrix([])
    h.plan = staticmethod(lambda path: (200, {}, [body[i:i + 1] for i in range(len(body))], 0.2))
    started = time.monotonic()
    with pytest.raises(InputError, match="did not end within 1.5 s"):
        collect_window(url, 1000.0, 1600.0, step=60, timeout_s=30.0)
    assert time.monotonic() - started < 10  # each byte came within the socket timeout: only the deadline stops it


@pytest.mark.parametrize("result, words", [
    ([{"metric": [1], "values": [[1000, "1"]]}], "'metric' is not an object of string labels"),
    ([{"metric": {"instance": 5}, "values": [[1000, "1"]]}], "'metric' is not an object of string labels"),
    ([{"metric": {"instance": "h1:9100"}, "values": [[1000]]}], r"'values' holds '\[1000\]'"),
    ([{"metric": {"instance": "h1:9100"}, "values": [[1000, "abc"]]}], "not \\[time, \"number\"\\]"),
    ([{"metric": {"instance": "h1:9100"}, "values": {"a": 1}}], "'values' is not an array"),
    # a well-formed series of another name than the query asked: the query is named, no traceback
    ([{"metric": {"instance": "h1:9100", "__name__": "node_cpu_seconds_total", "cpu": "0", "mode": "idle"},
       "values": [[1000, "1"], [1060, "2"]]}], "with a series this tool cannot read"),
])
def test_answers_of_the_wrong_shape_are_one_line_naming_the_query(servers, result, words):
    url, h = servers()
    h.plan = staticmethod(lambda path: (200, {}, [_matrix(result)], 0.0))
    with pytest.raises(InputError, match=words) as info:
        collect_window(url, 1000.0, 1600.0, step=60)
    assert "\n" not in str(info.value) and "answered" in str(info.value)


def test_infinite_values_and_hostile_labels_are_read_without_harm(servers):
    url, h = servers()
    hostile = {"instance": "a:b|c\nd\x00e:9100", "__name__": "node_load1", "device": "../../etc"}
    h.plan = staticmethod(lambda path: (200, {}, [_matrix([{"metric": hostile,
                                                            "values": [[1000, "+Inf"], [1060, "1e400"], [1120, "2"]]}])],
                                        0.0) if "targets" not in path else (200, {}, [b"[1, 2]"], 0.0))
    try:
        window = collect_window(url, 1000.0, 1600.0, step=60)
    except InputError as exc:  # what a hostile server can get: one line, never a traceback
        assert "\n" not in str(exc)
    else:
        assert all("\n" not in h and "\x00" not in h for h in window.graph.meta.hosts)
