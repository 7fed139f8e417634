"""The mock server names models as the API does today: current names, the legacy names it
still serves (answered by their successor), retired names refused; and JSON output mode."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dsh.llm._sse import parse_sse
from dsh.testing.mockserver import MockServer
from dsh.testing.mockserver.server import MODELS
from dsh.testing.mockserver.validate import LEGACY_MODELS, RETIRED_MODELS, serving_model

from .conftest import Post, chat


def payloads(answer_text: str) -> list[dict[str, Any]]:
    return [json.loads(event.data) for event in parse_sse(answer_text.encode())]


def content(answer_text: str) -> str:
    return "".join(
        (choice.get("delta") or {}).get("content") or ""
        for payload in payloads(answer_text)
        for choice in payload["choices"]
    )


async def test_today_s_models_are_listed_and_served(post: Post, mock_server: MockServer) -> None:
    assert MODELS == ("deepseek-flash", "deepseek-v4-pro")
    for model in MODELS:
        answer = await post(chat(model=model))
        assert answer.status == 200
        assert {payload["model"] for payload in payloads(answer.text)} == {model}


@pytest.mark.parametrize("legacy", ["deepseek-v4-flash", "deepseek-v4-flash-vision-exp"])
async def test_a_legacy_name_is_answered_by_its_successor(post: Post, legacy: str) -> None:
    assert serving_model(legacy) == LEGACY_MODELS[legacy] == "deepseek-flash"
    answer = await post(chat(model=legacy))
    assert answer.status == 200
    assert {payload["model"] for payload in payloads(answer.text)} == {"deepseek-flash"}


async def test_a_legacy_name_is_only_served_while_its_successor_is() -> None:
    import aiohttp

    async with MockServer(models=["deepseek-v4-pro"]) as server, aiohttp.ClientSession() as s:
        response = await s.post(
            f"{server.url}/chat/completions",
            json=chat(model="deepseek-v4-flash"),
            headers={"Authorization": "Bearer k"},
        )
        assert response.status == 400
        assert (await response.json())["error"]["message"] == "Model Not Exist"


@pytest.mark.parametrize("retired", RETIRED_MODELS)
async def test_retired_names_are_refused_naming_today_s_models(post: Post, retired: str) -> None:
    answer = await post(chat(model=retired))
    assert answer.status == 400
    assert answer.error() == (
        "The supported API model names are deepseek-flash or deepseek-v4-pro, "
        f"but you passed {retired}."
    )


@pytest.mark.parametrize(
    ("response_format", "says"),
    [
        ({"type": "json_schema"}, "This response_format type is unavailable now"),
        ("json_object", "This response_format type is unavailable now"),
        ({}, "This response_format type is unavailable now"),
        ({"type": "json_object"}, "Prompt must contain the word 'json' in some form"),
    ],
)
async def test_bad_response_formats_are_refused(
    post: Post, response_format: Any, says: str
) -> None:
    answer = await post(chat(response_format=response_format))
    assert answer.status == 400
    assert answer.error().startswith(says)


async def test_json_mode_answers_a_json_object(post: Post) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "assistant", "content": "json is not asked for here"},
        {"role": "user", "content": [{"type": "text", "text": "Reply in JSON: hi"}]},
    ]
    answer = await post(chat(messages, response_format={"type": "json_object"}))
    assert answer.status == 200
    assert json.loads(content(answer.text)) == {
        "answer": 'You said: "Reply in JSON: hi". I am the dsh mock model.'
    }


async def test_the_word_json_in_an_assistant_message_does_not_count(post: Post) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
        {"role": "assistant", "content": "JSON"},
        {"role": "user", "content": None},
    ]
    answer = await post(chat(messages, response_format={"type": "json_object"}))
    assert answer.status == 400
    assert answer.error().startswith("Prompt must contain the word 'json'")


async def test_text_mode_and_tool_results_in_json_mode(post: Post) -> None:
    plain = await post(chat(response_format={"type": "text"}))
    assert content(plain.text).startswith('You said: "hi"')
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "json please"},
        {"role": "assistant", "content": "", "reasoning_content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    answer = await post(chat(messages, response_format={"type": "json_object"}))
    assert json.loads(content(answer.text)) == {"answer": "The tool returned: 42"}
