"""The mock server's Messages endpoint: the same scenarios in the Messages format, the checks
the API makes (thinking blocks and signatures passed back included), non-streamed answers."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from dsh.llm._sse import parse_sse
from dsh.testing.mockserver import MockServer, Scenario, error_reply, reply
from dsh.testing.mockserver.anthropic import encode, message_json, signature_of
from dsh.testing.mockserver.anthropic_checks import openai_body, served_model
from dsh.testing.mockserver.wire import KEEP_ALIVE

from .conftest import Post

PATH = "/anthropic/v1/messages"
KEY = {"x-api-key": "k"}
USER = {"role": "user", "content": "hi"}


def messages(*turns: Any, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "deepseek-flash",
        "max_tokens": 4096,
        "messages": list(turns) or [USER],
        "stream": True,
    }
    body.update(fields)
    return body


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(event.data) for event in parse_sse(text.encode())]


def error_of(text: str) -> dict[str, Any]:
    body = json.loads(text)
    assert body["type"] == "error"
    error: dict[str, Any] = body["error"]
    return error


THINKING = {"type": "enabled", "budget_tokens": 1024}
NO_KEY = "an x-api-key or Authorization: Bearer header is required"


def tool_turn(*first: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        USER,
        {
            "role": "assistant",
            "content": [*first, {"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
        },
    ]


async def test_a_scripted_answer_in_the_messages_format(post: Post) -> None:
    answer = await post(messages(thinking=THINKING), path=PATH, headers=KEY)
    assert answer.status == 200
    assert answer.headers["request-id"] == "mock-1"
    kinds = [event["type"] for event in events(answer.text)]
    assert kinds[:2] == ["message_start", "ping"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    stream = events(answer.text)
    thinking = "".join(
        e["delta"].get("thinking", "") for e in stream if e["type"] == "content_block_delta"
    )
    signature = next(
        e["delta"]["signature"]
        for e in stream
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "signature_delta"
    )
    assert signature == signature_of(thinking)


async def test_claude_names_are_served_by_deepseek_models(post: Post) -> None:
    answer = await post(messages(model="claude-opus-5"), path=PATH, headers=KEY)
    assert events(answer.text)[0]["message"]["model"] == "deepseek-v4-pro"
    assert served_model("claude-sonnet-5") == "deepseek-flash"
    assert served_model("deepseek-v4-flash") == "deepseek-flash"


async def test_the_root_path_is_anthropics(post: Post) -> None:
    answer = await post(messages(), path="/v1/messages", headers=KEY)
    assert answer.status == 200


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (["not", "an", "object"], "must be a JSON object"),
        ({"model": "deepseek-flash", "messages": [USER]}, "max_tokens: Field required"),
        (messages(max_tokens=0), "max_tokens: Input should be"),
        (messages(max_tokens=True), "max_tokens: Input should be"),
        (messages(model="gpt-5"), "'gpt-5' is not a supported model"),
        (messages(thinking={"type": "sometimes"}), "thinking.type"),
        (messages(tools=[{"name": "f"}]), "tools.0.input_schema: Field required"),
        (messages(tools=["f"]), "tools.0.input_schema: Field required"),
        (
            messages(tool_choice={"type": "any"}, thinking=THINKING),
            "tool_choice forces tool use",
        ),
        (messages(messages=[]), "at least one message"),
        (messages({"role": "system", "content": "x"}), "messages.0.role"),
        (messages("just a string"), "messages.0.role"),
        (messages({"role": "user", "content": [{"type": "tool_use"}]}), "unexpected block type"),
        (messages({"role": "user", "content": ["text"]}), "unexpected block type"),
        (messages({"role": "user", "content": ""}), "must be non-empty"),
        (
            messages(
                *tool_turn()[:2],
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                thinking={"type": "disabled"},
            ),
            "ids were found without `tool_result` blocks immediately after: t1",
        ),
        (
            messages(
                USER,
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]},
            ),
            "unexpected `tool_use_id` found in `tool_result` blocks: x",
        ),
        (
            messages(
                *tool_turn()[:2],
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "first"},
                        {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                    ],
                },
                thinking={"type": "disabled"},
            ),
            "`tool_result` blocks must come first",
        ),
        (messages(*tool_turn()), "must be passed back to the API"),
        (messages(*tool_turn(), thinking=THINKING), "must be passed back to the API"),
        (
            messages(*tool_turn({"type": "redacted_thinking", "data": "ENC"})),
            "`redacted_thinking` content is not supported",
        ),
        (
            messages({"role": "user", "content": [{"type": "image", "source": {}}]}),
            "messages.0.content.0: `image` content is not supported",
        ),
        (
            messages(*tool_turn({"type": "thinking", "thinking": "hm", "signature": "x"})),
            "Invalid `signature` in `thinking` block",
        ),
        (
            messages(*tool_turn({"type": "thinking", "thinking": "hm"})),
            "Invalid `signature` in `thinking` block",
        ),
        (messages({"role": "assistant", "content": []}, thinking=THINKING), None),
    ],
)
async def test_the_checks_the_api_makes(post: Post, body: Any, says: str | None) -> None:
    answer = await post(body, path=PATH, headers=KEY)
    if says is None:
        assert answer.status == 200
        return
    assert answer.status == 400, answer.text
    error = error_of(answer.text)
    assert error["type"] == "invalid_request_error"
    assert says in error["message"]


async def test_a_body_that_is_not_json_is_refused(post: Post) -> None:
    answer = await post(path=PATH, headers=KEY, raw=b"{nope")
    assert answer.status == 400


async def test_a_signed_thinking_block_is_accepted(post: Post) -> None:
    signed = {"type": "thinking", "thinking": "hm", "signature": signature_of("hm")}
    answer = await post(messages(*tool_turn(signed), thinking=THINKING), path=PATH, headers=KEY)
    assert answer.status == 200, answer.text


@pytest.mark.parametrize(
    "thinking",
    [
        {"type": "enabled"},
        {"type": "enabled", "budget_tokens": 512},
        {"type": "enabled", "budget_tokens": 4096},
    ],
)
async def test_the_thinking_budget_is_ignored_as_deepseek_ignores_it(
    post: Post, thinking: dict[str, Any]
) -> None:
    """DeepSeek's compatibility table: ``thinking`` is supported, ``budget_tokens`` ignored —
    so a budget Anthropic would refuse (missing, under 1024, not below max_tokens) is served."""
    answer = await post(messages(thinking=thinking, max_tokens=1000), path=PATH, headers=KEY)
    assert answer.status == 200, answer.text


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer k"},
        {"x-api-key": "k"},
        {"Authorization": "Bearer k", "x-api-key": "wrong"},
    ],
)
async def test_the_key_may_come_as_x_api_key_or_bearer_and_bearer_wins(
    post: Post, mock_server: MockServer, headers: dict[str, str]
) -> None:
    """DeepSeek's Messages reference: either header; ``Authorization`` wins when both are sent
    (the official ``anthropic`` SDK sends only ``Authorization: Bearer``)."""
    mock_server.api_key = "k"
    answer = await post(messages(), path=PATH, headers=headers)
    assert answer.status == 200, answer.text


@pytest.mark.parametrize(
    ("headers", "required", "says"),
    [
        ({}, None, NO_KEY),
        ({"Authorization": "Basic k"}, None, NO_KEY),
        ({"x-api-key": "nope"}, "k", "invalid API key"),
        ({"Authorization": "Bearer nope", "x-api-key": "k"}, "k", "invalid API key"),
    ],
)
async def test_the_key_is_checked(
    post: Post, mock_server: MockServer, headers: dict[str, str], required: str | None, says: str
) -> None:
    mock_server.api_key = required
    answer = await post(messages(), path=PATH, headers=headers)
    assert answer.status == 401
    assert error_of(answer.text) == {"type": "authentication_error", "message": says}


async def test_http_faults_keep_their_status_and_headers_in_the_messages_error_shape(
    post: Post, mock_server: MockServer
) -> None:
    mock_server.queue("rate-limit", "unprocessable")
    limited = await post(messages(), path=PATH, headers=KEY)
    assert (limited.status, limited.headers["Retry-After"]) == (429, "2")
    assert error_of(limited.text) == {"type": "rate_limit_error", "message": "Rate Limit Reached"}
    plain = await post(messages(), path=PATH, headers=KEY)
    assert plain.status == 422 and plain.text.startswith("Failed to deserialize")


async def test_a_non_streamed_answer_is_one_message(post: Post, mock_server: MockServer) -> None:
    mock_server.queue({"name": "tool-loop", "steps": 1})
    answer = await post(messages(stream=False, thinking=THINKING), path=PATH, headers=KEY)
    message = json.loads(answer.text)
    thinking, call = message["content"]
    assert thinking["type"] == "thinking"
    assert thinking["signature"] == signature_of(thinking["thinking"])
    assert call == {"type": "tool_use", "id": "call_0", "name": "echo", "input": {"text": "step 0"}}
    assert message["stop_reason"] == "tool_use"
    assert message["usage"]["output_tokens"] > 1


async def test_a_non_streamed_malformed_answer_is_the_broken_event(
    post: Post, mock_server: MockServer
) -> None:
    mock_server.queue("malformed-json")
    answer = await post(messages(stream=False), path=PATH, headers=KEY)
    assert answer.text.endswith('"delta":{"ty')


async def test_the_prefix_cache_counts_hits_on_the_messages_endpoint_too() -> None:
    async with MockServer(prefix_cache=True) as server:
        long = {"role": "user", "content": "word " * 400}
        reads = []
        async with aiohttp.ClientSession() as session:
            for _ in range(2):
                async with session.post(server.url + PATH, json=messages(long), headers=KEY) as r:
                    reads.append(events((await r.read()).decode()))
    assert reads[0][0]["message"]["usage"]["cache_read_input_tokens"] == 0
    assert reads[1][0]["message"]["usage"]["cache_read_input_tokens"] >= 256


# -- the encoding alone --------------------------------------------------------------------------


def test_bodies_that_are_not_error_objects_or_completions_stay_as_they_are() -> None:
    for body in ("[1, 2]", '{"something": "else"}', "<html></html>"):
        assert encode(Scenario("x", status=502, body=body)).body == body
    assert json.loads(
        encode(error_reply(503, "busy", error_type="service_unavailable_error")).body
    ) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "busy"},
    }
    assert (
        json.loads(encode(error_reply(500, "?", error_type="mystery")).body)["error"]["type"]
        == "api_error"
    )


def test_an_error_string_in_the_stream_becomes_an_error_event_and_ends_it() -> None:
    frames = (*reply(text="Hi").frames[:2], 'data: {"error": "gone"}\n\n', *reply(text="Hi").frames)
    stream = events("".join(encode(Scenario("x", frames)).frames))
    assert stream[-1] == {"type": "error", "error": {"type": "api_error", "message": "gone"}}


def test_frames_without_data_pass_through_and_an_unfinished_answer_gets_no_message_stop() -> None:
    frames = (KEEP_ALIVE, "retry: 5\n\n", *reply(text="Hi").frames[:-1])
    encoded = encode(Scenario("x", frames)).frames
    assert encoded[:2] == (KEEP_ALIVE, "retry: 5\n\n")
    kinds = [event["type"] for event in events("".join(encoded))]
    assert kinds[-1] == "message_delta"
    assert json.loads(message_json(Scenario("x", encoded)))["stop_reason"] == "end_turn"


def test_a_scenario_without_any_data_encodes_to_itself() -> None:
    assert encode(Scenario("silence", (KEEP_ALIVE,))).frames == (KEEP_ALIVE,)


def test_the_request_as_the_scenarios_read_it() -> None:
    body = messages(
        {
            "role": "user",
            "content": [{"type": "text", "text": "a"}, {"type": "image", "source": {}}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "t", "name": "f", "input": {"q": "北京"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [{"type": "text", "text": "r"}],
                },
                {"type": "tool_result", "tool_use_id": "u", "content": None},
            ],
        },
        system=[{"type": "text", "text": "sys"}],
        thinking=THINKING,
        tools=[{"name": "f", "input_schema": {"type": "object"}}],
    )
    assert openai_body(body) == {
        "model": "deepseek-flash",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "a"},
            {
                "role": "assistant",
                "content": "calling",
                "reasoning_content": "hm",
                "tool_calls": [
                    {
                        "id": "t",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"q": "北京"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "t", "content": "r"},
            {"role": "tool", "tool_call_id": "u", "content": ""},
        ],
        "thinking": {"type": "enabled"},
        "tools": [
            {
                "type": "function",
                "function": {"name": "f", "description": "", "parameters": {"type": "object"}},
            }
        ],
    }


def test_unicode_line_separators_inside_text_are_not_line_ends() -> None:
    text = "a\x85b\u2028c d"
    stream = events("".join(encode(reply(text=text)).frames))
    pieces = [e["delta"]["text"] for e in stream if e["type"] == "content_block_delta"]
    assert "".join(pieces) == text
