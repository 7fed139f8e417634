"""The SDK's parsed ``ChatCompletionChunk`` objects → StreamChunks.

:class:`ChunkMapper` keeps one response's blocks. Per chunk (:meth:`ChunkMapper.feed`):

* ``delta.reasoning_content`` — DeepSeek's field, which the SDK keeps as an extra attribute —
  when non-empty: the reasoning block opens once (``block-start``), then ``reasoning-delta``;
* ``delta.content`` when non-empty: the same for the text block and ``text-delta``;
* each ``delta.tool_calls`` fragment: a call not seen before opens a tool-call block and always
  gets a ``tool-call-delta`` (with its id and, if present, its name); later fragments get one
  when they carry arguments or the first name. Calls are told apart by their wire index, by
  their id when a gateway drops the index, else the fragment continues the last call;
* ``usage``, when present, replaces what came before; ``finish_reason`` is kept.

At the end of the stream (:meth:`ChunkMapper.close`): every block's ``block-end`` in the order
the blocks opened, the usage, then the finish — all deferred to the end because DeepSeek may
send usage after the finish chunk. ``None`` and ``""`` both mean "nothing", so the empty
``reasoning_content`` that opens every thinking stream opens no block.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dsh.chunks import (
    BlockEnd,
    BlockStart,
    BlockType,
    Finish,
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
from dsh.content import Block, Reasoning, Text, ToolCall
from dsh.errors import LlmError

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionChunk
    from openai.types.chat.chat_completion_chunk import ChoiceDelta, ChoiceDeltaToolCall
    from openai.types.completion_usage import CompletionUsage

__all__ = ["ChunkMapper", "finish_of", "usage_of"]


def _field(value: object, name: str) -> Any:
    """A field of an SDK object, or of the plain dict an older SDK leaves unparsed (its
    ``CompletionUsage`` has no details objects); ``None`` when absent."""
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def usage_of(usage: CompletionUsage) -> TokenUsage:
    """The disjoint :class:`TokenUsage` of an SDK usage object. DeepSeek counts cache hits
    inside ``prompt_tokens`` (as the extra ``prompt_cache_hit_tokens``, or OpenAI's
    ``prompt_tokens_details.cached_tokens``); they are moved out of the input count.
    Reasoning tokens stay inside the output count."""
    hits = _field(usage, "prompt_cache_hit_tokens")
    if hits is None:
        hits = _field(_field(usage, "prompt_tokens_details"), "cached_tokens") or 0
    reasoning = _field(_field(usage, "completion_tokens_details"), "reasoning_tokens") or 0
    return TokenUsage(
        input_tokens=(usage.prompt_tokens or 0) - hits,
        output_tokens=usage.completion_tokens or 0,
        cache_read_tokens=hits,
        reasoning_tokens=reasoning,
    )


def finish_of(reason: str, answered: bool) -> FinishReason:
    """The StreamChunk finish of a wire ``finish_reason``. ``answered``: some block opened —
    a ``stop`` without one is the failure ``EMPTY_RESPONSE``. A reason that is not a success
    (``content_filter``, ``insufficient_system_resource``...) fails with the reason, upper-cased,
    as its code."""
    if reason == "stop":
        if answered:
            return FinishStop()
        return FinishError(LlmFailure("the model returned an empty completion", "EMPTY_RESPONSE"))
    if reason == "tool_calls":
        return FinishToolCalls()
    if reason == "length":
        return FinishMaxTokens()
    return FinishError(LlmFailure(f"the model stopped: {reason}", reason.upper()))


def _string(value: object) -> str:
    """A text field of a chunk: ``None`` is empty; anything but a string is malformed."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise TypeError(f"a text field holds {type(value).__name__}")


class _Open:
    """A block that is still streaming."""

    __slots__ = ("call_id", "index", "kind", "name", "pieces")

    def __init__(self, index: int, kind: BlockType) -> None:
        self.index = index
        self.kind = kind
        self.pieces: list[str] = []
        self.call_id = ""
        self.name = ""

    def complete(self) -> Block:
        joined = "".join(self.pieces)
        if self.kind == "reasoning":
            return Reasoning(joined)
        if self.kind == "text":
            return Text(joined)
        return ToolCall(self.call_id or f"call_{self.index}", self.name, joined)


class ChunkMapper:
    """The state of one response; use a new one per call."""

    def __init__(self) -> None:
        self._opened: list[_Open] = []
        self._reasoning: _Open | None = None
        self._text: _Open | None = None
        self._calls: dict[object, _Open] = {}
        self._last_call: object = None
        self._usage: TokenUsage | None = None
        self._finish_reason: str | None = None

    def feed(self, chunk: ChatCompletionChunk) -> list[StreamChunk]:
        """The StreamChunks of one SDK chunk; ``LlmError(MALFORMED_RESPONSE)`` when it is not
        shaped like one."""
        try:
            return self._map(chunk)
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
            raise LlmError.of(
                "MALFORMED_RESPONSE", f"unexpected chunk from DeepSeek ({exc}): {chunk!r:.200}"
            ) from exc

    def close(self) -> list[StreamChunk]:
        """The closing StreamChunks, once the stream reached ``[DONE]``."""
        if self._finish_reason is None:
            raise LlmError.of("MALFORMED_RESPONSE", "the stream ended without a finish_reason")
        closing: list[StreamChunk] = [BlockEnd(b.index, b.complete()) for b in self._opened]
        if self._usage is not None:
            closing.append(UsageChunk(self._usage))
        closing.append(Finish(finish_of(self._finish_reason, bool(self._opened))))
        return closing

    def _map(self, chunk: ChatCompletionChunk) -> list[StreamChunk]:
        if chunk.usage is not None:
            self._usage = usage_of(chunk.usage)
        out: list[StreamChunk] = []
        for choice in chunk.choices[:1]:
            if choice.delta is not None:
                self._delta(choice.delta, out)
            if choice.finish_reason is not None:
                self._finish_reason = _string(choice.finish_reason)
        return out

    def _delta(self, delta: ChoiceDelta, out: list[StreamChunk]) -> None:
        reasoning = _string(getattr(delta, "reasoning_content", None))
        if reasoning:
            self._reasoning = self._reasoning or self._open("reasoning", out)
            self._reasoning.pieces.append(reasoning)
            out.append(ReasoningDelta(self._reasoning.index, reasoning))
        text = _string(delta.content)
        if text:
            self._text = self._text or self._open("text", out)
            self._text.pieces.append(text)
            out.append(TextDelta(self._text.index, text))
        for fragment in delta.tool_calls or ():
            self._call(fragment, out)

    def _call(self, fragment: ChoiceDeltaToolCall, out: list[StreamChunk]) -> None:
        function = fragment.function
        call_id = _string(fragment.id)
        name = _string(function.name if function else None)
        arguments = _string(function.arguments if function else None)
        key: object = fragment.index
        if key is None:
            key = call_id or self._last_call
        self._last_call = key
        block = self._calls.get(key)
        first = block is None
        if block is None:
            block = self._calls[key] = self._open("tool-call", out)
        named = name if name and not block.name else None
        block.call_id = block.call_id or call_id
        block.name = block.name or name
        block.pieces.append(arguments)
        if first or arguments or named:
            out.append(ToolCallDelta(block.index, block.call_id, arguments, name=named))

    def _open(self, kind: BlockType, out: list[StreamChunk]) -> _Open:
        block = _Open(len(self._opened), kind)
        self._opened.append(block)
        out.append(BlockStart(block.index, kind))
        return block
