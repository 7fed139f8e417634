"""``dsh mock-server``: run the mock DeepSeek server until Ctrl-C or ``POST /mock/shutdown``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from dsh.testing.mockserver.catalogue import check_spec
from dsh.testing.mockserver.server import MockServer
from dsh_plugins.mock_server.options import mock_server as configure

__all__ = ["configure", "run", "setup_block"]


async def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Serve until shut down; exit code 2 for an unknown scenario name, 1 when the port is
    taken (or cannot be listened on)."""
    try:
        for name in args.scenario:
            check_spec(name)
    except ValueError as exc:
        print(f"dsh mock-server: {exc}", file=err)
        return 2
    server = MockServer(port=args.port, api_key=args.api_key)
    try:
        try:
            await server.start()
        except OSError as exc:
            reason = exc.strerror or str(exc)
            print(f"dsh mock-server: cannot listen on 127.0.0.1:{args.port}: {reason}", file=err)
            return 1
        server.queue(*args.scenario)
        _announce(server, args.api_key, out)
        await server.wait_closed()
    finally:
        await server.close()
    return 0


def setup_block(url: str, api_key: str | None) -> str:
    """The ``dsh.toml`` lines that point dsh at the server. The adapter refuses to send a
    request without a key, so the block has one: the server's own, or any (it accepts any)."""
    return "\n".join(
        [
            "[llm_deepseek]",
            f"base_url = {json.dumps(url)}",
            f"api_key = {json.dumps(api_key or 'sk-mock')}",
        ]
    )


def _announce(server: MockServer, api_key: str | None, out: TextIO) -> None:
    print(f"mock DeepSeek server listening on {server.url}", file=out)
    print(
        "point dsh at it: put these lines in dsh.toml (read from the current directory)", file=out
    )
    print(f"\n{setup_block(server.url, api_key)}\n", file=out)
    print('then: dsh run "hello"   or   dsh chat', file=out)
    print(f"queue scenarios: POST a JSON list of names to {server.url}/mock/queue", file=out)
    print(f"stop: Ctrl-C, or POST {server.url}/mock/shutdown", file=out, flush=True)
