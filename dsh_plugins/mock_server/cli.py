"""``dsh mock-server``: run the mock DeepSeek server until Ctrl-C or ``POST /mock/shutdown``."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from dsh_plugins.mock_server.catalogue import check_spec
from dsh_plugins.mock_server.server import MockServer

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: free)")
    parser.add_argument("--api-key", help="the only bearer token accepted (default: any)")
    parser.add_argument(
        "--scenario",
        action="append",
        default=[],
        metavar="NAME",
        help="queue a scenario for the next request (repeatable; see docs/plugins/mock_server.md)",
    )


async def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Serve until shut down; exit code 2 for an unknown scenario name."""
    try:
        for name in args.scenario:
            check_spec(name)
    except ValueError as exc:
        print(f"dsh mock-server: {exc}", file=out)
        return 2
    async with MockServer(port=args.port, api_key=args.api_key) as server:
        server.queue(*args.scenario)
        print(f"mock DeepSeek server listening on {server.url}", file=out)
        print(f'point dsh at it: [llm_deepseek] base_url = "{server.url}"', file=out)
        print(f"queue scenarios: POST a JSON list of names to {server.url}/mock/queue", file=out)
        print(f"stop: Ctrl-C, or POST {server.url}/mock/shutdown", file=out, flush=True)
        await server.wait_closed()
    return 0
