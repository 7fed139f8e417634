"""Hypothesis strategies for dsh values and for chunk streams (requires ``hypothesis``).

:func:`chunk_streams` draws *valid but messy* streams — interleaved blocks, arbitrary delta
splits, delta-only blocks, duplicate ``block-end``, late deltas, several ``usage`` chunks — with
the :class:`~dsh.llm._assembler.AssembledMessage` they must fold to. Adapter authors can feed them
through their own consumers; the assembler is tested with them.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from attrs import frozen
from hypothesis import strategies as st

from dsh.llm._assembler import AssembledMessage
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishAborted,
    FinishError,
    FinishMaxTokens,
    FinishReason,
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
from dsh.values._content import (
    AgentSource,
    Block,
    Image,
    Message,
    MessageSource,
    PluginSource,
    Reasoning,
    Text,
    ToolCall,
    ToolResult,
    UserSource,
)
from dsh.values._events import ErrorEvent, RetryEvent, StepEnd, StepStart, ToolCallEvent
from dsh.values._request import LlmRequest, ToolSchema
from dsh.values._value import Value

__all__ = [
    "StreamCase",
    "blocks",
    "chunk_streams",
    "failures",
    "finish_reasons",
    "llm_requests",
    "message_sources",
    "messages",
    "packed_event_data",
    "stream_chunks",
    "token_usages",
    "tool_schemas",
]

texts = st.text(max_size=20)
ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)
counts = st.integers(min_value=0, max_value=10**7)
json_args = st.dictionaries(ids, st.integers() | texts, max_size=3).map(json.dumps)

token_usages = st.builds(TokenUsage, counts, counts, counts, counts, counts)
failures = st.builds(
    LlmFailure,
    message=texts,
    code=st.sampled_from(["RATE_LIMIT", "SERVER", "TIMEOUT", "ABORTED", "EMPTY_RESPONSE"]),
    status=st.none() | st.integers(100, 599),
    retry_after_s=st.none() | st.floats(0, 3600, allow_nan=False),
    request_id=st.none() | ids,
)
finish_reasons: st.SearchStrategy[FinishReason] = st.one_of(
    st.just(FinishStop()),
    st.just(FinishToolCalls()),
    st.just(FinishMaxTokens()),
    st.builds(FinishAborted, failures),
    st.builds(FinishError, failures),
)
message_sources: st.SearchStrategy[MessageSource] = st.one_of(
    st.just(UserSource()), st.builds(PluginSource, ids), st.builds(AgentSource, ids)
)
result_content = st.lists(
    st.builds(Text, texts) | st.builds(Image, texts, st.none() | texts), max_size=3
).map(tuple)
blocks: st.SearchStrategy[Block] = st.one_of(
    st.builds(Text, texts),
    st.builds(Reasoning, texts),
    st.builds(
        Reasoning,
        texts,
        st.none() | texts,
        st.booleans(),
        st.none() | json_args.map(lambda args: f"[{args}]"),
    ),
    st.builds(ToolCall, ids, ids, json_args),
    st.builds(ToolResult, ids, result_content, st.booleans()),
    st.builds(Image, texts, st.none() | texts),
)
messages = st.builds(
    Message,
    st.sampled_from(["system", "user", "assistant"]),
    st.lists(blocks, max_size=4).map(tuple),
)
tool_schemas = st.builds(
    ToolSchema,
    ids,
    texts,
    st.just({"type": "object", "properties": {"x": {"type": "string"}}}),
    st.booleans(),
)
llm_requests = st.builds(
    LlmRequest,
    model=ids,
    messages=st.lists(messages, max_size=3).map(tuple),
    system=st.none() | texts,
    tools=st.lists(tool_schemas, max_size=2).map(tuple),
    temperature=st.none() | st.floats(0, 2),
    max_tokens=st.none() | st.integers(1, 10**6),
    stop=st.lists(texts, max_size=2).map(tuple),
    reasoning_effort=st.none() | st.sampled_from(["low", "medium", "high", "max"]),
    thinking=st.none() | st.booleans(),
    session_id=st.none() | ids,
    purpose=st.none() | st.just("compaction"),
)
stream_chunks: st.SearchStrategy[StreamChunk] = st.one_of(
    st.builds(BlockStart, st.integers(0, 9), st.sampled_from(["text", "reasoning", "tool-call"])),
    st.builds(TextDelta, st.integers(0, 9), texts),
    st.builds(ReasoningDelta, st.integers(0, 9), texts),
    st.builds(ToolCallDelta, st.integers(0, 9), ids, texts, st.none() | ids),
    st.builds(BlockEnd, st.integers(0, 9), blocks),
    st.builds(UsageChunk, token_usages),
    st.builds(Finish, finish_reasons),
)

#: The data of events a session log keeps packed (:data:`dsh.session._log.PACKED_DATA`), any values
#: of the declared types (floats include NaN and the infinities).
_step = st.integers(0, 10**6)
packed_event_data = st.one_of(
    st.builds(StepStart, _step, _step),
    st.builds(StepEnd, _step, _step),
    st.builds(ToolCallEvent, _step, _step, st.text(), st.text(), st.text()),
    st.builds(ErrorEvent, _step, _step, st.text(), st.none() | st.text()),
    st.builds(
        RetryEvent,
        _step,
        _step,
        st.integers(0, 100),
        st.text(),
        st.text(),
        st.floats(),
        st.none() | st.integers(100, 599),
        st.none() | st.integers(0, 100),
    ),
)


@frozen(repr=False, eq=False)
class StreamCase(Value):
    """A chunk stream and what it means."""

    chunks: tuple[StreamChunk, ...]
    expected: AssembledMessage


def _pieces(draw: Any, text: str) -> list[str]:
    """``text`` split at random points (possibly with empty pieces)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=4)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def _delta(index: int, block: Block, piece: str, first: bool) -> StreamChunk:
    if isinstance(block, Text):
        return TextDelta(index, piece)
    if isinstance(block, Reasoning):
        return ReasoningDelta(index, piece)
    assert isinstance(block, ToolCall)
    return ToolCallDelta(index, block.id, piece, block.name if first else None)


