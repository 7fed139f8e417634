"""``dsh mcp list`` (the servers, their state and their tools) and ``dsh mcp serve`` (a dsh
agent as an MCP server, on stdio or streamable HTTP)."""

from __future__ import annotations

import argparse
import sys

from dsh.agent import AgentOptions
from dsh.harness import Harness
from dsh_plugins.mcp import MCP_HELP
from dsh_plugins.mcp.manager import McpServers, sdk_missing

__all__ = ["HELP", "configure", "run"]

HELP = MCP_HELP


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
    return 1 if any(status.state == "failed" for status in statuses) else 0


def _default_model(harness: Harness) -> str:
    """The model ``dsh run`` and ``dsh chat`` use (``[terminal_ui] model``), or ``""``."""
    section = harness.config.dump().get("terminal_ui") or {}
    return str(section.get("model") or "")


async def _serve(harness: Harness, args: argparse.Namespace) -> int:
    missing = sdk_missing()
    if missing is not None:
        print(f"dsh mcp serve: MISSING_DEPENDENCY: {missing}", file=sys.stderr)
        return 1
    from dsh_plugins.mcp import serve

    async with harness:
        model = args.model or _default_model(harness)
        if model not in harness.llm.models():
            known = ", ".join(harness.llm.models()) or "none"
            print(
                f"dsh mcp serve: no adapter serves the model {model!r}: pass --model (known "
                f"models: {known})",
                file=sys.stderr,
            )
            return 2
        options = AgentOptions(model=model, system_prompt=args.system_prompt)
        server = serve.build(harness, options)
        if args.transport == "stdio":
            await serve.run_stdio(server)
        else:
            await serve.run_http(server, args.host, args.port)
    return 0
