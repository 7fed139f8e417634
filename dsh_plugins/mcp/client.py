"""One connection to an MCP server, through the official ``mcp`` SDK (imported here only, so
the SDK stays an optional extra).

The SDK's transports and sessions are anyio context managers that must be entered and left by
one task: :class:`Connection` runs them in a task of its own (the *runner*) that holds the
session open until it is stopped, inside an anyio cancel scope, so stopping lets the
transport's shielded shutdown close stdin, wait, and kill the server's process group. Calls are
made from the tool's own task, so the registry's timeout, an abort or a dispose cancel the
request (the SDK then tells the server with ``notifications/cancelled``). A stdio server is
reached through :mod:`dsh_plugins.mcp.stdio`, an HTTP one through :mod:`dsh_plugins.mcp.http`;
the reads of both are bounded by ``max_message_bytes``.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import IO, Any, Literal

import anyio
from mcp import ClientSession
from mcp import types as mcp_types
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from pydantic import ValidationError

from dsh.plugin import get_logger
from dsh_plugins.mcp.config import McpConfig, McpError, McpServerConfig, expand
from dsh_plugins.mcp.http import http_client
from dsh_plugins.mcp.stdio import PROTOCOL_ERROR, LineReader, stdio_transport

__all__ = ["Connection", "State"]

log = get_logger("dsh.mcp")

State = Literal["stopped", "starting", "running", "crashed", "failed"]

#: How much of a server's stderr a failure report quotes.
STDERR_TAIL_CHARS = 2000


class Connection:
    """A server by ``name``: :meth:`start` it, :meth:`call` its tools, :meth:`stop` it.

    ``tools`` is its current tool list (those of the ``tools`` allow-list, at most
    ``max_tools``; ``capped`` says the server offers more); ``on_change(self)`` is called after
    every start and every refresh of the list (the server sent
    ``notifications/tools/list_changed``). A call that finds the server gone starts it again,
    unless the previous failures ask to wait (see :class:`~dsh_plugins.mcp.config.McpConfig`);
    ``clock`` is how the wait is measured. A server that breaks the protocol (see
    :mod:`dsh_plugins.mcp.stdio`) is ``failed`` at once, and started again by the next call.
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
        self.capped = False
        #: The tools of the last listing the SDK could not read: (name, why).
        self.unreadable: tuple[tuple[str, str], ...] = ()
        self.max_tools = config.max_tools or settings.max_tools
        self.max_message_bytes = config.max_message_bytes or settings.max_message_bytes
        #: What frames the stdio server's messages (and how much it ever held), while it runs.
        self.reader: LineReader | None = None
        self._on_change = on_change
        self._clock = clock
        self._failures = 0
        self._retry_at = 0.0
        self._lock = asyncio.Lock()
        self._session: ClientSession | None = None
        self._dispatcher: JSONRPCDispatcher[Any] | None = None
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
        runner.add_done_callback(self._ended)
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

    def _ended(self, runner: asyncio.Task[None]) -> None:
        """The runner ended. Unless it was stopped (or had not started: :meth:`start` reports
        that), the connection ended on its own (its transport found the server breaking the
        protocol): the server is failed, and the next call starts it again."""
        if self._runner is None or self._runner[0] is not runner or self._session is None:
            return
        self._session = None
        self.state, self.error = "failed", self._lost(_reason(runner))
        self._note_failure()
        log.warning("MCP server failed", server=self.name, error=self.error)

    def _lost(self, why: str) -> str:
        return f"MCP server {self.name!r} failed: {why}; it is started again on the next call"

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

    async def _halt(self) -> BaseException | None:
        """Leave the runner's contexts (the transport stops the server: its shutdown is
        bounded) and wait for it; returns how it ended."""
        runner, self._runner, self._session = self._runner, None, None
        if self._refresh is not None:
            self._refresh.cancel()
            self._refresh = None
        ended: BaseException | None = None
        if runner is not None:
            task, scope = runner
            scope.cancel()
            [ended] = await asyncio.gather(task, return_exceptions=True)
            log.debug("MCP connection closed", server=self.name, outcome=ended)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        return ended

    async def _run(self, ready: asyncio.Future[None], scope: anyio.CancelScope) -> None:
        with scope:
            async with AsyncExitStack() as stack:
                read, write = await self._open(stack)

                async def on_message(message: IncomingMessage) -> None:
                    self._on_message(message, session)

                dispatcher = JSONRPCDispatcher(read, write)
                session = ClientSession(dispatcher=dispatcher, message_handler=on_message)
                self._dispatcher = dispatcher
                await stack.enter_async_context(session)
                await session.initialize()
                await self._list(session)
                self._session = session
                ready.set_result(None)
                await anyio.sleep_forever()

    async def _open(self, stack: AsyncExitStack) -> Any:
        if self.config.command is not None:
            env = expand(self.config.env, f"the env of MCP server {self.name!r}")
            # Kept open while the server runs (its stderr), closed by _halt.
            self._stderr = tempfile.TemporaryFile(  # noqa: SIM115
                "w+", encoding="utf-8", errors="replace"
            )
            self.reader = LineReader(self.max_message_bytes)
            transport = stdio_transport(
                self.config.command,
                self.config.args,
                env,
                self.config.cwd,
                self._stderr,
                self.reader,
            )
            return await stack.enter_async_context(transport)
        headers = expand(self.config.headers, f"the headers of MCP server {self.name!r}")
        http = await stack.enter_async_context(http_client(headers, self.max_message_bytes))
        endpoint = streamable_http_client(
            str(self.config.url), http_client=http, max_sse_event_size=self.max_message_bytes
        )
        return await stack.enter_async_context(endpoint)

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
            await self._list(session)
        except Exception as exc:
            log.warning("MCP server's tool list could not be read", server=self.name, error=exc)
            return
        log.info("MCP server's tools changed", server=self.name, tools=[t.name for t in self.tools])
        self._on_change(self)

    async def _list(self, session: ClientSession) -> None:
        """Read the server's tool list, page by page, keeping the allowed tools; reading stops
        once more than ``max_tools`` are kept, and only the first ``max_tools`` are."""
        allowed = self.config.tools
        tools: list[mcp_types.Tool] = []
        unreadable: list[tuple[str, str]] = []
        cursor: str | None = None
        while True:
            page, cursor = await self._page(session, cursor, unreadable)
            tools += [t for t in page if allowed is None or t.name in allowed]
            if cursor is None or len(tools) > self.max_tools:
                break
        self.tools, self.capped = tuple(tools[: self.max_tools]), len(tools) > self.max_tools
        self.unreadable = tuple(
            (n, why) for n, why in unreadable if allowed is None or n in allowed
        )
        if self.capped:
            log.warning(
                "MCP server offers more tools than max_tools: only the first ones are offered",
                server=self.name,
                max_tools=self.max_tools,
                hint=f"list the tools you need in [mcp.servers.{self.name}] tools, or raise "
                "max_tools",
            )

    async def _page(
        self, session: ClientSession, cursor: str | None, unreadable: list[tuple[str, str]]
    ) -> tuple[list[mcp_types.Tool], str | None]:
        """One page of the tool list and the next page's cursor. The SDK checks a page as a
        whole, so one malformed tool would cost all of them: then the page is read again as it
        is, and its tools one by one (the registry then checks their schemas)."""
        params = None if cursor is None else mcp_types.PaginatedRequestParams(cursor=cursor)
        try:
            page = await session.list_tools(params=params)
        except ValidationError:
            assert self._dispatcher is not None  # set with the session
            raw = await self._dispatcher.send_raw_request(
                "tools/list", None if cursor is None else {"cursor": cursor}
            )
            following = raw.get("nextCursor")
            # What list_tools would have cached (a call checks its result against the tool's
            # output schema, and lists the tools again when it finds none): the SDK offers no
            # public way to hand it a list it did not read itself.
            read = mcp_types.ListToolsResult(tools=_tools_of(raw, unreadable))
            tools = session._absorb_tool_listing(read, complete=False).tools
            return tools, following if isinstance(following, str) else None
        return page.tools, page.next_cursor

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
            raise await self._crashed(tool, exc, session) from exc
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
            await self._halt()  # what is left of a server that failed on its own
            await self.start()
        finally:
            self._starting = None

    async def _crashed(self, tool: str, exc: BaseException, session: ClientSession) -> McpError:
        """The error of a call whose connection closed: the server exited, or (its transport
        ended it) broke the protocol."""
        went_away = self._went_away(tool, exc)  # before the halt closes its stderr
        async with self._lock:
            if self._session is session:
                broken = _protocol_error(await self._halt())
                if broken is None:
                    self.state, self.error = "crashed", went_away
                else:
                    self.state, self.error = "failed", self._lost(broken.message)
                self._note_failure()
            elif self.state != "failed":  # a call beside it found the crash first
                return McpError(went_away, "MCP_SERVER_CRASHED")
        if self.state == "failed":
            return McpError(self.error or "", PROTOCOL_ERROR)
        return McpError(went_away, "MCP_SERVER_CRASHED")

    def _went_away(self, tool: str, exc: BaseException) -> str:
        tail = self.stderr_tail()
        message = (
            f"MCP server {self.name!r} went away during the call of {tool!r} "
            f"({_describe(exc)}); it is started again on the next call"
        )
        if tail:
            message += f". Its stderr ends with:\n{tail}"
        return message


def _tools_of(raw: dict[str, Any], unreadable: list[tuple[str, str]]) -> list[mcp_types.Tool]:
    """The tools of a ``tools/list`` answer the SDK refused, each read on its own: those it
    cannot read at all go to ``unreadable``, with the place and the reason."""
    entries = raw.get("tools")
    if not isinstance(entries, list):
        raise McpError("its tools/list answer has no list of tools", "MCP_ERROR")
    tools = []
    for index, entry in enumerate(entries):
        try:
            tools.append(mcp_types.Tool.model_validate(entry))
        except ValidationError as exc:
            name = entry.get("name") if isinstance(entry, dict) else None
            error = exc.errors()[0]
            where = "/" + "/".join(str(part) for part in error["loc"])
            why = f"the server's entry for it is invalid at {where}: {error['msg']}"
            unreadable.append((name if isinstance(name, str) else f"#{index}", why))
    return tools


def _protocol_error(ended: BaseException | None) -> McpError | None:
    """The transport's error, when a connection ended because the server broke the protocol."""
    while isinstance(ended, BaseExceptionGroup) and ended.exceptions:
        ended = ended.exceptions[0]
    return ended if isinstance(ended, McpError) and ended.code == PROTOCOL_ERROR else None


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
