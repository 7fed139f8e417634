"""Messages API answers and errors → :class:`LlmFailure` with a canonical code.

An error body is ``{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}``;
the ``error.type`` names the failure (``overloaded_error`` is HTTP 529, the API's "busy, retry").
The status wins over the body's type when both speak.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from dsh.plugin import LlmFailure, retry_after_s

__all__ = [
    "QUOTE_CHARS",
    "error_type_code",
    "http_failure",
    "missing_key_failure",
    "not_event_stream_failure",
    "request_id",
    "status_code",
]

#: How much of an unexpected body a failure quotes.
QUOTE_CHARS = 200
_CONTEXT_OVERFLOW = re.compile(
    r"prompt is too long|context length|context window|maximum context", re.IGNORECASE
)
_STATUS_CODES = {
    400: "INVALID_REQUEST",
    401: "AUTH",
    402: "INSUFFICIENT_BALANCE",
    403: "AUTH",
    404: "INVALID_REQUEST",
    413: "INVALID_REQUEST",
    422: "INVALID_REQUEST",
    429: "RATE_LIMIT",
}
_ERROR_TYPES = {
    "invalid_request_error": "INVALID_REQUEST",
    "authentication_error": "AUTH",
    "permission_error": "AUTH",
    "billing_error": "INSUFFICIENT_BALANCE",
    "not_found_error": "INVALID_REQUEST",
    "request_too_large": "INVALID_REQUEST",
    "rate_limit_error": "RATE_LIMIT",
    "timeout_error": "TIMEOUT",
    "api_error": "SERVER",
    "overloaded_error": "SERVER",
}
# Anthropic names the request in request-id; DeepSeek's endpoint in its trace id.
_UPSTREAM_ID_HEADERS = ("request-id", "x-request-id", "x-ds-trace-id")
# Behind LiteLLM: its copies of the upstream's ids (prefixed ``llm_provider-``), then its own.
_REQUEST_ID_HEADERS = (
    *_UPSTREAM_ID_HEADERS,
    *(f"llm_provider-{name}" for name in _UPSTREAM_ID_HEADERS),
    "x-litellm-call-id",
)


def status_code(status: int, message: str) -> str:
    """The canonical code of an HTTP error status (529 "overloaded" and every 5xx: SERVER)."""
    if status in (400, 413) and _CONTEXT_OVERFLOW.search(message):
        return "CONTEXT_WINDOW_EXCEEDED"
    if status >= 500:
        return "SERVER"
    return _STATUS_CODES.get(status, f"HTTP_{status}")


def error_type_code(error_type: str) -> str:
    """The canonical code of an ``error.type`` (an in-stream ``error`` event, or an error
    object sent with HTTP 200): ``SERVER`` for a type dsh does not know."""
    return _ERROR_TYPES.get(error_type, "SERVER")


def request_id(headers: Mapping[str, str], body: Any = None) -> str | None:
    """The request's id: the ``request-id`` header (or a gateway's), else the body's."""
    found = next((headers[h] for h in _REQUEST_ID_HEADERS if h in headers), None)
    if found is None and isinstance(body, dict) and isinstance(body.get("request_id"), str):
        return str(body["request_id"])
    return found


def _error_body(body: bytes) -> tuple[Any, dict[str, Any] | None]:
    """The decoded body and its ``error`` object (``None`` when it has none)."""
    try:
        decoded = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        return None, None
    error = decoded.get("error") if isinstance(decoded, dict) else None
    if error is None or error == {}:
        return decoded, None
    return decoded, error if isinstance(error, dict) else {"message": str(error)}


def http_failure(
    provider: str, status: int, reason: str, headers: Mapping[str, str], body: bytes
) -> LlmFailure:
    """The failure for a non-2xx answer."""
    decoded, error = _error_body(body)
    text = body.decode("utf-8", "replace").strip()
    message = str(error.get("message")) if error is not None else text or reason
    code = status_code(status, message)
    return LlmFailure(
        message=f"{provider} answered HTTP {status}: {message}",
        code=code,
        status=status,
        retry_after_s=retry_after_s(headers.get("Retry-After")),
        request_id=request_id(headers, decoded),
    )


def not_event_stream_failure(
    provider: str, content_type: str, headers: Mapping[str, str], body: bytes
) -> LlmFailure:
    """The failure for an HTTP 200 that is not an event stream: an error object keeps its
    message and gets the code of its type; anything else (a non-streamed message, an HTML page,
    an empty body) is ``MALFORMED_RESPONSE`` quoting the body's start."""
    decoded, error = _error_body(body)
    if error is not None:
        return LlmFailure(
            message=f"{provider} answered HTTP 200: {error.get('message')}",
            code=error_type_code(str(error.get("type"))),
            status=200,
            request_id=request_id(headers, decoded),
        )
    text = body.decode("utf-8", "replace").strip()
    start = text[:QUOTE_CHARS] if text else "(an empty body)"
    return LlmFailure(
        message=(
            f"{provider} answered HTTP 200 without an event stream: {content_type or 'no type'} "
            f"body {start}"
        ),
        code="MALFORMED_RESPONSE",
        status=200,
        request_id=request_id(headers, decoded),
    )


def missing_key_failure(provider: str, env_var: str, key_name: str, option: str) -> LlmFailure:
    return LlmFailure(
        f"no {provider} API key: set the {env_var} environment variable, store one with "
        f"`dsh keys set {key_name}`, or set {option} in the [llm_anthropic] config section",
        "AUTH",
    )
