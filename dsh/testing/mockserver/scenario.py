"""What the mock server answers to one request: a :class:`Scenario`, and builders for them."""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from attrs import frozen

from dsh.testing.mockserver.wire import DONE_FRAME, ChunkStyle, dumps, usage_json
from dsh.values._value import Value

__all__ = ["CREATED", "FINGERPRINT", "Ending", "Scenario", "error_reply", "reply", "split_words"]

CREATED = 1786782779
FINGERPRINT = "a26a7955944dc5c60445bff77fac9c8e"

Ending = Literal["close", "disconnect", "stall", "keep-alive"]
"""After the frames: ``close`` ends the body normally; ``disconnect`` drops the connection;
``stall`` sends nothing more and keeps it open; ``keep-alive`` sends ``: keep-alive`` comments
every ``interval_s`` (or 10 ms) forever. The last two end when the server closes."""


@frozen(repr=False, eq=False)
class Scenario(Value):
    """One answer. A ``status`` other than 200, or ``event_stream=False``, answers ``body``
    with ``content_type`` (an HTTP 200 that is not an event stream: a JSON error, a
    non-streamed completion, an HTML page, an empty body). Otherwise ``frames`` (SSE text,
    ``[DONE]`` included when wanted; lone surrogates are sent as the raw bytes they escape,
    :func:`~dsh.testing.mockserver.wire.frame_bytes`) are streamed, each after ``interval_s``,
    then the ``ending`` happens. Non-streaming requests get the frames folded into one
    ``chat.completion`` object."""

    name: str
    frames: tuple[str, ...] = ()
    status: int = 200
    body: str = ""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    ending: Ending = "close"
    interval_s: float = 0.0
    event_stream: bool = True


def split_words(text: str | None) -> list[str]:
    """``text`` in word-sized pieces that join back to it exactly, as a model streams it."""
    return re.findall(r"\s*\S+|\s+", text or "")


def _pieces(arguments: str, size: int = 8) -> list[str]:
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def reply(
    *,
    model: str = "deepseek-v4-flash",
    reasoning: str | None = None,
    text: str | None = None,
    tool_calls: Sequence[tuple[str, str, str]] = (),
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
    prompt_tokens: int = 16,
    name: str = "reply",
) -> Scenario:
    """A V4-shaped streamed answer: reasoning (thinking mode when given), text, then tool calls
    ``(id, name, arguments_json)``, the finish chunk with usage, ``[DONE]``. ``finish`` defaults
    to ``tool_calls`` or ``stop``; ``usage`` defaults to an estimate from the lengths."""
    thinking = reasoning is not None
    arguments = "".join(call[2] for call in tool_calls)
    if usage is None:
        output = _tokens(f"{reasoning or ''}{text or ''}{arguments}") or 1
        reasoning_tokens = _tokens(reasoning or "") if thinking else None
        usage = usage_json(prompt_tokens, output, reasoning=reasoning_tokens)
    key = dumps([model, reasoning, text, list(tool_calls)])
    style = ChunkStyle(str(uuid.uuid5(uuid.NAMESPACE_URL, key)), model, CREATED, FINGERPRINT)
    first = {"role": "assistant", "content": None, "reasoning_content": ""}
    frames = [style.chunk(first if thinking else {"role": "assistant", "content": ""})]
    frames += [
        style.chunk({"content": None, "reasoning_content": piece})
        for piece in split_words(reasoning)
    ]
    frames += [
        style.chunk(
            {"content": piece, "reasoning_content": None} if thinking else {"content": piece}
        )
        for piece in split_words(text)
    ]
    for index, call in enumerate(tool_calls):
        frames += _tool_call_frames(style, index, *call)
    closing = {"content": "", "reasoning_content": None} if thinking else {"content": ""}
    frames.append(style.chunk(closing, finish or ("tool_calls" if tool_calls else "stop"), usage))
    frames.append(DONE_FRAME)
    return Scenario(name, tuple(frames))


def _tool_call_frames(
    style: ChunkStyle, index: int, call_id: str, name: str, arguments: str
) -> list[str]:
    head = {
        "index": index,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }
    frames = [style.chunk({"tool_calls": [head]})]
    frames += [
        style.chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        for piece in _pieces(arguments)
    ]
    return frames


def error_reply(
    status: int,
    message: str,
    *,
    error_type: str = "invalid_request_error",
    plain: bool = False,
    headers: Sequence[tuple[str, str]] = (),
    name: str = "error",
) -> Scenario:
    """An HTTP error: DeepSeek's ``{"error": {...}}`` body, or ``plain`` text as older 422s were."""
    if plain:
        return Scenario(
            name, status=status, body=message, content_type="text/plain", headers=tuple(headers)
        )
    error = {"message": message, "type": error_type, "param": None, "code": "invalid_request_error"}
    return Scenario(name, status=status, body=dumps({"error": error}), headers=tuple(headers))
