"""The kit fails adapters that break the contract, and says how: each broken adapter here wraps
a conforming one and spoils one thing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import attrs
import pytest

from dsh import hookimpl
from dsh.testing import conformance
from dsh.testing.conformance import (
    CASES,
    AdapterTarget,
    ConformanceCase,
    ConformanceError,
    Endpoint,
    adapter_target,
    compare_reports,
    run_case,
)
from dsh.values._chunks import (
    BlockEnd,
    Finish,
    FinishAborted,
    FinishError,
    FinishMaxTokens,
    FinishStop,
    LlmFailure,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)
from dsh.values._content import Message, Text, ToolCall
from dsh.values._errors import LlmError
from dsh.values._request import LlmRequest
from dsh_plugins.llm_deepseek import DeepSeekAdapter, DeepSeekConfig
from dsh_plugins.llm_openai_sdk import OpenAISdkAdapter, OpenAISdkConfig, OpenAISdkPlugin

MODEL = "deepseek-sdk/deepseek-flash"
Rewrite = Callable[[list[StreamChunk]], Sequence[StreamChunk]]


def case(name: str) -> ConformanceCase:
    return next(c for c in CASES if c.name == name)


def sdk_adapter(endpoint: Endpoint) -> OpenAISdkAdapter:
    config = OpenAISdkConfig(endpoint.base_url, api_key=endpoint.api_key)
    return OpenAISdkAdapter(attrs.evolve(config, idle_timeout_s=endpoint.idle_timeout_s))


def raising_adapter(endpoint: Endpoint) -> DeepSeekAdapter:
    config = DeepSeekConfig(endpoint.base_url, api_key=endpoint.api_key)
    return DeepSeekAdapter(attrs.evolve(config, idle_timeout_s=endpoint.idle_timeout_s))


class Wrapped:
    """An adapter around another; subclasses spoil its stream."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        async for chunk in self.inner.stream(request):
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class Rewriting(Wrapped):
    """Collects the whole stream, then plays ``rewrite(chunks)``."""

    def __init__(self, inner: Any, rewrite: Rewrite) -> None:
        super().__init__(inner)
        self.rewrite = rewrite

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        chunks = [chunk async for chunk in self.inner.stream(request)]
        for chunk in self.rewrite(chunks):
            yield chunk


def rewriting(rewrite: Rewrite) -> AdapterTarget:
    return adapter_target(MODEL, lambda endpoint: Rewriting(sdk_adapter(endpoint), rewrite))


def per_phase(*wraps: Callable[[Any], Any]) -> AdapterTarget:
    """A target whose adapter differs between the stream phase and the agent phase."""
    made = iter(wraps)
    return adapter_target(MODEL, lambda endpoint: next(made)(sdk_adapter(endpoint)))


async def problems_of(target: AdapterTarget, name: str) -> list[str]:
    with pytest.raises(ConformanceError) as caught:
        await run_case(target, case(name))
    assert f"case {name!r}" in str(caught.value)
    return caught.value.problems


def has(problems: list[str], *texts: str) -> bool:
    return all(any(text in problem for problem in problems) for text in texts)


# -- the three breaches the issue names ------------------------------------------------------


async def test_usage_after_finish_fails() -> None:
    def late_usage(chunks: list[StreamChunk]) -> list[StreamChunk]:
        usage = [c for c in chunks if isinstance(c, UsageChunk)]
        return [c for c in chunks if not isinstance(c, UsageChunk)] + usage

    problems = await problems_of(rewriting(late_usage), "text-v4")
    assert has(problems, "stream: chunk 5: usage after finish: nothing may follow finish")


async def test_a_dropped_tool_call_fragment_fails() -> None:
    def drop_one(chunks: list[StreamChunk]) -> list[StreamChunk]:
        deltas = [c for c in chunks if isinstance(c, ToolCallDelta)]
        return [c for c in chunks if c is not deltas[2]]

    problems = await problems_of(rewriting(drop_one), "tool-call-thinking")
    assert has(problems, "block-end 1 is not what its deltas said: arguments")


