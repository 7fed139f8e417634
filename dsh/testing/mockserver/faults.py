"""Fault scenarios: every HTTP error DeepSeek documents, with realistic bodies, and every way a
stream has been seen to break (``deepseek-wire.md`` §4.6, §5)."""

from __future__ import annotations

from dsh.testing.mockserver.scenario import CREATED, FINGERPRINT, Scenario, error_reply, reply
from dsh.testing.mockserver.wire import DONE_FRAME, KEEP_ALIVE, dumps, usage_json

__all__ = [
    "HTML_PAGE",
    "auth",
    "bad_request",
    "completion_200",
    "content_filter",
    "context_length",
    "disconnect",
    "empty",
    "empty_200",
    "error_event",
    "html_200",
    "insufficient_balance",
    "insufficient_resource",
    "json_error_200",
    "keep_alive_stall",
    "malformed_json",
    "missing_done",
    "overloaded",
    "queued",
    "queued_stall",
    "rate_limit",
    "server_error",
    "stall",
    "unknown_finish",
    "unprocessable",
]

PARTIAL_TEXT = "Partial answer"
#: What a gateway in front of the API answers with HTTP 200 when it has no stream to give.
HTML_PAGE = (
    "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway"
    "</h1><p>The upstream server did not answer.</p></body></html>"
)


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


def unknown_finish() -> Scenario:
    """A ``finish_reason`` the API does not document (a newer server, a gateway's own)."""
    return Scenario("unknown-finish", reply(text=PARTIAL_TEXT, finish="model_overheated").frames)


def queued(wait_s: float = 1.0, interval_s: float = 0.05) -> Scenario:
    """A queued request (rate-limit page): ``: keep-alive`` comments for ``wait_s`` before
    inference starts, then a whole answer. Not a stall: an adapter must wait for it."""
    keep_alives = (KEEP_ALIVE,) * max(1, round(wait_s / interval_s))
    answer = reply(text="Served after the queue.").frames
    return Scenario("queued", (*keep_alives, *answer), interval_s=interval_s)


def queued_stall(interval_s: float = 0.05) -> Scenario:
    """A request that stays queued: ``: keep-alive`` comments and never a data event (the API
    closes such a connection after 10 minutes)."""
    return Scenario("queued-stall", (), ending="keep-alive", interval_s=interval_s)


def json_error_200() -> Scenario:
    """HTTP 200 with a JSON error object instead of a stream (as some gateways answer)."""
    error = {
        "message": "Rate Limit Reached",
        "type": "rate_limit_reached_error",
        "param": None,
        "code": "rate_limit_reached_error",
    }
    return Scenario("json-error-200", body=dumps({"error": error}), event_stream=False)


def completion_200() -> Scenario:
    """HTTP 200 with a non-streamed ``chat.completion`` (a proxy that dropped ``stream``)."""
    message = {"role": "assistant", "content": PARTIAL_TEXT}
    completion = {
        "id": "8c1f2e3d-4b5a-4c6d-9e8f-7a6b5c4d3e2f",
        "object": "chat.completion",
        "created": CREATED,
        "model": "deepseek-flash",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
        "usage": usage_json(16, 4, reasoning=0),
        "system_fingerprint": FINGERPRINT,
    }
    return Scenario("completion-200", body=dumps(completion), event_stream=False)


def html_200() -> Scenario:
    """HTTP 200 with an HTML page (a captive portal or a gateway's error page)."""
    return Scenario("html-200", body=HTML_PAGE, content_type="text/html", event_stream=False)


def empty_200() -> Scenario:
    """HTTP 200 with an empty JSON-typed body."""
    return Scenario("empty-200", body="", event_stream=False)
