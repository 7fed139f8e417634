"""When the otel plugin records, and what each signal costs the loop: nothing at all until a
provider records, only what a configured signal needs after; a policy's decision inside the
tool span; a turn's cost as one measurement per model when the turn ends."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dsh import AgentOptions, Harness, Tool, hookimpl
from dsh.llm._service import ModelInfo
from dsh.testing import ScriptedAdapter, error_response, text_response, tool_call_response
from dsh.tools._registry import ToolExecution
from dsh.values._chunks import StreamChunk, TokenUsage, UsageChunk
from dsh.values._content import Message, Text
from dsh.values._events import TurnCompleted, TurnEnd
from dsh.values._request import LlmRequest, ToolSchema
from dsh.values._tokens import Price
from dsh_plugins.otel import OtelPlugin
from dsh_plugins.otel.telemetry import records
from dsh_plugins.permissions import PermissionsPlugin
from dsh_plugins.retry import RetryPlugin
from tests.plugins.otel.support import Clock, Telemetry, agent_on, run_turn

ROOT = Path(__file__).resolve().parents[3]
#: The hooks that run per chunk, per model call and per tool call.
HOT_HOOKS = ("dsh_session_event", "dsh_llm_stream", "dsh_tools_execute", "dsh_tools_approve")


async def echo(args: Any, execution: ToolExecution) -> str:
    return f"echo: {args['text']}"


ECHO = Tool(ToolSchema("echo", "Echo the text."), echo)


def test_only_providers_outside_the_api_record() -> None:
    """The API's no-op providers and the proxies standing in for unset global ones record
    nothing; the SDK's (or any other implementation's) do."""
    assert not records(trace.NoOpTracerProvider())
    assert not records(trace.ProxyTracerProvider())
    from opentelemetry import metrics

    assert not records(metrics.NoOpMeterProvider())
    assert records(TracerProvider()) and records(MeterProvider())


async def test_without_a_configured_sdk_no_hook_of_the_plugin_runs_on_the_hot_path() -> None:
    """The API alone (no global provider set in this process): the agent runs, nothing is
    recorded, and the loop calls none of the plugin's per-chunk, per-call hooks."""
    plugin = OtelPlugin()
    async with Harness(load_entrypoints=False, plugins=[plugin]) as h:
        h.tools.register(ECHO)
        agent = agent_on(h, tool_call_response("c1", "echo", {"text": "x"}), text_response("k"))
        await run_turn(agent)
        assert not plugin.active
        assert [name for name in h.plugins.names() if "recorder" in name] == []
        for hook in HOT_HOOKS:
            assert not [name for name in h.plugins.implementers(hook) if "otel" in name], hook
        assert agent.session.events[-1].type == "turn/end"


async def test_with_a_provider_the_recorder_is_registered_when_the_harness_starts(
    telemetry: Telemetry,
) -> None:
    plugin = telemetry.plugin()
    async with Harness(load_entrypoints=False, plugins=[plugin]) as h:
        assert plugin.active
        for hook in HOT_HOOKS:
            assert "OtelPlugin.recorder" in h.plugins.implementers(hook), hook


async def test_two_instances_with_providers_of_their_own_each_record() -> None:
    """The entry point's instance and a host's own, say, each into its providers."""
    from tests.plugins.otel.support import Telemetry as Recording

    first, second = Recording(), Recording()
    plugins = [first.plugin(), second.plugin()]
    async with Harness(load_entrypoints=False, plugins=plugins) as h:
        await run_turn(agent_on(h, text_response("k")))
        assert {"OtelPlugin.recorder", "OtelPlugin#2.recorder"} <= set(h.plugins.names())
    for recording in (first, second):
        assert sorted(s.name for s in recording.spans()) == ["chat scripted", "invoke_agent a"]
        recording.tracer_provider.shutdown()
        recording.meter_provider.shutdown()


