"""What the SDK raises, as :class:`LlmFailure` values with canonical codes.

This adapter never raises for a failed call: the adapter ends the stream with
``finish{error}`` carrying one of these. Imported with the SDK (see :mod:`.sdk`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

import openai

from dsh.plugin import LlmError, LlmFailure, retry_after_s
from dsh_plugins.llm_openai_sdk.framing import MissingDone

__all__ = [
    "QUOTE_CHARS",
    "broke_off",
    "request_failure",
    "request_id_of",
    "status_failure",
    "stream_failure",
    "unstreamed_failure",
]

_CONTEXT_OVERFLOW = re.compile(r"context (length|window)|maximum context", re.IGNORECASE)
# The SDK already sorts statuses into exception classes; the canonical code follows the class.
_CODE_OF_ERROR: tuple[tuple[type[openai.APIStatusError], str], ...] = (
    (openai.RateLimitError, "RATE_LIMIT"),
    (openai.AuthenticationError, "AUTH"),
    (openai.PermissionDeniedError, "AUTH"),
    (openai.BadRequestError, "INVALID_REQUEST"),
    (openai.UnprocessableEntityError, "INVALID_REQUEST"),
    (openai.InternalServerError, "SERVER"),
)
# Statuses DeepSeek documents that the SDK has no class for.
_CODE_OF_STATUS = {402: "INSUFFICIENT_BALANCE", 413: "INVALID_REQUEST"}
# An error object sent with HTTP 200 has no status to go by: the words of its ``type`` (else its
# ``code``) say which failure it is; the first word found wins, SERVER when none is.
_CODE_OF_WORD = {
    "auth": "AUTH",
    "permission": "AUTH",
    "balance": "INSUFFICIENT_BALANCE",
    "quota": "INSUFFICIENT_BALANCE",
    "rate_limit": "RATE_LIMIT",
    "server": "SERVER",
    "unavailable": "SERVER",
    "invalid_request": "INVALID_REQUEST",
}
_HINTS = {
    "AUTH": " (check DEEPSEEK_API_KEY or api_key in the [llm_openai_sdk] config section)",
    "INSUFFICIENT_BALANCE": " (top up the account at https://platform.deepseek.com)",
}
# DeepSeek names its requests with x-ds-trace-id; the others are what gateways send.
_REQUEST_ID_HEADERS = ("x-ds-trace-id", "x-request-id", "x-deepseek-request-id", "request-id")
_HTTP_STACK = frozenset({"httpx", "httpx2", "httpcore", "h11", "h2", "anyio"})
# What the stream helper raises on a chunk it cannot accumulate (after the decoder's reshaping,
# only a payload of the wrong types gets that far).
_SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, AssertionError)
#: How much of a body that is not an event stream a failure quotes.
QUOTE_CHARS = 200


def request_id_of(headers: Mapping[str, str]) -> str | None:
    """The id the server gave the request, for a support ticket: ``x-ds-trace-id``, else a
    gateway's request id."""
    return next((headers[name] for name in _REQUEST_ID_HEADERS if name in headers), None)


def _status_code(error: openai.APIStatusError, message: str) -> str:
    if isinstance(error, openai.BadRequestError) and _CONTEXT_OVERFLOW.search(message):
        return "CONTEXT_WINDOW_EXCEEDED"
    for error_class, code in _CODE_OF_ERROR:
        if isinstance(error, error_class):
            return code
    return _CODE_OF_STATUS.get(error.status_code, f"HTTP_{error.status_code}")


def _body_message(error: openai.APIStatusError) -> str:
    """DeepSeek's ``{"error": {"message": ...}}`` (the SDK keeps the inner object as
    ``body``), else the body as text, else the status line's reason."""
    body = error.body
    if isinstance(body, Mapping) and isinstance(body.get("message"), str):
        return str(body["message"])
    return error.response.text.strip() or error.response.reason_phrase


def status_failure(error: openai.APIStatusError) -> LlmFailure:
    """The failure of an HTTP error answer: its status, the body's message, ``Retry-After``
    and the request id."""
    message = _body_message(error)
    code = _status_code(error, message)
    headers = error.response.headers
    return LlmFailure(
        message=f"DeepSeek answered HTTP {error.status_code}: {message}{_HINTS.get(code, '')}",
        code=code,
        status=error.status_code,
        retry_after_s=retry_after_s(headers.get("retry-after")),
        request_id=request_id_of(headers),
    )


def _error_object(text: str) -> Mapping[str, object] | None:
    """The ``error`` of a JSON body ``{"error": ...}`` (a string becomes its message)."""
    try:
        error = json.loads(text)["error"]
    except (ValueError, TypeError, KeyError):
        return None
    if not error:
        return None
    return error if isinstance(error, Mapping) else {"message": str(error)}


