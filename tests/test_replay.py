"""Replay verification: logged chunks re-assemble to exactly the logged messages."""

from __future__ import annotations

from typing import Any

from attrs import evolve
from hypothesis import assume, given

from dsh import AgentOptions, Harness, Tool
from dsh.session._verify import Mismatch, verify
from dsh.testing import (
    ScriptedAdapter,
    error_response,
    max_tokens_response,
    raise_error,
    reasoning_response,
    text_response,
    tool_call_response,
)
from dsh.testing.strategies import StreamCase, chunk_streams
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishAborted,
    FinishError,
    FinishStop,
    LlmFailure,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
)
from dsh.values._content import Reasoning, Text
from dsh.values._events import (
    RETRY_EVENT,
    AssistantChunk,
    AssistantMessage,
    RetryEvent,
    SessionEvent,
    StepEnd,
    StepStart,
)
from dsh.values._request import ToolSchema
from dsh_plugins.retry import RetryPlugin


async def no_wait(delay_s: float) -> None:
    return None


async def logged_session(*script: Any) -> list[SessionEvent]:
    """The log of one turn of an agent playing ``script`` (with the retry policy)."""

    async def echo(args: Any, execution: Any) -> str:
        return "echoed"

    async with Harness(load_entrypoints=False, plugins=[RetryPlugin()], sleep=no_wait) as h:
        h.tools.register(Tool(ToolSchema("echo", "e"), echo))
        h.llm.register_adapter(["m"], ScriptedAdapter(list(script)))
        agent = h.agent_loop.create("a", AgentOptions(model="m"))
        agent.send("go")
        await agent.wait_idle()
        return list(agent.session.events)


async def test_a_real_log_with_retries_verifies() -> None:
    events = await logged_session(
        raise_error("SERVER", "down", before=text_response("half")[:3]),
        error_response("RATE_LIMIT", "slow down"),
        [Finish(FinishStop())],  # empty: EMPTY_RESPONSE, retried
        reasoning_response("think", "then call"),
    )
    report = verify(events)
    assert (report.ok, report.verified, report.unanswered) == (True, 1, 0)
    events = await logged_session(
        tool_call_response("c1", "echo", {"x": 1}, text="calling"),
        max_tokens_response("cut off"),
    )
    assert (verify(events).verified, verify(events).ok) == (2, True)


async def test_a_failed_step_is_unanswered_not_a_mismatch() -> None:
    events = await logged_session(raise_error("AUTH", "bad key", before=text_response("x")[:2]))
    report = verify(events)
    assert (report.ok, report.verified, report.unanswered) == (True, 0, 1)


def tampered(events: list[SessionEvent], seq: int, chunk: StreamChunk) -> list[SessionEvent]:
    out = list(events)
    data = out[seq].data
    assert isinstance(data, AssistantChunk)
    out[seq] = evolve(out[seq], data=evolve(data, chunk=chunk))
    return out


async def test_a_changed_delta_is_reported_precisely() -> None:
    events = await logged_session(text_response("hello"))
    chunks = [e.seq for e in events if e.type == "assistant/chunk"]
    message = next(e for e in events if e.type == "assistant/message")
    bad = tampered(events, chunks[3], TextDelta(0, "X"))  # the third delta: "l" -> "X"
    # The logged block-end is authoritative, so change what it carries too.
    end = bad[chunks[6]].data
    assert isinstance(end, AssistantChunk) and isinstance(end.chunk, BlockEnd)
    bad = tampered(bad, chunks[6], evolve(end.chunk, block=Text("heXlo")))
    [mismatch] = verify(bad).mismatches
    assert mismatch == Mismatch(
        message.seq,
        1,
        1,
        chunks[0],
        chunks[-1],
        "block 0: logged Text(text='hello'), replayed Text(text='heXlo') "
        "(first difference at character 2)",
    )
    assert str(mismatch).startswith(
        f"seq {message.seq} (turn 1, step 1): the assistant/message differs from its chunks "
        f"seq {chunks[0]}..{chunks[-1]}: block 0"
    )
    assert not verify(bad).ok


