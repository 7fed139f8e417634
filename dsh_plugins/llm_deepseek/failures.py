"""HTTP answers and transport problems → :class:`LlmFailure` with a canonical code."""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import Mapping

from dsh.chunks import LlmFailure

__all__ = ["failure_code", "http_failure", "missing_key_failure", "retry_after_s"]

_CONTEXT_OVERFLOW = re.compile(r"context length|context window|maximum context", re.IGNORECASE)
_STATUS_CODES = {
    400: "INVALID_REQUEST",
    401: "AUTH",
    402: "INSUFFICIENT_BALANCE",
    403: "AUTH",
    413: "INVALID_REQUEST",
    422: "INVALID_REQUEST",
    429: "RATE_LIMIT",
}
_HINTS = {
    "AUTH": " (check DEEPSEEK_API_KEY or [llm_deepseek] api_key)",
    "INSUFFICIENT_BALANCE": " (top up the account at https://platform.deepseek.com)",
}
_REQUEST_ID_HEADERS = ("x-request-id", "x-deepseek-request-id", "request-id")


def failure_code(status: int, message: str) -> str:
    """The canonical code of an HTTP error status (the status wins over the body)."""
    if status == 400 and _CONTEXT_OVERFLOW.search(message):
        return "CONTEXT_WINDOW_EXCEEDED"
    if status >= 500:
        return "SERVER"
    return _STATUS_CODES.get(status, f"HTTP_{status}")


def body_message(body: bytes) -> str:
    """The error message of a response body: ``{"error": {"message": ...}}`` or plain text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, TypeError, KeyError):
        return text
    return str(message)


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` in seconds: a number of seconds or an HTTP date; ``None`` if absent or
    unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def http_failure(status: int, reason: str, headers: Mapping[str, str], body: bytes) -> LlmFailure:
    """The failure for a non-2xx answer."""
    message = body_message(body) or reason
    code = failure_code(status, message)
    return LlmFailure(
        message=f"DeepSeek answered HTTP {status}: {message}{_HINTS.get(code, '')}",
        code=code,
        status=status,
        retry_after_s=retry_after_s(headers.get("Retry-After")),
        request_id=next((headers[h] for h in _REQUEST_ID_HEADERS if h in headers), None),
    )


def missing_key_failure() -> LlmFailure:
    return LlmFailure(
        "no DeepSeek API key: set the DEEPSEEK_API_KEY environment variable (or api_key in the "
        "[llm_deepseek] config section), or run `dsh demo` to try dsh offline against the "
        "bundled mock server",
        "AUTH",
    )
