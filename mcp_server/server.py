"""All the MCP wiring: tools, resources and the prompt over `mcp_server.tools.WittyTools`.

Each tool is registered from its input model (whose fields become the tool's parameters and input
schema) and its output model (the output schema of its `structuredContent`); tools/list publishes
both schemas as `schemas.published_schema` writes them. Bad input of any kind becomes an ``isError``
result with one sentence and no stack trace. Answers are valid UTF-8 whatever a graph holds (a lone
surrogate shows as U+FFFD, `mcp_server.wire`), so no answer can fail to be written.

Graph work (every tool but list_graphs, and the graph resources) runs on worker threads, so progress
notifications and other requests are served while it runs. `Workers` runs at most 8 of them at once;
a call waits for a free one. Each call has a deadline, waiting included: ``--tool-timeout`` (120 s by
default), or for collect its window plus that. Past it the call answers ``isError`` saying it timed
out, and is abandoned: its thread cannot be stopped (collect's window is told to end), and it keeps
its place among the 8 until the library call returns, so hung calls never add threads. tools/list,
list_graphs and the static resources need none of these threads and answer while they are all busy.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError, UnexpectedToolError
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, TextContent, ToolAnnotations, ToolExecution
from mcp.types import Resource as MCPResource
from mcp.types import Tool as MCPTool
from pydantic import BaseModel, Field, ValidationError

from witty_profiler.app.graphs import GraphStore
from witty_profiler.mcp_server import guide
from witty_profiler.mcp_server import schemas as s
from witty_profiler.mcp_server.sdk import lowlevel
from witty_profiler.mcp_server.tasks import Tasks
from witty_profiler.mcp_server.tools import TOOLS, ToolSpec, WittyTools, suggest
from witty_profiler.mcp_server.wire import SafeReadStream, SafeWriteStream
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.layers import VIEWS
from witty_profiler.topology.text import valid_text

log = logging.getLogger("witty-mcp")
T = TypeVar("T")

TOOL_TIMEOUT_S = 120.0  # --tool-timeout
WORK_THREADS = 8

INSTRUCTIONS = """\
witty-profiler finds why an AI training or inference host is slow. Work in small steps: collect \
(or load_graph; its answer is the summary) -> convert_layer for each layer with a P0/P1 finding (its \
evidence is there) -> match_patterns -> generate_report. A graph_id comes from collect, load_graph or list_graphs. \
max_tokens caps an answer (8000 by default); lists page with next_cursor and every cut says what \
was left out. The prompt diagnose_bottlenecks walks through it."""

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def _one_line(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else ""
        parts.append(f"{where}: {err.get('msg', 'invalid')}{got}")
    return "invalid arguments: " + "; ".join(parts) + "; fix them as the tool's input schema says"


class TimedOut(Exception):
    """A call that did not finish within its deadline; the message says so in one sentence."""


class Workers:
    """Graph work on its own threads, at most `threads` at once, each call within a deadline.

    A call waits on the event loop for a free thread, then runs on it. Past its deadline the call is
    abandoned: it answers `TimedOut`, and its thread, which cannot be stopped, keeps its place until the
    library call returns. So calls that hang can fill these threads but never add to them, and nothing
    else needs them: tools/list and list_graphs run on the event loop, the SDK's own sync handlers on
    its thread pool. The threads are daemons: one that hangs does not keep the server from exiting."""

    def __init__(self, threads: int = WORK_THREADS, timeout: float = TOOL_TIMEOUT_S) -> None:
        self.threads, self.timeout = threads, timeout
        self._free = anyio.CapacityLimiter(threads)

    async def run(self, what: str, fn: Callable[[], T], timeout: float | None = None,
                  on_abandon: Callable[[], None] | None = None) -> T:
        """`fn()` on a worker thread, its result or its exception; `TimedOut` after `timeout` seconds
        (default: the server's), waiting for a thread included. `on_abandon` is called when the call is
        given up (deadline or cancellation) while `fn` may still run: e.g. to tell it to stop."""
        limit = self.timeout if timeout is None else timeout
        slot, done, outcome = object(), anyio.Event(), []
        token, context = anyio.lowlevel.current_token(), contextvars.copy_context()

        def finished() -> None:  # on the event loop
            self._free.release_on_behalf_of(slot)
            done.set()

        def work() -> None:
            try:
                outcome.append((True, context.run(fn)))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                outcome.append((False, exc))
            finally:
                try:
                    anyio.from_thread.run_sync(finished, token=token)
                except RuntimeError:  # the event loop has ended: nobody waits for this thread
                    pass

        started = False
        try:
            with anyio.move_on_after(limit):
                await self._free.acquire_on_behalf_of(slot)
                try:
                    threading.Thread(target=work, name=f"witty-mcp {what}", daemon=True).start()
                except BaseException:
                    self._free.release_on_behalf_of(slot)
                    raise
                started = True
                await done.wait()
        finally:
            if not done.is_set() and started and on_abandon is not None:
                on_abandon()
        if not done.is_set():
            if started:
                raise TimedOut(f"{what} did not finish within {limit:g} s and was abandoned (the server's "
                               f"--tool-timeout is {self.timeout:g} s): ask for less, e.g. one layer or a "
                               f"narrower query, or start witty-mcp with a longer --tool-timeout")
            raise TimedOut(f"{what} did not start within {limit:g} s: all {self.threads} graph workers are busy "
                           f"with earlier calls that have not returned (the server's --tool-timeout is "
                           f"{self.timeout:g} s); try again later")
        ok, value = outcome[0]
        if not ok:
            raise value
        return value


class WittyServer(MCPServer):
    """MCPServer whose tool errors are one sentence (argument validation included), and which refuses
    arguments a tool does not have instead of ignoring them: a misspelt option must not go unnoticed."""

    inputs: dict[str, type[BaseModel]]
    schemas: dict[str, tuple[dict[str, Any], dict[str, Any]]]
    tasks: Tasks
    witty: WittyTools
    workers: Workers

    async def run_stdio_async(self) -> None:
        """Serve over stdio as the SDK does, through streams that survive a string that is not valid UTF-8:
        a failed write would end the server, a refused read would leave its call unanswered."""
        async with stdio_server() as (read_stream, write_stream):
            inner = lowlevel(self)
            await inner.run(SafeReadStream(read_stream), SafeWriteStream(write_stream),
                            inner.create_initialization_options())

    async def list_tools(self) -> list[MCPTool]:
        """The tools with the schemas of their input and output models as `schemas.published_schema`
        writes them, not the wordier ones the SDK derives from the signature."""
        listed = await super().list_tools()
        for tool in listed:
            if tool.name in self.schemas:
                tool.input_schema, tool.output_schema = self.schemas[tool.name]
            if tool.name in self.tasks.tools:
                tool.execution = ToolExecution(task_support="optional")
        return listed

    async def _handle_call_tool(self, ctx: Any, params: Any) -> Any:
        """A call that asks to run as a task (params.task) and may: answered at once with the task, which
        runs on (mcp_server.tasks); any other call as the SDK handles it."""
        if params.task is not None and params.name in self.tasks.tools:
            plain = params.model_copy(update={"task": None})
            return self.tasks.start(params.task, lambda: super(WittyServer, self)._handle_call_tool(ctx, plain))
        return await super()._handle_call_tool(ctx, params)

    async def list_resources(self) -> list[MCPResource]:
        """The static resources, then each known graph's summary (newest first), so that clients with a
        resource picker show the graphs."""
        listed = await super().list_resources()
        for record in self.witty.store.records()[:50]:
            listed.append(MCPResource(
                uri=f"witty://graphs/{record.graph_id}/summary", name=f"{record.graph_id}", mime_type="text/plain",
                title=f"graph {record.graph_id}",
                description=f"{record.origin} {record.loaded_from or ', '.join(record.hosts)}: "
                            f"{record.entity_count} entities, {record.edge_count} edges"))
        return listed

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        model = self.inputs.get(name)
        fields = list(model.model_fields) if model else []
        if model is not None and (unknown := sorted(set(arguments) - set(fields))):
            hint = "; ".join(f"{u!r}{suggest(u, fields)}" for u in unknown)
            return _error(name, f"{name} has no argument {hint}; its arguments are {', '.join(fields)}")
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:  # a bug, not bad input: the traceback goes to the log
            log.error("tool %s failed", name, exc_info=exc.__cause__ or exc)
            return _error(name, f"{name} failed inside witty-profiler ({type(exc.__cause__ or exc).__name__}); "
                                f"the server goes on, the details are in its log on stderr")
        except ToolError as exc:
            cause = exc.__cause__
            return _error(name, _one_line(cause) if isinstance(cause, ValidationError) else str(cause or exc))


def _error(name: str, message: str) -> CallToolResult:
    log.info("tool %s: %s", name, message)
    return CallToolResult(content=[TextContent(type="text", text=valid_text(message))], is_error=True)


def _parameters(model: type[BaseModel]) -> list[inspect.Parameter]:
    """The model's fields as keyword parameters, constraints and descriptions kept."""
    params = []
    for name, field in model.model_fields.items():
        annotation = Annotated[(field.annotation, *field.metadata,
                                Field(description=field.description, json_schema_extra=field.json_schema_extra))]
        default = inspect.Parameter.empty if field.is_required() else field.get_default(call_default_factory=True)
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
    return params


def add_tool(server: MCPServer, name: str, title: str, description: str, input_model: type[BaseModel],
             output_model: type[BaseModel], annotations: ToolAnnotations,
             run: Callable[[Any, Context], Any]) -> None:
    """Register `run(input, ctx) -> Answer` (a coroutine) as tool `name`."""
    returns = Annotated[CallToolResult, output_model]

    async def tool(ctx: Context, **kwargs: Any) -> Any:
        try:
            inp = input_model.model_validate(kwargs)
        except ValidationError as exc:
            raise ToolError(_one_line(exc)) from None
        try:
            answer = await run(inp, ctx)
        except (InputError, TimedOut) as exc:
            raise ToolError(str(exc)) from None
        return CallToolResult(content=[TextContent(type="text", text=valid_text(answer.text))],
                              structured_content=valid_text(answer.data.model_dump(mode="json", exclude_none=True)))

    tool.__name__ = name
    tool.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context), *_parameters(input_model)],
        return_annotation=returns)
    tool.__annotations__ = {"ctx": Context, "return": returns}
    server.add_tool(tool, name=name, title=title, description=description, annotations=annotations)
    if isinstance(server, WittyServer):
        server.inputs[name] = input_model
        server.schemas[name] = (s.published_schema(input_model), s.published_schema(output_model, output=True))


