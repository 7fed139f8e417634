"""The Messages API's stream events → StreamChunks: one response's state machine.

Feed each event's decoded JSON to :meth:`EventTranslator.feed`; :attr:`EventTranslator.done`
turns true at ``message_stop``. Event by event:

* ``message_start``: its ``message.usage`` is the first usage (input and cache counts).
* ``content_block_start``: a ``text``, ``thinking`` or ``tool_use`` block opens a dsh block
  (``block-start``; a ``tool_use`` also gives a ``tool-call-delta`` with its id and name); a
  ``redacted_thinking`` block opens a reasoning block that stays empty and keeps its ``data``;
  other block types (server tools) are not dsh's and are skipped with their deltas.
* ``content_block_delta``: ``text_delta`` → ``text-delta``, ``thinking_delta`` →
  ``reasoning-delta``, ``input_json_delta`` → ``tool-call-delta`` (empty fragments send
  nothing), ``signature_delta`` → kept for the block's end (appended to the start's ``signature``; a
  start's ``"signature": ""`` is kept as an empty signature, not as none); other delta types
  are ignored.
* ``content_block_stop``: a ``tool_use`` that streamed no input gets its ``content_block_start``
  input (``{}``) as its one argument fragment, so the arguments are always JSON.
* ``message_delta``: ``stop_reason`` and the cumulative usage (counts it carries replace the
  ones before).
* ``message_stop``: ``block-end`` for every block in arrival order, then ``usage``, then
  ``finish``. Ends wait for it, as the OpenAI-format adapters' ends wait for ``[DONE]``, so the
  three built-in adapters give the same chunk sequence for the same content.
* ``ping``: nothing. ``error``: raises ``LlmError`` with the code of its ``error.type``.
  Unknown event types are ignored (the API may add some); anything after ``message_stop`` too.

dsh block indexes are assigned in arrival order; the wire's ``index`` only finds the block.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

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
from dsh_plugins.llm_anthropic.failures import error_type_code

__all__ = ["EventTranslator", "stop_reason", "usage_of"]

_KINDS: dict[str, BlockType] = {
    "text": "text",
    "thinking": "reasoning",
    "redacted_thinking": "reasoning",
    "tool_use": "tool-call",
}
#: Each streamed delta type → the field holding its piece.
_DELTA_FIELDS = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "input_json_delta": "partial_json",
}
_USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)
# Stop reasons that are not success → (code, what it means).
_FAILED_STOPS = {
    "refusal": ("CONTENT_FILTER", "the model refused"),
    "model_context_window_exceeded": (
        "CONTEXT_WINDOW_EXCEEDED",
        "the context window filled up while answering",
    ),
    "pause_turn": ("UNKNOWN_FINISH", "a server tool paused the turn; dsh offers none"),
}
_SIMPLE_STOPS: dict[str, FinishReason] = {
    "tool_use": FinishToolCalls(),
    "max_tokens": FinishMaxTokens(),
}


def usage_of(counts: dict[str, int]) -> TokenUsage:
    """Anthropic's counts are disjoint already: ``input_tokens`` excludes the cached reads and
    the cache writes. The API reports no separate reasoning count."""
    return TokenUsage(
        input_tokens=counts.get("input_tokens", 0),
        output_tokens=counts.get("output_tokens", 0),
        cache_read_tokens=counts.get("cache_read_input_tokens", 0),
        cache_write_tokens=counts.get("cache_creation_input_tokens", 0),
    )


def stop_reason(reason: str | None, has_content: bool) -> FinishReason:
    """Map a ``stop_reason``: ``end_turn`` and ``stop_sequence`` are a stop (``EMPTY_RESPONSE``
    when nothing was said), ``tool_use`` and ``max_tokens`` map to their finishes, ``refusal`` is
    ``CONTENT_FILTER``; any other reason is ``UNKNOWN_FINISH``. The message keeps the reason."""
    if reason in ("end_turn", "stop_sequence"):
        if has_content:
            return FinishStop()
        return FinishError(LlmFailure("the model returned an empty answer", "EMPTY_RESPONSE"))
    simple = _SIMPLE_STOPS.get(str(reason))
    if simple is not None:
        return simple
    code, meaning = _FAILED_STOPS.get(str(reason), ("UNKNOWN_FINISH", "a reason dsh does not know"))
    return FinishError(LlmFailure(f"the model stopped: {reason} ({meaning})", code))


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


class _Block:
    """One content block being streamed."""

    __slots__ = ("id", "index", "input", "kind", "name", "parts", "redacted", "signature")

    def __init__(self, index: int, kind: BlockType) -> None:
        self.index = index
        self.kind = kind
        self.parts: list[str] = []
        self.id = ""
        self.name = ""
        self.input = "{}"
        self.signature: str | None = None
        self.redacted = False

    def build(self) -> Block:
        joined = "".join(self.parts)
        if self.kind == "text":
            return Text(joined)
        if self.kind == "reasoning":
            return Reasoning(joined, self.signature, self.redacted)
        return ToolCall(self.id, self.name, joined)

    def has_content(self) -> bool:
        return self.kind == "tool-call" or any(self.parts)


class EventTranslator:
    """One response's translation state. Not reusable across responses."""

    def __init__(self) -> None:
        self._blocks: list[_Block] = []
        self._by_wire: dict[object, _Block | None] = {}
        self._counts: dict[str, int] = {}
        self._stop_reason: str | None = None
        self.done = False
        self._handlers: dict[str, Callable[[Any], list[StreamChunk]]] = {
            "message_start": self._message_start,
            "content_block_start": self._block_start,
            "content_block_delta": self._block_delta,
            "content_block_stop": self._block_stop,
            "message_delta": self._message_delta,
            "message_stop": self._message_stop,
            "error": _raise_error,
        }

    def feed(self, event: Any) -> list[StreamChunk]:
        """The chunks one event produces. Raises ``LlmError`` on a malformed event or an
        ``error`` event."""
        if self.done:
            return []
        try:
            handler = self._handlers.get(_string(event["type"]))
            return [] if handler is None else handler(event)
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            raise LlmError.of(
                "MALFORMED_RESPONSE",
                f"unexpected event from the Messages API ({exc}): {event!r:.200}",
            ) from exc

    def _message_start(self, event: Any) -> list[StreamChunk]:
        self._usage(event["message"].get("usage"))
        return []

    def _block_start(self, event: Any) -> list[StreamChunk]:
        wire = event["content_block"]
        kind = _KINDS.get(_string(wire["type"]))
        if kind is None:
            self._by_wire[event["index"]] = None
            return []
        block = _Block(len(self._blocks), kind)
        self._blocks.append(block)
        self._by_wire[event["index"]] = block
        out: list[StreamChunk] = [BlockStart(block.index, kind)]
        if wire["type"] == "redacted_thinking":
            block.redacted, block.signature = True, _string(wire["data"])
        elif kind == "tool-call":
            block.id, block.name = _string(wire["id"]), _string(wire["name"])
            block.input = json.dumps(wire.get("input") or {}, ensure_ascii=False)
            out.append(ToolCallDelta(block.index, block.id, "", name=block.name))
        else:
            # A start may carry text already (the API sends it empty); it is the first delta.
            first = _string(wire.get(wire["type"]) or "")
            # Present but empty is still a signature: gateways that make thinking out of
            # another format's reasoning send "" and no signature_delta, and want it back.
            signature = wire.get("signature")
            block.signature = None if signature is None else _string(signature)
            out += self._piece(block, first)
        return out

    def _block_delta(self, event: Any) -> list[StreamChunk]:
        block = self._by_wire[event["index"]]
        delta = event["delta"]
        kind = delta["type"]
        if block is None:
            return []
        if kind == "signature_delta":
            block.signature = (block.signature or "") + _string(delta["signature"])
            return []
        name = _DELTA_FIELDS.get(kind)
        return [] if name is None else self._piece(block, _string(delta[name]))

    def _piece(self, block: _Block, piece: str) -> list[StreamChunk]:
        if not piece:
            return []
        block.parts.append(piece)
        if block.kind == "text":
            return [TextDelta(block.index, piece)]
        if block.kind == "reasoning":
            return [ReasoningDelta(block.index, piece)]
        return [ToolCallDelta(block.index, block.id, piece)]

    def _block_stop(self, event: Any) -> list[StreamChunk]:
        block = self._by_wire[event["index"]]
        if block is not None and block.kind == "tool-call" and not block.parts:
            return self._piece(block, block.input)
        return []

    def _message_delta(self, event: Any) -> list[StreamChunk]:
        reason = event["delta"].get("stop_reason")
        if reason is not None:
            self._stop_reason = _string(reason)
        self._usage(event.get("usage"))
        return []

    def _usage(self, usage: Any) -> None:
        if not usage:
            return
        for name in _USAGE_FIELDS:
            value = usage.get(name)
            if value is not None:
                if not isinstance(value, int):
                    raise TypeError(f"usage {name} is not an integer")
                self._counts[name] = value

    def _message_stop(self, event: Any) -> list[StreamChunk]:
        if self._stop_reason is None:
            raise LlmError.of(
                "MALFORMED_RESPONSE", "the stream reached message_stop without a stop_reason"
            )
        self.done = True
        out: list[StreamChunk] = [BlockEnd(block.index, block.build()) for block in self._blocks]
        if self._counts:
            out.append(UsageChunk(usage_of(self._counts)))
        has_content = any(block.has_content() for block in self._blocks)
        out.append(Finish(stop_reason(self._stop_reason, has_content)))
        return out


def _raise_error(event: Any) -> list[StreamChunk]:
    """An ``error`` event: the API failed after the stream began (``overloaded_error`` under
    load). Raised, with the code of its type."""
    error = event.get("error")
    details = error if isinstance(error, dict) else {"message": str(error)}
    raise LlmError.of(
        error_type_code(str(details.get("type"))),
        f"the Messages API reported an error mid-stream: {details.get('type')}: "
        f"{details.get('message')}",
    )
