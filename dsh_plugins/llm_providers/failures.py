"""What went wrong, as canonical :class:`LlmFailure` codes: HTTP answers, the error objects
servers put in a stream (OpenAI, OpenRouter and vLLM each shape them differently), and the
finish reasons that are failures."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from dsh.plugin import LlmFailure

__all__ = [
    "error_object",
    "finish_failure",
    "http_failure",
    "not_a_stream",
    "request_id",
    "retry_after",
]

_OVERFLOW = re.compile(r"context length|context window|maximum context|too many tokens", re.I)
_STATUS = {
    400: "INVALID_REQUEST",
    401: "AUTH",
    402: "INSUFFICIENT_BALANCE",
    403: "AUTH",
    404: "INVALID_REQUEST",
    408: "TIMEOUT",
    413: "INVALID_REQUEST",
    422: "INVALID_REQUEST",
    429: "RATE_LIMIT",
}
# Words of an error ``type``/``code`` string → the canonical code; the first match wins.
_WORDS = (
    ("context_length", "CONTEXT_WINDOW_EXCEEDED"),
    ("auth", "AUTH"),
    ("permission", "AUTH"),
    ("quota", "INSUFFICIENT_BALANCE"),
    ("credit", "INSUFFICIENT_BALANCE"),
    ("rate_limit", "RATE_LIMIT"),
    ("timeout", "TIMEOUT"),
    ("invalid", "INVALID_REQUEST"),
    ("not_found", "INVALID_REQUEST"),
)
# OpenAI's, OpenRouter's (its generation id), DeepSeek's, then a gateway's; then LiteLLM's
# copies of its upstream's (prefixed ``llm_provider-``), then LiteLLM's own call id.
_UPSTREAM_ID = ("x-request-id", "x-generation-id", "x-ds-trace-id", "request-id")
_REQUEST_ID = (
    *_UPSTREAM_ID,
    *(f"llm_provider-{name}" for name in _UPSTREAM_ID),
    "x-litellm-call-id",
)
QUOTE = 200


def status_code(status: int, message: str) -> str:
    if status in (400, 413) and _OVERFLOW.search(message):
        return "CONTEXT_WINDOW_EXCEEDED"
    if status >= 500:
        return "SERVER"
    return _STATUS.get(status, f"HTTP_{status}")


def retry_after(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` in seconds, when it is a number (dates are rare on these APIs); behind
    LiteLLM, the upstream's as the proxy renames it (``llm_provider-retry-after``)."""
    value = (headers.get("Retry-After") or headers.get("llm_provider-retry-after") or "").strip()
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def request_id(headers: Mapping[str, str]) -> str | None:
    return next((headers[name] for name in _REQUEST_ID if name in headers), None)


def _message_of(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        return text[:QUOTE]
    found = error_fields(parsed)
    return str(found.get("message") or text[:QUOTE]) if found else text[:QUOTE]


def not_a_stream(
    provider: str, status: int, content_type: str, headers: Mapping[str, str], body: bytes
) -> LlmFailure:
    """An HTTP 2xx answer that is not an event stream: an error object sent with 200 is read
    as the error it is; anything else (a page, a non-streamed completion) is malformed."""
    text = body.decode("utf-8", "replace").strip()
    try:
        error = error_fields(json.loads(text))
    except ValueError:
        error = None
    if error is not None:
        found = error_object(provider, error)
        return LlmFailure(
            found.message, found.code, status, retry_after(headers), request_id(headers)
        )
    return LlmFailure(
        f"{provider} answered HTTP {status} with {content_type!r}, not an event stream: "
        f"{text[:QUOTE] or '(empty body)'}",
        "MALFORMED_RESPONSE",
        status,
        None,
        request_id(headers),
    )


def http_failure(provider: str, status: int, headers: Mapping[str, str], body: bytes) -> LlmFailure:
    """An answer with an error status."""
    message = _message_of(body) or "(empty body)"
    code = status_code(status, message)
    return LlmFailure(
        f"{provider} answered HTTP {status}: {message}",
        code,
        status,
        retry_after(headers),
        request_id(headers),
    )


def error_fields(payload: Any) -> dict[str, Any] | None:
    """The error a payload carries: ``{"error": {...}}`` (OpenAI, OpenRouter) or vLLM's
    ``{"object": "error", "message": ...}``; ``None`` when it is not an error."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict):
        return error
    if isinstance(error, str) and error:
        return {"message": error}
    if payload.get("object") == "error":
        return payload
    return None


def error_object(provider: str, error: Mapping[str, Any]) -> LlmFailure:
    """An error sent inside an HTTP 200 stream. OpenRouter's ``code`` is an HTTP status;
    OpenAI's ``type``/``code`` are words; vLLM's ``code`` is a status too, and LiteLLM's is a
    status as a string (``"429"``)."""
    message = str(error.get("message") or "no message")
    raw = error.get("code")
    status = _status_of(raw)
    if status is not None:
        code = status_code(status, message)
    else:
        said = f"{error.get('type')} {raw}".lower()
        code = next((c for word, c in _WORDS if word in said), "SERVER")
        if code == "INVALID_REQUEST" and _OVERFLOW.search(message):
            code = "CONTEXT_WINDOW_EXCEEDED"
    return LlmFailure(f"{provider} sent an error in the stream: {message}", code, status)


def _status_of(code: object) -> int | None:
    """An error ``code`` that names an HTTP status: an integer, or its digits as a string."""
    if isinstance(code, str) and len(code) == 3 and code.isascii() and code.isdigit():
        code = int(code)
    if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599:
        return code
    return None


def finish_failure(provider: str, reason: str) -> LlmFailure:
    """A finish reason that is a failure (``content_filter`` or one nobody documents)."""
    if reason == "insufficient_system_resource":
        return LlmFailure(f"{provider} ran out of resources for the answer", "SERVER")
    if reason == "content_filter":
        return LlmFailure(f"{provider}'s content filter stopped the answer", "CONTENT_FILTER")
    return LlmFailure(f"{provider} finished with an unknown reason {reason!r}", "UNKNOWN_FINISH")
