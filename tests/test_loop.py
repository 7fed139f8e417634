"""The loop lifecycle: exact session event sequences for every path through a turn."""

from __future__ import annotations

import asyncio
import gc
import sys
from typing import Any

import pytest

from dsh import AgentOptions, Continuation, DshError, Harness, Retry, Stop, Tool, hookimpl
from dsh.testing import (
    error_response,
    hang,
    max_tokens_response,
    raise_error,
    reasoning_response,
    text_response,
    tool_call_response,
)
from dsh.values._chunks import (
    Finish,
    FinishAborted,
    FinishMaxTokens,
    FinishStop,
    LlmFailure,
    TextDelta,
    ToolCallDelta,
)
from dsh.values._content import (
    Message,
    PluginSource,
    Reasoning,
    Text,
    ToolCall,
    ToolResult,
    text_of,
)
from dsh.values._events import (
    AssistantChunk,
    AssistantMessage,
    ErrorEvent,
    ToolResultEvent,
    TurnAborted,
    TurnCompleted,
    TurnDisposed,
    TurnEnd,
    TurnError,
    TurnMaxTokens,
    TurnStart,
    UserMessage,
)
from dsh.values._rare_events import ContextMessage, QueuedMessage, SteeringMessage
from dsh.values._request import LlmRequest, ToolSchema
from tests.helpers import data_of, kinds, of_type, scripted_agent


def echo_tool(name: str = "echo", gate: asyncio.Event | None = None) -> Tool:
    async def run(args: Any, execution: Any) -> str:
        if gate is not None:
            await gate.wait()
        return f"echo:{args['text']}"

    return Tool(ToolSchema(name, "echo the text", {"type": "object"}), run)


def turn_end_reason(agent: Any, index: int = -1) -> Any:
    return data_of(agent.session.events, TurnEnd)[index].reason


