"""Public test kit: a scripted adapter and its script entries.

``ScriptedAdapter(script)`` plays one entry per model call and records every request it got.
Entries: ``text_response``, ``reasoning_response``, ``tool_call_response``,
``max_tokens_response``, ``error_response`` (in-band ``finish{error}``), ``raise_error`` (the
adapter raises), ``hang()`` (waits until cancelled), a list of chunks, or a callable taking the
request and returning (or awaiting to) any of these. Hypothesis strategies live in
:mod:`dsh.testing.strategies`, the pytest fixtures in :mod:`dsh.testing.pytest_plugin`
(loaded automatically by pytest), the mock DeepSeek server in :mod:`dsh.testing.mockserver`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from attrs import frozen

from dsh.chunks import (
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
from dsh.content import Reasoning, Text, ToolCall
from dsh.errors import DshError, LlmError
from dsh.events import SessionEvent
from dsh.markers import hookimpl
from dsh.request import LlmRequest
from dsh.session import (
    Batch,
    BufferedStore,
    Session,
    SessionBusy,
    SessionConflict,
    SessionSummary,
    Writer,
)
from dsh.store import title_of
from dsh.value import Value

__all__ = [
    "Hang",
    "MemoryStore",
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


@frozen(repr=False)
class RaiseError(Value):
    """Script entry: the adapter raises ``LlmError(failure)`` after streaming ``before``."""

    failure: LlmFailure
    before: tuple[StreamChunk, ...] = ()


@frozen(repr=False)
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


class MemoryStore(BufferedStore):
    """An in-memory session store plugin: what a persistence plugin does, minus the disk — the
    smallest complete :class:`~dsh.session.BufferedStore`.

    Events count as stored once a checkpoint or flush ran (``written(session)`` says how
    many), so a test can "crash" a harness by dropping it and resume another from ``stored``.
    Stores that share ``stored``, ``parents`` and ``writers`` act as processes sharing a disk:
    one writer per session (``writers``: the store holding each session, taken at its first
    checkpoint or flush, released when it is closed or the harness stops). ``checkpoints`` and
    ``flushes`` count the hook calls.
    """

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[str, list[SessionEvent]] = {}
        self.parents: dict[str, str | None] = {}
        self.writers: dict[str, tuple[MemoryStore, Writer]] = {}
        self.checkpoints = 0
        self.flushes = 0

    @hookimpl
    def dsh_session_checkpoint(self, session: Session) -> Awaitable[None] | None:
        self.checkpoints += 1
        return super().dsh_session_checkpoint(session)

    @hookimpl
    def dsh_session_flush(self, session: Session) -> Awaitable[None] | None:
        self.flushes += 1
        return super().dsh_session_flush(session)

    def acquire(self, session: Session) -> int:
        holder = self.writers.get(session.id)
        if holder is not None and holder[0] is not self:
            raise SessionBusy(session.id, holder[1])
        stored = self.stored.get(session.id)
        if session.persisted and stored is not None and len(stored) != session.persisted:
            raise SessionConflict(session.id, len(stored), session.persisted)
        self.writers[session.id] = (self, Writer.this_process())
        return session.persisted if stored is not None else 0

    def replace(self, batch: Batch) -> None:
        self.stored[batch.session.id] = list(batch.events)
        self.parents[batch.session.id] = batch.session.parent

    def append(self, batch: Batch) -> None:
        stored = self.stored[batch.session.id]
        if len(stored) != batch.stored:
            raise SessionConflict(batch.session.id, len(stored), batch.stored)
        stored.extend(batch.events)

    def release(self, session_id: str) -> None:
        self.writers.pop(session_id, None)

    def load(self, session_id: str) -> list[SessionEvent] | None:
        events = self.stored.get(session_id)
        return None if events is None else list(events)

    def list_sessions(self, query: str | None, limit: int) -> list[SessionSummary]:
        found = [
            SessionSummary(
                sid,
                events[0].time,
                events[-1].time,
                len(events),
                title_of(events),
                self.parents.get(sid),
            )
            for sid, events in self.stored.items()
            if events
        ]
        if query is not None:
            found = [s for s in found if query in s.id or query in s.title]
        return sorted(found, key=lambda s: s.updated, reverse=True)[:limit]