def build_server(tools: WittyTools | None = None, tool_timeout: float = TOOL_TIMEOUT_S,
                 work_threads: int = WORK_THREADS, server_class: type[WittyServer] = WittyServer,
                 **sdk_options: Any) -> WittyServer:
    """The server of `tools`: every tool of the registry (`tools.TOOLS`), the resources and the prompt."""
    from witty_profiler.topology.version import VERSION
    w = tools or WittyTools(GraphStore())
    server = server_class("witty-profiler", title="witty-profiler", version=VERSION, instructions=INSTRUCTIONS,
                          log_level="INFO", **sdk_options)
    server.inputs, server.schemas, server.witty = {}, {}, w
    server.tasks = Tasks({name for name, spec in TOOLS.items() if spec.runs == "window"})  # they take a while
    server.tasks.register(lowlevel(server))
    server.workers = Workers(work_threads, tool_timeout)
    for spec in TOOLS.values():
        # destructive and idempotent mean something only for a tool that writes (the protocol's own rule): a
        # read-only tool leaves them out, which every conversation's tools/list is shorter for
        annotations = (ToolAnnotations(read_only_hint=True, open_world_hint=False) if spec.read_only else
                       ToolAnnotations(read_only_hint=False, destructive_hint=spec.destructive,
                                       idempotent_hint=spec.idempotent, open_world_hint=False))
        add_tool(server, spec.name, spec.title, spec.description, spec.input, spec.output, annotations,
                 _runner(spec, w, server.workers, tool_timeout))
    _add_resources(server, w, server.workers)
    _add_prompt(server)
    return server


