"""Compaction: cut points, pruning, summaries, overflow recovery, resume fidelity."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh import AgentOptions, DshError, Harness, Tool
from dsh.llm._service import ModelInfo
from dsh.loop._loop import LoopAgent
from dsh.session._session import Session, summary_message
from dsh.testing import (
    MemoryStore,
    ScriptedAdapter,
    error_response,
    raise_error,
    text_response,
    tool_call_response,
)
from dsh.testing.mock import deepseek_config
from dsh.testing.mockserver import MockServer
from dsh.values._chunks import TokenUsage
from dsh.values._content import Message, Text, ToolCall, ToolResult
from dsh.values._errors import ConfigError
from dsh.values._events import (
    AssistantMessage,
    SessionEvent,
    ToolResultEvent,
    TurnEnd,
    TurnError,
    UserMessage,
)
from dsh.values._rare_events import (
    HistoryRewriteEnd,
    HistoryRewriteStart,
    HistorySummary,
    SteeringMessage,
)
from dsh.values._request import LlmRequest, ToolSchema
from dsh.values._tokens import message_tokens
from dsh_plugins.compaction import CompactionConfig, CompactionPlugin, choose_cut
from dsh_plugins.llm_deepseek import DeepSeekPlugin
from tests.helpers import data_of, of_type

SMALL = {"context_window": 600, "reserve_tokens": 100, "keep_recent_tokens": 120}


def is_summary(message: Message) -> bool:
    first = message.content[0]
    return isinstance(first, Text) and first.text.startswith("<summary of the earlier")


async def make(
    config: dict[str, Any] | None = None, **extra: Any
) -> tuple[Harness, CompactionPlugin]:
    plugin = CompactionPlugin()
    h = Harness(
        load_entrypoints=False,
        plugins=[plugin, *extra.pop("plugins", [])],
        config={"compaction": config or SMALL, **extra},
    )
    await h.start()
    return h, plugin


def summarised(events: Any) -> list[HistorySummary]:
    return data_of(events, HistorySummary)


# -- cut points ------------------------------------------------------------------------------


def test_the_cut_never_lands_on_a_tool_result() -> None:
    history = [
        (0, Message("user", (Text("x" * 400),))),
        (1, Message("assistant", (ToolCall("c", "t", "{}"),))),
        (2, Message("user", (ToolResult("c", (Text("y" * 400),)),))),
        (3, Message("assistant", (Text("done"),))),
    ]
    assert choose_cut(history, 1) == 3
    assert choose_cut(history, 110) == 1  # index 2 is a result: move back to its call
    assert choose_cut(history, 10_000) == 0
    assert choose_cut([], 10) == 0


def conversation() -> st.SearchStrategy[list[tuple[str, Any]]]:
    """Random conversations: user text, assistant text, tool calls with results, steering."""
    text = st.text("abcdefgh ", min_size=1, max_size=300)
    exchange = st.one_of(
        st.tuples(st.just("user"), text),
        st.tuples(st.just("assistant"), text),
        st.tuples(st.just("tools"), st.lists(text, min_size=1, max_size=3)),
        st.tuples(st.just("steering"), text),
    )
    return st.lists(exchange, min_size=1, max_size=25)


def seed_session(exchanges: list[tuple[str, Any]]) -> Session:
    session = Session("s")
    for n, (kind, value) in enumerate(exchanges):
        if kind == "user":
            session.append(UserMessage((Text(value),)))
        elif kind == "assistant":
            session.append(AssistantMessage(1, n, (Text(value),)))
        elif kind == "steering":
            session.append(SteeringMessage(1, (Text(value),)))
        else:
            calls = tuple(ToolCall(f"c{n}-{i}", "t", "{}") for i in range(len(value)))
            session.append(AssistantMessage(1, n, calls))
            for call, result in zip(calls, value, strict=True):
                session.append(ToolResultEvent(1, n, call.id, (Text(result),)))
    return session


def assert_no_orphans(messages: tuple[Message, ...]) -> None:
    called: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        for block in message.content:
            if isinstance(block, ToolCall):
                called.add(block.id)
            elif isinstance(block, ToolResult):
                assert block.tool_call_id in called, "a result without its call"
                answered.add(block.tool_call_id)
    assert called == answered, "a call without its result"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exchanges=conversation(), keep=st.integers(1, 400))
def test_compaction_keeps_pairs_and_the_tail(exchanges: list[tuple[str, Any]], keep: int) -> None:
    async def run() -> None:
        config = {**SMALL, "keep_recent_tokens": keep, "prune_min_chars": 50}
        h, plugin = await make(config)
        h.llm.register_adapter(["m"], ScriptedAdapter([text_response("SUMMARY")]))
        agent = h.agent_loop.create("a", AgentOptions(model="m"), session=seed_session(exchanges))
        before = agent.session.history()
        cut = choose_cut(before, keep)
        compacted = await plugin.compact(agent)
        after = agent.session.derive_messages()
        assert_no_orphans(after)
        tail = tuple(m for _, m in before[cut:])
        if cut == 0:
            assert not compacted and after == tuple(m for _, m in before)
        else:
            assert compacted
            assert after == (summary_message("SUMMARY"), *tail)
        await h.close()

    asyncio.run(run())


# -- in a running agent ----------------------------------------------------------------------


async def test_threshold_compaction_prunes_then_summarises_and_the_turn_goes_on() -> None:
    h, plugin = await make(
        {"context_window": 1000, "reserve_tokens": 100, "keep_recent_tokens": 120}
    )
    plugin.meter.bounds = (1.0, 1.0)  # the scripted adapter's usage figures are made up

    async def fetch(args: Any, execution: Any) -> str:
        return "r" * 1600  # ~400 tokens

    h.tools.register(Tool(ToolSchema("fetch", "fetch"), fetch))
    adapter = ScriptedAdapter(
        [
            tool_call_response("c1", "fetch", {}),
            text_response("ok"),
            text_response("SUMMARY OF WORK"),  # the compaction call
            text_response("final answer"),
        ]
    )
    h.llm.register_adapter(["m"], adapter)
    agent = h.agent_loop.create("a", AgentOptions(model="m"))
    agent.send("a" * 1400)  # ~350 tokens: turn 1 fits (~820 of 900)
    await agent.wait_idle()
    assert not of_type(agent.session.events, "compaction/start")
    agent.send("b" * 2400)  # ~600 more: over; pruning the old result is not enough
    await agent.wait_idle()
    events = agent.session.events
    kinds = [e.type for e in events if e.type.startswith("compaction/")]
    assert kinds == ["compaction/start", "compaction/prune", "compaction/summary", "compaction/end"]
    summary_request = adapter.requests[2]
    assert summary_request.purpose == "compaction"
    assert summary_request.messages[2].content[0].tool_call_id == "c1"  # type: ignore[union-attr]
    final = adapter.requests[3].messages
    assert final == (summary_message("SUMMARY OF WORK"), Message("user", (Text("b" * 2400),)))
    assert final == agent.session.derive_messages()[:-1]
    assert data_of(events, TurnEnd)[-1].reason.type == "completed"
    start = data_of(events, HistoryRewriteStart)[0]
    summary = summarised(events)[0]
    assert start.reason == "threshold" and summary.tokens_after < summary.tokens_before
    assert summary.usage is not None and summary.model == "m"
    assert data_of(events, HistoryRewriteEnd)[0].tokens_after == summary.tokens_after
    await h.close()


async def test_pruning_alone_can_be_enough() -> None:
    config = {"context_window": 1100, "reserve_tokens": 100, "keep_recent_tokens": 40}
    h, plugin = await make(config)
    plugin.meter.bounds = (1.0, 1.0)

    async def fetch(args: Any, execution: Any) -> str:
        return "r" * 3600  # ~900 tokens

    h.tools.register(Tool(ToolSchema("fetch", "fetch"), fetch))
    h.llm.register_adapter(
        ["m"],
        ScriptedAdapter(
            [tool_call_response("c1", "fetch", {}), text_response("a"), text_response("b")]
        ),
    )
    agent = h.agent_loop.create("a", AgentOptions(model="m"))
    agent.send("go")
    await agent.wait_idle()
    agent.send("more " * 80)
    await agent.wait_idle()
    events = agent.session.events
    assert of_type(events, "compaction/prune") and not summarised(events)
    result = next(
        b for m in agent.session.derive_messages() for b in m.content if isinstance(b, ToolResult)
    )
    note = "[tool result elided by compaction: 3600 characters; call the tool again if you need it]"
    assert result.content == (Text(note),)
    await h.close()


async def test_overflow_compacts_and_retries_once() -> None:
    h, _ = await make({**SMALL, "context_window": 100_000})
    adapter = ScriptedAdapter(
        [
            text_response("first"),
            raise_error("CONTEXT_WINDOW_EXCEEDED", "too long"),
            text_response("SUMMARY"),
            text_response("fits now"),
            raise_error("CONTEXT_WINDOW_EXCEEDED", "too long"),
            text_response("SUMMARY 2"),
            raise_error("CONTEXT_WINDOW_EXCEEDED", "still too long"),
        ]
    )
    h.llm.register_adapter(["m"], adapter)
    agent = h.agent_loop.create("a", AgentOptions(model="m"))
    agent.send("x" * 800)
    await agent.wait_idle()
    agent.send("y" * 800)
    await agent.wait_idle()
    events = agent.session.events
    assert data_of(events, HistoryRewriteStart)[0].reason == "overflow"
    assert data_of(events, TurnEnd)[1].reason.type == "completed"
    agent.send("z" * 800)
    await agent.wait_idle()
    reason = data_of(agent.session.events, TurnEnd)[-1].reason
    assert isinstance(reason, TurnError) and reason.failure.code == "CONTEXT_WINDOW_EXCEEDED"
    await h.close()


async def test_a_failed_summary_is_logged_and_the_request_goes_ahead() -> None:
    h, plugin = await make()
    plugin.meter.bounds = (1.0, 1.0)
    h.llm.register_adapter(
        ["m"],
        ScriptedAdapter(
            [
                text_response("a"),
                error_response("SERVER", "down"),  # summary call fails
                text_response("b"),
                text_response("   "),  # an empty summary
                text_response("c"),
            ]
        ),
    )
    agent = h.agent_loop.create("a", AgentOptions(model="m"))
    agent.send("q" * 700)
    await agent.wait_idle()
    agent.send("second " * 200)
    await agent.wait_idle()
    ends = data_of(agent.session.events, HistoryRewriteEnd)
    assert ends[0].error == "summary failed: SERVER: down"
    agent.send("third " * 100)
    await agent.wait_idle()
    ends = data_of(agent.session.events, HistoryRewriteEnd)
    assert ends[-1].error == "summary failed: the model returned an empty summary"
    assert not summarised(agent.session.events)
    assert data_of(agent.session.events, TurnEnd)[-1].reason.type == "completed"
    await h.close()


async def test_manual_compaction() -> None:
    h, plugin = await make({**SMALL, "keep_recent_tokens": 5})
    assert h.compaction is plugin
    h.llm.register_adapter(["m"], ScriptedAdapter([text_response("a"), text_response("SUM")]))
    agent = h.agent_loop.create("a", AgentOptions(model="m"))
    assert await h.compaction.compact(agent) is False  # nothing yet
    agent.send("hello")
    await agent.wait_idle()
    assert await h.compaction.compact(agent) is True
    assert agent.session.derive_messages()[0] == summary_message("SUM")
    nomodel = h.agent_loop.create("b")
    with pytest.raises(DshError, match="has no model"):
        await h.compaction.compact(nomodel)
    await h.close()


async def test_context_windows_and_skips() -> None:
    class Described(ScriptedAdapter):
        def model_info(self, model: str) -> ModelInfo:
            return ModelInfo(context_window=50_000)

    config = {"context_windows": {"a": 1000}, "reserve_tokens": 10}
    h, plugin = await make(config)
    h.llm.register_adapter(["d"], Described([]))
    h.llm.register_adapter(["s"], ScriptedAdapter([]))
    assert plugin.context_window("a") == 1000
    assert plugin.context_window("d") == 50_000
    assert plugin.context_window("s") == 128_000
    assert plugin.threshold("a") == 990
    assert plugin.reserve("a") == 10 and plugin.limits("a") == (990, plugin.target("a"))
    await h.close()
    h, plugin = await make({"context_window": 7})
    assert plugin.context_window("anything") == 7
    agent_request = LlmRequest("m", (Message("user", (Text("x" * 100),)),), purpose="compaction")
    assert plugin.dsh_agent_request(_agent(h), 1, agent_request) is None
    await h.close()
    h, plugin = await make({"enabled": False})
    assert plugin.dsh_agent_request(_agent(h), 1, agent_request) is None
    assert CompactionConfig().enabled
    await h.close()


def _agent(h: Harness) -> LoopAgent:
    return h.agent_loop.create(f"x{len(h.agents.list())}", AgentOptions(model="m"))


async def test_the_meter_learns_from_usage() -> None:
    h, plugin = await make({"context_window": 100_000})
    h.llm.register_adapter(["m"], ScriptedAdapter([text_response("a"), error_response("X", "y")]))
    agent = h.agent_loop.create("a", AgentOptions(model="m"))
    agent.send("hello there")
    await agent.wait_idle()
    assert plugin.meter.factor("m") != 1.0  # text_response reports 10 input tokens
    agent.send("again")
    await agent.wait_idle()
    await h.close()


# -- against the mock server, with resume --------------------------------------------------


async def test_long_conversation_against_the_mock_server_and_resume() -> None:
    store = MemoryStore()
    compaction = {"context_window": 900, "reserve_tokens": 100, "keep_recent_tokens": 150}
    async with MockServer() as server:
        config = {**deepseek_config(server), "compaction": compaction}
        plugins: list[Any] = [DeepSeekPlugin, CompactionPlugin, store]
        async with Harness(load_entrypoints=False, plugins=plugins, config=config) as h:
            agent = h.agent_loop.create(
                "a", AgentOptions(model="deepseek-v4-flash"), session_id="a-session"
            )
            for n in range(8):
                agent.send(f"message {n}: " + "tell me more " * 20)
                await agent.wait_idle()
            events = agent.session.events
            assert summarised(events), "compaction fired"
            reasons = [e.reason.type for e in data_of(events, TurnEnd)]
            assert reasons == ["completed"] * 8
            snapshot = MemoryStore()
            snapshot.stored = {sid: list(log) for sid, log in store.stored.items()}
            agent.send("the next question")
            await agent.wait_idle()
            original = server.requests[-1].body
        # A fresh process resumes the stored log and sends the same message: the model
        # receives exactly the request it received in the original run.
        plugins[-1] = snapshot
        async with Harness(load_entrypoints=False, plugins=plugins, config=config) as h:
            resumed = await h.agent_loop.resume(
                "a-session", AgentOptions(model="deepseek-v4-flash")
            )
            resumed.send("the next question")
            await resumed.wait_idle()
            assert server.requests[-1].body == original


def test_usage_without_a_pending_estimate_is_ignored() -> None:
    plugin = CompactionPlugin()
    usage = AssistantMessage(1, 1, (Text("a"),), TokenUsage(5, 5))
    plugin.dsh_session_event(Session("s"), SessionEvent("assistant/message", 0, 0.0, usage))
    assert plugin.meter.factors == {}


def test_a_response_without_usage_keeps_its_estimate_for_the_next() -> None:
    plugin = CompactionPlugin()
    plugin._estimates["s"] = ("m", 100)
    silent = AssistantMessage(1, 1, (Text("a"),), None)
    plugin.dsh_session_event(Session("s"), SessionEvent("assistant/message", 0, 0.0, silent))
    assert plugin._estimates == {"s": ("m", 100)} and plugin.meter.factors == {}


async def test_a_disposed_agent_is_forgotten() -> None:
    h, plugin = await make({**SMALL, "context_window": 100_000})
    adapter = ScriptedAdapter(
        [
            raise_error("CONTEXT_WINDOW_EXCEEDED", "too long"),
            text_response("S"),
            text_response("ok"),
        ]
    )
    h.llm.register_adapter(["m"], adapter)
    agent = h.agent_loop.create("a", AgentOptions(model="m"))
    agent.send("x" * 800)
    await agent.wait_idle()
    assert plugin._overflowed
    assert agent.session.id in plugin.meter._messages
    await agent.dispose()
    assert not plugin._overflowed and not plugin._estimates and not plugin._forced
    assert agent.session.id not in plugin.meter._messages
    await h.close()


# -- the low-water mark ----------------------------------------------------------------------

HEADROOM = {"context_window": 4000, "reserve_tokens": 500, "keep_recent_tokens": 600}


def responder(request: LlmRequest) -> list[Any]:
    """A model that calls ``fetch`` once per user message, then answers; and summarises."""
    if request.purpose == "compaction":
        return text_response("SUMMARY")
    last = request.messages[-1].content[0]
    if isinstance(last, ToolResult):
        return text_response("seen it")
    return tool_call_response(f"c{len(request.messages)}", "fetch", {})


async def long_conversation(low_water: float, turns: int) -> tuple[CompactionPlugin, Any, Any]:
    """``turns`` turns of a tool call with a ~250-token result; returns the plugin, the
    adapter and the agent's events."""
    h, plugin = await make({**HEADROOM, "low_water": low_water, "prune_min_chars": 50})
    plugin.meter.bounds = (1.0, 1.0)  # the scripted usage figures are made up

    async def fetch(args: Any, execution: Any) -> str:
        return "r" * 1000

    h.tools.register(Tool(ToolSchema("fetch", "fetch"), fetch))
    adapter = ScriptedAdapter([responder] * (4 * turns))
    h.llm.register_adapter(["m"], adapter)
    agent = h.agent_loop.create("a", AgentOptions(model="m"))
    for n in range(turns):
        agent.send(f"question {n} " + "q" * 400)
        await agent.wait_idle()
    events = agent.session.events
    await h.close()
    return plugin, adapter, events


