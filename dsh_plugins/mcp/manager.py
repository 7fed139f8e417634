"""The MCP servers of one harness (``harness.mcp``): started together with the harness, their
tools kept in step with the tool registry, stopped with the harness.

Imports nothing from the ``mcp`` SDK at module level: without the optional extra, configuring a
server is a ``MISSING_DEPENDENCY`` failure that says what to install, and nothing else breaks.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING

from dsh.plugin import DshError, Tool, get_logger
from dsh_plugins.mcp.config import INSTALL, McpConfig, McpError, McpServerConfig

if TYPE_CHECKING:
    from dsh.plugin import Harness
    from dsh_plugins.mcp.client import Connection
    from dsh_plugins.mcp.status import ServerStatus

__all__ = ["McpServers", "sdk_missing"]

log = get_logger("dsh.mcp")

#: Who registers MCP tools in the tool registry (``dsh tools`` shows it as the source).
OWNER = "mcp"


def sdk_missing() -> str | None:
    """Why MCP servers cannot run here (the SDK is not installed), or ``None``."""
    if importlib.util.find_spec("mcp") is not None:
        return None
    return f"the MCP SDK is not installed: run {INSTALL} to use MCP servers"


class McpServers:
    """Starts the configured servers, registers their tools, follows their tool lists."""

    def __init__(self, harness: Harness, config: McpConfig) -> None:
        self._harness = harness
        self.config = config
        self._connections: dict[str, Connection] = {}
        self._failures: dict[str, McpError] = {}
        self._registered: dict[str, dict[str, tuple[Tool, Callable[[], None]]]] = {}
        self._problems: dict[str, list[str]] = {}

    async def start(self) -> None:
        """Start every enabled server at once; a server that fails is logged and listed with
        its error, and the others go on."""
        enabled = {name: c for name, c in self.config.servers.items() if c.enabled}
        if not enabled:
            return
        missing = sdk_missing()
        if missing is not None:
            for name in enabled:
                self._failures[name] = McpError(
                    f"MCP server {name!r} is configured but {missing}", "MISSING_DEPENDENCY"
                )
                log.error(
                    "MCP server not started", server=name, code="MISSING_DEPENDENCY", error=missing
                )
            return
        from dsh_plugins.mcp.client import Connection

        for name, server in enabled.items():
            self._connections[name] = Connection(name, server, self.config, self._sync)
        await asyncio.gather(*(self._start(c) for c in self._connections.values()))

    async def _start(self, connection: Connection) -> None:
        try:
            await connection.start()
        except McpError as exc:
            self._failures[connection.name] = exc
            log.warning("MCP server failed to start", server=connection.name, error=exc.message)

    async def stop(self) -> None:
        """Stop every server and take their tools out of the registry."""
        await asyncio.gather(*(c.stop() for c in self._connections.values()))
        for tools in self._registered.values():
            for _, dispose in tools.values():
                dispose()
        self._registered.clear()

    def _sync(self, connection: Connection) -> None:
        """Make the registry hold exactly the server's current tools (allowed and capped by
        the connection), each under its dsh name; note every tool that cannot be offered."""
        from dsh_plugins.mcp.tools import dsh_name, make_tool

        server = connection.name
        problems = self._problems[server] = []
        if connection.capped:
            problems.append(
                f"it offers more than max_tools ({connection.max_tools}) tools: only the first "
                f"{connection.max_tools} are offered"
            )
        for name, why in connection.unreadable:
            self._not_offered(server, name, why)
        wanted: dict[str, Tool] = {}
        origin: dict[str, str] = {}  # dsh name -> the server's name of the tool
        for listed in connection.tools:
            name = dsh_name(server, listed.name)
            if name in origin:
                self._not_offered(
                    server,
                    listed.name,
                    f"its dsh name {name!r} is that of its tool {origin[name]!r} already",
                )
                continue
            origin[name] = listed.name
            wanted[name] = make_tool(connection, listed, name, self.config.max_output_bytes)
        held = self._registered.setdefault(server, {})
        for name in list(held):
            tool, dispose = held[name]
            if name not in wanted or _differs(tool, wanted[name]):
                dispose()
                del held[name]
        for name, tool in wanted.items():
            if name not in held:
                self._register(server, origin[name], tool, held)

    def _register(
        self, server: str, origin: str, tool: Tool, held: dict[str, tuple[Tool, Callable[[], None]]]
    ) -> None:
        try:
            held[tool.name] = (tool, self._harness.tools.register(tool, OWNER))
        except DshError as exc:
            self._not_offered(server, origin, str(exc))

    def _not_offered(self, server: str, tool: str, why: str) -> None:
        shown = tool if len(tool) <= 80 else f"{tool[:60]}... ({len(tool)} characters)"
        log.warning("MCP tool not offered", server=server, tool=shown, error=why)
        self._problems[server].append(f"tool {shown!r} is not offered: {why}")

    def status(self) -> list[ServerStatus]:
        """Every configured server, in config order."""
        return [self._status(name, config) for name, config in self.config.servers.items()]

    def _status(self, name: str, config: McpServerConfig) -> ServerStatus:
        from dsh_plugins.mcp.status import ServerStatus

        where = config.describe()
        if not config.enabled:
            return ServerStatus(name, where, "disabled")
        connection = self._connections.get(name)
        failure = self._failures.get(name)
        if failure is not None and (connection is None or connection.state == "failed"):
            return ServerStatus(name, where, "failed", failure.message, failure.code)
        assert connection is not None  # enabled, not failed: it was started
        tools = tuple(sorted(t.schema.name for t, _ in self._registered.get(name, {}).values()))
        problems = tuple(self._problems.get(name, ()))
        return ServerStatus(
            name, where, connection.state, connection.error, tools=tools, problems=problems
        )


def _differs(old: Tool, new: Tool) -> bool:
    return (old.schema, old.effect, old.timeout_s) != (new.schema, new.effect, new.timeout_s)
