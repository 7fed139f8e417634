"""Section ``mcp``: the MCP servers whose tools the harness offers, and how calls to them are
bounded. Values of ``env`` and ``headers`` may name environment variables as ``${NAME}``, so a
secret stays in the environment and out of the config file (and ``dsh config --dump`` masks
both tables anyway)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from attrs import field, frozen

from dsh.plugin import DshError, OutOfRange, PermissionMode, Value, at_least, greater_than

__all__ = [
    "INSTALL",
    "SECTION",
    "McpConfig",
    "McpError",
    "McpServeConfig",
    "McpServerConfig",
    "expand",
]

SECTION = "mcp"
#: What a user runs to get the optional MCP SDK.
INSTALL = "pip install 'dsh-harness[mcp]'"

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
#: The longest server name: it is part of every tool name (``mcp__<server>__<tool>``), and model
#: APIs take tool names of at most 64 characters.
MAX_SERVER_NAME = 32
#: The default cap on one message from a server (``max_message_bytes``): 8 MiB.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
#: The default cap on the tools one server may offer (``max_tools``).
MAX_TOOLS = 128
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class McpError(DshError):
    """An MCP server could not be started or used; ``code`` says why (``MISSING_DEPENDENCY``,
    ``MCP_START_FAILED``, ``MCP_UNAVAILABLE``...)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def _one_transport(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Exactly one of ``command`` (a stdio server) and ``url`` (a streamable HTTP server)."""
    if (instance.command is None) == (value is None):
        raise OutOfRange(
            "an MCP server needs either command (a program speaking MCP on stdio) or url "
            "(a streamable HTTP endpoint), not both and not neither"
        )


def _server_names(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    bad = sorted(name for name in value if not _NAME.match(name))
    if bad:
        raise OutOfRange(
            f"MCP server names become part of tool names (mcp__<server>__<tool>): use letters, "
            f"digits, '_' and '-' only, not {', '.join(map(repr, bad))}"
        )
    long = sorted(name for name in value if len(name) > MAX_SERVER_NAME)
    if long:
        raise OutOfRange(
            f"MCP server names become part of tool names, which model APIs cap at 64 "
            f"characters: use at most {MAX_SERVER_NAME} characters, not "
            f"{', '.join(map(repr, long))}"
        )


def _optional_positive(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        greater_than(0)(instance, attribute, value)


def _optional_at_least(low: int) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    check = at_least(low)

    def validate(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None:
            check(instance, attribute, value)

    return validate


@frozen(repr=False, eq=False)
class McpServerConfig(Value):
    """One MCP server: a program started with ``command`` and ``args`` (in ``cwd``, with
    ``env`` added to a minimal environment) that speaks MCP on stdio, or a streamable HTTP
    endpoint at ``url`` (sent ``headers``). ``enabled = false`` keeps it configured but not
    started. ``timeout_s`` bounds one tool call (default: ``tools.default_timeout_s``);
    ``start_timeout_s`` bounds its start; ``tools`` (names as the server gives them) keeps only
    those tools. ``max_message_bytes`` and ``max_tools`` override the section's for this
    server."""

    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(factory=dict, metadata={"secret": True})
    cwd: str | None = None
    url: str | None = field(default=None, validator=_one_transport)
    headers: dict[str, str] = field(factory=dict, metadata={"secret": True})
    enabled: bool = True
    timeout_s: float | None = field(default=None, validator=_optional_positive)
    start_timeout_s: float = field(default=30.0, validator=greater_than(0))
    tools: tuple[str, ...] | None = None
    max_message_bytes: int | None = field(default=None, validator=_optional_at_least(1024))
    max_tools: int | None = field(default=None, validator=_optional_at_least(1))

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def describe(self) -> str:
        """Where the server runs, for listings (no header or environment values)."""
        if self.command is not None:
            return " ".join(["stdio:", self.command, *self.args])
        return f"http: {re.sub(r'//[^/@]*@', '//', str(self.url))}"


@frozen(repr=False, eq=False)
class McpServeConfig(Value):
    """Section ``mcp.serve``: how ``dsh mcp serve`` serves (its options override these).
    ``mode`` is the served agent's permission mode (default ``read-only``, whatever
    ``[permissions] mode`` says); ``workspace`` the directory its tools are confined to
    (default: the current one). Over HTTP: ``token`` is the bearer token clients must send
    (``${NAME}`` reads it from the environment; required unless the server listens on a
    loopback address); ``allowed_hosts`` and ``allowed_origins`` are the ``Host`` and
    ``Origin`` headers accepted beside the loopback ones and the listening address."""

    mode: PermissionMode | None = None
    workspace: str | None = None
    token: str | None = field(default=None, metadata={"secret": True})
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()


@frozen(repr=False, eq=False)
class McpConfig(Value):
    """Section ``mcp``. ``servers`` maps a name to a server; each of its tools becomes the dsh
    tool ``mcp__<name>__<tool>``. A tool's text output keeps its first and last halves of
    ``max_output_bytes``. A server that crashed is started again by the next call; after each
    further failure in a row the next attempt waits twice as long, from ``restart_backoff_s``
    up to ``max_restart_backoff_s``. One message from a server may be at most
    ``max_message_bytes`` long (a stdio server that sends a longer one, or stops ending its
    lines, is stopped and started again on the next call; an HTTP server's answer over it fails
    the call it answers); a server offers at most ``max_tools`` tools (the first ones it lists;
    a warning names the server)."""

    servers: dict[str, McpServerConfig] = field(factory=dict, validator=_server_names)
    max_output_bytes: int = field(default=30_000, validator=at_least(1))
    restart_backoff_s: float = field(default=1.0, validator=at_least(0))
    max_restart_backoff_s: float = field(default=60.0, validator=at_least(0))
    max_message_bytes: int = field(default=MAX_MESSAGE_BYTES, validator=at_least(1024))
    max_tools: int = field(default=MAX_TOOLS, validator=at_least(1))
    serve: McpServeConfig = field(factory=McpServeConfig)


def expand(
    values: Mapping[str, str], what: str, environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """``values`` with every ``${NAME}`` replaced by that environment variable; raises
    :class:`McpError` naming the first variable that is not set."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise McpError(
                f"{what} refers to the environment variable {name}, which is not set: export "
                "it before starting dsh",
                "MCP_START_FAILED",
            )
        return environ[name]

    return {key: _VARIABLE.sub(substitute, value) for key, value in values.items()}
