"""The StreamChunk protocol: the one closed union every LLM adapter speaks.

A stream is a sequence of chunks for one provider attempt. ``index`` ties deltas to blocks and
blocks may interleave; ``block-end`` carries the complete, authoritative block; ``usage`` comes
before ``finish``; nothing comes after ``finish``. See ``docs/streamchunk.md``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from attrs import frozen

from dsh.values._content import Block
from dsh.values._value import Value

__all__ = [
    "BlockEnd",
    "BlockStart",
    "BlockType",
    "Finish",
    "FinishAborted",
    "FinishError",
    "FinishMaxTokens",
    "FinishReason",
    "FinishStop",
    "FinishToolCalls",
    "LlmFailure",
    "ReasoningDelta",
    "StreamChunk",
    "TextDelta",
    "TokenUsage",
    "ToolCallDelta",
    "UsageChunk",
]

BlockType = Literal["text", "reasoning", "tool-call"]


# The chunks a session log keeps (most of its events) and their usage carry no weak-reference
# slot: nothing refers to them weakly, and it is 8 bytes less per object, one or two per chunk.
@frozen(weakref_slot=False, repr=False, eq=False)
class TokenUsage(Value):
    """Token counts of one model call. The counts are **disjoint**.

    ``input_tokens`` is uncached input only; billed input is ``input_tokens + cache_read_tokens +
    cache_write_tokens``. ``reasoning_tokens`` is informational and already inside
    ``output_tokens``.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )


@frozen(repr=False, eq=False)
class LlmFailure(Value):
    """Why a model call failed.

    ``code`` is canonical (``RATE_LIMIT``, ``SERVER``, ``TIMEOUT``, ``TRANSPORT``,
    ``STREAM_CLOSED``, ``MALFORMED_RESPONSE``, ``EMPTY_RESPONSE``, ``CONTEXT_WINDOW_EXCEEDED``,
    ``AUTH``, ``INSUFFICIENT_BALANCE``, ``INVALID_REQUEST``, ``ABORTED``, ...), so that retry
    policies and UIs never parse provider messages.
    """

    message: str
    code: str
    status: int | None = None
    retry_after_s: float | None = None
    request_id: str | None = None


@frozen(repr=False, eq=False)
class FinishStop(Value):
    type: ClassVar[str] = "stop"


@frozen(repr=False, eq=False)
class FinishToolCalls(Value):
    type: ClassVar[str] = "tool-calls"


@frozen(repr=False, eq=False)
class FinishMaxTokens(Value):
    type: ClassVar[str] = "max-tokens"


@frozen(repr=False, eq=False)
class FinishAborted(Value):
    type: ClassVar[str] = "aborted"
    failure: LlmFailure


@frozen(repr=False, eq=False)
class FinishError(Value):
    type: ClassVar[str] = "error"
    failure: LlmFailure


FinishReason = FinishStop | FinishToolCalls | FinishMaxTokens | FinishAborted | FinishError


@frozen(weakref_slot=False, repr=False, eq=False)
class BlockStart(Value):
    type: ClassVar[str] = "block-start"
    index: int
    block_type: BlockType


@frozen(weakref_slot=False, repr=False, eq=False)
class TextDelta(Value):
    type: ClassVar[str] = "text-delta"
    index: int
    text: str


@frozen(weakref_slot=False, repr=False, eq=False)
class ReasoningDelta(Value):
    type: ClassVar[str] = "reasoning-delta"
    index: int
    text: str


@frozen(weakref_slot=False, repr=False, eq=False)
class ToolCallDelta(Value):
    type: ClassVar[str] = "tool-call-delta"
    index: int
    id: str
    arguments_delta: str
    name: str | None = None


@frozen(weakref_slot=False, repr=False, eq=False)
class BlockEnd(Value):
    type: ClassVar[str] = "block-end"
    index: int
    block: Block


@frozen(weakref_slot=False, repr=False, eq=False)
class UsageChunk(Value):
    type: ClassVar[str] = "usage"
    usage: TokenUsage


@frozen(weakref_slot=False, repr=False, eq=False)
class Finish(Value):
    type: ClassVar[str] = "finish"
    reason: FinishReason


StreamChunk = (
    BlockStart | TextDelta | ReasoningDelta | ToolCallDelta | BlockEnd | UsageChunk | Finish
)
