"""``mcp``: the tools of Model Context Protocol servers as dsh tools, and a dsh agent as an MCP
server.

The client: section ``mcp`` lists servers (a program on stdio, or a streamable HTTP URL); they
start with the harness, concurrently, and stop with it; each tool becomes the dsh tool
``mcp__<server>__<tool>`` and runs through ``dsh_tools_execute`` like any other, with an effect
taken from its annotations. ``dsh mcp list`` shows the servers and their tools; ``dsh mcp
serve`` exposes an agent as an MCP server with one tool, ``ask``. The ``mcp`` SDK is an
optional extra (``pip install 'dsh-harness[mcp]'``). See ``docs/mcp.md``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dsh.plugin import Command, Harness, hookimpl, imported
from dsh_plugins.mcp.config import SECTION, McpConfig, McpServerConfig
from dsh_plugins.mcp.manager import McpServers

if TYPE_CHECKING:
    from dsh_plugins.mcp.status import ServerStatus

__all__ = [
    "MCP_HELP",
    "McpConfig",
    "McpPlugin",
    "McpServerConfig",
    "McpServers",
    "ServerStatus",
]

# A server's status loads when one is asked for (``dsh mcp list``), never with a start.
_HOMES = {"ServerStatus": "dsh_plugins.mcp.status"}


def __getattr__(name: str) -> Any:
    return imported(__name__, name, _HOMES)


MCP_HELP = "MCP servers: list the configured ones and their tools, or serve a dsh agent over MCP"


def _deferred(function: str, *bound: Any) -> Callable[[Any], Any]:
    """``commands.function`` (with ``bound`` first), imported when first called: every harness
    loads this plugin, and only ``dsh mcp`` needs the command's module (and ``argparse``)."""

    def call(arg: Any) -> Any:
        return getattr(importlib.import_module(f"{__name__}.commands"), function)(*bound, arg)

    return call


class McpPlugin:
    """Starts the configured MCP servers with the harness (``harness.mcp`` while it runs) and
    contributes the ``mcp`` command."""

    def __init__(self) -> None:
        self.servers: McpServers | None = None
        self._dispose: Callable[[], None] = lambda: None

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, McpConfig)

    @hookimpl
    def dsh_register_commands(self, register: Callable[[Command], Any], harness: Harness) -> None:
        register(Command("mcp", MCP_HELP, _deferred("run", harness), _deferred("configure")))

    @hookimpl
    async def dsh_harness_start(self, harness: Harness) -> None:
        servers = McpServers(harness, harness.config.section(SECTION, McpConfig))
        self._dispose = harness.add_service("mcp", servers)
        self.servers = servers
        await servers.start()

    @hookimpl
    async def dsh_harness_stop(self, harness: Harness) -> None:
        servers, self.servers = self.servers, None
        if servers is None:  # the start hook failed before the servers existed
            return
        self._dispose()
        await servers.stop()

    def plugin_details(self, harness: Harness) -> list[str]:
        """The configured servers, for ``dsh plugins`` (without starting them)."""
        config = harness.config.section(SECTION, McpConfig)
        return [
            f"server {name}: {server.describe()}" + ("" if server.enabled else " (disabled)")
            for name, server in config.servers.items()
        ]
