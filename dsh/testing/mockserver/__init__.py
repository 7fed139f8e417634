"""The mock DeepSeek server: a DeepSeek-compatible, fault-injecting HTTP server on loopback.

The engine of the test kit: the server (:class:`MockServer`, ``async with MockServer() as
server``), its scenarios and faults, the recorded wire transcripts, the request checks, the
Anthropic Messages encoding and the prompt-cache accounting. Tests get a started one from the
``mock_server`` fixture (:mod:`dsh.testing.mock`); the ``mock_server`` plugin is its command-line
front (``dsh mock-server``, ``dsh demo``). See ``docs/plugins/mock_server.md``.
"""

from __future__ import annotations

from dsh.testing.mockserver.catalogue import SCENARIOS, ScenarioSpec
from dsh.testing.mockserver.conversation import sample_arguments, thinking_enabled
from dsh.testing.mockserver.scenario import Scenario, error_reply, reply
from dsh.testing.mockserver.server import MODELS, MockServer, RecordedRequest, completion_json

__all__ = [
    "MODELS",
    "SCENARIOS",
    "MockServer",
    "RecordedRequest",
    "Scenario",
    "ScenarioSpec",
    "completion_json",
    "error_reply",
    "reply",
    "sample_arguments",
    "thinking_enabled",
]