def _block_events(draw: Any, index: int, block: Block) -> list[StreamChunk]:
    """The chunks of one block: optional start, deltas, optional end, noise after the end."""
    assert isinstance(block, Text | Reasoning | ToolCall)
    kind = {"text": "text", "reasoning": "reasoning", "tool-call": "tool-call"}[block.type]
    body = block.arguments if isinstance(block, ToolCall) else block.text
    events: list[StreamChunk] = []
    if draw(st.booleans()):
        events.append(BlockStart(index, kind))  # type: ignore[arg-type]
    events += [_delta(index, block, p, i == 0) for i, p in enumerate(_pieces(draw, body))]
    ended = draw(st.booleans()) or (isinstance(block, ToolCall) and not block.name)
    if ended:
        events.append(BlockEnd(index, block))
        if draw(st.booleans()):
            events.append(_delta(index, block, "late", False))
        if draw(st.booleans()):
            events.append(BlockEnd(index, Text("duplicate end, ignored")))
    return events


def _interleave(draw: Any, per_block: list[list[StreamChunk]]) -> list[StreamChunk]:
    """Merge the blocks' chunk lists, keeping each list's order and blocks' first-seen order."""
    out: list[StreamChunk] = []
    cursors = [0] * len(per_block)
    started = 0
    while any(c < len(events) for c, events in zip(cursors, per_block, strict=True)):
        ready = [i for i in range(started) if cursors[i] < len(per_block[i])]
        if started < len(per_block):
            ready.append(started)
        choice = draw(st.sampled_from(ready))
        if choice == started:
            started += 1
        out.append(per_block[choice][cursors[choice]])
        cursors[choice] += 1
    return out


stream_blocks = st.one_of(
    st.builds(Text, texts),
    st.builds(Reasoning, texts),
    st.builds(ToolCall, ids, ids, json_args),
)


@st.composite
def chunk_streams(draw: Any) -> StreamCase:
    """A valid, messy chunk stream and the message, usage and finish it must assemble to."""
    intended = draw(st.lists(stream_blocks, max_size=5))
    per_block = [_block_events(draw, i, b) for i, b in enumerate(intended)]
    chunks = _interleave(draw, per_block)
    usages = draw(st.lists(token_usages, max_size=2))
    chunks += [UsageChunk(u) for u in usages]
    finish = draw(finish_reasons)
    chunks.append(Finish(finish))
    if draw(st.booleans()):
        chunks.append(TextDelta(0, "after finish, ignored"))
    kept = [
        b for b in intended if not (isinstance(finish, FinishMaxTokens) and isinstance(b, ToolCall))
    ]
    expected = AssembledMessage(
        Message("assistant", tuple(kept)), usages[-1] if usages else None, finish
    )
    return StreamCase(tuple(chunks), expected)
