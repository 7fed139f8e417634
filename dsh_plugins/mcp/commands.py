"""``dsh mcp list`` (the servers, their state and their tools) and ``dsh mcp serve`` (a dsh
agent as an MCP server, on stdio or streamable HTTP)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dsh.plugin import PERMISSION_MODES, AgentOptions, Harness, PermissionMode
from dsh_plugins.mcp import MCP_HELP
from dsh_plugins.mcp.config import SECTION, McpConfig, McpError, McpServeConfig, expand
from dsh_plugins.mcp.manager import McpServers, sdk_missing

__all__ = ["HELP", "configure", "run"]

HELP = MCP_HELP
#: The environment variable ``dsh mcp serve`` reads its bearer token from.
TOKEN_VARIABLE = "DSH_MCP_TOKEN"


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="mcp_action", metavar="ACTION")
    parser.set_defaults(mcp_parser=parser)
    actions.add_parser("list", help="start the configured servers; show their state and tools")
    serve = actions.add_parser(
        "serve", help="serve a dsh agent as an MCP server with one tool, ask(prompt, session_id)"
    )
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (http)")
    serve.add_argument("--port", type=int, default=8765, help="the port to listen on (http)")
    serve.add_argument(
        "-m", "--model", help="the agent's model (default: [terminal_ui] model)", default=None
    )
    serve.add_argument("--system-prompt", default="", help="appended to the agent's prompt")
    serve.add_argument(
        "--mode",
        choices=PERMISSION_MODES,
        help="the agent's permission mode (default: [mcp.serve] mode, else read-only)",
    )
    serve.add_argument(
        "--workspace",
        metavar="DIR",
        help="the directory the agent's tools may touch (default: the current one)",
    )
    serve.add_argument(
        "--token",
        help=f"the bearer token HTTP clients must send (default: ${TOKEN_VARIABLE}, else "
        "[mcp.serve] token); required unless --host is a loopback address",
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST",
        help="also accept this Host header (http; repeatable): a name clients use to reach us",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="also accept this Origin header (http; repeatable), such as https://app.example",
    )


async def run(harness: Harness, args: argparse.Namespace) -> int:
    if args.mcp_action == "list":
        async with harness:
            servers: McpServers = harness.mcp
            return _list(servers)
    if args.mcp_action == "serve":
        return await _serve(harness, args)
    args.mcp_parser.print_help()
    return 2


def _list(servers: McpServers) -> int:
    statuses = servers.status()
    if not statuses:
        print("no MCP servers are configured (section [mcp.servers.<name>], see docs/mcp.md)")
        return 0
    for status in statuses:
        print(f"{status.name}  {status.state}  {status.where}")
        if status.error is not None:
            code = f"{status.code}: " if status.code else ""
            print("    " + f"{code}{status.error}".replace("\n", "\n    "))
        for tool in status.tools:
            print(f"    {tool}")
        for problem in status.problems:
            print(f"    note: {problem}")
    return 1 if any(status.state == "failed" for status in statuses) else 0


def _default_model(harness: Harness) -> str:
    """The model ``dsh run`` and ``dsh chat`` use (``[terminal_ui] model``), or ``""``."""
    section = harness.config.dump().get("terminal_ui") or {}
    return str(section.get("model") or "")


def _token(args: argparse.Namespace, config: McpServeConfig) -> str | None:
    """The bearer token: ``--token``, else the environment's, else the config's (``${NAME}``
    read from the environment). Raises :class:`McpError` for an unset variable."""
    if args.token:
        return str(args.token)
    if os.environ.get(TOKEN_VARIABLE):
        return os.environ[TOKEN_VARIABLE]
    if config.token:
        return expand({"token": config.token}, "[mcp.serve] token")["token"]
    return None


def _refusal(harness: Harness, args: argparse.Namespace) -> str | None:
    """Why serving must not start, in one line (before the harness starts), or ``None``."""
    from dsh_plugins.mcp import serve

    config = harness.config.section(SECTION, McpConfig).serve
    workspace = args.workspace or config.workspace
    if workspace is not None and not Path(workspace).is_dir():
        return f"the workspace {workspace!r} is not a directory"
    if args.transport != "http":
        return None
    try:
        args.token = _token(args, config)
    except McpError as exc:
        return exc.message
    return serve.refusal(args.host, args.token)


def _absolute(path: str | None) -> str | None:
    return os.path.abspath(path) if path else None


async def _serve(harness: Harness, args: argparse.Namespace) -> int:
    missing = sdk_missing()
    if missing is not None:
        print(f"dsh mcp serve: MISSING_DEPENDENCY: {missing}", file=sys.stderr)
        return 1
    from dsh_plugins.mcp import serve

    harness.load()
    refused = _refusal(harness, args)
    if refused is not None:
        print(f"dsh mcp serve: {refused}", file=sys.stderr)
        return 2
    config = harness.config.section(SECTION, McpConfig).serve
    workspace = args.workspace or config.workspace
    mode: PermissionMode = args.mode or config.mode or serve.DEFAULT_MODE
    async with harness:
        model = args.model or _default_model(harness)
        if not harness.llm.serves(model):
            known = ", ".join(harness.llm.models()) or "none"
            print(
                f"dsh mcp serve: no adapter serves the model {model!r}: pass --model (known "
                f"models: {known})",
                file=sys.stderr,
            )
            return 2
        options = AgentOptions(
            model=model, system_prompt=args.system_prompt, workspace=_absolute(workspace)
        )
        server = serve.build(harness, options, mode=mode)
        if args.transport == "stdio":
            await serve.run_stdio(server)
        else:
            await serve.run_http(
                server,
                args.host,
                args.port,
                token=args.token,
                allowed_hosts=[*config.allowed_hosts, *args.allow_host],
                allowed_origins=[*config.allowed_origins, *args.allow_origin],
            )
    return 0
