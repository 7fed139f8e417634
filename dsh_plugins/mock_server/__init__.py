"""``mock_server``: a DeepSeek-compatible, fault-injecting HTTP server on loopback.

For tests (``dsh.testing.mock``), for host code (``async with MockServer() as server``) and from
the command line (``dsh mock-server``). This plugin also contributes ``dsh demo``, which runs an
agent against it. See ``docs/plugins/mock_server.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsh.harness import Command
from dsh.markers import hookimpl
from dsh_plugins.mock_server import cli, demo
from dsh_plugins.mock_server.catalogue import SCENARIOS, ScenarioSpec
from dsh_plugins.mock_server.conversation import sample_arguments, thinking_enabled
from dsh_plugins.mock_server.scenario import Scenario, error_reply, reply
from dsh_plugins.mock_server.server import MODELS, MockServer, RecordedRequest, completion_json

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


class MockServerPlugin:
    """Contributes the ``mock-server`` and ``demo`` CLI commands."""

    @hookimpl
    def dsh_register_commands(self, register: Callable[[Command], Any]) -> None:
        register(Command("mock-server", cli.HELP, cli.run, cli.configure))
        register(Command("demo", demo.HELP, demo.run, demo.configure))