async def test_a_fragment_dropped_everywhere_fails_against_the_wire() -> None:
    def drop_everywhere(chunks: list[StreamChunk]) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        for chunk in chunks:
            if isinstance(chunk, ToolCallDelta) and chunk.arguments_delta == "city":
                continue
            if isinstance(chunk, BlockEnd) and isinstance(chunk.block, ToolCall):
                chunk = BlockEnd(
                    chunk.index, attrs.evolve(chunk.block, arguments='{"":"Hangzhou"}')
                )
            out.append(chunk)
        return out

    problems = await problems_of(rewriting(drop_everywhere), "tool-call-thinking")
    assert has(problems, "stream: assembled", "the wire said")


class WrongCode(Wrapped):
    """Raises every failure as SERVER."""

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        try:
            async for chunk in self.inner.stream(request):
                yield chunk
        except LlmError as exc:
            raise LlmError(attrs.evolve(exc.failure, code="SERVER")) from exc


async def test_a_raised_error_with_the_wrong_code_fails() -> None:
    target = adapter_target("deepseek-flash", lambda endpoint: WrongCode(raising_adapter(endpoint)))
    problems = await problems_of(target, "rate-limit")
    assert problems == ["stream: failure code 'SERVER', expected 'RATE_LIMIT'"]


# -- more ways to fail the stream phase ----------------------------------------------------


class RaisesKeyError(Wrapped):
    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        async for chunk in self.inner.stream(request):
            if isinstance(chunk, Finish):
                raise KeyError("oops")
            yield chunk


async def test_raising_anything_but_llm_error_fails() -> None:
    target = adapter_target(MODEL, lambda endpoint: RaisesKeyError(sdk_adapter(endpoint)))
    problems = await problems_of(target, "disconnect")
    assert has(problems, "the adapter raised KeyError instead of LlmError", "'ADAPTER_ERROR'")


class AnswersWithoutAsking:
    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        yield Finish(FinishError(LlmFailure("never asked", "SERVER")))


async def test_an_adapter_that_never_calls_the_server_fails() -> None:
    target = adapter_target(MODEL, lambda endpoint: AnswersWithoutAsking())
    problems = await problems_of(target, "text-v4")
    assert has(problems, "no request reached the mock server")


def as_success(chunks: list[StreamChunk]) -> list[StreamChunk]:
    last = chunks[-1]
    if isinstance(last, Finish) and isinstance(last.reason, FinishError):
        return [*chunks[:-1], BlockEnd(0, Text("Partial answer")), Finish(FinishStop())]
    return chunks


async def test_a_fault_that_succeeds_fails() -> None:
    problems = await problems_of(rewriting(as_success), "content-filter")
    assert has(problems, "the call succeeded; it must fail with CONTENT_FILTER")


async def test_a_fault_must_stream_what_the_wire_sent_before_it() -> None:
    def no_deltas(chunks: list[StreamChunk]) -> list[StreamChunk]:
        return [c for c in chunks if not isinstance(c, TextDelta)]

    problems = await problems_of(rewriting(no_deltas), "disconnect")
    assert has(problems, "streamed '' before failing, the wire sent 'Partial answer'")


def spoil_failure(**changes: Any) -> Rewrite:
    def rewrite(chunks: list[StreamChunk]) -> list[StreamChunk]:
        last = chunks[-1]
        assert isinstance(last, Finish) and isinstance(last.reason, FinishError)
        failure = attrs.evolve(last.reason.failure, **changes)
        return [*chunks[:-1], Finish(FinishError(failure))]

    return rewrite


async def test_http_failures_must_carry_status_retry_after_request_id_and_the_message() -> None:
    problems = await problems_of(rewriting(spoil_failure(retry_after_s=None)), "rate-limit")
    assert problems == ["stream: status 429 and retry_after_s None, the answer said 429 and 2.0"]
    spoiled = spoil_failure(request_id=None, message="nope")
    problems = await problems_of(rewriting(spoiled), "auth")
    assert has(problems, "request_id None, the answer said 'mock-1'", "does not quote")


