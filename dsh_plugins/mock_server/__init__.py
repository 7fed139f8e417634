"""``mock_server``: the command-line front of the mock DeepSeek server.

The server itself — scenarios, faults, transcripts, wire encoding, request checks — is the test
kit's engine, :mod:`dsh.testing.mockserver`. This plugin contributes ``dsh mock-server``, which
serves it on loopback, and ``dsh demo``, which runs an agent against it. See
``docs/plugins/mock_server.md``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from dsh.plugin import Command, hookimpl
from dsh_plugins.mock_server import options

__all__ = ["DEMO_HELP", "MOCK_SERVER_HELP", "MockServerPlugin"]

MOCK_SERVER_HELP = (
    "run the DeepSeek-compatible mock server on 127.0.0.1 (for tests and offline work)"
)
DEMO_HELP = "run an agent offline against the bundled DeepSeek-compatible mock server"


def _deferred(module: str, function: str) -> Callable[[Any], Any]:
    """``module.function``, imported when first called: every dsh process loads this plugin for
    its commands, and only a few run the server (and load aiohttp.web)."""

    def call(args: Any) -> Any:
        return getattr(importlib.import_module(f"{__name__}.{module}"), function)(args)

    return call


class MockServerPlugin:
    """Contributes the ``mock-server`` and ``demo`` CLI commands."""

    @hookimpl
    def dsh_register_commands(self, register: Callable[[Command], Any]) -> None:
        register(
            Command(
                "mock-server",
                MOCK_SERVER_HELP,
                _deferred("cli", "run"),
                options.mock_server,
            )
        )
        register(Command("demo", DEMO_HELP, _deferred("demo", "run"), options.demo))
