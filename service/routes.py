"""The service's REST API: one table of routes, from which both the Starlette routes and the OpenAPI
document are made, so the document cannot drift from what is served.

Windows are named by id (GET /api/v1/graphs lists them) or `latest`. Graph work (loading, diagnosing,
rendering) runs on a worker thread, never on the event loop. Errors are JSON `{"error": sentence}`:
400 bad input (naming the parameter), 404 unknown window or route, 405 a method the route does not take,
409 nothing to act on yet; the HTTP server adds 408 too slow, 413 body too large and 503 too many
connections (limits.py).
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from witty_profiler.app.reports import REPORT_FORMATS
from witty_profiler.app.views import MIN_TOKENS
from witty_profiler.service.ring import NoWindowYet, UnknownWindow
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.layers import VIEWS
from witty_profiler.topology.text import visible
from witty_profiler.topology.version import VERSION as __version__


@dataclass
class Param:
    name: str
    where: str  # path or query
    schema: dict[str, Any]
    description: str
    required: bool = False


@dataclass
class Api:
    method: str
    path: str
    summary: str
    handler: Callable[[Any, Request], Awaitable[Response]]
    params: list[Param] = field(default_factory=list)
    body: dict[str, Any] | None = None  # JSON schema of an optional JSON body
    produces: tuple[str, ...] = ("application/json",)


WINDOW = Param("window_id", "path", {"type": "string"}, "a window id from GET /api/v1/graphs, or latest", True)
FORMAT = {"type": "string", "enum": ["md", "json"], "default": "md"}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _off_loop(fn: Callable[[], Any]) -> Any:
    return await anyio.to_thread.run_sync(fn)


def _window_id(service: Any, request: Request) -> str:
    given = request.path_params["window_id"]
    return service.ring.latest_id() if given == "latest" else given


WHOLE = re.compile(r"[0-9]{1,9}")  # ASCII digits only: str.isdigit() takes "²" or "٣", which int() refuses


def _whole_number(request: Request, name: str) -> int | None:
    """A query parameter that is a whole number (None when absent), or a 400 naming it."""
    given = request.query_params.get(name)
    if given is None:
        return None
    if not WHOLE.fullmatch(given):
        shown = given if len(given) <= 40 else given[:40] + "..."
        raise InputError(f"{name} must be a whole number (digits 0-9, at most 9 of them), got {shown!r}")
    return int(given)


async def _json_body(request: Request, example: str) -> Any:
    """The request's JSON body (None when it is empty), or a 400 saying what is wrong with it."""
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except RecursionError:
        raise InputError("JSON nested too deeply") from None
    except ValueError:  # not JSON, or not UTF-8 (UnicodeDecodeError is a ValueError)
        raise InputError(f"the body must be JSON such as {example}") from None


def _format(request: Request, allowed: list[str]) -> str:
    fmt = request.query_params.get("format", "md")
    if fmt not in allowed:
        raise InputError(f"format must be one of {', '.join(allowed)}, got {fmt!r}")
    return fmt


async def status(service: Any, request: Request) -> Response:
    return JSONResponse(service.status())


async def start(service: Any, request: Request) -> Response:
    return JSONResponse({"changed": service.monitor.start(), **service.status()})


async def stop(service: Any, request: Request) -> Response:
    changed = await _off_loop(service.monitor.stop)
    return JSONResponse({"changed": changed, **service.status()})


async def trigger(service: Any, request: Request) -> Response:
    body = await _json_body(request, '{"reason": "latency spike"}')
    reason = "on demand"
    if body is not None:
        if not isinstance(body, dict) or set(body) - {"reason"} or not isinstance(body.get("reason", ""), str):
            raise InputError("the body takes one key, reason (a string)")
        reason = body.get("reason") or reason
    # what cannot be stored or shown is replaced, as everywhere else (topology.text.visible): a lone surrogate
    # (a JSON escape such as \ud800, or a client that cut a UTF-16 string in half) becomes U+FFFD, a control
    # character its picture; the window is kept either way, which is what a trigger is for
    reason = visible(reason[:200])
    record = await _off_loop(lambda: service.monitor.trigger(reason))
    return JSONResponse(record.model_dump())


async def list_graphs(service: Any, request: Request) -> Response:
    return JSONResponse({"windows": [r.model_dump() for r in service.ring.records()], **service.ring.usage()})


async def one_graph(service: Any, request: Request) -> Response:
    window_id = _window_id(service, request)
    envelope = request.query_params.get("envelope", "false")
    if envelope not in ("true", "false"):
        raise InputError(f"envelope must be true or false, got {envelope!r}")
    raw = await _off_loop(lambda: service.ring.read_bytes(window_id))
    if envelope == "true":  # the original witty-profiler's answer: {env: this host, content: the graph}
        env = json.dumps({"hostname": socket.gethostname(), "service_version": __version__, "window_id": window_id})
        raw = b'{"env":' + env.encode() + b',"content":' + raw + b"}"
    return Response(raw, media_type="application/json")


async def view(service: Any, request: Request) -> Response:
    window_id, layer = _window_id(service, request), request.path_params["layer"]
    if layer not in VIEWS:
        raise InputError(f"unknown layer {layer!r}: choose one of {', '.join(VIEWS)}")
    max_tokens = _whole_number(request, "max_tokens")
    text = await _off_loop(lambda: service.view(window_id, layer, max_tokens))
    return PlainTextResponse(text)


async def diagnosis(service: Any, request: Request) -> Response:
    window_id = _window_id(service, request)
    d = await _off_loop(lambda: service.diagnosis(window_id))
    return Response(d.to_json(), media_type="application/json")


