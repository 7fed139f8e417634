"""HTTP answers and error bodies → canonical failure codes."""

from __future__ import annotations

import json

import pytest

from dsh_plugins.llm_anthropic.failures import (
    error_type_code,
    http_failure,
    not_event_stream_failure,
    request_id,
    status_code,
)


def error(kind: str, message: str, **extra: object) -> bytes:
    return json.dumps(
        {"type": "error", "error": {"type": kind, "message": message}, **extra}
    ).encode()


@pytest.mark.parametrize(
    ("status", "message", "code"),
    [
        (400, "messages: text content blocks must be non-empty", "INVALID_REQUEST"),
        (400, "prompt is too long: 210000 tokens > 200000 maximum", "CONTEXT_WINDOW_EXCEEDED"),
        (413, "request exceeds the maximum context window", "CONTEXT_WINDOW_EXCEEDED"),
        (401, "invalid x-api-key", "AUTH"),
        (402, "Insufficient Balance", "INSUFFICIENT_BALANCE"),
        (403, "permission", "AUTH"),
        (404, "model: not found", "INVALID_REQUEST"),
        (429, "rate limited", "RATE_LIMIT"),
        (500, "Internal", "SERVER"),
        (529, "Overloaded", "SERVER"),
        (418, "teapot", "HTTP_418"),
    ],
)
def test_status_codes(status: int, message: str, code: str) -> None:
    assert status_code(status, message) == code


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        ("invalid_request_error", "INVALID_REQUEST"),
        ("authentication_error", "AUTH"),
        ("permission_error", "AUTH"),
        ("billing_error", "INSUFFICIENT_BALANCE"),
        ("not_found_error", "INVALID_REQUEST"),
        ("request_too_large", "INVALID_REQUEST"),
        ("rate_limit_error", "RATE_LIMIT"),
        ("timeout_error", "TIMEOUT"),
        ("api_error", "SERVER"),
        ("overloaded_error", "SERVER"),
        ("unheard_of_error", "SERVER"),
    ],
)
def test_error_types(kind: str, code: str) -> None:
    assert error_type_code(kind) == code


def test_529_overloaded_keeps_message_retry_after_and_request_id() -> None:
    failure = http_failure(
        "Anthropic",
        529,
        "",
        {"Retry-After": "7", "request-id": "req_011"},
        error("overloaded_error", "Overloaded"),
    )
    assert (failure.code, failure.status, failure.retry_after_s) == ("SERVER", 529, 7.0)
    assert failure.request_id == "req_011"
    assert failure.message == "Anthropic answered HTTP 529: Overloaded"


def test_the_request_id_falls_back_on_the_body_and_on_deepseek_trace_ids() -> None:
    assert request_id({}, {"request_id": "req_body"}) == "req_body"
    assert request_id({"x-ds-trace-id": "ds-1"}, {"request_id": "req_body"}) == "ds-1"
    assert request_id({}, {"request_id": 5}) is None
    # Behind LiteLLM: its copy of the upstream's id, else its own call id.
    assert request_id({"llm_provider-request-id": "up-1", "x-litellm-call-id": "c"}) == "up-1"
    assert request_id({"x-litellm-call-id": "c-1"}, {"request_id": "b"}) == "c-1"
    assert request_id({}, ["not", "an", "object"]) is None


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"upstream gone", "upstream gone"),
        (b"", "Bad Gateway"),
        (b'{"error": "just a string"}', "just a string"),
        (b'{"error": {}}', '{"error": {}}'),
        (b"[1, 2]", "[1, 2]"),
    ],
)
def test_bodies_that_are_not_error_objects_are_quoted(body: bytes, says: str) -> None:
    failure = http_failure("Anthropic", 502, "Bad Gateway", {}, body)
    assert failure.message == f"Anthropic answered HTTP 502: {says}"
    assert failure.code == "SERVER"


def test_an_error_object_with_http_200_gets_the_code_of_its_type() -> None:
    failure = not_event_stream_failure(
        "DeepSeek", "application/json", {}, error("rate_limit_error", "slow down", request_id="r")
    )
    assert (failure.code, failure.status, failure.request_id) == ("RATE_LIMIT", 200, "r")
    assert failure.message == "DeepSeek answered HTTP 200: slow down"


@pytest.mark.parametrize(
    ("content_type", "body", "says"),
    [
        ("text/html", b"<html>portal</html>", "text/html body <html>portal</html>"),
        ("", b"", "no type body (an empty body)"),
    ],
)
def test_anything_else_with_http_200_is_malformed(
    content_type: str, body: bytes, says: str
) -> None:
    failure = not_event_stream_failure("Anthropic", content_type, {}, body)
    assert failure.code == "MALFORMED_RESPONSE"
    assert failure.message.endswith(says)
