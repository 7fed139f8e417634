"""The mock server rejects requests the way the real API does."""

from __future__ import annotations

from typing import Any

import pytest

from dsh.testing.mockserver import MockServer

from .conftest import Post, chat

CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
TOOL = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}


def turn_with_call(reasoning: str | None = None) -> list[dict[str, Any]]:
    assistant: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [CALL]}
    if reasoning is not None:
        assistant["reasoning_content"] = reasoning
    return [
        {"role": "user", "content": "q"},
        assistant,
        {"role": "tool", "tool_call_id": "call_1", "content": "r"},
    ]


async def test_a_bearer_token_is_required(post: Post) -> None:
    answer = await post(chat(), headers={})
    assert answer.status == 401
    assert "auth header format should be Bearer" in answer.error()
    assert (await post(chat(), headers={"Authorization": "Bearer  "})).status == 401


async def test_a_configured_key_must_match() -> None:
    import aiohttp

    async with MockServer(api_key="sk-right") as server, aiohttp.ClientSession() as session:
        body = chat()
        wrong = await session.post(
            f"{server.url}/chat/completions", json=body, headers={"Authorization": "Bearer sk-bad"}
        )
        assert wrong.status == 401
        assert "****bad is invalid" in await wrong.text()
        right = await session.post(
            f"{server.url}/chat/completions",
            json=body,
            headers={"Authorization": "Bearer sk-right"},
        )
        assert right.status == 200
        await right.read()


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (["not", "an", "object"], 400, "expected a JSON object"),
        ({"messages": []}, 422, "missing field `model`"),
        ({"model": "deepseek-v4-flash"}, 422, "missing field `messages`"),
        (chat(model="gpt-4"), 400, "Model Not Exist"),
        (chat(messages=[]), 400, "must not be empty"),
        (chat(messages=[{"role": "robot", "content": "x"}]), 400, "unknown variant `robot`"),
        (chat(messages=["hello"]), 400, "unknown variant `None`"),
        (
            chat(
                messages=[
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
                ]
            ),
            400,
            "invalid type: sequence, expected a string",
        ),
        (
            chat(
                messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": None}]
            ),
            400,
            "content or tool_calls must be set",
        ),
        (
            chat(
                messages=[
                    {"role": "user", "content": "q"},
                    {"role": "tool", "tool_call_id": "call_9", "content": "r"},
                ]
            ),
            400,
            "tool_call_id 'call_9' does not answer",
        ),
        (
            chat(messages=[*turn_with_call("r")[:2], {"role": "user", "content": "next"}]),
            400,
            "must be followed by tool messages responding to each 'tool_call_id'",
        ),
        (chat(messages=turn_with_call()), 400, "must be passed back to the API"),
        (chat(tools=[TOOL], tool_choice="required"), 400, "does not support this tool_choice"),
        (chat(tools=[{"type": "retrieval"}]), 400, "unknown variant `retrieval`"),
        (
            chat(tools=[{"type": "function", "function": {"name": "f", "strict": True}}]),
            400,
            "strict mode is a beta feature",
        ),
    ],
)
async def test_invalid_requests_are_rejected(body: Any, status: int, says: str, post: Post) -> None:
    answer = await post(body)
    assert answer.status == status
    assert says in answer.text


async def test_a_body_that_is_not_json_is_rejected(post: Post) -> None:
    answer = await post(raw=b"{not json", headers={"Authorization": "Bearer k"})
    assert answer.status == 400


async def test_reasoning_passed_back_or_thinking_off_is_accepted(post: Post) -> None:
    assert (await post(chat(messages=turn_with_call("I need f.")))).status == 200
    off = chat(messages=turn_with_call(), thinking={"type": "disabled"})
    assert (await post(off)).status == 200


async def test_forced_tool_choice_is_fine_without_thinking(post: Post) -> None:
    body = chat(tools=[TOOL], tool_choice="required", thinking={"type": "disabled"})
    assert (await post(body)).status == 200
    assert (await post(chat(tools=[TOOL], tool_choice="auto"))).status == 200


async def test_strict_tools_need_the_beta_url_and_all_functions_strict(post: Post) -> None:
    strict = {"type": "function", "function": {"name": "s", "parameters": {}, "strict": True}}
    assert (await post(chat(tools=[strict]), path="/beta/chat/completions")).status == 200
    mixed = await post(chat(tools=[strict, TOOL]), path="/beta/chat/completions")
    assert mixed.status == 400
    assert "every function must set strict" in mixed.error()
    assert (await post(chat(tools=[TOOL]), path="/beta/chat/completions")).status == 200


def strict_tool(parameters: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "s", "parameters": parameters, "strict": True}}


CLOSED_POINT = {
    "type": "object",
    "properties": {"x": {"type": "number"}},
    "required": ["x"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("parameters", "says"),
    [
        (
            {"type": "object", "properties": {"x": {"type": "number"}}},
            "parameters: additionalProperties",
        ),
        (
            {**CLOSED_POINT, "required": []},
            "parameters: every property must be in required",
        ),
        (
            {**CLOSED_POINT, "properties": {"x": {"type": "array", "items": {"type": "object"}}}},
            "parameters.properties.x.items: additionalProperties",
        ),
        (
            {"anyOf": [CLOSED_POINT, {"properties": {}}]},
            "parameters.anyOf[1]: additionalProperties",
        ),
    ],
)
async def test_strict_schemas_on_beta_must_be_closed_as_the_api_checks(
    parameters: Any, says: str, post: Post
) -> None:
    answer = await post(chat(tools=[strict_tool(parameters)]), path="/beta/chat/completions")
    assert answer.status == 400
    assert f"Invalid strict schema at tools[0].function.{says}" in answer.error()


async def test_closed_strict_schemas_and_boolean_subschemas_are_served(post: Post) -> None:
    closed = {**CLOSED_POINT, "properties": {"x": {"type": "array", "items": True}}}
    answer = await post(chat(tools=[strict_tool(closed)]), path="/beta/chat/completions")
    assert answer.status == 200


@pytest.mark.parametrize("thinking", [{"type": "enabled"}, None])
async def test_a_missing_passback_is_refused_with_thinking_on_or_by_default(
    thinking: Any, post: Post
) -> None:
    body = chat(messages=turn_with_call())
    if thinking is not None:
        body["thinking"] = thinking
    answer = await post(body)
    assert (answer.status, answer.error()) == (
        400,
        "The `reasoning_content` in the thinking mode must be passed back to the API.",
    )
    assert (await post(chat(messages=turn_with_call("")))).status == 200