async def report(service: Any, request: Request) -> Response:
    window_id, fmt = _window_id(service, request), _format(request, list(REPORT_FORMATS))
    text = await _off_loop(lambda: service.report(window_id, fmt))
    return Response(text, media_type=f"{REPORT_FORMATS[fmt]}; charset=utf-8")


async def compare(service: Any, request: Request) -> Response:
    before, after = request.query_params.get("before"), request.query_params.get("after")
    if not before or not after:
        raise InputError("compare needs ?before=WINDOW_ID&after=WINDOW_ID (ids from GET /api/v1/graphs, or latest)")
    fmt = _format(request, ["md", "json"])
    ids = [service.ring.latest_id() if w == "latest" else w for w in (before, after)]
    result = await _off_loop(lambda: service.compare(*ids))
    if fmt == "json":
        return Response(result.to_json(), media_type="application/json")
    return Response(result.markdown(), media_type="text/markdown; charset=utf-8")


async def openapi(service: Any, request: Request) -> Response:
    return JSONResponse(openapi_document(service.api_routes))


def table() -> list[Api]:
    return [
        Api("GET", "/api/v1/status", "The service: collecting or stopped, windows done and failed, the last error, "
            "disk use of the ring and the kept windows against their caps", status),
        Api("POST", "/api/v1/start", "Resume collecting windows", start),
        Api("POST", "/api/v1/stop", "Stop collecting: the window in progress ends early and is still stored", stop),
        Api("POST", "/api/v1/trigger", "Keep the latest window out of the ring's reach (on demand)", trigger,
            body={"type": "object", "properties": {"reason": {"type": "string", "maxLength": 200}},
                  "additionalProperties": False}),
        Api("GET", "/api/v1/graphs", "The windows on disk, newest first, with their findings; ring and kept", list_graphs),
        Api("GET", "/api/v1/graphs/{window_id}", "One window's graph (native format v1); envelope=true wraps it as "
            "{env, content} like the original witty-profiler's HTTP answers", one_graph,
            [WINDOW, Param("envelope", "query", {"type": "boolean", "default": False}, "wrap as {env, content}")]),
        Api("GET", "/api/v1/graphs/{window_id}/views/{layer}", "The compact text view of one layer", view,
            [WINDOW, Param("layer", "path", {"type": "string", "enum": list(VIEWS)}, "a layer, summary or all", True),
             Param("max_tokens", "query", {"type": "integer", "minimum": MIN_TOKENS, "maximum": 999_999_999},
                   "token budget of the view")],
            produces=("text/plain",)),
        Api("GET", "/api/v1/graphs/{window_id}/diagnosis", "The seven-layer diagnosis: findings and coverage",
            diagnosis, [WINDOW]),
        Api("GET", "/api/v1/graphs/{window_id}/report", "The diagnosis report", report,
            [WINDOW, Param("format", "query", {"type": "string", "enum": list(REPORT_FORMATS), "default": "md"},
                           "md, json, or html (a self-contained page with the topology picture)")],
            produces=tuple(REPORT_FORMATS.values())),
        Api("GET", "/api/v1/compare", "Which findings two windows differ in, and how their metrics moved", compare,
            [Param("before", "query", {"type": "string"}, "window id (or latest)", True),
             Param("after", "query", {"type": "string"}, "window id (or latest)", True),
             Param("format", "query", FORMAT, "md or json")], produces=("text/markdown", "application/json")),
        Api("GET", "/openapi.json", "This document", openapi),
    ]


def starlette_routes(service: Any, apis: list[Api]) -> list[Route]:
    def endpoint(api: Api) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            try:
                return await api.handler(service, request)
            except UnknownWindow as exc:
                return _error(404, str(exc))
            except NoWindowYet as exc:
                return _error(409, str(exc))
            except InputError as exc:
                return _error(400, str(exc))
        return handle
    return [Route(api.path, endpoint(api), methods=[api.method]) for api in apis]


MCP_PATH = "/mcp"
ERROR = {"description": "error", "content": {"application/json": {"schema": {
    "type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}}}}


def openapi_document(apis: list[Api]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for api in apis:
        op: dict[str, Any] = {
            "summary": api.summary, "operationId": api.handler.__name__,
            "responses": {"200": {"description": "OK", "content": {m: {"schema": {}} for m in api.produces}},
                          "400": ERROR, "401": ERROR, "404": ERROR, "409": ERROR, "421": ERROR}}
        if api.params:
            op["parameters"] = [{"name": p.name, "in": p.where, "required": p.required or p.where == "path",
                                 "description": p.description, "schema": p.schema} for p in api.params]
        if api.body:
            op["requestBody"] = {"required": False, "content": {"application/json": {"schema": api.body}}}
            op["responses"]["413"] = ERROR  # over server.max_body_mb
        paths.setdefault(api.path, {})[api.method.lower()] = op
    mcp = {"summary": "The MCP server (streamable HTTP transport): the witty-profiler tools over this service's "
                      "windows", "responses": {"200": {"description": "MCP messages (JSON or an SSE stream)"},
                                               "401": ERROR, "421": ERROR}}
    paths[MCP_PATH] = {m: {**mcp, "operationId": f"mcp_{m}"} for m in ("get", "post", "delete")}
    return {
        "openapi": "3.1.0",
        "info": {"title": "witty-profiler service", "version": __version__,
                 "description": "Continuous monitoring: rolling windows of this host, each diagnosed; windows where "
                                "a pattern fired, or kept on demand, outlive the ring."},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{}, {"bearer": []}],
        "paths": paths,
    }