async def test_traces_alone_record_spans_and_no_metric() -> None:
    """A host that configures traces only (the meter provider is the API's): spans, and no
    measurement made."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    plugin = OtelPlugin(tracer_provider=provider)
    async with Harness(load_entrypoints=False, plugins=[plugin]) as h:
        h.tools.register(ECHO)
        script = [tool_call_response("c1", "echo", {"text": "x"}), text_response("k")]
        agent = agent_on(h, *script, text_response("again"))
        await run_turn(agent)
        await run_turn(agent)  # the second turn looks at the meter provider again
        telemetry = plugin._telemetry
        assert telemetry is not None and telemetry.traced and not telemetry.metered
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == ["chat scripted"] * 3 + ["execute_tool echo"] + ["invoke_agent a"] * 2
    provider.shutdown()


async def test_metrics_alone_record_measurements_and_no_span() -> None:
    """A host that configures metrics only: every measurement, no span, and what the tool
    sees as the current span is what it was without the plugin."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    seen: list[trace.Span] = []

    async def look(args: Any, execution: ToolExecution) -> str:
        seen.append(trace.get_current_span())
        return "looked"

    plugin = OtelPlugin(meter_provider=provider)
    async with Harness(load_entrypoints=False, plugins=[plugin]) as h:
        h.tools.register(Tool(ToolSchema("look", "Look."), look))
        script = [tool_call_response("c1", "look", {}), text_response("k"), text_response("2")]
        agent = agent_on(h, *script)
        await run_turn(agent)
        await run_turn(agent)
        telemetry = plugin._telemetry
        assert telemetry is not None and telemetry.metered and not telemetry.traced
    assert seen == [trace.INVALID_SPAN]
    data = reader.get_metrics_data()
    assert data is not None
    names = {m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}
    assert names == {
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
        "gen_ai.client.operation.time_to_first_chunk",
        "dsh.agent.turns",
    }
    provider.shutdown()


LATE = """
import asyncio, json
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dsh import AgentOptions, Harness
from dsh.testing import ScriptedAdapter, text_response
from dsh_plugins.otel import OtelPlugin

async def main():
    plugin = OtelPlugin()
    async with Harness(load_entrypoints=False, plugins=[plugin]) as h:
        script = [text_response("one"), text_response("two"), text_response("three")]
        h.llm.register_adapter(["scripted"], ScriptedAdapter(script))
        agent = h.agent_loop.create("late", AgentOptions(model="scripted"))
        report = {}
        agent.send("1")
        await agent.wait_idle()
        report["before"] = plugin.active
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(tracer_provider)
        agent.send("2")
        await agent.wait_idle()
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        agent.send("3")
        await agent.wait_idle()
    report["spans"] = [
        [s.name, s.attributes.get("dsh.turn")] for s in exporter.get_finished_spans()
    ]
    report["turns"] = [
        [dict(p.attributes), p.value]
        for r in reader.get_metrics_data().resource_metrics
        for s in r.scope_metrics
        for m in s.metrics
        if m.name == "dsh.agent.turns"
        for p in m.data.data_points
    ]
    print(json.dumps(report))

asyncio.run(main())
"""


async def test_global_providers_a_host_sets_after_the_harness_started_are_taken_up() -> None:
    """A global provider set once the harness runs is used from the next turn on, traces and
    metrics each when they come. The global providers can be set once per process: the
    harness runs in a child process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LATE, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    report = json.loads(stdout)
    assert report["before"] is False
    assert sorted(report["spans"]) == [
        ["chat scripted", None],
        ["chat scripted", None],
        ["invoke_agent late", 2],
        ["invoke_agent late", 3],
    ]
    outcome = {"gen_ai.agent.name": "late", "dsh.turn.outcome": "completed"}
    assert report["turns"] == [[outcome, 1]]


class Answer:
    """The host's answer to every approval a policy asks for."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer

    @hookimpl
    def dsh_tools_approve(self, execution: ToolExecution, reason: str) -> bool:
        return self.answer


@pytest.mark.parametrize(("answer", "permission"), [(True, "approved"), (False, "denied")])
async def test_the_permissions_plugins_decision_is_inside_the_tool_span(
    telemetry: Telemetry, answer: bool, permission: str
) -> None:
    """The permissions plugin wraps every other tool middleware (``tryfirst``), and is loaded
    after this plugin here as among the entry points: the tool span still covers its decision,
    a denied call included."""
    plugins = [telemetry.plugin(), PermissionsPlugin(), Answer(answer)]
    config = {"permissions": {"mode": "read-only"}}  # a tool that declares nothing asks
    async with Harness(load_entrypoints=False, plugins=plugins, config=config) as h:
        h.tools.register(ECHO)
        agent = agent_on(h, tool_call_response("c1", "echo", {"text": "x"}), text_response("k"))
        await run_turn(agent)
    tool = telemetry.one("execute_tool echo")
    assert (tool.attributes or {})["dsh.tool.permission"] == permission
    assert [e.name for e in tool.events] == ["dsh.tool.approval_requested"]