async def test_an_answer_must_carry_the_wire_s_usage_and_finish() -> None:
    def spoil(chunks: list[StreamChunk]) -> list[StreamChunk]:
        return [
            UsageChunk(attrs.evolve(c.usage, output_tokens=99))
            if isinstance(c, UsageChunk)
            else Finish(FinishMaxTokens())
            if isinstance(c, Finish)
            else c
            for c in chunks
        ]

    problems = await problems_of(rewriting(spoil), "text-v4")
    assert has(problems, "stream: usage TokenUsage", "stream: finish FinishMaxTokens()")


async def test_a_stream_that_never_ends_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conformance, "DEADLINE_S", 0.3)

    class Hangs(Wrapped):
        async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
            async for chunk in self.inner.stream(request):
                yield chunk
            await asyncio.Event().wait()

    target = adapter_target(MODEL, lambda endpoint: Hangs(sdk_adapter(endpoint)))
    assert await problems_of(target, "text-v4") == ["stream: the stream did not end within 0.3 s"]


# -- cancellation ----------------------------------------------------------------------------


class Swallows(Wrapped):
    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        try:
            async for chunk in self.inner.stream(request):
                yield chunk
        except asyncio.CancelledError:
            yield Finish(FinishAborted(LlmFailure("cancelled", "ABORTED")))


class TurnsCancelIntoError(Wrapped):
    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        try:
            async for chunk in self.inner.stream(request):
                yield chunk
        except asyncio.CancelledError:
            raise RuntimeError("cancelled") from None


class ReadsAhead(Wrapped):
    """Reads the inner stream in a task of its own, which a cancelled consumer leaves
    running: the response stays open."""

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        queue: asyncio.Queue[StreamChunk | None] = asyncio.Queue()

        async def pump() -> None:
            async for chunk in self.inner.stream(request):
                await queue.put(chunk)
            await queue.put(None)

        self.pump = asyncio.create_task(pump())
        while (chunk := await queue.get()) is not None:
            yield chunk

    async def aclose(self) -> None:
        self.pump.cancel()
        await super().aclose()


@pytest.mark.parametrize(
    ("wrapper", "problem"),
    [
        (Swallows, "the stream swallowed the consumer's cancellation"),
        (TurnsCancelIntoError, "cancelled, the stream raised RuntimeError"),
        (ReadsAhead, "cancelling the consumer did not close the response"),
    ],
)
async def test_cancellation_must_come_through_and_close_the_response(
    wrapper: type[Wrapped], problem: str
) -> None:
    target = adapter_target(MODEL, lambda endpoint: wrapper(sdk_adapter(endpoint)))
    problems = await problems_of(target, "abort")
    assert problems == [f"stream: {problem}"]


# -- the agent phase -------------------------------------------------------------------------


def changes_text(inner: Any) -> Rewriting:
    def rewrite(chunks: list[StreamChunk]) -> list[StreamChunk]:
        return [
            TextDelta(c.index, c.text.upper())
            if isinstance(c, TextDelta)
            else BlockEnd(c.index, Text(c.block.text.upper()))
            if isinstance(c, BlockEnd) and isinstance(c.block, Text)
            else c
            for c in chunks
        ]

    return Rewriting(inner, rewrite)


async def test_the_agent_must_see_what_the_stream_said() -> None:
    problems = await problems_of(per_phase(Wrapped, changes_text), "text-v4")
    assert has(
        problems,
        "agent: the first step logged other chunks than the adapter streamed",
        "agent: the first assistant/message is",
    )


async def test_a_failing_case_must_fail_the_turn() -> None:
    succeeds = lambda inner: Rewriting(inner, as_success)  # noqa: E731
    problems = await problems_of(per_phase(Wrapped, succeeds), "content-filter")
    assert has(
        problems,
        "agent: the turn ended [TurnCompleted(reason=None)]",
        "agent: error events with codes [], expected ['CONTENT_FILTER']",
        "agent: a failed turn logged an assistant/message",
    )