async def test_compaction_goes_down_to_the_low_water_mark() -> None:
    plugin, _, events = await long_conversation(0.5, 30)
    assert plugin.target("m") == 2000 and plugin.threshold("m") == 3500
    ends = data_of(events, HistoryRewriteEnd)
    assert ends and all(e.tokens_after <= 2000 for e in ends)
    reasons = {e.reason for e in data_of(events, HistoryRewriteStart)}
    assert reasons == {"threshold"}


async def test_the_low_water_mark_bounds_the_number_of_compactions() -> None:
    turns = 30
    _, adapter, low = await long_conversation(0.5, turns)
    _, _, high = await long_conversation(1.0, turns)
    # Between two compactions the conversation grows from at most the target (2000) past the
    # threshold (3500): at least 1500 tokens, at the pace of one turn's messages.
    per_turn = sum(message_tokens(m) for m in adapter.requests[2].messages)
    compactions = len(of_type(low, "compaction/start"))
    assert compactions <= turns * per_turn // 1500 + 1
    assert compactions < len(of_type(high, "compaction/start"))


async def test_between_compactions_each_request_extends_the_last() -> None:
    """The prompt cache keeps working: only a compaction changes what was already sent."""
    _, adapter, events = await long_conversation(0.5, 20)
    requests = [r for r in adapter.requests if r.purpose is None]
    rewritten = sum(
        1
        for previous, current in itertools.pairwise(requests)
        if current.messages[: len(previous.messages)] != previous.messages
    )
    compactions = len(of_type(events, "compaction/start"))
    assert compactions >= 2 and rewritten <= compactions


async def test_the_low_water_mark_is_a_share_of_the_window() -> None:
    assert CompactionConfig().low_water == 0.6
    for bad in (0.0, 1.5, -1):
        # A share of the window outside (0, 1] stops the harness at start.
        with pytest.raises(ConfigError, match=r"\[compaction\] low_water must be"):
            await make({"low_water": bad})
