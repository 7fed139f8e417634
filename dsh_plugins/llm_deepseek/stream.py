"""The chunk translation state machine: DeepSeek ``chat.completion.chunk`` payloads → StreamChunks.

Feed each SSE payload (decoded JSON) to :meth:`ChunkTranslator.feed`, or a network read's
payloads (as sent) to :meth:`ChunkTranslator.translate`, and call :meth:`ChunkTranslator.done`
at ``[DONE]``. The whole machine, event by event:

* ``reasoning_content`` non-empty: open the reasoning block once (``block-start``), then
  ``reasoning-delta``.
* ``content`` non-empty: open the text block once (``block-start``), then ``text-delta``.
* ``tool_calls[i]`` with a new wire index: open a tool-call block (``block-start``), then a
  ``tool-call-delta`` with its id and name.
* ``tool_calls[i]`` with a known index: ``tool-call-delta`` with the argument fragment; an id or
  name only fills one still missing, never overwrites it.
* ``usage`` not null: remember it (the last one wins).
* ``finish_reason`` not null: remember it, after the ``delta`` of the same chunk.
* an ``error`` object: raise ``LlmError`` (a provider error mid-stream).
* ``[DONE]``: ``block-end`` for every block in arrival order, then ``usage``, then ``finish``.

Block indexes are assigned in arrival order. ``null``, absent and ``""`` all mean "no text", so the
empty ``reasoning_content`` of the first thinking chunk never opens a block. Ends, usage and finish
wait for ``[DONE]`` because DeepSeek may send usage after the finish chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from dsh.plugin import (
    Block,
    BlockEnd,
    BlockStart,
    BlockType,
    ChunkBatch,
    Deltas,
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

__all__ = ["ChunkTranslator", "finish_reason", "usage_from_wire"]

_SIMPLE_FINISHES: dict[str, FinishReason] = {
    "tool_calls": FinishToolCalls(),
    "length": FinishMaxTokens(),
}


def usage_from_wire(usage: dict[str, Any]) -> TokenUsage:
    """DeepSeek usage → the disjoint :class:`TokenUsage`: cache hits are taken out of the prompt
    count; reasoning tokens stay inside the output count."""
    prompt = usage.get("prompt_tokens") or 0
    hits = usage.get("prompt_cache_hit_tokens")
    if hits is None:
        hits = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return TokenUsage(
        input_tokens=prompt - hits,
        output_tokens=usage.get("completion_tokens") or 0,
        cache_read_tokens=hits,
        reasoning_tokens=reasoning,
    )


# Reasons that are not success → (code, what it means). ``insufficient_system_resource`` is the
# in-stream form of a 503, so it is SERVER (the retry plugin retries it).
_FAILED_FINISHES = {
    "insufficient_system_resource": ("SERVER", "DeepSeek ran out of inference resources"),
    "content_filter": ("CONTENT_FILTER", "the content filter stopped the answer"),
}


def finish_reason(reason: str, has_content: bool) -> FinishReason:
    """Map a wire ``finish_reason``. A ``stop`` without any block is ``EMPTY_RESPONSE``;
    ``insufficient_system_resource`` is ``SERVER``, ``content_filter`` is ``CONTENT_FILTER`` and
    any other reason ``UNKNOWN_FINISH``; the message keeps the raw reason."""
    if reason == "stop":
        if has_content:
            return FinishStop()
        return FinishError(LlmFailure("the model returned an empty completion", "EMPTY_RESPONSE"))
    simple = _SIMPLE_FINISHES.get(reason)
    if simple is not None:
        return simple
    code, meaning = _FAILED_FINISHES.get(reason, ("UNKNOWN_FINISH", "a reason dsh does not know"))
    return FinishError(LlmFailure(f"the model stopped: {reason} ({meaning})", code))


def _text(value: Any) -> str:
    """A wire text field: ``None`` is empty; anything but a string is malformed."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


class _Block:
    """A block being streamed: its index, kind and what arrived so far."""

    __slots__ = ("id", "index", "kind", "name", "parts")

    def __init__(self, index: int, kind: BlockType) -> None:
        self.index = index
        self.kind = kind
        self.parts: list[str] = []
        self.id = ""
        self.name = ""

    def build(self) -> Block:
        joined = "".join(self.parts)
        if self.kind == "text":
            return Text(joined)
        if self.kind == "reasoning":
            return Reasoning(joined)
        return ToolCall(self.id or f"call_{self.index}", self.name, joined)