def step(
    *chunks: StreamChunk, content: tuple[Any, ...], usage: TokenUsage | None = None
) -> list[SessionEvent]:
    events = [SessionEvent("step/start", 0, 0.0, StepStart(1, 1))]
    events += [SessionEvent("assistant/chunk", 0, 0.0, AssistantChunk(1, 1, c)) for c in chunks]
    events.append(SessionEvent("assistant/message", 0, 0.0, AssistantMessage(1, 1, content, usage)))
    events.append(SessionEvent("step/end", 0, 0.0, StepEnd(1, 1)))
    return [evolve(e, seq=i) for i, e in enumerate(events)]


def detail(events: list[SessionEvent]) -> str:
    [mismatch] = verify(events).mismatches
    return mismatch.detail


def test_every_kind_of_difference_is_described() -> None:
    hi = (TextDelta(0, "hi"), Finish(FinishStop()))
    assert detail(step(*hi, content=())) == "0 block(s) logged, 1 replayed"
    assert detail(step(*hi, content=(Text("hi"),), usage=TokenUsage(1, 2))) == (
        "usage: logged TokenUsage(input_tokens=1, output_tokens=2, cache_read_tokens=0, "
        "cache_write_tokens=0, reasoning_tokens=0), replayed None"
    )
    long = Text("x" * 100)
    assert detail(step(TextDelta(0, "y" * 100), content=(long,))).endswith(
        "..., replayed Text(text='yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy... "
        "(first difference at character 0)"
    )
    mixed = step(ReasoningDelta(0, "hm"), content=(Text("hm"),))
    assert detail(mixed) == "block 0: logged Text(text='hm'), replayed Reasoning(text='hm')"
    broken = step(BlockStart(0, "text"), ReasoningDelta(0, "x"), TextDelta(0, "y"), content=())
    assert detail(broken).startswith(
        "the chunks do not assemble: MALFORMED_RESPONSE: a reasoning delta"
    )
    [no_chunks] = verify(step(content=(Text("hi"),))).mismatches
    assert "differs from its no chunks: 1 block(s) logged, 0 replayed" in str(no_chunks)
    assert verify(step(content=())).ok  # nothing streamed, nothing logged


def test_attempts_split_at_failing_finishes_and_retry_events() -> None:
    failed = (TextDelta(0, "partial"), Finish(FinishError(LlmFailure("x", "SERVER"))))
    ok = (TextDelta(0, "fine"), Finish(FinishStop()), TextDelta(0, " late, ignored"))
    assert verify(step(*failed, *ok, content=(Text("fine"),))).ok
    raised = step(TextDelta(0, "partial"), TextDelta(0, "fine"), content=(Text("fine"),))
    assert not verify(raised).ok  # a raise that no retry event marks cannot be told apart
    retry = RetryEvent(1, 1, 1, "SERVER", "down", 0.0)
    marked = [*raised[:2], SessionEvent(RETRY_EVENT, 2, 0.0, retry), *raised[2:]]
    assert verify(marked).ok
    elsewhere = evolve(retry, turn=9)
    other = [*raised[:2], SessionEvent(RETRY_EVENT, 2, 0.0, elsewhere), *raised[2:]]
    assert not verify(other).ok


@given(chunk_streams(), chunk_streams())
def test_any_stream_replays_to_its_message(case: StreamCase, failed: StreamCase) -> None:
    """A successful stream after a failed attempt and its retry event verifies."""
    expected = case.expected
    empty = all(isinstance(b, Text | Reasoning) and not b.text for b in expected.message.content)
    assume(not isinstance(expected.finish, FinishError | FinishAborted))
    assume(not (isinstance(expected.finish, FinishStop) and empty))
    retry = SessionEvent(RETRY_EVENT, 0, 0.0, RetryEvent(1, 1, 1, "SERVER", "down", 0.0))
    events = step(*case.chunks, content=expected.message.content, usage=expected.usage)
    events = [events[0], *step(*failed.chunks, content=())[1:-2], retry, *events[1:]]
    report = verify([evolve(e, seq=i) for i, e in enumerate(events)])
    assert report.ok, report.mismatches