def _runner(spec: ToolSpec, w: WittyTools, workers: Workers, tool_timeout: float) -> Callable[[Any, Context], Any]:
    """How a tool's method runs: on the event loop (quick, in memory), on a graph worker, or as a window with
    progress notifications whose deadline is the window (every host's, for a cluster) plus the tool timeout."""
    method = getattr(w, spec.method)

    async def inline(inp: Any, ctx: Context) -> Any:
        return method(inp)

    async def worker(inp: Any, ctx: Context) -> Any:
        return await workers.run(spec.name, lambda: method(inp))

    async def window(inp: Any, ctx: Context) -> Any:
        stop = threading.Event()
        token = anyio.lowlevel.current_token()

        def progress(elapsed: float, total: float, message: str) -> None:
            try:
                anyio.from_thread.run(ctx.report_progress, elapsed, total, message, token=token)
            except Exception:  # noqa: BLE001 - a client that went away must not stop the capture
                log.debug("progress notification not delivered", exc_info=True)

        # given up (cancelled, too late): the window ends early
        length = w.cluster_deadline(inp) if inp.cluster() else inp.duration_s
        return await workers.run(spec.name, lambda: method(inp, progress, stop), timeout=length + tool_timeout,
                                 on_abandon=stop.set)
    return {"inline": inline, "worker": worker, "window": window}[spec.runs]


