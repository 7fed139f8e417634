"""The loop treats an adapter's two error paths the same (DESIGN §4): a raised ``LlmError`` is
logged as the ``finish{error|aborted}`` an in-band adapter sends, so both leave one session."""

from __future__ import annotations

from typing import Any

import pytest

from dsh import AgentOptions, Harness
from dsh.testing import ScriptedAdapter, raise_error
from dsh.values._chunks import (
    BlockStart,
    Finish,
    FinishAborted,
    FinishError,
    LlmFailure,
    StreamChunk,
    TextDelta,
)
from dsh.values._events import AssistantChunk, SessionEvent

BEFORE: list[StreamChunk] = [BlockStart(0, "text"), TextDelta(0, "par")]


async def session_of(entry: Any) -> list[tuple[str, int, Any]]:
    async with Harness(load_entrypoints=False) as harness:
        harness.llm.register_adapter(["m"], ScriptedAdapter([entry]))
        agent = harness.agent_loop.create("a", AgentOptions(model="m"))
        agent.send("go")
        await agent.wait_idle()
        events: list[SessionEvent] = list(agent.session.events)
    return [(e.type, e.seq, e.data) for e in events]


@pytest.mark.parametrize(("code", "finish"), [("SERVER", FinishError), ("ABORTED", FinishAborted)])
async def test_a_raised_failure_is_logged_as_the_in_band_finish(code: str, finish: Any) -> None:
    raised = await session_of(raise_error(code, "gone", before=BEFORE))
    in_band = await session_of([*BEFORE, Finish(finish(LlmFailure("gone", code)))])
    assert raised == in_band


async def test_an_unexpected_exception_is_logged_as_an_adapter_error_finish() -> None:
    class Crashing:
        async def stream(self, request: Any) -> Any:
            yield TextDelta(0, "a")
            raise KeyError("internal")

    async with Harness(load_entrypoints=False) as harness:
        harness.llm.register_adapter(["m"], Crashing())
        agent = harness.agent_loop.create("a", AgentOptions(model="m"))
        agent.send("go")
        await agent.wait_idle()
        chunks = [e.data.chunk for e in agent.session.events if isinstance(e.data, AssistantChunk)]
    assert chunks[0] == TextDelta(0, "a")
    assert isinstance(chunks[1], Finish) and isinstance(chunks[1].reason, FinishError)
    assert chunks[1].reason.failure.code == "ADAPTER_ERROR"


async def test_a_failure_raised_after_finish_is_not_logged_twice() -> None:
    late = raise_error(
        "SERVER", "late", before=[*BEFORE, Finish(FinishError(LlmFailure("x", "X")))]
    )
    events = await session_of(late)
    finishes = [
        data
        for type_, _, data in events
        if type_ == "assistant/chunk" and isinstance(data.chunk, Finish)
    ]
    assert len(finishes) == 1
