"""The kit across wire formats: which cases exist on which wire, how an adapter for the
Messages API is held to what its wire carried (signatures included), and how
``compare_wires`` reports adapters of two wires that disagree."""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import pytest

from dsh.testing.conformance import (
    CASES,
    WIRES,
    ConformanceCase,
    ConformanceError,
    Endpoint,
    adapter_target,
    compare_wires,
    run_case,
)
from dsh.values._chunks import BlockEnd, Finish, FinishMaxTokens, StreamChunk
from dsh.values._content import Reasoning
from dsh.values._request import LlmRequest
from dsh_plugins.llm_anthropic import AnthropicConfig, MessagesAdapter, adapters

from .test_builtin_adapters import HAND_ROLLED, MESSAGES

OPENAI_ONLY = {
    "framing-fields",
    "done-whitespace",
    "usage-choices-null",
    "usage-no-choices",
    "strict-tools",
}


def case(name: str) -> ConformanceCase:
    return next(c for c in CASES if c.name == name)


def test_each_case_names_the_wires_it_exists_on() -> None:
    assert all(set(c.wires) <= set(WIRES) and c.wires for c in CASES)
    assert {c.name for c in CASES if "anthropic" not in c.wires} == OPENAI_ONLY
    outcome_only = {c.name for c in CASES if c.agreement == "outcome"}
    assert outcome_only == {
        "tool-calls-one-chunk",
        "passback-empty-reasoning",
        "passback-thinking-default",
        "insufficient-resource",
    }


async def test_a_case_the_wire_does_not_have_is_skipped() -> None:
    with pytest.raises(pytest.skip.Exception, match="only on the openai wire"):
        await run_case(MESSAGES, case("framing-fields"))


class ForgetsSignatures:
    """A Messages adapter that drops every reasoning block's signature."""

    def __init__(self, inner: MessagesAdapter) -> None:
        self.inner = inner

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        async for chunk in self.inner.stream(request):
            if isinstance(chunk, BlockEnd) and isinstance(chunk.block, Reasoning):
                chunk = BlockEnd(chunk.index, Reasoning(chunk.block.text))
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


def _forgetful(endpoint: Endpoint) -> ForgetsSignatures:
    config = AnthropicConfig(
        deepseek_base_url=endpoint.base_url,
        deepseek_api_key=endpoint.api_key,
        anthropic_models=(),
        idle_timeout_s=endpoint.idle_timeout_s,
    )
    return ForgetsSignatures(adapters(config)[0])


FORGETFUL = attrs.evolve(adapter_target(MESSAGES.model, _forgetful), wire="anthropic")


async def test_a_messages_adapter_must_keep_the_signatures_its_wire_carried() -> None:
    with pytest.raises(ConformanceError) as raised:
        await run_case(FORGETFUL, case("thinking"))
    assert any("the wire said" in problem for problem in raised.value.problems)


async def test_reports_of_two_wires_that_differ_say_where() -> None:
    a = await run_case(HAND_ROLLED, case("text-v4"))
    b = await run_case(MESSAGES, case("text-v4"))
    assert compare_wires(a, b) == []
    last = b.events[-2]
    changed = attrs.evolve(
        b,
        chunks=(*b.chunks[:-1], Finish(FinishMaxTokens())),
        events=(*b.events[:-2], attrs.evolve(last, type="other")),
    )
    differences = compare_wires(a, changed)
    assert differences[0].startswith("the streams differ")
    assert differences[1].startswith("the outcomes differ")
    assert differences[2].startswith("event ") and "('other', " in differences[2]
    assert differences[3] == f"{len(a.events)} events ≠ {len(a.events) - 1} events"


async def test_where_only_outcomes_agree_chunks_are_not_compared() -> None:
    a = await run_case(HAND_ROLLED, case("tool-calls-one-chunk"))
    b = await run_case(MESSAGES, case("tool-calls-one-chunk"))
    assert a.stream != b.stream
    assert compare_wires(a, b) == []


async def test_aborted_runs_are_compared_without_their_chunks() -> None:
    a = await run_case(HAND_ROLLED, case("abort"))
    b = await run_case(MESSAGES, case("abort"))
    assert compare_wires(a, b) == []
