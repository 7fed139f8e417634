"""The OpenTelemetry API is imported only once something can record: a provider given to the
plugin, a host that imported the API (which setting a global provider takes), or a variable
naming a provider. A process whose host never touches OpenTelemetry does not pay its import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from dsh import Harness
from dsh.testing import text_response
from dsh_plugins.otel import API_MODULES, PROVIDER_VARIABLES, OtelPlugin
from tests.plugins.otel.support import agent_on, run_turn

ROOT = Path(__file__).resolve().parents[3]
MISSING = "opentelemetry-api is not installed: no spans (pip install dsh-harness[otel])"

LATE_IMPORT = """
import asyncio, json, sys
from dsh import AgentOptions, Harness
from dsh.testing import ScriptedAdapter, text_response
from dsh_plugins.otel import OtelPlugin

async def run_turn(agent):
    agent.send("hi")
    await agent.wait_idle()

async def main():
    plugin = OtelPlugin()
    async with Harness(load_entrypoints=False, plugins=[plugin]) as h:
        report = {"at start": "opentelemetry" in sys.modules}
        script = [text_response("1"), text_response("2")]
        h.llm.register_adapter(["scripted"], ScriptedAdapter(script))
        agent = h.agent_loop.create("a", AgentOptions(model="scripted"))
        await run_turn(agent)
        report["after a turn"] = ["opentelemetry" in sys.modules, plugin.active]
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        await run_turn(agent)
        report["spans"] = sorted(s.name for s in exporter.get_finished_spans())
    print(json.dumps(report))

asyncio.run(main())
"""

NAMED = """
import asyncio, json, sys
from dsh import Harness
from dsh_plugins.otel import OtelPlugin

async def main():
    plugin = OtelPlugin()
    async with Harness(load_entrypoints=False, plugins=[plugin]) as h:
        print(json.dumps(plugin.active))

asyncio.run(main())
"""


def child(script: str, **env: str) -> object:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    for name in PROVIDER_VARIABLES:
        if name not in env:
            environment.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def loaded(plugin: OtelPlugin) -> bool:
    """Whether the plugin imported the API and looked at the providers."""
    return plugin._telemetry is not None


@pytest.fixture
def api_not_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as if nothing had imported the API yet (restored afterwards)."""
    for name in API_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_the_api_is_imported_once_the_host_imports_it_and_not_before() -> None:
    pytest.importorskip("opentelemetry.sdk")
    assert child(LATE_IMPORT) == {
        "at start": False,
        "after a turn": [False, False],
        "spans": ["chat scripted", "invoke_agent a"],
    }


def test_a_provider_named_by_a_variable_records_from_the_start() -> None:
    pytest.importorskip("opentelemetry.sdk")
    assert child(NAMED, OTEL_PYTHON_TRACER_PROVIDER="sdk_tracer_provider") is True


async def test_the_first_turn_after_the_host_imported_the_api_looks_at_the_providers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    modules = {name: pytest.importorskip(name) for name in API_MODULES}
    for name in API_MODULES:
        monkeypatch.delitem(sys.modules, name)
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    plugin = OtelPlugin()
    async with Harness(load_entrypoints=False, plugins=[plugin]) as h:
        agent = agent_on(h, text_response("one"), text_response("two"))
        await run_turn(agent)
        assert not loaded(plugin)
        for name, module in modules.items():  # the host imports the API
            monkeypatch.setitem(sys.modules, name, module)
        await run_turn(agent)
        assert loaded(plugin)
        assert not plugin.active  # no provider that records was set in this process


@pytest.mark.usefixtures("api_not_imported")
async def test_without_the_api_nothing_is_looked_at_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    plugin = OtelPlugin()
    with capture_logs() as logs:
        async with Harness(load_entrypoints=False, plugins=[plugin]) as h:
            agent = agent_on(h, text_response("one"))
            monkeypatch.setitem(sys.modules, API_MODULES[0], None)  # a host's import attempt
            await run_turn(agent)
    assert [log["event"] for log in logs if log["event"] == MISSING] == [MISSING]
    assert not loaded(plugin) and not plugin.active


@pytest.mark.usefixtures("api_not_imported")
async def test_a_variable_naming_a_provider_without_the_api_is_reported_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.delitem(sys.modules, "dsh_plugins.otel.telemetry", raising=False)
    monkeypatch.setenv(PROVIDER_VARIABLES[1], "sdk_meter_provider")
    plugin = OtelPlugin()
    with capture_logs() as logs:
        async with Harness(load_entrypoints=False, plugins=[plugin]):
            pass
    assert [log["event"] for log in logs if log["event"] == MISSING] == [MISSING]
    assert not plugin.active