class RewritesMessages:
    """A plugin that rewrites every assistant message: replay sees it."""

    @hookimpl
    def dsh_agent_step_result(self, message: Message) -> Message:
        return attrs.evolve(message, content=(Text("rewritten"),))


async def test_the_log_must_replay() -> None:
    target = AdapterTarget(
        MODEL,
        lambda endpoint: [OpenAISdkPlugin(), RewritesMessages()],
        lambda endpoint: {"llm_openai_sdk": endpoint.section(models=["deepseek-flash"])},
    )
    problems = await problems_of(target, "text-v4")
    assert has(problems, "agent: replay: seq", "agent: the first assistant/message is")


async def test_a_turn_that_never_ends_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conformance, "DEADLINE_S", 0.5)

    class Hangs(Wrapped):
        async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
            await asyncio.Event().wait()
            yield Finish(FinishStop())  # pragma: no cover

    problems = await problems_of(per_phase(Wrapped, Hangs), "text-v4")
    assert problems == ["agent: the turn did not end within 0.5 s"]


# -- comparing two adapters -------------------------------------------------------------------


SDK_TARGET = adapter_target(MODEL, sdk_adapter)
RAISING_TARGET = adapter_target("deepseek-flash", raising_adapter)


async def test_reports_that_differ_say_where() -> None:
    a = await run_case(RAISING_TARGET, case("auth"))
    b = await run_case(SDK_TARGET, case("auth"))
    assert compare_reports(a, b) == []
    exact = compare_reports(a, b, exact_messages=True)
    assert exact[0].startswith("the streams differ")
    assert exact[1].startswith("event ")
    shorter = attrs.evolve(b, requests=(), events=b.events[:-1])
    assert compare_reports(a, shorter) == [
        f"the request bodies differ:\n    {a.requests}\n    ()",
        f"{len(a.events)} events ≠ {len(a.events) - 1} events",
    ]


async def test_aborted_runs_are_compared_without_their_chunks() -> None:
    a = await run_case(RAISING_TARGET, case("abort"))
    b = await run_case(SDK_TARGET, case("abort"))
    assert compare_reports(a, b) == []
    last = b.events[-1]
    other = attrs.evolve(b, events=(*b.events[:-1], attrs.evolve(last, type="other")))
    (difference,) = compare_reports(a, other)
    assert difference.startswith("event ") and "('other', " in difference


# -- what the kit accepts --------------------------------------------------------------------


class PlainIterator:
    """An async iterator that is not a generator: it has no ``aclose``."""

    def __init__(self, chunks: AsyncIterator[StreamChunk]) -> None:
        self.chunks = chunks

    def __aiter__(self) -> PlainIterator:
        return self

    async def __anext__(self) -> StreamChunk:
        return await anext(self.chunks)


class PlainStream(Wrapped):
    def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        return PlainIterator(self.inner.stream(request))


async def test_any_async_iterator_will_do() -> None:
    target = adapter_target(MODEL, lambda endpoint: PlainStream(sdk_adapter(endpoint)))
    assert (await run_case(target, case("text-v4"))).chunks[-1] == Finish(FinishStop())


async def test_an_empty_stop_counts_as_the_empty_response_it_is() -> None:
    def plain_stop(chunks: list[StreamChunk]) -> list[StreamChunk]:
        return [Finish(FinishStop())]

    report = await run_case(rewriting(plain_stop), case("empty"))
    assert report.stream == (Finish(FinishStop()),)


async def test_chunks_that_do_not_assemble_fail() -> None:
    def wrong_kind(chunks: list[StreamChunk]) -> list[StreamChunk]:
        return [ReasoningDelta(c.index, c.text) if isinstance(c, TextDelta) else c for c in chunks]

    problems = await problems_of(rewriting(wrong_kind), "text-v4")
    assert has(problems, "a reasoning chunk for block 0, which is text", "do not assemble")
