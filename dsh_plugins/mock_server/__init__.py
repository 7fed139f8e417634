"""``mock_server``: a DeepSeek-compatible, fault-injecting HTTP server on loopback.

For tests (``dsh.testing.mock``), for host code (``async with MockServer() as server``) and from
the command line (``dsh mock-server``). This plugin also contributes ``dsh demo``, which runs an
agent against it. See ``docs/plugins/mock_server.md``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dsh.harness import Command
from dsh.markers import hookimpl

if TYPE_CHECKING:
    from dsh_plugins.mock_server.catalogue import SCENARIOS, ScenarioSpec
    from dsh_plugins.mock_server.conversation import sample_arguments, thinking_enabled
    from dsh_plugins.mock_server.scenario import Scenario, error_reply, reply
    from dsh_plugins.mock_server.server import (
        MODELS,
        MockServer,
        RecordedRequest,
        completion_json,
    )

__all__ = [
    "MODELS",
    "SCENARIOS",
    "MockServer",
    "MockServerPlugin",
    "RecordedRequest",
    "Scenario",
    "ScenarioSpec",
    "completion_json",
    "error_reply",
    "reply",
    "sample_arguments",
    "thinking_enabled",
]

# The server (and aiohttp.web) load on first use: every dsh process loads this plugin for its
# commands, and only a few run the server.
_HOMES = {
    "SCENARIOS": "catalogue",
    "ScenarioSpec": "catalogue",
    "sample_arguments": "conversation",
    "thinking_enabled": "conversation",
    "Scenario": "scenario",
    "error_reply": "scenario",
    "reply": "scenario",
    "MODELS": "server",
    "MockServer": "server",
    "RecordedRequest": "server",
    "completion_json": "server",
}
MOCK_SERVER_HELP = (
    "run the DeepSeek-compatible mock server on 127.0.0.1 (for tests and offline work)"
)
DEMO_HELP = "run an agent offline against the bundled DeepSeek-compatible mock server"


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


def _deferred(module: str, function: str) -> Callable[[Any], Any]:
    """``module.function``, imported when first called."""

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
                _deferred("cli", "configure"),
            )
        )
        register(
            Command("demo", DEMO_HELP, _deferred("demo", "run"), _deferred("demo", "configure"))
        )
