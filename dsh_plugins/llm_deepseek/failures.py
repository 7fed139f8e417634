"""HTTP answers and transport problems → :class:`LlmFailure` with a canonical code."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from dsh.plugin import LlmFailure, retry_after_s

__all__ = [
    "error_type_code",
    "failure_code",
    "http_failure",
    "missing_key_failure",
    "not_event_stream_failure",
    "request_id",
]

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
# DeepSeek sends x-ds-trace-id; the others are what gateways in front of it send.
_REQUEST_ID_HEADERS = ("x-ds-trace-id", "x-request-id", "x-deepseek-request-id", "request-id")
# An OpenAI-style error ``type`` (or ``code``) → the canonical code, first match wins.
_ERROR_TYPES = (
    ("auth", "AUTH"),
    ("permission", "AUTH"),
    ("balance", "INSUFFICIENT_BALANCE"),
    ("quota", "INSUFFICIENT_BALANCE"),
    ("rate_limit", "RATE_LIMIT"),
    ("server", "SERVER"),
    ("unavailable", "SERVER"),
    ("invalid_request", "INVALID_REQUEST"),
)
#: How much of an unexpected body a failure quotes.
QUOTE_CHARS = 200


def failure_code(status: int, message: str) -> str:
    """The canonical code of an HTTP error status (the status wins over the body)."""
    if status == 400 and _CONTEXT_OVERFLOW.search(message):
        return "CONTEXT_WINDOW_EXCEEDED"
    if status >= 500:
        return "SERVER"
    return _STATUS_CODES.get(status, f"HTTP_{status}")


def error_type_code(details: Mapping[str, object]) -> str:
    """The canonical code of an ``{"error": {...}}`` object sent with HTTP 200 (no status to
    go by): from its ``type``, else its ``code``; ``SERVER`` when neither says more."""
    said = [str(details.get(key)).lower() for key in ("type", "code")]
    found = (code for text in said for word, code in _ERROR_TYPES if word in text)
    code = next(found, "SERVER")
    if code == "INVALID_REQUEST" and _CONTEXT_OVERFLOW.search(str(details.get("message"))):
        return "CONTEXT_WINDOW_EXCEEDED"
    return code


def request_id(headers: Mapping[str, str]) -> str | None:
    """The id DeepSeek gives the request (``x-ds-trace-id``, else a gateway's request id)."""
    return next((headers[h] for h in _REQUEST_ID_HEADERS if h in headers), None)


def body_message(body: bytes) -> str:
    """The error message of a response body: ``{"error": {"message": ...}}`` or plain text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, TypeError, KeyError):
        return text
    return str(message)


def http_failure(status: int, reason: str, headers: Mapping[str, str], body: bytes) -> LlmFailure:
    """The failure for a non-2xx answer."""
    message = body_message(body) or reason
    code = failure_code(status, message)
    return LlmFailure(
        message=f"DeepSeek answered HTTP {status}: {message}{_HINTS.get(code, '')}",
        code=code,
        status=status,
        retry_after_s=retry_after_s(headers.get("Retry-After")),
        request_id=request_id(headers),
    )


def not_event_stream_failure(
    content_type: str, headers: Mapping[str, str], body: bytes
) -> LlmFailure:
    """The failure for an HTTP 200 whose body is not an event stream: a JSON ``error`` object
    keeps its message and gets the code its type says; anything else (a non-streamed
    completion, an HTML page, an empty body) is ``MALFORMED_RESPONSE`` quoting the body's
    start, so the server's words are not lost."""
    text = body.decode("utf-8", "replace").strip()
    try:
        error = json.loads(text)["error"]
    except (ValueError, TypeError, KeyError):
        error = None
    if error:
        details = error if isinstance(error, dict) else {"message": str(error)}
        return LlmFailure(
            message=f"DeepSeek answered HTTP 200: {details.get('message')}",
            code=error_type_code(details),
            status=200,
            request_id=request_id(headers),
        )
    start = text[:QUOTE_CHARS] if text else "(an empty body)"
    return LlmFailure(
        message=(
            f"DeepSeek answered HTTP 200 without an event stream: {content_type or 'no type'} "
            f"body {start}"
        ),
        code="MALFORMED_RESPONSE",
        status=200,
        request_id=request_id(headers),
    )


def missing_key_failure() -> LlmFailure:
    return LlmFailure(
        "no DeepSeek API key: set the DEEPSEEK_API_KEY environment variable, store one with "
        "`dsh keys set deepseek` (or set api_key in the [llm_deepseek] config section), or run "
        "`dsh demo` to try dsh offline against the bundled mock server",
        "AUTH",
    )
