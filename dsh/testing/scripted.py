"""The scripted adapter and its script entries (exported by :mod:`dsh.testing`).

``ScriptedAdapter(script)`` plays one entry per model call and records every request it got.
Entries: ``text_response``, ``reasoning_response``, ``tool_call_response``,
``max_tokens_response``, ``error_response`` (in-band ``finish{error}``), ``raise_error`` (the
adapter raises), ``hang()`` (waits until cancelled), a list of chunks, or a callable taking the
request and returning (or awaiting to) any of these.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from attrs import frozen

from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishError,
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    LlmFailure,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from dsh.values._content import Reasoning, Text, ToolCall
from dsh.values._errors import DshError, LlmError
from dsh.values._request import LlmRequest
from dsh.values._value import Value

__all__ = [
    "Hang",
    "RaiseError",
    "ScriptEntry",
    "ScriptedAdapter",
    "error_response",
    "hang",
    "max_tokens_response",
    "raise_error",
    "reasoning_response",
    "text_response",
    "tool_call_response",
    "tool_calls_response",
]


@frozen(repr=False, eq=False)
class RaiseError(Value):
    """Script entry: the adapter raises ``LlmError(failure)`` after streaming ``before``."""

    failure: LlmFailure
    before: tuple[StreamChunk, ...] = ()


@frozen(repr=False, eq=False)
class Hang(Value):
    """Script entry: stream ``before``, then wait until cancelled."""

    before: tuple[StreamChunk, ...] = ()


ScriptEntry = Sequence[StreamChunk] | RaiseError | Hang | Callable[[LlmRequest], Any]


def _text_chunks(index: int, text: str) -> list[StreamChunk]:
    return [
        BlockStart(index, "text"),
        *(TextDelta(index, ch) for ch in text),
        BlockEnd(index, Text(text)),
    ]


def text_response(text: str) -> list[StreamChunk]:
    """A text reply streamed one character per delta, then usage and ``finish{stop}``."""
    return [
        *_text_chunks(0, text),
        UsageChunk(TokenUsage(input_tokens=10, output_tokens=len(text))),
        Finish(FinishStop()),
    ]


def reasoning_response(reasoning: str, text: str) -> list[StreamChunk]:
    """Reasoning (block 0) then text (block 1)."""
    return [
        BlockStart(0, "reasoning"),
        *(ReasoningDelta(0, ch) for ch in reasoning),
        BlockEnd(0, Reasoning(reasoning)),
        *_text_chunks(1, text),
        UsageChunk(TokenUsage(10, len(reasoning) + len(text), reasoning_tokens=len(reasoning))),
        Finish(FinishStop()),
    ]


def tool_call_response(
    call_id: str, name: str, args: dict[str, Any], text: str | None = None
) -> list[StreamChunk]:
    """An optional text block, then one tool call whose JSON arguments arrive in two deltas."""
    return tool_calls_response([(call_id, name, args)], text)


def tool_calls_response(
    calls: Sequence[tuple[str, str, dict[str, Any]]], text: str | None = None
) -> list[StreamChunk]:
    """An optional text block, then several tool calls ``(call_id, name, args)`` in order."""
    chunks = _text_chunks(0, text) if text else []
    for index, (call_id, name, args) in enumerate(calls, start=1 if text else 0):
        raw = json.dumps(args)
        chunks += [
            BlockStart(index, "tool-call"),
            ToolCallDelta(index, call_id, raw[:5], name=name),
            ToolCallDelta(index, call_id, raw[5:]),
            BlockEnd(index, ToolCall(call_id, name, raw)),
        ]
    return [*chunks, UsageChunk(TokenUsage(10, 5)), Finish(FinishToolCalls())]


def max_tokens_response(text: str) -> list[StreamChunk]:
    """A text reply cut off by the output limit: ``finish{max-tokens}``."""
    return [*text_response(text)[:-1], Finish(FinishMaxTokens())]


def error_response(code: str, message: str, *, status: int | None = None) -> list[StreamChunk]:
    """The in-band error path: the stream ends ``finish{error}``."""
    return [Finish(FinishError(LlmFailure(message, code, status=status)))]


def raise_error(code: str, message: str, *, before: Sequence[StreamChunk] = ()) -> RaiseError:
    """The raising error path: the adapter raises ``LlmError`` (after ``before``)."""
    return RaiseError(LlmFailure(message, code), tuple(before))


def hang(before: Sequence[StreamChunk] = ()) -> Hang:
    """Stream ``before`` then wait until the step is cancelled (abort, dispose)."""
    return Hang(tuple(before))


class ScriptedAdapter:
    """An LLM adapter that plays a script: one entry per model call.

    ``requests`` records every request received; ``started`` is set when a call begins (handy
    to abort at a known point).
    """

    def __init__(self, script: Sequence[ScriptEntry]) -> None:
        self.script = list(script)
        self.requests: list[LlmRequest] = []
        self.started = asyncio.Event()
        self.closed = False

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        self.requests.append(request)
        if not self.script:
            raise DshError(
                f"ScriptedAdapter: script exhausted after {len(self.requests) - 1} calls"
            )
        entry: Any = self.script.pop(0)
        if callable(entry):
            entry = entry(request)
            if inspect.isawaitable(entry):
                entry = await entry
        self.started.set()
        if isinstance(entry, RaiseError | Hang):
            for chunk in entry.before:
                yield chunk
            if isinstance(entry, RaiseError):
                raise LlmError(entry.failure)
            await asyncio.Event().wait()
        for chunk in entry:
            yield chunk

    async def aclose(self) -> None:
        self.closed = True