class PricedAdapter(ScriptedAdapter):
    """A scripted model at $1 per million input tokens and $2 per million output tokens."""

    def model_info(self, model_id: str) -> ModelInfo:
        return ModelInfo(pricing=Price(1.0, 2.0))


def priced(reply: list[StreamChunk], input_tokens: int, output_tokens: int) -> list[StreamChunk]:
    """``reply`` with its usage chunk saying these token counts."""
    usage = UsageChunk(TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens))
    return [*reply[:-2], usage, reply[-1]]


def cost_points(telemetry: Telemetry) -> list[tuple[str, Any]]:
    return [
        (p.attributes["gen_ai.request.model"], p.value) for p in telemetry.points("dsh.llm.cost")
    ]


async def test_a_turns_cost_is_added_once_per_model_when_it_ends(
    harness: Harness, telemetry: Telemetry
) -> None:
    held: list[list[tuple[str, Any]]] = []

    async def check(args: Any, execution: ToolExecution) -> str:
        held.append(cost_points(telemetry))  # mid-turn: the first call's cost is held
        return "checked"

    harness.tools.register(Tool(ToolSchema("check", "Check."), check))
    script = [
        priced(tool_call_response("c1", "check", {}), 1000, 100),
        priced(text_response("done"), 3000, 200),
    ]
    harness.llm.register_adapter(["priced"], PricedAdapter(script))
    agent = harness.agent_loop.create("p", AgentOptions(model="priced"))
    await run_turn(agent)
    assert held == [[]]
    chats = [dict(s.attributes or {})["dsh.llm.cost"] for s in telemetry.named("chat priced")]
    assert chats == [pytest.approx(0.0012), pytest.approx(0.0034)]
    assert cost_points(telemetry) == [("priced", pytest.approx(0.0046))]
    assert len(telemetry.points("gen_ai.client.operation.duration")) == 2  # chat, execute_tool


async def test_a_call_outside_a_turn_adds_its_cost_at_once(
    harness: Harness, telemetry: Telemetry
) -> None:
    harness.llm.register_adapter(
        ["priced"], PricedAdapter([priced(text_response("sum"), 1000, 500)])
    )
    request = LlmRequest("priced", (Message("user", (Text("summarise"),)),), purpose="summary")
    await harness.llm.complete(request)
    assert cost_points(telemetry) == [("priced", pytest.approx(0.002))]
    assert dict(telemetry.one("chat priced").attributes or {})["dsh.llm.purpose"] == "summary"


async def test_a_call_that_outlives_its_turn_adds_its_cost_at_once(
    harness: Harness, telemetry: Telemetry
) -> None:
    """A call made for the agent's session during a turn (a plugin's side request) whose
    stream is read after the turn ended: its cost is not lost with the turn."""
    side: list[AsyncIterator[StreamChunk]] = []

    async def start_side_call(args: Any, execution: ToolExecution) -> str:
        assert execution.agent is not None
        messages = (Message("user", (Text("title this"),)),)
        request = LlmRequest("priced", messages, session_id=execution.agent.session.id)
        side.append(await harness.llm.stream(request))
        return "started"

    harness.tools.register(Tool(ToolSchema("side", "Start a side call."), start_side_call))
    harness.llm.register_adapter(["priced"], PricedAdapter([priced(text_response("t"), 1000, 500)]))
    agent = agent_on(harness, tool_call_response("c1", "side", {}), text_response("k"))
    await run_turn(agent)
    assert cost_points(telemetry) == []
    [stream] = side
    async for _ in stream:
        pass
    assert cost_points(telemetry) == [("priced", pytest.approx(0.002))]


@pytest.fixture
def global_tracer_provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[Telemetry]:
    """Lets a test set the process's global tracer provider with the API's own call, once,
    and puts the API's globals back afterwards (they can be set once per process)."""
    from opentelemetry.util._once import Once

    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    found = Telemetry()
    yield found
    found.tracer_provider.shutdown()
    found.meter_provider.shutdown()


