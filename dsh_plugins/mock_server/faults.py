"""Fault scenarios: every HTTP error DeepSeek documents, with realistic bodies, and every way a
stream has been seen to break (``deepseek-wire.md`` §4.6, §5)."""

from __future__ import annotations

from dsh_plugins.mock_server.scenario import Scenario, error_reply, reply
from dsh_plugins.mock_server.wire import DONE_FRAME, dumps

__all__ = [
    "auth",
    "bad_request",
    "content_filter",
    "context_length",
    "disconnect",
    "empty",
    "error_event",
    "insufficient_balance",
    "insufficient_resource",
    "keep_alive_stall",
    "malformed_json",
    "missing_done",
    "overloaded",
    "rate_limit",
    "server_error",
    "stall",
    "unprocessable",
]

PARTIAL_TEXT = "Partial answer"


def _partial() -> tuple[str, ...]:
    """The frames of a text answer up to (not including) its finish chunk."""
    frames = reply(text=PARTIAL_TEXT).frames
    return frames[:-2]


def bad_request() -> Scenario:
    return error_reply(
        400,
        "Failed to deserialize the JSON body into the target type: messages[1]: invalid type: "
        "sequence, expected a string at line 1 column 45",
        name="bad-request",
    )


def context_length() -> Scenario:
    return error_reply(
        400,
        "This model's maximum context length is 131072 tokens. However, you requested 131134 "
        "tokens (122942 in the messages, 8192 in the completion). Please reduce the length of "
        "the messages or completion.",
        name="context-length",
    )


def auth() -> Scenario:
    return error_reply(
        401,
        'Authentication Fails, Your api key: ****18b" is invalid',
        error_type="authentication_error",
        name="auth",
    )


def insufficient_balance() -> Scenario:
    return error_reply(
        402, "Insufficient Balance", error_type="unknown_error", name="insufficient-balance"
    )


def unprocessable() -> Scenario:
    return error_reply(
        422,
        "Failed to deserialize the JSON body into the target type: missing field `messages` at "
        "line 4 column 1",
        plain=True,
        name="unprocessable",
    )


def rate_limit(retry_after: str = "2") -> Scenario:
    return error_reply(
        429,
        "Rate Limit Reached",
        error_type="rate_limit_reached_error",
        headers=[("Retry-After", retry_after)],
        name="rate-limit",
    )


def server_error() -> Scenario:
    return error_reply(500, "Internal Server Error", error_type="server_error", name="server-error")


def overloaded() -> Scenario:
    return error_reply(
        503,
        "Server overloaded, please try again later.",
        error_type="service_unavailable_error",
        name="overloaded",
    )


def disconnect() -> Scenario:
    """Part of an answer, then the connection drops (an incomplete chunked body)."""
    return Scenario("disconnect", _partial(), ending="disconnect")


def stall() -> Scenario:
    """Part of an answer, then silence with the connection left open."""
    return Scenario("stall", _partial(), ending="stall")


def keep_alive_stall(interval_s: float = 0.01) -> Scenario:
    """Part of an answer, then ``: keep-alive`` comments forever and never another chunk."""
    return Scenario("keep-alive-stall", _partial(), ending="keep-alive", interval_s=interval_s)


def malformed_json() -> Scenario:
    """Part of an answer, then a chunk cut off in the middle of its JSON."""
    broken = (
        'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"con\n\n'
    )
    return Scenario("malformed-json", (*_partial(), broken, DONE_FRAME))


def missing_done() -> Scenario:
    """A whole answer whose body ends cleanly without ``[DONE]``."""
    return Scenario("missing-done", reply(text=PARTIAL_TEXT).frames[:-1])


def empty() -> Scenario:
    """``finish_reason: stop`` with no content at all."""
    return Scenario("empty", reply(text="").frames)


def content_filter() -> Scenario:
    return Scenario("content-filter", reply(text=PARTIAL_TEXT, finish="content_filter").frames)


def insufficient_resource() -> Scenario:
    frames = reply(reasoning="Thinking hard", finish="insufficient_system_resource").frames
    return Scenario("insufficient-resource", frames)


def error_event() -> Scenario:
    """Part of an answer, then an OpenAI-style error object as a ``data:`` payload."""
    error = {
        "message": "The server had an error while processing your request.",
        "type": "server_error",
        "param": None,
        "code": "server_error",
    }
    return Scenario("error-event", (*_partial(), f"data: {dumps({'error': error})}\n\n"))
