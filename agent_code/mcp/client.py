"""The MCP client: the official ``mcp`` SDK's async sessions, run for a synchronous agent.

:class:`McpManager` owns one asyncio event loop in a daemon thread. Each server gets a task
there that enters the SDK's ``Client`` (a stdio subprocess in the project directory — inside
the OS sandbox, :mod:`agent_code.confine`, when the manager has a ``wall`` — or a Streamable
HTTP endpoint), lists the server's tools, and holds the session open until
:meth:`McpManager.close`. The agent loop calls :meth:`McpManager.call` from its own thread;
the call runs on the loop and its result (or failure) comes back as a plain value:

* a call is bounded by the server's ``timeout`` (else ``MCP_TOOL_TIMEOUT`` ms, else
  :data:`DEFAULT_CALL_TIMEOUT_S`): past it the call is cancelled and :class:`McpCallError`
  says so; the server stays usable;
* a server that exits (or whose endpoint goes away) mid-session is marked ``exited``: the
  call in flight and every later one fail at once with :class:`McpCallError` naming the
  server and why — the session goes on without it;
* start-up is bounded by ``MCP_TIMEOUT`` ms (default :data:`DEFAULT_STARTUP_TIMEOUT_S`);
  servers start concurrently, and one that fails is ``failed`` with the reason and the
  last lines of its stderr (a stdio server's stderr goes to a temporary file, not the
  terminal);
* a stdio server may have a *guard* (``start(..., guards=)``): called immediately before its
  process is spawned, a message from it fails the start instead (a project server whose
  files changed since the user approved them, ``agent_code.mcp.footprint``).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import tempfile
import threading
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, AsyncIterator, Callable, Coroutine, TypeVar

from agent_code.mcp.config import ServerConfig

if TYPE_CHECKING:   # the SDK is imported when a server starts, not with this module
    from mcp import Client
    from mcp.types import CallToolResult, Tool

    from agent_code.confine import Wall

T = TypeVar("T")

DEFAULT_STARTUP_TIMEOUT_S = 30.0
DEFAULT_CALL_TIMEOUT_S = 300.0
STDERR_TAIL = 5

# states of a server: what `agent-code mcp list` and /mcp show
CONNECTED, FAILED, EXITED, STOPPED = "connected", "failed", "exited", "stopped"
NOT_APPROVED, DECLINED, INVALID, NOT_STARTED = "not approved", "declined", "invalid", "not started"


class McpCallError(Exception):
    """A call that did not reach a result: the message is for the model."""


class NotStarted(Exception):
    """A guard refused the spawn: the message says why."""


def _env_seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, "")) / 1000
    except ValueError:
        return default
    return value if value > 0 else default


def describe_error(exc: BaseException) -> str:
    """One line for an exception, the innermost of an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = next((e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)), exc.exceptions[0])
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    if isinstance(exc, NotStarted):
        return text
    if name == "MCPError":
        return text or "an MCP error"
    return f"{name}: {text}" if text else name


@dataclass
class ServerState:
    """One server of the session and where it stands."""

    config: ServerConfig
    status: str = NOT_STARTED
    error: str | None = None
    tools: list[Tool] = field(default_factory=list)  # as listed at start
    server_name: str | None = None                   # what the server calls itself (serverInfo)
    server_version: str | None = None
    client: Client | None = None
    stderr: IO[str] | None = None                    # a stdio server's stderr file
    _stop: asyncio.Event | None = None
    _gone: asyncio.Event | None = None
    _task: asyncio.Task | None = None

    @property
    def name(self) -> str:
        return self.config.name

    def stderr_tail(self, lines: int = STDERR_TAIL) -> str:
        if self.stderr is None:
            return ""
        try:
            self.stderr.flush()
            self.stderr.seek(0)
            text = self.stderr.read()
        except (OSError, ValueError):
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])