def _add_resources(server: MCPServer, w: WittyTools, workers: Workers) -> None:
    def graph_or_404(graph_id: str) -> Any:
        try:
            return w.store.get(graph_id)
        except InputError as exc:
            raise ResourceNotFoundError(str(exc)) from None

    async def on_worker(what: str, fn: Callable[[], str]) -> str:
        try:
            return valid_text(await workers.run(what, fn))
        except TimedOut as exc:
            raise ResourceError(str(exc)) from None

    @server.resource("witty://graphs/{graph_id}/summary", name="graph-summary", mime_type="text/plain",
                     description="hosts, window, counts and every collector's status and reason; then the summary view")
    async def graph_summary(graph_id: str) -> str:
        def text() -> str:
            graph_or_404(graph_id)
            described = w.graph_summary(s.GraphSummaryInput(graph_id=graph_id)).text
            return described + "\n" + w.convert_layer(s.ConvertLayerInput(graph_id=graph_id, layer="summary")).text
        return await on_worker("reading the graph summary", text)

    @server.resource("witty://graphs/{graph_id}/diagnosis", name="diagnosis", mime_type="application/json",
                     description="the full typed diagnosis of a graph (findings with every evidence item, coverage), "
                                 "as diagnose --format json writes it")
    async def diagnosis(graph_id: str) -> str:
        def text() -> str:
            graph_or_404(graph_id)
            return w.ws.report(graph_id, "json")
        return await on_worker("diagnosing the graph", text)

    @server.resource("witty://graphs/{graph_id}/views/{layer}", name="layer-view", mime_type="text/plain",
                     description=f"the compact view of one layer of a graph ({', '.join(VIEWS)}), 8000 tokens at "
                                 "most")
    async def layer_view(graph_id: str, layer: str) -> str:
        if layer not in VIEWS:
            raise ResourceNotFoundError(f"unknown layer {layer!r}: use one of {', '.join(VIEWS)}")

        def text() -> str:
            graph_or_404(graph_id)
            return w.convert_layer(s.ConvertLayerInput(graph_id=graph_id, layer=layer)).text  # type: ignore[arg-type]
        return await on_worker("reading the layer view", text)

    @server.resource("witty://patterns", name="pattern-catalog", mime_type="text/markdown",
                     description="every bottleneck pattern: id, layer, what it detects, thresholds, evidence")
    def patterns() -> str:
        return guide.pattern_catalog()

    @server.resource("witty://thresholds", name="thresholds", mime_type="application/toml",
                     description="the pattern thresholds in force on this server, as TOML")
    def thresholds() -> str:
        return guide.thresholds_toml(w.ws.thresholds(), w.thresholds_path)


def _add_prompt(server: MCPServer) -> None:
    @server.prompt("diagnose_bottlenecks", title="Diagnose bottlenecks",
                   description="Walk through collect -> summary -> layer views of unhealthy layers -> match -> report "
                               "for a symptom (e.g. 'tokens/s dropped 40 % after the upgrade').")
    def diagnose_bottlenecks(symptom: str, pids: str | None = None) -> str:
        return guide.diagnose_prompt(symptom, pids)
