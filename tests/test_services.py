"""The five services: llm, tools, sessions, system prompt, agents."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dsh import (
    AgentOptions,
    DshError,
    Harness,
    LlmError,
    PromptSection,
    Stop,
    Tool,
    ToolOutcome,
    hookimpl,
)
from dsh.llm._prompt import PromptAssembly, render
from dsh.llm._service import DeferredAdapter, ModelInfo
from dsh.session._session import Session, context_message
from dsh.testing import ScriptedAdapter, text_response
from dsh.tools._registry import ToolExecution, as_content
from dsh.values._chunks import StreamChunk, TextDelta
from dsh.values._content import AgentSource, Image, Message, PluginSource, Text, ToolResult, text_of
from dsh.values._events import (
    AssistantMessage,
    SessionEvent,
    StepStart,
    ToolResultEvent,
    TurnCompleted,
    TurnEnd,
    TurnError,
    UserMessage,
)
from dsh.values._rare_events import ContextMessage, SteeringMessage
from dsh.values._request import LlmRequest, ToolSchema
from tests.helpers import data_of

# -- llm ---------------------------------------------------------------------------------------


async def test_adapters_by_model_id(harness: Harness) -> None:
    adapter = ScriptedAdapter([text_response("a")])
    dispose = harness.llm.register_adapter(["p/m", "m"], adapter)
    assert harness.llm.models() == ["m", "p/m"]
    stream = await harness.llm.stream(LlmRequest("p/m", ()))
    assert [c async for c in stream] == text_response("a")
    assert harness.llm.adapters() == [adapter]
    dispose()
    assert harness.llm.models() == []
    dispose()  # idempotent


async def test_duplicate_model_ids_fail_naming_both_owners(harness: Harness) -> None:
    harness.llm.register_adapter(["m"], ScriptedAdapter([]), owner="first")
    with pytest.raises(
        LlmError,
        match="DUPLICATE_ADAPTER: model 'm' is registered twice: by 'first' and by 'second'",
    ):
        harness.llm.register_adapter(["x", "m"], ScriptedAdapter([]), owner="second")
    assert harness.llm.models() == ["m"]  # all or nothing


async def test_unknown_model_lists_the_known_ones(harness: Harness) -> None:
    harness.llm.register_adapter(["a", "b"], ScriptedAdapter([]))
    with pytest.raises(
        LlmError, match="NO_ADAPTER: no adapter serves model 'z'; registered models: a, b"
    ) as info:
        await harness.llm.stream(LlmRequest("z", ()))
    assert info.value.failure.code == "NO_ADAPTER"
    harness.llm.register_adapter(["c"], ScriptedAdapter([]))


async def test_llm_stream_middleware_can_route_to_another_model() -> None:
    class Route:
        @hookimpl
        async def dsh_llm_stream(self, request: LlmRequest, call_next: Any) -> Any:
            return await call_next(LlmRequest("real", request.messages))

    async with Harness(load_entrypoints=False, plugins=[Route()]) as h:
        h.llm.register_adapter(["real"], ScriptedAdapter([text_response("r")]))
        stream = await h.llm.stream(LlmRequest("alias", ()))
        assert [c async for c in stream][1] == TextDelta(0, "r")


async def test_adapters_are_closed_with_the_harness() -> None:
    class SyncClose:
        closed = False

        async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
            yield TextDelta(0, "")

        def aclose(self) -> None:
            self.closed = True

    scripted, sync = ScriptedAdapter([]), SyncClose()
    async with Harness(load_entrypoints=False) as h:
        h.llm.register_adapter(["a"], scripted)
        h.llm.register_adapter(["b"], sync)

        class NoClose:
            async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
                yield TextDelta(0, "")

        h.llm.register_adapter(["c"], NoClose())
    assert scripted.closed and sync.closed


class Described(ScriptedAdapter):
    """A scripted adapter that says something about its models."""

    def model_info(self, model: str) -> ModelInfo:
        return ModelInfo(context_window=1_000)

    def unavailable(self, model: str) -> str | None:
        return "not here" if model == "gone" else None


async def test_a_deferred_adapter_is_built_once_at_first_use_for_all_its_models() -> None:
    built: list[Described] = []

    def build() -> Described:
        built.append(Described([text_response("a"), text_response("b")]))
        return built[-1]

    async with Harness(load_entrypoints=False) as h:
        h.llm.register_adapter(["p/m", "m", "gone"], DeferredAdapter(build), owner="plugin")
        assert h.llm.models() == ["gone", "m", "p/m"]
        assert built == [] and h.llm.adapters() == []  # listing builds nothing
        stream = await h.llm.stream(LlmRequest("p/m", ()))
        assert [c async for c in stream] == text_response("a")
        stream = await h.llm.stream(LlmRequest("m", ()))
        assert [c async for c in stream] == text_response("b")
        assert len(built) == 1
        assert h.llm.adapter_for("gone") is h.llm.adapter_for("m") is built[0]
        assert h.llm.model_info("m") == ModelInfo(context_window=1_000)
        assert h.llm.unavailable("gone") == "not here"
        assert h.llm.adapters() == built
    assert len(built) == 1 and built[0].closed  # closed with the harness, like any adapter


async def test_model_info_and_unavailable_build_a_deferred_adapter() -> None:
    built: list[Described] = []

    def build() -> Described:
        built.append(Described([]))
        return built[-1]

    async with Harness(load_entrypoints=False) as h:
        h.llm.register_adapter(["a"], DeferredAdapter(build))
        h.llm.register_adapter(["b"], DeferredAdapter(build))
        assert h.llm.model_info("a") == ModelInfo(context_window=1_000)
        assert h.llm.unavailable("b") is None
        assert h.llm.unavailable("nobody") is None and h.llm.model_info("nobody") is None
        assert len(built) == 2


async def test_a_deferred_adapter_never_used_is_never_built_nor_closed() -> None:
    def build() -> ScriptedAdapter:
        raise AssertionError("built")

    async with Harness(load_entrypoints=False) as h:
        dispose = h.llm.register_adapter(["a"], DeferredAdapter(build))
        dispose()
        h.llm.register_adapter(["a"], DeferredAdapter(build))  # the id is free again


async def test_an_adapter_that_cannot_be_built_ends_the_turn_with_why_and_is_tried_again() -> None:
    attempts: list[str] = []

    def build() -> ScriptedAdapter:
        attempts.append("build")
        if len(attempts) == 1:
            raise ModuleNotFoundError("No module named 'somesdk'")
        return ScriptedAdapter([text_response("second time")])

    async with Harness(load_entrypoints=False) as h:
        h.llm.register_adapter(["m"], DeferredAdapter(build), owner="llm_some")
        agent = h.agent_loop.create("a", AgentOptions(model="m"))
        agent.send("one")
        await agent.wait_idle()
        reason = data_of(agent.session.events, TurnEnd)[-1].reason
        assert isinstance(reason, TurnError)
        assert reason.failure.code == "ADAPTER_ERROR"
        assert reason.failure.message == (
            "the adapter of 'llm_some' for model 'm' could not be built: "
            "ModuleNotFoundError: No module named 'somesdk'"
        )
        assert data_of(agent.session.events, UserMessage)[0].content == (Text("one"),)
        # The loop goes on; the next use builds it again, and this time it works.
        agent.send("two")
        await agent.wait_idle()
        assert isinstance(data_of(agent.session.events, TurnEnd)[-1].reason, TurnCompleted)
        assert attempts == ["build", "build"]


async def test_a_build_failure_says_why_in_unavailable_and_an_llm_error_stays_as_it_is() -> None:
    def broken() -> ScriptedAdapter:
        raise ValueError("bad base_url")

    def no_key() -> ScriptedAdapter:
        raise LlmError.of("AUTH", "no API key: set SOME_KEY")

    async with Harness(load_entrypoints=False) as h:
        h.llm.register_adapter(["broken"], DeferredAdapter(broken), owner="p")
        h.llm.register_adapter(["no-key"], DeferredAdapter(no_key), owner="p")
        assert h.llm.unavailable("broken") == (
            "the adapter of 'p' for model 'broken' could not be built: ValueError: bad base_url"
        )
        assert h.llm.model_info("broken") is None
        with pytest.raises(LlmError, match="ADAPTER_ERROR: the adapter of 'p'") as info:
            h.llm.adapter_for("broken")
        assert isinstance(info.value.__cause__, ValueError)
        assert h.llm.unavailable("no-key") == "no API key: set SOME_KEY"
        with pytest.raises(LlmError, match=r"^AUTH: no API key: set SOME_KEY$"):
            h.llm.adapter_for("no-key")


# -- tools -------------------------------------------------------------------------------------


def make_tool(name: str, fn: Any, **kw: Any) -> Tool:
    return Tool(ToolSchema(name, f"the {name} tool"), fn, **kw)


async def run(h: Harness, name: str, arguments: str = "{}") -> ToolOutcome:
    return await h.tools.execute(ToolExecution("c1", name, arguments))


async def test_tool_runs_with_parsed_arguments(harness: Harness) -> None:
    async def add(args: Any, execution: ToolExecution) -> Any:
        return [Text(str(args["a"] + args["b"])), Image("data:,x")]

    harness.tools.register(make_tool("add", add))
    assert await run(harness, "add", '{"a": 1, "b": 2}') == ToolOutcome(
        (Text("3"), Image("data:,x"))
    )
    assert [s.name for s in harness.tools.schemas()] == ["add"]

    async def no_args(args: Any, execution: ToolExecution) -> str:
        return repr(args)

    harness.tools.register(make_tool("noargs", no_args))
    assert (await run(harness, "noargs", "  ")).content == (Text("{}"),)


async def test_tool_failures_become_error_results(harness: Harness) -> None:
    async def boom(args: Any, execution: ToolExecution) -> str:
        raise ValueError("kaput")

    async def slow(args: Any, execution: ToolExecution) -> str:
        await asyncio.sleep(10)
        return "late"

    harness.tools.register(make_tool("boom", boom))
    harness.tools.register(make_tool("slow", slow, timeout_s=0.01))
    unknown = await run(harness, "nope")
    assert (unknown.code, unknown.is_error) == ("UNKNOWN_TOOL", True)
    assert unknown.content == (Text('Error: unknown tool "nope"; available tools: boom, slow'),)
    invalid = await run(harness, "boom", "{not json")
    assert invalid.code == "INVALID_ARGS" and "not valid JSON" in text_of(invalid.content)
    raised = await run(harness, "boom")
    assert raised.code == "TOOL_ERROR" and raised.content == (Text("Error: ValueError: kaput"),)
    timed_out = await run(harness, "slow")
    assert timed_out.code == "TOOL_TIMEOUT" and "0.01 s" in text_of(timed_out.content)


async def test_unknown_tool_with_no_tools_says_none(harness: Harness) -> None:
    assert "available tools: none" in text_of((await run(harness, "x")).content)


async def test_a_raising_tools_middleware_is_an_error_result_not_an_exception() -> None:
    class Broken:
        @hookimpl
        def dsh_tools_execute(self) -> None:
            raise RuntimeError("sandbox broke")

    async with Harness(load_entrypoints=False, plugins=[Broken()]) as h:
        outcome = await run(h, "anything")
        assert outcome.code == "TOOL_ERROR" and "sandbox broke" in text_of(outcome.content)


async def test_tool_registration(harness: Harness) -> None:
    async def fn(args: Any, execution: ToolExecution) -> str:
        return ""

    tool = make_tool("t", fn)
    dispose = harness.tools.register(tool)
    assert harness.tools.get("t") is tool and tool.name == "t"
    with pytest.raises(DshError, match="registered twice: by 'host' and by 'other'"):
        harness.tools.register(make_tool("t", fn), owner="other")
    dispose()
    dispose()
    assert harness.tools.get("t") is None and harness.tools.names() == []


def test_as_content() -> None:
    assert as_content("x") == (Text("x"),)
    assert as_content([Text("a")]) == (Text("a"),)


async def test_tools_registered_by_plugins_name_the_plugin_on_conflict() -> None:
    async def fn(args: Any, execution: ToolExecution) -> str:
        return ""

    class Provider:
        @hookimpl
        def dsh_register_tools(self, register: Any) -> None:
            register(make_tool("shared", fn))

    h = Harness(load_entrypoints=False)
    h.plugins.register(Provider(), name="one")
    h.plugins.register(Provider(), name="two")
    with pytest.raises(DshError, match="by 'two' and by 'one'"):
        h.load()


# -- sessions ----------------------------------------------------------------------------------


def test_session_derives_model_history_from_the_log() -> None:
    s = Session("s")
    s.append(UserMessage((Text("q"),)))
    s.append(StepStart(1, 1))
    s.append(AssistantMessage(1, 1, (Text("a"),)))
    assert s.derive_messages() == (
        Message("user", (Text("q"),)),
        Message("assistant", (Text("a"),)),
    )
    s.append(ToolResultEvent(1, 1, "c", (Text("r"),), True))
    s.append(SteeringMessage(1, (Text("steer"),)))
    s.append(ContextMessage((Text("ctx"),), AgentSource("boss")))
    derived = s.derive_messages()
    assert derived[2:] == (
        Message("user", (ToolResult("c", (Text("r"),), True),)),
        Message("user", (Text("steer"),)),
        context_message((Text("ctx"),), AgentSource("boss")),
    )
    assert derived[4].content[0] == Text('<context source="agent:boss">')
    assert len(s) == 6 and [e.seq for e in s.events] == list(range(6))


def test_a_seed_must_have_contiguous_seq() -> None:
    event = SessionEvent("user/message", 1, 0.0, UserMessage((Text("x"),)))
    with pytest.raises(DshError, match="seed event 0 has seq 1"):
        Session("s", [event])


async def test_store_creates_gets_lists_and_forks(harness: Harness) -> None:
    created: list[str] = []
    events: list[int] = []

    class Watch:
        @hookimpl
        def dsh_session_created(self, session: Session) -> None:
            created.append(session.id)

        @hookimpl
        def dsh_session_event(self, event: SessionEvent) -> None:
            events.append(event.seq)

    harness.plugins.register(Watch())
    harness.sessions.create("session-1")
    a = harness.sessions.create()
    assert a.id == "session-2"
    a.append(UserMessage((Text("x"),), PluginSource("p")))
    a.append(UserMessage((Text("y"),)))
    fork = harness.sessions.fork(a, at_seq=0, session_id="child")
    assert fork.parent == a.id and len(fork) == 1
    assert harness.sessions.get("child") is fork
    assert [s.id for s in harness.sessions.list()] == ["session-1", "session-2", "child"]
    assert created == ["session-1", "session-2", "child"] and events == [0, 1]
    with pytest.raises(DshError, match="already exists"):
        harness.sessions.create("child")
    assert harness.sessions.fork(a).events == a.events
    assert await harness.sessions.load("nope") is None
    await Session("plain").flush()
    await Session("plain").checkpoint()


# -- system prompt -----------------------------------------------------------------------------


async def test_prompt_sections_are_ordered_and_rendered(harness: Harness) -> None:
    harness.system_prompt.section(PromptSection("persona", "You are terse.", order=0))
    dispose = harness.system_prompt.section(
        PromptSection("identity", lambda: "I am dsh.", order=-100)
    )
    harness.system_prompt.section(PromptSection("empty", "", order=5))
    assembly = await harness.system_prompt.assemble()
    assert render(assembly) == "I am dsh.\n\nYou are terse."
    with pytest.raises(DshError, match="registered twice"):
        harness.system_prompt.section(PromptSection("persona", "x"))
    dispose()
    dispose()
    assert [s.name for s in harness.system_prompt.sections()] == ["persona", "empty"]


async def test_prompt_assembly_waterfall_and_plugin_sections() -> None:
    class Sections:
        @hookimpl
        def dsh_register_prompt_sections(self, register: Any) -> None:
            register(PromptSection("rules", "Be safe."))

        @hookimpl
        def dsh_system_prompt_assemble(self, assembly: PromptAssembly) -> Any:
            return Stop(PromptAssembly(assembly.sections, ()))

    async def fn(args: Any, execution: ToolExecution) -> str:
        return ""

    async with Harness(load_entrypoints=False, plugins=[Sections()]) as h:
        h.tools.register(make_tool("hidden", fn))
        assembly = await h.system_prompt.assemble()
        assert render(assembly) == "Be safe." and assembly.tools == ()


# -- agents ------------------------------------------------------------------------------------


async def test_agent_registry(harness: Harness) -> None:
    agent = harness.agent_loop.create("a")
    assert harness.agents.get("a") is agent and harness.agents.list() == [agent]
    assert repr(agent) == "<LoopAgent 'a' idle>"
    with pytest.raises(DshError, match="already exists"):
        harness.agents.register(agent)


async def test_complete_folds_a_stream_and_raises_in_band_failures() -> None:
    from dsh.testing import error_response

    class Plain:
        """A stream object without ``aclose``."""

        def __init__(self) -> None:
            self.chunks = iter(text_response("plain"))

        def __aiter__(self) -> Plain:
            return self

        async def __anext__(self) -> StreamChunk:
            for chunk in self.chunks:
                return chunk
            raise StopAsyncIteration

    class PlainStreams:
        @hookimpl
        def dsh_llm_stream(self, request: LlmRequest, call_next: Any) -> Any:
            return Plain() if request.model == "plain" else call_next(request)

    async with Harness(load_entrypoints=False, plugins=[PlainStreams()]) as h:
        h.llm.register_adapter(
            ["m"], ScriptedAdapter([text_response("hi"), error_response("X", "no")])
        )
        assert (await h.llm.complete(LlmRequest("m", ()))).message.content == (Text("hi"),)
        with pytest.raises(LlmError, match="X: no"):
            await h.llm.complete(LlmRequest("m", ()))
        assert (await h.llm.complete(LlmRequest("plain", ()))).message.content == (Text("plain"),)
