"""How DeepSeek's wire looks: SSE frames, ``chat.completion.chunk`` payloads, usage objects."""

from __future__ import annotations

import json
import re
from typing import Any

from attrs import frozen

from dsh.values._value import Value

__all__ = [
    "DONE_FRAME",
    "KEEP_ALIVE",
    "LINE_END",
    "TRACE_ID_HEADER",
    "ChunkStyle",
    "data_frame",
    "dumps",
    "frame_bytes",
    "frame_data",
    "frame_payload",
    "payload_of",
    "usage_json",
]

DONE_FRAME = "data: [DONE]\n\n"
KEEP_ALIVE = ": keep-alive\n\n"
#: The response header in which DeepSeek names the request (its trace id).
TRACE_ID_HEADER = "x-ds-trace-id"


def frame_bytes(frames: str) -> bytes:
    """Frames as sent: UTF-8, with each lone surrogate (``"\\udce9"``) sent as the raw byte it
    escapes, so a scenario can carry the invalid UTF-8 a broken proxy sends."""
    return frames.encode("utf-8", "surrogateescape")


def dumps(payload: Any) -> str:
    """Compact JSON with raw UTF-8, exactly as DeepSeek writes it."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def data_frame(payload: Any) -> str:
    return f"data: {dumps(payload)}\n\n"


def usage_json(
    prompt: int, completion: int, *, hits: int = 0, reasoning: int | None = None
) -> dict[str, Any]:
    """A usage object in DeepSeek's field order; ``reasoning=None`` omits
    ``completion_tokens_details`` (as non-thinking V3.2 responses do)."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": hits},
    }
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    usage["prompt_cache_hit_tokens"] = hits
    usage["prompt_cache_miss_tokens"] = prompt - hits
    return usage


@frozen(repr=False, eq=False)
class ChunkStyle(Value):
    """The envelope of every chunk of one response. ``usage_null``: with
    ``stream_options.include_usage`` every chunk carries ``"usage": null`` until the last."""

    id: str
    model: str
    created: int
    fingerprint: str
    usage_null: bool = True

    def chunk(
        self,
        delta: dict[str, Any] | None,
        finish: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> str:
        """One ``data:`` frame; ``delta=None`` leaves the ``delta`` key out."""
        choice: dict[str, Any] = {"index": 0}
        if delta is not None:
            choice["delta"] = delta
        choice["logprobs"] = None
        choice["finish_reason"] = finish
        return self._frame([choice], usage)

    def usage_only(self, usage: dict[str, Any]) -> str:
        """The trailing usage-only chunk of the OpenAI ``include_usage`` contract."""
        return self._frame([], usage)

    def _frame(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None) -> str:
        payload: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": choices,
        }
        if usage is not None or self.usage_null:
            payload["usage"] = usage
        return data_frame(payload)


#: Where an SSE line ends: CR, LF or CRLF.
LINE_END = re.compile(r"\r\n|\r|\n")


def frame_data(frame: str) -> str | None:
    """The data of a one-event frame (``None``: no data lines: a comment, ``retry:``...)."""
    # SSE lines end only in CR, LF or CRLF (str.splitlines would also split at U+0085...).
    lines = [line for line in LINE_END.split(frame) if line.startswith("data:")]
    if not lines:
        return None
    return "\n".join(line[5:].removeprefix(" ") for line in lines)


def frame_payload(frame: str) -> Any:
    """The decoded JSON of a frame's data (``None``: no data, or not JSON)."""
    data = frame_data(frame)
    return None if data is None else payload_of(data)


def payload_of(data: str) -> Any:
    """``data`` decoded as JSON, ``None`` when it is not."""
    try:
        return json.loads(data)
    except ValueError:
        return None
