"""One connection to an MCP server, through the official ``mcp`` SDK (imported here only, so
the SDK stays an optional extra).

The SDK's transports and sessions are anyio context managers that must be entered and left by
one task: :class:`Connection` runs them in a task of its own (the *runner*) that holds the
session open until it is stopped, inside an anyio cancel scope, so stopping lets the SDK's
shielded shutdown close stdin, wait, and kill the server's process group. Calls are made from
the tool's own task, so the registry's timeout, an abort or a dispose cancel the request (the
SDK then tells the server with ``notifications/cancelled``).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import IO, Any, Literal

import anyio
import httpx2
import structlog
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp import types as mcp_types
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from dsh_plugins.mcp.config import McpConfig, McpError, McpServerConfig, expand

__all__ = ["Connection", "State"]

log = structlog.get_logger("dsh.mcp")

State = Literal["stopped", "starting", "running", "crashed", "failed"]

#: How much of a server's stderr a failure report quotes.
STDERR_TAIL_CHARS = 2000


class Connection:
    """A server by ``name``: :meth:`start` it, :meth:`call` its tools, :meth:`stop` it.

    ``tools`` is its current tool list; ``on_change(self)`` is called after every start and
    every refresh of the list (the server sent ``notifications/tools/list_changed``). A call
    that finds the server gone starts it again, unless the previous failures ask to wait
    (see :class:`~dsh_plugins.mcp.config.McpConfig`); ``clock`` is how the wait is measured.
    """

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        settings: McpConfig,
        on_change: Callable[[Connection], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.config = config
        self.settings = settings
        self.state: State = "stopped"
        self.error: str | None = None
        self.tools: tuple[mcp_types.Tool, ...] = ()
        self._on_change = on_change
        self._clock = clock
        self._failures = 0
        self._retry_at = 0.0
        self._lock = asyncio.Lock()
        self._session: ClientSession | None = None
        self._runner: tuple[asyncio.Task[None], anyio.CancelScope] | None = None
        self._stderr: IO[str] | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._starting: asyncio.Task[None] | None = None

    # -- lifetime ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the server and list its tools, within ``start_timeout_s``; raises
        :class:`McpError` (``MCP_START_FAILED``) saying why, with the end of its stderr."""
        self.state = "starting"
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        scope = anyio.CancelScope()
        runner = asyncio.create_task(self._run(ready, scope), name=f"mcp server {self.name}")
        self._runner = runner, scope
        try:
            await asyncio.wait(
                {ready, runner},
                timeout=self.config.start_timeout_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
        except asyncio.CancelledError:  # nobody waits for it any more: leave nothing running
            await self._halt()
            self.state = "stopped"
            raise
        if ready.done():
            self._started()
            return
        why = (
            f"did not start within {self.config.start_timeout_s:g} s"
            if not runner.done()
            else f"failed to start: {_reason(runner)}"
        )
        error = self._failed(f"MCP server {self.name!r} {why}", "MCP_START_FAILED")
        await self._halt()
        raise error

    async def stop(self) -> None:
        """Stop the server (its process, for a stdio server) and forget its session."""
        await self._halt()
        self.state = "stopped"

    def _started(self) -> None:
        self.state, self.error = "running", None
        log.info("MCP server started", server=self.name, tools=[t.name for t in self.tools])
        self._on_change(self)

    def _failed(self, message: str, code: str) -> McpError:
        tail = self.stderr_tail()
        if tail:
            message += f"; its stderr ends with:\n{tail}"
        self.state, self.error = "failed", message
        self._note_failure()
        return McpError(message, code)

    def _note_failure(self) -> None:
        """Count a failure; the next start waits ``restart_backoff_s`` doubled for each failure
        after the first (the first restart after a crash is immediate)."""
        self._failures += 1
        delay = 0.0
        if self._failures > 1:
            backoff = self.settings.restart_backoff_s * 2 ** (self._failures - 2)
            delay = min(backoff, self.settings.max_restart_backoff_s)
        self._retry_at = self._clock() + delay

    async def _halt(self) -> None:
        """Leave the runner's contexts (the SDK stops the server: its shutdown is bounded) and
        wait for it."""
        runner, self._runner, self._session = self._runner, None, None
        if self._refresh is not None:
            self._refresh.cancel()
            self._refresh = None
        if runner is not None:
            task, scope = runner
            scope.cancel()
            ended = await asyncio.gather(task, return_exceptions=True)
            log.debug("MCP connection closed", server=self.name, outcome=ended[0])
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    async def _run(self, ready: asyncio.Future[None], scope: anyio.CancelScope) -> None:
        with scope:
            async with AsyncExitStack() as stack:
                read, write = await self._open(stack)

                async def on_message(message: IncomingMessage) -> None:
                    self._on_message(message, session)

                session = ClientSession(read, write, message_handler=on_message)
                await stack.enter_async_context(session)
                await session.initialize()
                self.tools = await _list_tools(session)
                self._session = session
                ready.set_result(None)
                await anyio.sleep_forever()

    async def _open(self, stack: AsyncExitStack) -> Any:
        if self.config.command is not None:
            env = expand(self.config.env, f"the env of MCP server {self.name!r}")
            params = StdioServerParameters(
                command=self.config.command,
                args=list(self.config.args),
                env=env,
                cwd=self.config.cwd,
            )
            # Kept open while the server runs (its stderr), closed by _halt.
            self._stderr = tempfile.TemporaryFile(  # noqa: SIM115
                "w+", encoding="utf-8", errors="replace"
            )
            return await stack.enter_async_context(stdio_client(params, errlog=self._stderr))
        headers = expand(self.config.headers, f"the headers of MCP server {self.name!r}")
        http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
        await stack.enter_async_context(http)
        url = str(self.config.url)
        return await stack.enter_async_context(streamable_http_client(url, http_client=http))

    def stderr_tail(self) -> str:
        """The last lines the server wrote to stderr (empty for an HTTP server)."""
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0)
        text = self._stderr.read()
        self._stderr.seek(0, 2)
        tail = text[-STDERR_TAIL_CHARS:].rstrip()
        return tail if len(text) <= STDERR_TAIL_CHARS else "..." + tail

    # -- the tool list -------------------------------------------------------------------------

    def _on_message(self, message: IncomingMessage, session: ClientSession) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            # Not awaited here: the SDK delivers the answer to list_tools after this returns.
            self._refresh = asyncio.create_task(self._refreshed(self._refresh, session))

    async def _refreshed(self, previous: asyncio.Task[None] | None, session: ClientSession) -> None:
        if previous is not None:
            await asyncio.wait({previous})
        try:
            self.tools = await _list_tools(session)
        except Exception as exc:
            log.warning("MCP server's tool list could not be read", server=self.name, error=exc)
            return
        log.info("MCP server's tools changed", server=self.name, tools=[t.name for t in self.tools])
        self._on_change(self)

    # -- calls ---------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call ``tool``; raises :class:`McpError` when the server is unavailable, refuses the
        request or goes away during the call (then the next call starts it again)."""
        session = await self._session_for_call()
        try:
            result = await session.call_tool(tool, arguments)
        except Exception as exc:
            if isinstance(exc, MCPError) and exc.code != mcp_types.CONNECTION_CLOSED:
                raise McpError(
                    f"MCP server {self.name!r} refused the call of {tool!r}: {exc.message} "
                    f"(MCP error {exc.code})",
                    "MCP_ERROR",
                ) from exc
            raise await self._crashed(tool, exc) from exc
        self._failures = 0
        if self._refresh is not None:  # the list changed during the call: see it before the
            await asyncio.wait({self._refresh})  # model's next step
        return result

    async def _session_for_call(self) -> ClientSession:
        """The open session, or one started now. The start runs in a task of its own, so a call
        cancelled while it waits (its timeout, an abort) leaves it running for the next call."""
        async with self._lock:
            if self._session is not None:
                return self._session
            if self._starting is None:
                wait = self._retry_at - self._clock()
                if wait > 0:
                    raise McpError(
                        f"MCP server {self.name!r} is unavailable ({self.error}); it is started "
                        f"again on a call in {wait:.1f} s",
                        "MCP_UNAVAILABLE",
                    )
                self._starting = asyncio.create_task(self._restart())
            starting = self._starting
        await asyncio.shield(starting)
        return await self._session_for_call()  # started; unless it went away again meanwhile

    async def _restart(self) -> None:
        try:
            await self.start()
        finally:
            self._starting = None

    async def _crashed(self, tool: str, exc: BaseException) -> McpError:
        tail = self.stderr_tail()
        message = (
            f"MCP server {self.name!r} went away during the call of {tool!r} "
            f"({_describe(exc)}); it is started again on the next call"
        )
        if tail:
            message += f". Its stderr ends with:\n{tail}"
        async with self._lock:
            if self._session is not None:
                await self._halt()
                self.state, self.error = "crashed", message
                self._note_failure()
        return McpError(message, "MCP_SERVER_CRASHED")


async def _list_tools(session: ClientSession) -> tuple[mcp_types.Tool, ...]:
    """Every page of the server's tool list."""
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    while True:
        params = None if cursor is None else mcp_types.PaginatedRequestParams(cursor=cursor)
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tuple(tools)


def _reason(runner: asyncio.Task[None]) -> str:
    return _describe(runner.exception() or RuntimeError("the connection ended"))


def _describe(exc: BaseException) -> str:
    """The innermost error of an exception group (the SDK's task groups wrap them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, McpError):  # ours: its message says it all
        return exc.message
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
