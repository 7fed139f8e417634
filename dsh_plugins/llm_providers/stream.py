"""Chat-completion chunk payloads → StreamChunks.

Blocks come in the order the wire opens them: reasoning (from the provider's
``reasoning_field``), text, then tool calls, which may interleave by their wire ``index``. A
block ends when a block of another kind starts or the stream ends. The finish reason and the
usage may come in either order (OpenAI sends usage in a last chunk with no choices, after the
finish; llama.cpp sends it with the finish), so both are emitted at ``[DONE]``: usage, then
finish. An error object in the stream (OpenRouter, vLLM) ends it with ``finish{error}``.

Streamed ``refusal`` text (OpenAI's ``delta.refusal``) is the assistant's text too, and the
stream then ends ``CONTENT_FILTER`` with that text in the failure's message, whatever the finish
reason said. With a ``passback`` field (a gateway's signed reasoning blocks: LiteLLM's
``thinking_blocks``, OpenRouter's ``reasoning_details``) the streamed fragments of each block
(by its ``index``) are joined — text, thinking, summary, signature and data appended, other
fields kept from the first — and the first reasoning block ends at ``[DONE]`` carrying them as
``Reasoning.provider_data`` (a reasoning block of its own when no reasoning text came).
"""

from __future__ import annotations

import json
from typing import Any

