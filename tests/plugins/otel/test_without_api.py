"""The otel plugin where the OpenTelemetry API is not installed: it does nothing, the agents
work as without it, and ``--otel`` says what to install. These tests run in every environment:
where the packages are installed, importing them is made to fail."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

import pytest

from dsh import AgentOptions, Harness, Tool
from dsh.testing import ScriptedAdapter, error_response, tool_call_response
from dsh.tools._registry import ToolExecution
from dsh.values._content import Text
from dsh.values._events import ToolResultEvent, TurnEnd, TurnError
from dsh.values._request import ToolSchema
from dsh_plugins.otel import OtelPlugin, load_telemetry
from dsh_plugins.terminal_ui import headless, startup


@pytest.fixture
def no_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import opentelemetry`` fails, as it does where the extra is not installed."""
    if importlib.util.find_spec("opentelemetry") is not None:
        monkeypatch.delitem(sys.modules, "dsh_plugins.otel.telemetry", raising=False)
        monkeypatch.setitem(sys.modules, "opentelemetry", None)


async def echo(args: Any, execution: ToolExecution) -> str:
    return f"echo: {args['text']}"


@pytest.mark.usefixtures("no_api")
async def test_without_the_api_the_plugin_does_nothing() -> None:
    assert load_telemetry() is None
    plugin = OtelPlugin()
    async with Harness(load_entrypoints=False, plugins=[plugin]) as h:
        h.tools.register(Tool(ToolSchema("echo", "Echo."), echo))
        script = [tool_call_response("c1", "echo", {"text": "x"}), error_response("SERVER", "down")]
        h.llm.register_adapter(["scripted"], ScriptedAdapter(script))
        agent = h.agent_loop.create("a", AgentOptions(model="scripted"))
        agent.send("hi")
        await agent.wait_idle()
        assert not plugin.active
        assert not await h.hooks.tools_approve(ToolExecution("c2", "echo", "{}"), "why")
    results = [e.data for e in agent.session.events if isinstance(e.data, ToolResultEvent)]
    assert [r.content for r in results] == [(Text("echo: x"),)]
    ends = [e.data.reason for e in agent.session.events if isinstance(e.data, TurnEnd)]
    assert [(r.type, r.failure.code) for r in ends if isinstance(r, TurnError)] == [
        ("error", "SERVER")
    ]
    assert len(ends) == 1


@pytest.mark.usefixtures("no_api")
def test_otel_without_the_packages_says_what_to_install() -> None:
    parser = argparse.ArgumentParser()
    headless.configure(parser)
    args = parser.parse_args(["--otel", "hi"])
    problem = startup.options_problem(Harness(load_entrypoints=False), args)
    assert problem == (
        "--otel needs the OpenTelemetry SDK and its OTLP exporter (opentelemetry is not "
        "installed): pip install 'dsh-harness[otel]' opentelemetry-sdk "
        "opentelemetry-exporter-otlp-proto-http"
    )


def test_a_broken_plugin_module_is_not_mistaken_for_a_missing_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "dsh_plugins.otel.telemetry", None)
    with pytest.raises(ImportError):
        load_telemetry()