async def test_a_turn_running_when_the_host_sets_the_provider_is_left_out(
    global_tracer_provider: Telemetry,
) -> None:
    """The provider is set by a tool while a turn runs; the sub-agent that tool starts is the
    first turn recorded (the recorder comes with it). The running turn, which started with
    nothing to record, ends and retries without a span of its own; its later model calls are
    recorded, as calls of no recorded turn."""
    telemetry = global_tracer_provider
    plugins = [OtelPlugin(), RetryPlugin(random=lambda: 0.0)]
    async with Harness(load_entrypoints=False, plugins=plugins, sleep=Clock().sleep) as h:
        h.llm.register_adapter(["sub"], ScriptedAdapter([text_response("sub answer")]))

        async def spawn(args: Any, execution: ToolExecution) -> str:
            trace.set_tracer_provider(telemetry.tracer_provider)
            sub = h.agent_loop.create("helper", AgentOptions(model="sub"))
            await run_turn(sub, "help")
            await sub.dispose()
            return "spawned"

        h.tools.register(Tool(ToolSchema("spawn", "Spawn."), spawn))
        script = [
            tool_call_response("c1", "spawn", {}),
            error_response("SERVER", "down"),
            text_response("done"),
        ]
        agent = agent_on(h, *script)
        await run_turn(agent)
        end = agent.session.events[-1].data
        assert isinstance(end, TurnEnd) and isinstance(end.reason, TurnCompleted)
    names = sorted(s.name for s in telemetry.spans())
    assert names == ["chat scripted", "chat scripted", "chat sub", "invoke_agent helper"]
    assert [s.parent for s in telemetry.named("chat scripted")] == [None, None]


async def test_metrics_alone_note_retries_approvals_and_repeated_tools_without_spans(
    telemetry: Telemetry,
) -> None:
    plugins = [
        OtelPlugin(meter_provider=telemetry.meter_provider),
        RetryPlugin(random=lambda: 0.0),
        PermissionsPlugin(),
        Answer(True),
    ]
    config = {"permissions": {"mode": "read-only"}}  # every echo asks
    clock = Clock()
    async with Harness(
        load_entrypoints=False, plugins=plugins, config=config, sleep=clock.sleep
    ) as h:
        h.tools.register(ECHO)
        script = [
            error_response("SERVER", "down"),
            tool_call_response("c1", "echo", {"text": "x"}),
            tool_call_response("c2", "echo", {"text": "y"}),
            text_response("done"),
        ]
        agent = agent_on(h, *script)
        await run_turn(agent)
        assert await h.hooks.tools_approve(ToolExecution("c9", "echo", "{}"), "no span here")
    durations = telemetry.points("gen_ai.client.operation.duration")
    tools = [p.count for p in durations if p.attributes.get("gen_ai.tool.name") == "echo"]
    chats = {
        p.attributes.get("error.type"): p.count
        for p in durations
        if "gen_ai.tool.name" not in p.attributes
    }
    assert (tools, chats) == ([2], {"SERVER": 1, None: 3})
    assert telemetry.spans() == []


def test_the_metric_attribute_caches_stay_bounded(telemetry: Telemetry) -> None:
    """A host that names tools and models without end does not grow the caches without end."""
    from dsh_plugins.otel.telemetry import CACHED_ATTRIBUTES
    from dsh_plugins.otel.telemetry import Telemetry as Recording

    recording = Recording(False, telemetry.tracer_provider, telemetry.meter_provider)
    for n in range(CACHED_ATTRIBUTES + 10):
        recording._tool_metric_attributes(f"tool{n}", "TOOL_ERROR")
        recording._chat_metric_attributes(("p", f"model{n}", None))
    tool = recording._tool_metric_attributes(f"tool{CACHED_ATTRIBUTES + 9}", "TOOL_ERROR")
    chat = recording._chat_metric_attributes(("p", f"model{CACHED_ATTRIBUTES + 9}", None))[0]
    assert tool == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": f"tool{CACHED_ATTRIBUTES + 9}",
        "error.type": "TOOL_ERROR",
    }
    assert chat["gen_ai.request.model"] == f"model{CACHED_ATTRIBUTES + 9}"
    assert len(recording._tool_attributes) <= CACHED_ATTRIBUTES
    assert len(recording._chat_attributes) <= CACHED_ATTRIBUTES
