"""The SDK stream helper's events → StreamChunks.

The helper (``AsyncChatCompletionStream``) accumulates every chunk into a snapshot of the whole
completion and fires typed events. :class:`HelperEvents` maps one response's events:

* ``chunk`` — the raw chunk and the snapshot after it: remembers the snapshot, the ``usage``
  (the last one wins) and the ``finish_reason``; DeepSeek's ``delta.reasoning_content`` (an
  extra field the SDK keeps) opens the reasoning block once and streams ``reasoning-delta``;
* ``content.delta`` — opens the text block once and streams ``text-delta``;
* ``tool_calls.function.arguments.delta`` — one per fragment of call ``index``, in the chunk's
  order: the first opens a tool-call block and always gives a ``tool-call-delta``; later ones
  give one when they carry arguments, or the call's first name. The snapshot already holds the
  whole chunk, so the id and name a fragment brings are read from the fragment itself (kept
  from the ``chunk`` event); an id or name only fills one still missing;
* every other event (``content.done``, ``tool_calls.function.arguments.done``, refusal and
  logprobs events) adds nothing a StreamChunk carries.

In one chunk the helper fires ``chunk`` before the content and tool events, so reasoning comes
before text and text before calls, as on the wire. ``""`` opens nothing (thinking streams open
with an empty ``reasoning_content``). At the end (:meth:`HelperEvents.close`), the blocks are
ended in the order they opened, with their complete text from the final snapshot, then the usage
and the finish: DeepSeek may send usage after the finish chunk.

The helper is given no input tools and no parse type, so it never parses arguments or content
itself: with strict tools it would raise on a ``length`` or ``content_filter`` finish before
firing that chunk's events, and on arguments that are not JSON. The arguments stay the raw
string, as StreamChunks require.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dsh.plugin import (
    Block,
    BlockEnd,
    BlockStart,
    BlockType,
    Finish,
    FinishError,
    FinishMaxTokens,
    FinishReason,
    FinishStop,
    FinishToolCalls,
    LlmError,
    LlmFailure,
    Reasoning,
    ReasoningDelta,
    StreamChunk,
    Text,
    TextDelta,
    TokenUsage,
    ToolCall,
    ToolCallDelta,
    UsageChunk,
)

if TYPE_CHECKING:
    from openai.lib.streaming.chat import (
        ChatCompletionStreamEvent,
        ChunkEvent,
        FunctionToolCallArgumentsDeltaEvent,
        ParsedChatCompletionSnapshot,
    )
    from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall
    from openai.types.chat.parsed_chat_completion import ParsedChatCompletionMessage
    from openai.types.completion_usage import CompletionUsage

__all__ = ["HelperEvents", "finish_of", "usage_of"]

# Finish reasons that are not a success: (code, what the reason means). The in-stream form of a
# 503 is SERVER, which the retry plugin retries.
_FAILED = {
    "insufficient_system_resource": ("SERVER", "DeepSeek ran out of inference resources"),
    "content_filter": ("CONTENT_FILTER", "the content filter stopped the answer"),
}
_UNKNOWN = ("UNKNOWN_FINISH", "a reason dsh does not know")
_ENDED: dict[str, FinishReason] = {"tool_calls": FinishToolCalls(), "length": FinishMaxTokens()}


def finish_of(reason: str, answered: bool) -> FinishReason:
    """The StreamChunk finish of a wire ``finish_reason``; ``answered``: a block opened (a
    ``stop`` without one is ``EMPTY_RESPONSE``). A failed finish keeps the raw reason."""
    if reason == "stop":
        if answered:
            return FinishStop()
        return FinishError(LlmFailure("the model returned an empty completion", "EMPTY_RESPONSE"))
    if reason in _ENDED:
        return _ENDED[reason]
    code, meaning = _FAILED.get(reason, _UNKNOWN)
    return FinishError(LlmFailure(f"the model stopped: {reason} ({meaning})", code))


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


def _string(value: object, what: str) -> str:
    """A text field: ``None`` is empty; anything but a string is malformed."""
    if value is None or isinstance(value, str):
        return value or ""
    raise LlmError.of(
        "MALFORMED_RESPONSE", f"unexpected chunk from DeepSeek: {what} is {type(value).__name__}"
    )


class _Call:
    """What was said of one tool call so far: its block, its id, whether its name went out."""

    __slots__ = ("block", "id", "named")

    def __init__(self, block: int) -> None:
        self.block = block
        self.id = ""
        self.named = False


class HelperEvents:
    """The mapping state of one response; use a new one per call."""

    def __init__(self) -> None:
        self._kinds: list[tuple[BlockType, int]] = []
        self._reasoning: int | None = None
        self._text: int | None = None
        self._calls: dict[int, _Call] = {}
        self._snapshot: ParsedChatCompletionSnapshot | None = None
        self._fragments: deque[ChoiceDeltaToolCall] = deque()
        self._usage: TokenUsage | None = None
        self._reason: str | None = None

    def feed(self, event: ChatCompletionStreamEvent[object]) -> list[StreamChunk]:
        """The StreamChunks of one helper event."""
        out: list[StreamChunk] = []
        if event.type == "chunk":
            self._chunk(event, out)
        elif event.type == "content.delta":
            self._content(_string(event.delta, "content"), out)
        elif event.type == "tool_calls.function.arguments.delta":
            self._arguments(event, out)
        return out

    def close(self) -> list[StreamChunk]:
        """The closing StreamChunks, once the stream reached ``[DONE]``."""
        if self._reason is None or self._snapshot is None:
            raise LlmError.of("MALFORMED_RESPONSE", "the stream ended without a finish_reason")
        message = self._snapshot.choices[0].message
        out: list[StreamChunk] = [
            BlockEnd(index, _complete(kind, position, index, message))
            for index, (kind, position) in enumerate(self._kinds)
        ]
        if self._usage is not None:
            out.append(UsageChunk(self._usage))
        out.append(Finish(finish_of(self._reason, bool(self._kinds))))
        return out

    def _chunk(self, event: ChunkEvent, out: list[StreamChunk]) -> None:
        self._snapshot = event.snapshot
        chunk = event.chunk
        if chunk.usage is not None:
            self._usage = usage_of(chunk.usage)
        self._fragments.clear()
        for choice in chunk.choices:
            self._fragments.extend(choice.delta.tool_calls or ())
            reasoning = _string(getattr(choice.delta, "reasoning_content", None), "reasoning")
            if reasoning:
                if self._reasoning is None:
                    self._reasoning = self._open("reasoning", 0, out)
                out.append(ReasoningDelta(self._reasoning, reasoning))
            if choice.finish_reason is not None:
                self._reason = _string(choice.finish_reason, "finish_reason")

    def _content(self, text: str, out: list[StreamChunk]) -> None:
        if text:
            if self._text is None:
                self._text = self._open("text", 0, out)
            out.append(TextDelta(self._text, text))

    def _arguments(
        self, event: FunctionToolCallArgumentsDeltaEvent, out: list[StreamChunk]
    ) -> None:
        # One event per fragment, in the chunk's order; the snapshot already holds the whole
        # chunk, so what this fragment added (its id, its name) is read from the fragment.
        wire = self._fragments.popleft()
        function = wire.function
        call_id = _string(wire.id, "a tool call id")
        name = _string(function.name if function else None, "a tool name")
        fragment = _string(event.arguments_delta, "tool arguments")
        call = self._calls.get(event.index)
        first = call is None
        if call is None:
            call = self._calls[event.index] = _Call(self._open("tool-call", event.index, out))
        call.id = call.id or call_id
        new_name = name if name and not call.named else None
        call.named = call.named or bool(name)
        if first or fragment or new_name:
            out.append(ToolCallDelta(call.block, call.id, fragment, name=new_name))

    def _open(self, kind: BlockType, position: int, out: list[StreamChunk]) -> int:
        index = len(self._kinds)
        self._kinds.append((kind, position))
        out.append(BlockStart(index, kind))
        return index


def _complete(
    kind: BlockType, position: int, index: int, message: ParsedChatCompletionMessage[object]
) -> Block:
    """A block as the final snapshot holds it."""
    if kind == "reasoning":
        return Reasoning(getattr(message, "reasoning_content", None) or "")
    if kind == "text":
        return Text(message.content or "")
    call = (message.tool_calls or [])[position]
    name, arguments = call.function.name or "", call.function.arguments or ""
    return ToolCall(call.id or f"call_{index}", name, arguments)