from dsh.plugin import (
    BlockEnd,
    BlockStart,
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
from dsh_plugins.llm_providers.config import ReasoningField, ReasoningPassback
from dsh_plugins.llm_providers.failures import error_fields, error_object, finish_failure

__all__ = ["Translator", "usage_of"]

_FINISHES: dict[str, FinishReason] = {
    "stop": FinishStop(),
    "tool_calls": FinishToolCalls(),
    "function_call": FinishToolCalls(),
    "length": FinishMaxTokens(),
}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def usage_of(wire: dict[str, Any], cached_tokens: bool) -> TokenUsage:
    """Disjoint counts from an OpenAI ``usage`` object: cached tokens are inside
    ``prompt_tokens`` there, and reasoning tokens inside ``completion_tokens``."""
    prompt, output = _count(wire.get("prompt_tokens")), _count(wire.get("completion_tokens"))
    details = wire.get("prompt_tokens_details") if cached_tokens else None
    details = details if isinstance(details, dict) else {}
    read = min(_count(details.get("cached_tokens")), prompt)
    written = min(_count(details.get("cache_write_tokens")), prompt - read)
    completion = wire.get("completion_tokens_details")
    reasoning = _count(completion.get("reasoning_tokens")) if isinstance(completion, dict) else 0
    return TokenUsage(prompt - read - written, output, read, written, min(reasoning, output))


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


#: The fields of a reasoning block's streamed fragments that are pieces of one value.
_JOINED = ("thinking", "text", "summary", "signature", "data")


def _merge(block: dict[str, Any], fragment: dict[str, Any]) -> None:
    """One streamed fragment of a gateway's reasoning block into the block so far."""
    for key, value in fragment.items():
        held = block.get(key)
        if key in _JOINED and isinstance(held, str) and isinstance(value, str):
            block[key] = held + value
        elif held is None:
            block[key] = value


class _Call:
    __slots__ = ("arguments", "id", "index", "name")

    def __init__(self, index: int, call_id: str, name: str) -> None:
        self.index, self.id, self.name = index, call_id, name
        self.arguments: list[str] = []


class Translator:
    """One stream's state. ``feed`` each parsed event, then ``done`` at ``[DONE]``."""

    def __init__(
        self,
        provider: str,
        reasoning_field: ReasoningField,
        cached_tokens: bool = True,
        passback: ReasoningPassback = "none",
    ) -> None:
        self._provider = provider
        self._fields: tuple[str, ...] = {
            "reasoning_content": ("reasoning_content",),
            "reasoning": ("reasoning",),
            "auto": ("reasoning_content", "reasoning"),
            "none": (),
        }[reasoning_field]
        self._cached_tokens = cached_tokens
        self._next = 0
        self._open: tuple[str, int] | None = None  # the open reasoning or text block
        self._parts: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None
        self._refusal: list[str] = []
        self._passback = None if passback == "none" else passback
        self._details: dict[object, dict[str, Any]] = {}
        self._held: tuple[int, str] | None = None  # the first reasoning block, ended at [DONE]
        self.failed = False

    def feed(self, payload: Any) -> list[StreamChunk]:
        """The chunks one event's payload makes (nothing once the stream failed)."""
        if self.failed:
            return []
        error = error_fields(payload)
        if error is not None:
            self.failed = True
            return [Finish(FinishError(error_object(self._provider, error)))]
        if not isinstance(payload, dict):
            raise LlmError.of(
                "MALFORMED_RESPONSE",
                f"{self._provider} sent an event that is not a JSON object: {payload!r:.200}",
            )
        out: list[StreamChunk] = []
        usage = payload.get("usage")
        if isinstance(usage, dict):
            self._usage = usage_of(usage, self._cached_tokens)
        choices = payload.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            self._choice(choices[0], out)
        return out

    def done(self) -> list[StreamChunk]:
        """What ends the stream: open blocks end, then usage, then the finish."""
        if self.failed:
            return []
        out = self._close_open() + self._end_held() + self._close_calls()
        if self._usage is not None:
            out.append(UsageChunk(self._usage))
        finish = self._finish
        if self._refusal:
            failure = LlmFailure(
                f"{self._provider} refused: {''.join(self._refusal)}", "CONTENT_FILTER"
            )
            finish = FinishError(failure)
        elif finish is None:
            failure = LlmFailure(
                f"{self._provider} ended the stream ([DONE]) without a finish reason",
                "MALFORMED_RESPONSE",
            )
            finish = FinishError(failure)
        out.append(Finish(finish))
        return out

    # -- one choice --------------------------------------------------------------------------
    def _choice(self, choice: dict[str, Any], out: list[StreamChunk]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = next(
                (t for f in self._fields if isinstance(t := delta.get(f), str) and t), ""
            )
            if reasoning:
                self._stream_text("reasoning", reasoning, out)
            self._reasoning_blocks(delta.get(self._passback) if self._passback else None)
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._stream_text("text", content, out)
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                self._refusal.append(refusal)
                self._stream_text("text", refusal, out)
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                for call in calls:
                    if isinstance(call, dict):
                        self._tool_call(call, out)
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason and self._finish is None:
            known = _FINISHES.get(reason)
            if reason == "error":
                self.failed = True
                failure = error_object(self._provider, choice.get("error") or {})
                out.append(Finish(FinishError(failure)))
            else:
                self._finish = known or FinishError(finish_failure(self._provider, reason))

    def _stream_text(self, kind: str, text: str, out: list[StreamChunk]) -> None:
        if self._open is None or self._open[0] != kind:
            out += self._close_open()
            self._open = (kind, self._next)
            self._next += 1
            out.append(BlockStart(self._open[1], "reasoning" if kind == "reasoning" else "text"))
        index = self._open[1]
        self._parts.append(text)
        out.append(ReasoningDelta(index, text) if kind == "reasoning" else TextDelta(index, text))

    def _reasoning_blocks(self, fragments: Any) -> None:
        if not isinstance(fragments, list):
            return
        for position, fragment in enumerate(fragments):
            if isinstance(fragment, dict):
                key = fragment.get("index", position)
                _merge(self._details.setdefault(key, {}), fragment)

    def _close_open(self) -> list[StreamChunk]:
        if self._open is None:
            return []
        kind, index = self._open
        text = "".join(self._parts)
        self._open, self._parts = None, []
        if kind == "text":
            return [BlockEnd(index, Text(text))]
        if self._passback is not None and self._held is None:
            self._held = (index, text)  # its blocks may still be streaming: it ends at [DONE]
            return []
        return [BlockEnd(index, Reasoning(text))]

    def _end_held(self) -> list[StreamChunk]:
        """The first reasoning block's end, with the gateway's reasoning blocks."""
        out: list[StreamChunk] = []
        if self._held is None and self._details:
            self._held = (self._next, "")
            self._next += 1
            out.append(BlockStart(self._held[0], "reasoning"))
        if self._held is not None:
            index, text = self._held
            data = json.dumps(list(self._details.values())) if self._details else None
            out.append(BlockEnd(index, Reasoning(text, provider_data=data)))
        return out

    def _tool_call(self, wire: dict[str, Any], out: list[StreamChunk]) -> None:
        position = wire.get("index")
        position = position if isinstance(position, int) else len(self._calls)
        function = wire.get("function")
        function = function if isinstance(function, dict) else {}
        name = _string(function.get("name")) or None
        arguments = _string(function.get("arguments"))
        call = self._calls.get(position)
        if call is None:
            out += self._close_open()
            call_id = _string(wire.get("id")) or f"call-{self._next}"
            call = _Call(self._next, call_id, name or "")
            self._next += 1
            self._calls[position] = call
            out.append(BlockStart(call.index, "tool-call"))
            out.append(ToolCallDelta(call.index, call.id, arguments, call.name or None))
        elif name and not call.name:
            call.name = name
            out.append(ToolCallDelta(call.index, call.id, arguments, name))
        elif arguments:
            out.append(ToolCallDelta(call.index, call.id, arguments))
        if arguments:
            call.arguments.append(arguments)

    def _close_calls(self) -> list[StreamChunk]:
        out: list[StreamChunk] = [
            BlockEnd(call.index, ToolCall(call.id, call.name, "".join(call.arguments)))
            for call in self._calls.values()
        ]
        self._calls.clear()
        return out
