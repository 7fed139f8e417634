"""The options of ``dsh mock-server`` and ``dsh demo``.

Every ``dsh`` command line builds the parsers of every command, so this module imports nothing:
the server, aiohttp and the demo's harness load only when one of the two commands runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

__all__ = ["DEMO_PROMPT", "demo", "mock_server"]

DEMO_PROMPT = 'How many words are in "the quick brown fox jumps over the lazy dog"?'


def mock_server(parser: argparse.ArgumentParser) -> None:
    """The options of ``dsh mock-server``."""
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: free)")
    parser.add_argument("--api-key", help="the only bearer token accepted (default: any)")
    parser.add_argument(
        "--scenario",
        action="append",
        default=[],
        metavar="NAME",
        help="queue a scenario for the next request (repeatable; see docs/plugins/mock_server.md)",
    )


def demo(parser: argparse.ArgumentParser) -> None:
    """The options of ``dsh demo``."""
    parser.add_argument("--prompt", default=DEMO_PROMPT, help="what to ask the demo agent")