def _code_of_error_object(details: Mapping[str, object]) -> str:
    said = (str(details.get(key)).lower() for key in ("type", "code"))
    code = next(
        (code for text in said for word, code in _CODE_OF_WORD.items() if word in text), "SERVER"
    )
    if code == "INVALID_REQUEST" and _CONTEXT_OVERFLOW.search(str(details.get("message"))):
        return "CONTEXT_WINDOW_EXCEEDED"
    return code


def unstreamed_failure(content_type: str, headers: Mapping[str, str], body: bytes) -> LlmFailure:
    """The failure of an HTTP 200 that is not an event stream. A JSON ``error`` object keeps
    its message, with the code its type says; any other body (a non-streamed completion, an
    HTML page, nothing) is ``MALFORMED_RESPONSE`` quoting its start."""
    text = body.decode("utf-8", "replace").strip()
    details = _error_object(text)
    if details is not None:
        message = f"DeepSeek answered HTTP 200: {details.get('message')}"
        code = _code_of_error_object(details)
    else:
        start = text[:QUOTE_CHARS] or "(an empty body)"
        message = (
            f"DeepSeek answered HTTP 200 without an event stream: {content_type or 'no type'} "
            f"body {start}"
        )
        code = "MALFORMED_RESPONSE"
    return LlmFailure(message, code, status=200, request_id=request_id_of(headers))


def _cause(error: BaseException) -> str:
    """What the HTTP stack said, behind the SDK's generic "Connection error."."""
    cause = error.__cause__ or error
    return f"{type(cause).__name__}: {cause}"


def _from_http_stack(error: BaseException) -> bool:
    """The SDK lets some errors of its HTTP stack escape unwrapped (one that breaks off while
    it reads an error body; older SDKs, any error of a started stream): tell them by the
    module that raised them."""
    return type(error).__module__.partition(".")[0] in _HTTP_STACK


def _timed_out(error: BaseException) -> bool:
    if isinstance(error, TimeoutError | openai.APITimeoutError):
        return True
    return _from_http_stack(error) and "Timeout" in type(error).__name__


def _connection_failed(error: BaseException) -> bool:
    return isinstance(error, openai.APIConnectionError) or _from_http_stack(error)


def broke_off(error: BaseException) -> bool:
    """Whether ``error`` is the connection failing or timing out (whichever layer raised it)."""
    return _timed_out(error) or _connection_failed(error)


def request_failure(error: Exception, url: str, timeout_s: float) -> LlmFailure | None:
    """The failure of a call that got no streaming answer; ``None`` if ``error`` is not one
    the SDK or its HTTP stack raises (a bug: let it propagate)."""
    if isinstance(error, openai.APIStatusError):
        return status_failure(error)
    if _timed_out(error):
        return LlmFailure(f"no answer from {url} within {timeout_s} s", "TIMEOUT")
    if _connection_failed(error):
        return LlmFailure(f"cannot reach DeepSeek at {url}: {_cause(error)}", "TRANSPORT")
    return None


def _error_event(error: openai.APIError) -> LlmFailure:
    """An OpenAI-style ``{"error": {...}}`` payload in the stream (the SDK raises on it)."""
    body = error.body
    details = body if isinstance(body, Mapping) else {"message": body}
    kind = str(details.get("type"))
    code = "RATE_LIMIT" if "rate_limit" in kind else "SERVER"
    return LlmFailure(f"DeepSeek reported an error mid-stream: {details.get('message')}", code)


def stream_failure(error: Exception, idle_timeout_s: float) -> LlmFailure | None:
    """The failure of a stream that broke after the answer started; ``None`` if ``error`` is
    not a stream failure (a bug: let it propagate)."""
    if isinstance(error, LlmError):
        return error.failure
    if _timed_out(error):
        return LlmFailure(f"the stream made no progress for {idle_timeout_s} s", "TIMEOUT")
    if _connection_failed(error):
        return LlmFailure(f"the connection broke before [DONE]: {_cause(error)}", "STREAM_CLOSED")
    if isinstance(error, MissingDone):
        return LlmFailure("the stream ended without [DONE]", "STREAM_CLOSED")
    if isinstance(error, json.JSONDecodeError):
        return LlmFailure(
            f"DeepSeek sent an event that is not JSON: {error.doc:.200}", "MALFORMED_RESPONSE"
        )
    if isinstance(error, openai.APIError):
        return _error_event(error)
    if isinstance(error, _SHAPE_ERRORS):
        return LlmFailure(f"unexpected chunk from DeepSeek: {error}", "MALFORMED_RESPONSE")
    return None