class McpManager:
    """The MCP servers of one session (see the module doc)."""

    def __init__(self, root: Path, *, startup_timeout: float | None = None,
                 call_timeout: float | None = None, client_name: str = "agent-code",
                 client_version: str = "0", wall: Wall | None = None) -> None:
        self.root = Path(root)
        self.wall = wall   # stdio servers run inside it (agent_code.confine); None: unconfined
        self.startup_timeout = startup_timeout or _env_seconds("MCP_TIMEOUT", DEFAULT_STARTUP_TIMEOUT_S)
        self.call_timeout = call_timeout or _env_seconds("MCP_TOOL_TIMEOUT", DEFAULT_CALL_TIMEOUT_S)
        self.client_name, self.client_version = client_name, client_version
        self.servers: dict[str, ServerState] = {}
        self.guards: dict[str, Callable[[], str | None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # --- the loop ----------------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="agent-code-mcp", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    # --- servers -----------------------------------------------------------------------

    def add(self, config: ServerConfig, status: str = NOT_STARTED, error: str | None = None) -> ServerState:
        """Know about a server (not started: ``status`` says why)."""
        if config.problem is not None:
            status, error = INVALID, config.problem
        state = self.servers[config.name] = ServerState(config, status, error)
        return state

    def start(self, configs: list[ServerConfig],
              guards: dict[str, Callable[[], str | None]] | None = None) -> list[ServerState]:
        """Start these servers concurrently and wait until each is connected or failed;
        ``guards``: by server name, the check run immediately before its spawn (module doc)."""
        for config in configs:
            self.guards.pop(config.name, None)
        self.guards.update(guards or {})
        states = [self.add(c) for c in configs]
        startable = [s for s in states if s.status == NOT_STARTED]
        if startable:
            self._run(self._start_all(startable), self.startup_timeout + 10)
        return states

    async def _start_all(self, states: list[ServerState]) -> None:
        ready = []
        for state in states:
            state._stop, state._gone = asyncio.Event(), asyncio.Event()
            up = asyncio.Event()
            state._task = asyncio.create_task(self._serve(state, up), name=f"mcp:{state.name}")
            ready.append((state, up))
        for state, up in ready:
            try:
                await asyncio.wait_for(up.wait(), self.startup_timeout)
            except asyncio.TimeoutError:
                state.status, state.error = FAILED, f"did not answer within {self.startup_timeout:g} s"
                assert state._task is not None
                state._task.cancel()

    @asynccontextmanager
    async def _transport(self, state: ServerState) -> AsyncIterator[Any]:
        config = state.config
        if config.transport == "http":
            from mcp.client.streamable_http import streamable_http_client

            create_mcp_http_client: Callable[..., Any]
            try:  # the SDK's own client factory (its default timeouts), as its session group uses it
                create_mcp_http_client = importlib.import_module("mcp.shared._httpx_utils").create_mcp_http_client
            except (ImportError, AttributeError):  # pragma: no cover - a later SDK moved it
                import httpx2

                def create_mcp_http_client(headers: dict[str, str]) -> Any:
                    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))

            async with create_mcp_http_client(headers=dict(config.headers)) as http:
                async with streamable_http_client(config.url, http_client=http) as streams:
                    yield streams
            return
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        check = self.guards.get(config.name)
        refused = check() if check is not None else None   # on the loop, with no await before the spawn
        if refused:   # the last moment before the spawn: what remains is the interpreter's own open
            raise NotStarted(refused)
        state.stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        argv, env = [config.command, *config.args], dict(config.env) or None
        if self.wall is not None:   # the SDK's default environment, then the server's own
            from mcp.client.stdio import get_default_environment

            argv, env = self.wall.wrap(argv, {**get_default_environment(), **dict(config.env)})
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(self.root))
        async with stdio_client(params, errlog=state.stderr) as streams:
            yield streams

    async def _serve(self, state: ServerState, up: asyncio.Event) -> None:
        from mcp import Client
        from mcp.types import Implementation

        assert state._stop is not None and state._gone is not None
        try:
            client = Client(self._transport(state), read_timeout_seconds=self.startup_timeout,
                            client_info=Implementation(name=self.client_name, version=self.client_version))
            async with client:
                tools, cursor = [], None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
                info = client.server_info
                state.server_name = getattr(info, "name", None)
                state.server_version = getattr(info, "version", None)
                state.tools, state.client, state.status, state.error = tools, client, CONNECTED, None
                up.set()
                await state._stop.wait()
                if state.status == CONNECTED:
                    state.status = STOPPED
        except BaseException as exc:  # noqa: BLE001 - a server's failure is its state, never the session's
            if state.status == CONNECTED:
                state.status, state.error = EXITED, describe_error(exc)
            elif state.status == NOT_STARTED:
                state.status, state.error = FAILED, describe_error(exc)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            state.client = None
            if state.status == CONNECTED:  # the session ended by itself
                state.status, state.error = EXITED, "the connection closed"
            if state.status in (FAILED, EXITED) and state.config.transport == "stdio":
                tail = state.stderr_tail()
                if tail and state.error and "stderr:" not in state.error:
                    state.error += f" (stderr: {tail[-500:]})"
            up.set()
            state._gone.set()

    # --- calls -------------------------------------------------------------------------

    def call(self, server: str, tool: str, arguments: dict[str, Any], timeout: float | None = None) -> CallToolResult:
        """Call ``tool`` on ``server``; the SDK's ``CallToolResult``. Raises :class:`McpCallError`."""
        state = self.servers.get(server)
        if state is None or state.status != CONNECTED or state.client is None:
            raise McpCallError(self.unavailable(server))
        limit = timeout or state.config.timeout_s or self.call_timeout
        return self._run(self._call(state, tool, arguments, limit), limit + 15)

    def unavailable(self, server: str) -> str:
        state = self.servers.get(server)
        why = f"{state.status}: {state.error}" if state is not None and state.error else (
            state.status if state is not None else "unknown server")
        return (f"MCP server '{server}' is not running ({why}); its tools cannot be used in this session. "
                "Do not retry them: continue without this server, or tell the user it is down.")

    async def _call(self, state: ServerState, tool: str, arguments: dict[str, Any], limit: float) -> CallToolResult:
        from mcp.shared.exceptions import MCPError

        client = state.client
        if client is None or state._gone is None:
            raise McpCallError(self.unavailable(state.name))
        call = asyncio.ensure_future(client.call_tool(tool, arguments, read_timeout_seconds=limit))
        gone = asyncio.ensure_future(state._gone.wait())
        try:
            done, _ = await asyncio.wait({call, gone}, timeout=limit + 5, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the caller gave up (Ctrl-C): so does the call
            call.cancel()
            raise
        finally:
            gone.cancel()
        if call not in done:
            call.cancel()
            if state._gone.is_set():
                raise McpCallError(f"MCP server '{state.name}' stopped while {tool} was running "
                                   f"({state.error or 'it exited'}). " + self._continue_without())
            raise McpCallError(self._timed_out(state, tool, limit))
        try:
            return call.result()
        except MCPError as exc:
            from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

            if exc.code == REQUEST_TIMEOUT:
                raise McpCallError(self._timed_out(state, tool, limit)) from None
            if exc.code == CONNECTION_CLOSED:
                self._mark_gone(state, "the connection closed (the server exited)")
                raise McpCallError(f"MCP server '{state.name}' stopped: the connection closed while calling "
                                   f"{tool} (the server exited). " + self._continue_without()) from None
            raise McpCallError(f"MCP server '{state.name}' refused the call of {tool}: {exc.message}") from None
        except Exception as exc:  # a transport failure on the way
            self._mark_gone(state, describe_error(exc))
            raise McpCallError(f"MCP server '{state.name}' failed while calling {tool}: {describe_error(exc)}. "
                               + self._continue_without()) from None

    @staticmethod
    def _continue_without() -> str:
        return "Its tools cannot be used for the rest of this session: do not retry them; continue without them."

    @staticmethod
    def _timed_out(state: ServerState, tool: str, limit: float) -> str:
        return (f"{tool} on MCP server '{state.name}' did not answer within {limit:g} s; the call was cancelled. "
                "The server is still available; retry only with a smaller request.")

    def _mark_gone(self, state: ServerState, why: str) -> None:
        if state.status == CONNECTED:
            state.status, state.error = EXITED, why
        tail = state.stderr_tail() if state.config.transport == "stdio" else ""
        if tail and state.error and "stderr:" not in state.error:
            state.error += f" (stderr: {tail[-500:]})"
        state.client = None
        if state._stop is not None:
            state._stop.set()  # let its task close the transport

    # --- the end -----------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Stop every server (a stdio server's process is terminated) and the loop."""
        loop = self._loop
        if loop is None:
            return
        try:
            self._run(self._close_all(timeout), timeout + 5)
        except BaseException:  # noqa: BLE001 - closing must not fail the run
            pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)
        if not loop.is_running():
            loop.close()
        with self._lock:
            self._loop = self._thread = None
        for state in self.servers.values():
            if state.stderr is not None:
                try:
                    state.stderr.close()
                except OSError:
                    pass
                state.stderr = None

    async def _close_all(self, timeout: float) -> None:
        tasks = []
        for state in self.servers.values():
            if state._stop is not None:
                state._stop.set()
            if state._task is not None and not state._task.done():
                tasks.append(state._task)
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2)

    def __enter__(self) -> "McpManager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