class ChunkTranslator:
    """One response's translation state. Not reusable across responses."""

    def __init__(self) -> None:
        self._blocks: list[_Block] = []
        self._reasoning: _Block | None = None
        self._text: _Block | None = None
        self._tools: dict[object, _Block] = {}
        self._last_tool: object = None
        self._usage: TokenUsage | None = None
        self._finish_reason: str | None = None

    def feed(self, payload: Any) -> list[StreamChunk]:
        """The chunks one SSE payload produces. Raises ``LlmError`` on a malformed payload or a
        provider error object."""
        try:
            return self._payload(payload)
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            raise LlmError.of(
                "MALFORMED_RESPONSE", f"unexpected chunk from DeepSeek ({exc}): {payload!r:.200}"
            ) from exc

    def done(self) -> list[StreamChunk]:
        """The closing chunks, at ``[DONE]``: every block's end, the usage, the finish."""
        if self._finish_reason is None:
            raise LlmError.of("MALFORMED_RESPONSE", "the stream ended without a finish_reason")
        out: list[StreamChunk] = [BlockEnd(block.index, block.build()) for block in self._blocks]
        if self._usage is not None:
            out.append(UsageChunk(self._usage))
        out.append(Finish(finish_reason(self._finish_reason, bool(self._blocks))))
        return out

    def translate(
        self, payloads: Sequence[bytes | str], out: ChunkBatch, decode: Callable[[bytes | str], Any]
    ) -> None:
        """Append to ``out`` what :meth:`feed` gives for each of one read's ``payloads``
        (decoded by orjson, or by ``decode`` where orjson refuses one), in order, each run of
        text (or reasoning) deltas of one block as one :class:`Deltas`. Nearly every payload of
        a reply is one delta of a block already open and nothing else: such a payload is
        translated here, inline; any other goes through :meth:`feed`. A payload that fails
        leaves in ``out`` what those before it gave. :meth:`feed` is the reference
        (``tests/plugins/llm_deepseek/test_translate.py`` holds the two equal)."""
        loads, decode_error = orjson.loads, orjson.JSONDecodeError
        texts: list[str] = []  # the run at the end of ``out``: its texts and block
        block: _Block | None = None
        try:
            for payload in payloads:
                try:
                    data = loads(payload)
                except decode_error:
                    data = decode(payload)
                try:  # the common shape (anything else fails here, or below, and goes to feed)
                    choice = data["choices"][0]
                    delta = choice["delta"]
                    plain = (
                        data.get("usage") is None
                        and not data.get("error")
                        and choice.get("finish_reason") is None
                        and delta.__class__ is dict
                    )
                except (TypeError, KeyError, IndexError):
                    plain, delta = False, None
                if plain:
                    content = delta.get("content")
                    into: _Block | None = None
                    kind: type[TextDelta] | type[ReasoningDelta] = TextDelta
                    piece = content
                    if (
                        content
                        and content.__class__ is str
                        # a delta of text alone (DeepSeek's): nothing more to ask
                        and (
                            len(delta) == 1
                            or (
                                delta.get("reasoning_content") is None
                                and not delta.get("tool_calls")
                            )
                        )
                    ):
                        into = self._text
                    elif (
                        content is None
                        and (reasoning := delta.get("reasoning_content"))
                        and reasoning.__class__ is str
                        and not delta.get("tool_calls")
                    ):
                        into, kind, piece = self._reasoning, ReasoningDelta, reasoning
                    if into is not None:  # its block is open: the delta joins a run
                        if into is not block:
                            if block is not None:
                                block.parts += texts
                            block, texts = into, [piece]
                            out.append(Deltas(kind, into.index, texts))
                        else:
                            texts.append(piece)
                        continue
                if block is not None:
                    block.parts += texts
                    block = None
                out += self.feed(data)
        finally:
            if block is not None:
                block.parts += texts

    def _payload(self, payload: Any) -> list[StreamChunk]:
        error = payload.get("error")
        if error:
            raise _stream_error(error)
        usage = payload.get("usage")
        if usage is not None:
            self._usage = usage_from_wire(usage)
        out: list[StreamChunk] = []
        choices = payload.get("choices")
        if choices:
            choice = choices[0]
            delta = choice.get("delta")
            if delta:
                # Nearly every payload is one delta of text (or of reasoning): tested inline,
                # with _text's rule (None is empty, anything but a string is malformed).
                reasoning = delta.get("reasoning_content")
                if reasoning is not None:
                    if reasoning.__class__ is not str:
                        _text(reasoning)
                    if reasoning:
                        block = self._reasoning
                        if block is None:
                            block = self._reasoning = self._open("reasoning", out)
                        block.parts.append(reasoning)
                        out.append(ReasoningDelta(block.index, reasoning))
                content = delta.get("content")
                if content is not None:
                    if content.__class__ is not str:
                        _text(content)
                    if content:
                        block = self._text
                        if block is None:
                            block = self._text = self._open("text", out)
                        block.parts.append(content)
                        out.append(TextDelta(block.index, content))
                fragments = delta.get("tool_calls")
                if fragments:
                    for fragment in fragments:
                        self._tool_fragment(fragment, out)
            reason = choice.get("finish_reason")
            if reason is not None:
                self._finish_reason = _text(reason)
        return out

    def _tool_fragment(self, fragment: Any, out: list[StreamChunk]) -> None:
        function = fragment.get("function") or {}
        call_id = _text(fragment.get("id"))
        name = _text(function.get("name"))
        arguments = _text(function.get("arguments"))
        # Keyed by wire index; gateways that drop it are followed by id, else by the last call.
        key = fragment.get("index")
        if key is None:
            key = call_id or self._last_tool
        self._last_tool = key
        block = self._tools.get(key)
        opened = block is None
        if block is None:
            block = self._tools[key] = self._open("tool-call", out)
        new_name = name if name and not block.name else None
        block.id = block.id or call_id
        block.name = block.name or name
        block.parts.append(arguments)
        if opened or arguments or new_name:
            out.append(ToolCallDelta(block.index, block.id, arguments, name=new_name))

    def _open(self, kind: BlockType, out: list[StreamChunk]) -> _Block:
        block = _Block(len(self._blocks), kind)
        self._blocks.append(block)
        out.append(BlockStart(block.index, kind))
        return block


def _stream_error(error: Any) -> LlmError:
    """An OpenAI-style ``{"error": {...}}`` payload sent instead of a chunk."""
    details = error if isinstance(error, dict) else {"message": str(error)}
    code = "RATE_LIMIT" if "rate_limit" in str(details.get("type")) else "SERVER"
    return LlmError.of(code, f"DeepSeek reported an error mid-stream: {details.get('message')}")