async def test_plain_reply(harness: Harness) -> None:
    agent, adapter = scripted_agent(harness, [text_response("hi!")])
    agent.send("hello")
    await agent.wait_idle()
    assert kinds(agent.session.events) == [
        "user/message",
        "turn/start",
        "step/start",
        "chunks",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert len(of_type(agent.session.events, "assistant/chunk")) == len(text_response("hi!"))
    assert turn_end_reason(agent) == TurnCompleted()
    message = data_of(agent.session.events, AssistantMessage)[0]
    assert message.content == (Text("hi!"),)
    assert message.usage is not None and message.usage.output_tokens == 3
    assert [e.seq for e in agent.session.events] == list(range(len(agent.session.events)))
    assert adapter.requests[0].messages == (Message("user", (Text("hello"),)),)
    assert agent.status == "idle"


async def test_two_step_tool_turn(harness: Harness) -> None:
    harness.tools.register(echo_tool())
    agent, adapter = scripted_agent(
        harness,
        [tool_call_response("c1", "echo", {"text": "x"}, text="calling"), text_response("ok")],
    )
    agent.send("go")
    await agent.wait_idle()
    assert kinds(agent.session.events) == [
        "user/message",
        "turn/start",
        "step/start",
        "chunks",
        "assistant/message",
        "tool/call",
        "tool/result",
        "step/end",
        "step/start",
        "chunks",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    result = data_of(agent.session.events, ToolResultEvent)[0]
    assert (result.call_id, result.content, result.is_error) == ("c1", (Text("echo:x"),), False)
    second = adapter.requests[1].messages
    assert second[1] == Message(
        "assistant", (Text("calling"), ToolCall("c1", "echo", '{"text": "x"}'))
    )
    assert second[2] == Message("user", (ToolResult("c1", (Text("echo:x"),)),))
    assert [t.name for t in adapter.requests[0].tools] == ["echo"]


async def test_steering_mid_turn_is_delivered_between_steps(harness: Harness) -> None:
    gate = asyncio.Event()
    harness.tools.register(echo_tool(gate=gate))
    agent, adapter = scripted_agent(
        harness, [tool_call_response("c1", "echo", {"text": "x"}), text_response("ok")]
    )
    agent.send("go")
    await adapter.started.wait()
    await asyncio.sleep(0)
    agent.steer("also this")
    gate.set()
    await agent.wait_idle()
    assert kinds(agent.session.events) == [
        "user/message",
        "turn/start",
        "step/start",
        "chunks",
        "assistant/message",
        "tool/call",
        "inbox/queued",
        "tool/result",
        "steering/message",
        "step/end",
        "step/start",
        "chunks",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert adapter.requests[1].messages[-1] == Message("user", (Text("also this"),))
    queued = of_type(agent.session.events, "inbox/queued")[0]
    assert queued.data == QueuedMessage((Text("also this"),), steering=True)
    assert data_of(agent.session.events, SteeringMessage)[0].queued_seq == queued.seq


async def test_steering_forces_another_step_without_tool_calls(harness: Harness) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow_then_text(request: LlmRequest) -> Any:
        started.set()
        await release.wait()
        return text_response("first")

    agent, _ = scripted_agent(harness, [slow_then_text, text_response("second")])
    agent.send("go")
    await started.wait()
    agent.steer("wait, one more thing")
    release.set()
    await agent.wait_idle()
    assert [e.content for e in data_of(agent.session.events, AssistantMessage)] == [
        (Text("first"),),
        (Text("second"),),
    ]
    assert len(of_type(agent.session.events, "turn/start")) == 1


async def test_leftover_steering_becomes_the_next_turn(harness: Harness) -> None:
    class SteerAtStepEnd:
        steered = False

        @hookimpl
        async def dsh_agent_step_end(self, agent: Any) -> None:
            if not self.steered:
                self.steered = True
                agent.steer("late")

    harness.plugins.register(SteerAtStepEnd())
    agent, adapter = scripted_agent(harness, [text_response("a"), text_response("b")])
    agent.send("go")
    await agent.wait_idle()
    # Steering arriving at step end forces another step rather than being stranded.
    assert kinds(agent.session.events).count("step/start") == 2
    assert adapter.requests[1].messages[-1] == Message("user", (Text("late"),))


async def test_steering_left_after_turn_end_is_requeued(harness: Harness) -> None:
    class SteerAfterTurn:
        @hookimpl
        async def dsh_agent_turn_end(self, agent: Any, turn: int) -> None:
            if turn == 1:
                agent.inbox.steer(agent.inbox.drain_queued() or _steer_message("late"))

    harness.plugins.register(SteerAfterTurn())
    agent, _ = scripted_agent(harness, [text_response("a"), text_response("b")])
    agent.send("go")
    await agent.wait_idle()
    assert len(of_type(agent.session.events, "turn/start")) == 2
    assert data_of(agent.session.events, UserMessage)[1].content == (Text("late"),)


def _steer_message(text: str) -> Any:
    from dsh.loop._inbox import InboxMessage

    return InboxMessage((Text(text),))


async def test_steer_when_idle_is_send(harness: Harness) -> None:
    agent, _ = scripted_agent(harness, [text_response("a")])
    agent.steer("hello")
    await agent.wait_idle()
    assert kinds(agent.session.events)[0:2] == ["user/message", "turn/start"]


async def test_abort_mid_stream(harness: Harness) -> None:
    agent, adapter = scripted_agent(
        harness, [hang(before=[TextDelta(0, "par")]), text_response("next")]
    )
    agent.send("go")
    await adapter.started.wait()
    await asyncio.sleep(0)
    agent.abort("user pressed ctrl-c")
    await agent.wait_idle()
    assert kinds(agent.session.events) == [
        "user/message",
        "turn/start",
        "step/start",
        "chunks",
        "step/end",
        "turn/end",
    ]
    assert turn_end_reason(agent) == TurnAborted("user pressed ctrl-c")
    assert data_of(agent.session.events, AssistantChunk)[0].chunk == TextDelta(0, "par")
    agent.send("again")
    await agent.wait_idle()
    assert turn_end_reason(agent) == TurnCompleted()


async def test_abort_while_a_tool_runs_pairs_the_call_with_a_result(harness: Harness) -> None:
    gate = asyncio.Event()
    tool_started = asyncio.Event()

    async def blocking(args: Any, execution: Any) -> str:
        tool_started.set()
        await gate.wait()
        return "never"

    harness.tools.register(Tool(ToolSchema("block", "blocks"), blocking))
    agent, _ = scripted_agent(harness, [tool_call_response("c1", "block", {})])
    agent.send("go")
    await tool_started.wait()
    agent.abort("stop")
    await agent.wait_idle()
    assert kinds(agent.session.events)[-4:] == ["tool/call", "tool/result", "step/end", "turn/end"]
    result = data_of(agent.session.events, ToolResultEvent)[0]
    assert result.is_error and "aborted: stop" in text_of(result.content)
    assert turn_end_reason(agent) == TurnAborted("stop")


async def test_a_tool_that_swallows_the_abort_leaves_the_agent_uncancelled(
    harness: Harness,
) -> None:
    """The step runs in the agent's own task: abort's cancellation is taken back even when a
    tool catches it and returns, so the agent's later steps are not cancelled by it."""
    started = asyncio.Event()
    seen: list[int] = []

    async def stubborn(args: Any, execution: Any) -> str:
        if not started.is_set():
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                return "kept going"
        task = asyncio.current_task()
        assert task is not None
        seen.append(task.cancelling())
        await asyncio.sleep(0)  # a cancellation still pending would end the step here
        return "fine"

    harness.tools.register(Tool(ToolSchema("stubborn", "ignores cancellation"), stubborn))
    script = [
        tool_call_response("c1", "stubborn", {}),
        tool_call_response("c2", "stubborn", {}),
        text_response("done"),
    ]
    agent, _ = scripted_agent(harness, script)
    agent.send("go")
    await started.wait()
    agent.abort("stop")
    await agent.wait_idle()
    assert turn_end_reason(agent) == TurnAborted("stop")
    agent.send("again")
    await agent.wait_idle()
    assert seen == [0]
    assert turn_end_reason(agent) == TurnCompleted()


async def test_an_abort_from_a_chunk_observer_on_the_last_chunk_ends_only_the_turn(
    harness: Harness,
) -> None:
    """The observer runs in the agent's task, and the step may finish without waiting again:
    the abort must still end the turn ``aborted``, and not cancel the agent afterwards."""

    class AbortAtFinish:
        @hookimpl
        def dsh_agent_stream_chunk(self, agent: Any, chunk: Any) -> None:
            if isinstance(chunk, Finish) and agent.session.last_turn == 1:
                agent.abort("seen enough")

    harness.plugins.register(AbortAtFinish())
    agent, _ = scripted_agent(harness, [text_response("one"), text_response("two")])
    agent.send("go")
    await agent.wait_idle()
    assert turn_end_reason(agent) == TurnAborted("seen enough")
    agent.send("again")
    await agent.wait_idle()
    assert turn_end_reason(agent) == TurnCompleted()
    assert agent.status == "idle"


async def test_cancelling_the_agent_from_outside_during_a_step_is_not_an_abort(
    harness: Harness,
) -> None:
    started = asyncio.Event()

    async def blocking(args: Any, execution: Any) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    harness.tools.register(Tool(ToolSchema("block", "blocks"), blocking))
    agent, _ = scripted_agent(harness, [tool_call_response("c1", "block", {})])
    agent.send("go")
    await started.wait()
    agent._task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await agent._task
    assert agent.status == "disposed"
    assert not [e for e in agent.session.events if e.type == "turn/end"]


async def test_abort_when_idle_does_nothing(harness: Harness) -> None:
    agent, _ = scripted_agent(harness, [])
    agent.abort()
    await agent.wait_idle()
    assert agent.session.events == ()


async def test_abort_between_steps_ends_the_turn_before_the_next_step(harness: Harness) -> None:
    class AbortAtStepEnd:
        @hookimpl
        async def dsh_agent_step_end(self, agent: Any) -> None:
            agent.abort("enough")

    harness.plugins.register(AbortAtStepEnd())
    harness.tools.register(echo_tool())
    agent, _ = scripted_agent(harness, [tool_call_response("c1", "echo", {"text": "x"})])
    agent.send("go")
    await agent.wait_idle()
    assert kinds(agent.session.events).count("step/start") == 1
    assert turn_end_reason(agent) == TurnAborted("enough")


async def test_abort_as_the_step_starts_cancels_it_at_once(harness: Harness) -> None:
    class AbortAtStepStart:
        @hookimpl
        async def dsh_agent_step_start(self, agent: Any) -> None:
            agent.abort("now")

    harness.plugins.register(AbortAtStepStart())
    agent, adapter = scripted_agent(harness, [text_response("x")])
    agent.send("go")
    await agent.wait_idle()
    assert adapter.requests == []
    assert kinds(agent.session.events) == [
        "user/message",
        "turn/start",
        "step/start",
        "step/end",
        "turn/end",
    ]


async def test_dispose_mid_turn() -> None:
    statuses: list[str] = []

    class Watch:
        @hookimpl
        def dsh_agent_status(self, status: str) -> None:
            statuses.append(status)

    async with Harness(load_entrypoints=False, plugins=[Watch()]) as h:
        agent, adapter = scripted_agent(h, [hang()])
        agent.send("go")
        await adapter.started.wait()
        await agent.dispose()
        assert kinds(agent.session.events) == [
            "user/message",
            "turn/start",
            "step/start",
            "step/end",
            "turn/end",
        ]
        assert turn_end_reason(agent) == TurnDisposed()
        assert agent.status == "disposed"
        assert statuses == ["running", "disposed"]
        assert h.agents.get("main") is None
        with pytest.raises(DshError, match="disposed"):
            agent.send("more")
        await agent.dispose()  # idempotent
        await agent.wait_idle()


async def test_dispose_while_a_continuation_hook_runs_ends_the_turn_disposed(
    harness: Harness,
) -> None:
    class DisposeInContinuation:
        @hookimpl
        async def dsh_agent_turn_continuation(self, agent: Any) -> Any:
            asyncio.get_running_loop().create_task(agent.dispose())
            await asyncio.sleep(0)
            return Continuation(True)

    harness.plugins.register(DisposeInContinuation())
    agent, _ = scripted_agent(harness, [text_response("a")])
    agent.send("go")
    await agent.wait_idle()
    assert turn_end_reason(agent) == TurnDisposed()


async def test_disposing_the_harness_disposes_idle_agents() -> None:
    async with Harness(load_entrypoints=False) as h:
        agent, _ = scripted_agent(h, [])
    assert agent.status == "disposed"


@pytest.mark.parametrize(
    "hook",
    ["dsh_agent_request", "dsh_agent_step_result", "dsh_system_prompt_assemble"],
)
async def test_a_plugin_raising_in_a_step_waterfall_ends_the_turn(hook: str) -> None:
    class Broken:
        pass

    def boom(**kwargs: Any) -> None:
        raise ValueError("boom")

    setattr(Broken, hook, staticmethod(boom))
    async with Harness(load_entrypoints=False, plugins=[Broken()]) as h:
        agent, _ = scripted_agent(h, [text_response("a"), text_response("b")])
        agent.send("go")
        await agent.wait_idle()
        expected = ["user/message", "turn/start", "step/start"]
        if hook == "dsh_agent_step_result":
            expected.append("chunks")
        assert kinds(agent.session.events) == [*expected, "step/end", "error", "turn/end"]
        error = data_of(agent.session.events, ErrorEvent)[0]
        assert error.code == "PLUGIN_ERROR"
        assert "'Broken'" in error.message and hook in error.message and "boom" in error.message
        reason = turn_end_reason(agent)
        assert isinstance(reason, TurnError) and reason.failure.code == "PLUGIN_ERROR"
        agent.send("the loop still runs")
        await agent.wait_idle()
        assert len(of_type(agent.session.events, "turn/end")) == 2


async def test_a_plugin_raising_in_the_continuation_waterfall_ends_the_turn() -> None:
    class Broken:
        @hookimpl
        def dsh_agent_turn_continuation(self) -> None:
            raise RuntimeError("nope")

    async with Harness(load_entrypoints=False, plugins=[Broken()]) as h:
        agent, _ = scripted_agent(h, [text_response("a")])
        agent.send("go")
        await agent.wait_idle()
        assert kinds(agent.session.events)[-3:] == ["step/end", "error", "turn/end"]
        assert data_of(agent.session.events, ErrorEvent)[0].step == 0
        assert turn_end_reason(agent).failure.code == "PLUGIN_ERROR"


async def test_in_band_error_without_retry(harness: Harness) -> None:
    agent, _ = scripted_agent(harness, [error_response("SERVER", "overloaded", status=503)])
    agent.send("go")
    await agent.wait_idle()
    assert kinds(agent.session.events) == [
        "user/message",
        "turn/start",
        "step/start",
        "chunks",
        "step/end",
        "error",
        "turn/end",
    ]
    error = data_of(agent.session.events, ErrorEvent)[0]
    assert (error.code, error.message) == ("SERVER", "overloaded")
    reason = turn_end_reason(agent)
    assert reason == TurnError(LlmFailure("overloaded", "SERVER", status=503))
    assert of_type(agent.session.events, "assistant/message") == []


async def test_in_band_error_with_retry() -> None:
    attempts: list[tuple[str, int]] = []
    slept: list[float] = []

    class RetryOnce:
        @hookimpl
        def dsh_agent_request_error(self, failure: LlmFailure, attempt: int) -> Retry | None:
            attempts.append((failure.code, attempt))
            return Retry(0.25) if attempt == 1 else None

    async def fake_sleep(delay: float) -> None:
        slept.append(delay)

    async with Harness(load_entrypoints=False, plugins=[RetryOnce()], sleep=fake_sleep) as h:
        agent, adapter = scripted_agent(
            h, [error_response("RATE_LIMIT", "slow down"), text_response("ok")]
        )
        agent.send("go")
        await agent.wait_idle()
        assert kinds(agent.session.events) == [
            "user/message",
            "turn/start",
            "step/start",
            "chunks",
            "llm/retry",  # the policy decides, the loop records
            "chunks",
            "assistant/message",
            "step/end",
            "turn/end",
        ]
        assert attempts == [("RATE_LIMIT", 1)]
        assert slept == [0.25]
        assert len(adapter.requests) == 2
        assert turn_end_reason(agent) == TurnCompleted()


async def test_raised_adapter_error_is_treated_like_in_band(harness: Harness) -> None:
    agent, _ = scripted_agent(
        harness, [raise_error("TRANSPORT", "connection reset", before=[TextDelta(0, "a")])]
    )
    agent.send("go")
    await agent.wait_idle()
    assert kinds(agent.session.events) == [
        "user/message",
        "turn/start",
        "step/start",
        "chunks",
        "step/end",
        "error",
        "turn/end",
    ]
    assert turn_end_reason(agent).failure.code == "TRANSPORT"


async def test_in_band_aborted_finish_ends_the_turn_aborted(harness: Harness) -> None:
    failure = LlmFailure("cancelled upstream", "ABORTED")
    agent, _ = scripted_agent(harness, [[Finish(FinishAborted(failure))]])
    agent.send("go")
    await agent.wait_idle()
    assert turn_end_reason(agent) == TurnAborted("cancelled upstream")
    assert data_of(agent.session.events, ErrorEvent)[0].code == "ABORTED"


@pytest.mark.parametrize(
    "chunks", [text_response(""), [Finish(FinishStop())], []], ids=["empty-text", "bare", "nothing"]
)
async def test_empty_completion_is_an_empty_response_failure(
    harness: Harness, chunks: list[Any]
) -> None:
    agent, _ = scripted_agent(harness, [chunks])
    agent.send("go")
    await agent.wait_idle()
    assert turn_end_reason(agent).failure.code == "EMPTY_RESPONSE"


async def test_an_unexpected_adapter_exception_becomes_adapter_error(harness: Harness) -> None:
    def broken(request: LlmRequest) -> Any:
        return [TextDelta(0, "a"), ToolCallDelta(0, "x", "{}")]  # delta type mismatch on block 0

    agent, _ = scripted_agent(harness, [broken])
    agent.send("go")
    await agent.wait_idle()
    assert turn_end_reason(agent).failure.code == "MALFORMED_RESPONSE"

    class Crashing:
        async def stream(self, request: LlmRequest) -> Any:
            yield TextDelta(0, "a")
            raise KeyError("internal")

    harness.llm.register_adapter(["crash"], Crashing())
    crash = harness.agent_loop.create("crash", AgentOptions(model="crash"))
    crash.send("go")
    await crash.wait_idle()
    failure = turn_end_reason(crash).failure
    assert failure.code == "ADAPTER_ERROR" and "KeyError" in failure.message


async def test_max_tokens_keeps_text_drops_tool_calls_and_ends_the_turn(harness: Harness) -> None:
    chunks = [*tool_call_response("c1", "echo", {"text": "x"}, text="partial")[:-1]]
    agent, _ = scripted_agent(
        harness, [max_tokens_response("cut"), [*chunks, Finish(FinishMaxTokens())]]
    )
    agent.send("go")
    await agent.wait_idle()
    assert kinds(agent.session.events) == [
        "user/message",
        "turn/start",
        "step/start",
        "chunks",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert turn_end_reason(agent) == TurnMaxTokens()
    agent.send("again")
    await agent.wait_idle()
    last = data_of(agent.session.events, AssistantMessage)[-1]
    assert last.content == (Text("partial"),)
    assert of_type(agent.session.events, "tool/call") == []


async def test_no_model_and_unknown_model_fail_the_turn(harness: Harness) -> None:
    agent = harness.agent_loop.create("nomodel")
    agent.send("go")
    await agent.wait_idle()
    assert turn_end_reason(agent).failure.code == "NO_MODEL"
    other = harness.agent_loop.create("unknown", AgentOptions(model="nope"))
    other.send("go")
    await other.wait_idle()
    failure = turn_end_reason(other).failure
    assert failure.code == "NO_ADAPTER" and "'nope'" in failure.message


async def test_inject_adds_context_without_a_turn(harness: Harness) -> None:
    agent, adapter = scripted_agent(harness, [text_response("a")])
    agent.inject("the time is noon", source=PluginSource("clock"))
    await asyncio.sleep(0)
    assert kinds(agent.session.events) == ["context/message"]
    agent.send("what time is it?")
    await agent.wait_idle()
    first = adapter.requests[0].messages[0]
    assert first.content[0] == Text('<context source="plugin:clock">')
    assert first.content[1] == Text("the time is noon")


async def test_inject_while_running_reaches_the_next_request(harness: Harness) -> None:
    gate = asyncio.Event()
    harness.tools.register(echo_tool(gate=gate))
    agent, adapter = scripted_agent(
        harness, [tool_call_response("c1", "echo", {"text": "x"}), text_response("ok")]
    )
    agent.send("go")
    await adapter.started.wait()
    await asyncio.sleep(0)
    agent.inject("fyi")
    gate.set()
    await agent.wait_idle()
    # Never between a tool call and its result: delivered at the next step boundary.
    assert kinds(agent.session.events)[5:9] == [
        "tool/call",
        "tool/result",
        "context/message",
        "step/end",
    ]
    assert adapter.requests[1].messages[-1].content[1] == Text("fyi")


async def test_inject_near_turn_end_is_logged_before_turn_end(harness: Harness) -> None:
    class InjectAtContinuation:
        @hookimpl
        def dsh_agent_turn_continuation(self, agent: Any) -> None:
            agent.inject("late context")

    harness.plugins.register(InjectAtContinuation())
    agent, _ = scripted_agent(harness, [text_response("a")])
    agent.send("go")
    await agent.wait_idle()
    assert kinds(agent.session.events)[-2:] == ["context/message", "turn/end"]
    assert data_of(agent.session.events, ContextMessage)[0] == ContextMessage(
        (Text("late context"),)
    )


async def test_continuation_can_force_continue(harness: Harness) -> None:
    decisions: list[Continuation] = []

    class GoalLoop:
        @hookimpl
        def dsh_agent_turn_continuation(self, decision: Continuation) -> Any:
            decisions.append(decision)
            return Stop(Continuation(len(decisions) == 1, "goal not reached"))

    harness.plugins.register(GoalLoop())
    agent, _ = scripted_agent(harness, [text_response("a"), text_response("b")])
    agent.send("go")
    await agent.wait_idle()
    assert kinds(agent.session.events).count("step/start") == 2
    assert decisions == [Continuation(False), Continuation(False)]


async def test_continuation_can_force_stop(harness: Harness) -> None:
    class Budget:
        @hookimpl
        def dsh_agent_turn_continuation(self, decision: Continuation) -> Any:
            assert decision == Continuation(True, "tool calls or steering")
            return Continuation(False, "budget")

    harness.plugins.register(Budget())
    harness.tools.register(echo_tool())
    agent, _ = scripted_agent(harness, [tool_call_response("c1", "echo", {"text": "x"})])
    agent.send("go")
    await agent.wait_idle()
    assert kinds(agent.session.events).count("step/start") == 1
    assert turn_end_reason(agent) == TurnCompleted("budget")


async def test_turn_numbers_continue_from_a_seeded_session(harness: Harness) -> None:
    agent, _ = scripted_agent(harness, [text_response("a")], agent_id="first")
    agent.send("go")
    await agent.wait_idle()
    fork = harness.sessions.fork(agent.session)
    adapter_model = agent.options.model
    resumed = harness.agent_loop.create("second", AgentOptions(model=adapter_model), session=fork)
    harness.llm.adapter_for(adapter_model).script.append(text_response("b"))  # type: ignore[attr-defined]
    resumed.send("again")
    await resumed.wait_idle()
    assert [e.turn for e in data_of(fork.events, TurnStart)] == [1, 2]
    assert fork.parent == agent.session.id


async def test_an_empty_session_given_to_create_is_the_agents_session(harness: Harness) -> None:
    # A Session has a length: an empty one is falsy, and must not be swapped for a new one.
    session = harness.sessions.create("given-empty")
    assert len(session) == 0
    agent = harness.agent_loop.create("holder", AgentOptions(model="m"), session=session)
    assert agent.session is session


async def test_agents_listed_in_config_are_created_at_start() -> None:
    config = {"agent_loop": {"agents": [{"id": "a", "model": "m", "system_prompt": "be brief"}]}}
    async with Harness(load_entrypoints=False, config=config) as h:
        agent = h.agents.get("a")
        assert agent is not None
        assert agent.options == AgentOptions(model="m", system_prompt="be brief")


async def test_create_twice_fails(harness: Harness) -> None:
    harness.agent_loop.create("a")
    with pytest.raises(DshError, match="already exists"):
        harness.agent_loop.create("a")


async def test_flush_failure_is_logged_and_the_loop_goes_on() -> None:
    class BadStore:
        @hookimpl
        async def dsh_session_flush(self) -> None:
            raise OSError("disk full")

    async with Harness(load_entrypoints=False, plugins=[BadStore()]) as h:
        agent, _ = scripted_agent(h, [text_response("a"), text_response("b")])
        agent.send("go")
        await agent.wait_idle()
        assert kinds(agent.session.events)[-2:] == ["turn/end", "error"]
        assert "disk full" in data_of(agent.session.events, ErrorEvent)[0].message
        agent.send("again")
        await agent.wait_idle()
        assert len(of_type(agent.session.events, "turn/end")) == 2
        h.plugins.pm.unregister(name="BadStore")
        h.plugins.runtime.invalidate()


async def test_messages_queued_during_a_turn_run_as_the_next_turn(harness: Harness) -> None:
    agent, adapter = scripted_agent(harness, [hang(), text_response("b")])
    agent.send("first")
    await adapter.started.wait()
    agent.send("second")
    agent.send("third")
    agent.abort()
    await agent.wait_idle()
    users = [e.content for e in data_of(agent.session.events, UserMessage)]
    assert users == [(Text("first"),), (Text("second"),), (Text("third"),)]
    assert len(of_type(agent.session.events, "turn/start")) == 2


async def test_wait_idle_does_not_poll(harness: Harness) -> None:
    agent, adapter = scripted_agent(harness, [hang()])
    agent.send("go")
    await adapter.started.wait()
    waiter = asyncio.ensure_future(agent.wait_idle())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    agent.abort()
    await asyncio.wait_for(waiter, 10)  # at once; the bound only ends a hang


async def test_reasoning_is_kept_in_history(harness: Harness) -> None:
    agent, adapter = scripted_agent(harness, [reasoning_response("hmm", "a"), text_response("b")])
    agent.send("one")
    await agent.wait_idle()
    agent.send("two")
    await agent.wait_idle()
    assert adapter.requests[1].messages[1].content[0] == Reasoning("hmm")


async def test_content_may_be_text_a_block_or_blocks(harness: Harness) -> None:
    agent, _ = scripted_agent(harness, [text_response("a"), text_response("b")])
    agent.send(Text("one"))
    await agent.wait_idle()
    agent.send([Text("two"), Text("three")])
    await agent.wait_idle()
    users = [e.content for e in data_of(agent.session.events, UserMessage)]
    assert users == [(Text("one"),), (Text("two"), Text("three"))]


async def test_a_bug_inside_the_step_is_an_internal_error(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, _ = scripted_agent(harness, [text_response("a")])

    def broken() -> Any:
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(agent.session, "derive_messages", broken)
    agent.send("go")
    await agent.wait_idle()
    failure = turn_end_reason(agent).failure
    assert (failure.code, failure.message) == ("INTERNAL_ERROR", "ZeroDivisionError: oops")


async def test_cancelling_the_driver_task_itself_stops_the_agent(harness: Harness) -> None:
    agent, adapter = scripted_agent(harness, [hang()])
    agent.send("go")
    await adapter.started.wait()
    agent._task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await agent._task
    assert agent.status == "disposed"
    assert harness.agents.get("main") is None


async def test_streams_without_aclose_are_consumed(harness: Harness) -> None:
    class Plain:
        def __init__(self, chunks: list[Any]) -> None:
            self.chunks = iter(chunks)

        def __aiter__(self) -> Plain:
            return self

        async def __anext__(self) -> Any:
            try:
                return next(self.chunks)
            except StopIteration:
                raise StopAsyncIteration from None

    class PlainStreams:
        @hookimpl
        def dsh_llm_stream(self, request: LlmRequest) -> Any:
            return Plain(text_response("plain"))

    harness.plugins.register(PlainStreams())
    agent = harness.agent_loop.create("p", AgentOptions(model="anything"))
    agent.send("go")
    await agent.wait_idle()
    assert turn_end_reason(agent) == TurnCompleted()


async def test_an_exhausted_script_fails_the_turn_clearly(harness: Harness) -> None:
    agent, _ = scripted_agent(harness, [])
    agent.send("go")
    await agent.wait_idle()
    assert "script exhausted after 0 calls" in turn_end_reason(agent).failure.message


def test_an_agent_dropped_with_its_event_loop_is_finalised_without_awaiting() -> None:
    # A host that never closed its harness: the loop closes with the agent idle, and the
    # agent's coroutine is closed when collected. It must not try to await its clean-up then
    # (no loop runs it any more): nothing may surface as an unraisable error.
    caught: list[Any] = []
    hook = sys.unraisablehook
    sys.unraisablehook = caught.append
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:

        async def start() -> Harness:
            harness = Harness(load_entrypoints=False)
            await harness.start()
            agent = harness.agent_loop.create("dropped", AgentOptions(model="m"))
            await asyncio.sleep(0)
            assert agent.status == "idle"
            return harness

        harness = loop.run_until_complete(start())
        loop.close()
        asyncio.set_event_loop(None)  # as a test runner leaves it: no current loop
        del harness
        gc.collect()
    finally:
        sys.unraisablehook = hook
        asyncio.set_event_loop(None)
    assert [str(u.exc_value) for u in caught] == []
