"""Request bodies: quirks and capabilities shape what is sent; config resolution."""

from __future__ import annotations

from typing import Any

import pytest

from dsh import Harness
from dsh.llm._service import ModelInfo
from dsh.values._content import Image, Message, Reasoning, Text, ToolCall, ToolResult
from dsh.values._errors import ConfigError, LlmError
from dsh.values._request import LlmRequest, ToolSchema
from dsh.values._tokens import Price
from dsh_plugins.llm_providers import LlmProvidersPlugin, ProviderSettings, resolve
from dsh_plugins.llm_providers.config import ModelSettings
from dsh_plugins.llm_providers.failures import error_object, http_failure, not_a_stream
from dsh_plugins.llm_providers.profiles import DEFAULT_CAPS
from dsh_plugins.llm_providers.request import body_for, image_note

PICTURE = Image("data:image/png;base64,AAAA", "image/png")


def provider(name: str = "vllm", **settings: Any) -> Any:
    models = settings.pop("models", {"m": ModelSettings()})
    return resolve(name, ProviderSettings(models=models, **settings))


def request(*messages: Message, **fields: Any) -> LlmRequest:
    return LlmRequest("vllm/m", messages, **fields)


def test_system_stop_temperature_strict_tools_and_extra_body() -> None:
    tool = ToolSchema("f", "F.", {"type": "object"}, strict=True)
    body = body_for(
        provider(extra_body={"top_k": 5}),
        "m",
        request(
            Message("system", (Text("be brief"),)),
            system="sys",
            stop=("END",),
            temperature=0.2,
            tools=(tool,),
            response_format="json_object",
        ),
    )
    assert body["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "system", "content": "be brief"},
    ]
    assert (body["stop"], body["temperature"], body["top_k"]) == (["END"], 0.2, 5)
    assert body["tools"][0]["function"]["strict"] is True
    assert body["response_format"] == {"type": "json_object"}


def test_reasoning_effort_goes_to_models_that_may_reason() -> None:
    assert "reasoning_effort" not in body_for(provider(), "m", request())
    assert body_for(provider(), "m", request(reasoning_effort="low"))["reasoning_effort"] == "low"
    assert body_for(provider(), "m", request(reasoning_effort="max"))["reasoning_effort"] == "high"
    plain = provider(models={"m": ModelSettings(reasoning=False)})
    assert "reasoning_effort" not in body_for(plain, "m", request(reasoning_effort="high"))


def test_a_model_without_tools_gets_none() -> None:
    tool = ToolSchema("f", "F.")
    body = body_for(provider(models={"m": ModelSettings(tools=False)}), "m", request(tools=(tool,)))
    assert "tools" not in body


def test_json_mode_is_refused_before_sending_for_a_model_without_it() -> None:
    plain = provider(models={"m": ModelSettings(json_mode=False)})
    with pytest.raises(LlmError) as raised:
        body_for(plain, "m", request(response_format="json_object"))
    assert raised.value.failure.code == "INVALID_REQUEST"
    assert "json_mode = true" in str(raised.value)
    assert "response_format" in body_for(plain, "m", request(response_format="text"))


def test_images_go_to_a_vision_model_and_become_a_note_for_others() -> None:
    message = Message("user", (Text("look"), PICTURE))
    seeing = body_for(
        provider(models={"m": ModelSettings(image_input=True)}), "m", request(message)
    )
    assert seeing["messages"][0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": PICTURE.url},
    }
    blind = body_for(provider(), "m", request(message))
    assert blind["messages"][0] == {"role": "user", "content": f"look\n{image_note('m')}"}


def test_tool_results_split_user_messages_in_order() -> None:
    message = Message(
        "user",
        (
            Text("before"),
            ToolResult("c1", (Text("out"), Image("u", None))),
            ToolResult("c2", ()),
            Text("after"),
        ),
    )
    wire = body_for(provider(), "m", request(message))["messages"]
    assert wire == [
        {"role": "user", "content": "before"},
        {"role": "tool", "tool_call_id": "c1", "content": "out\n[image: unknown type]"},
        {"role": "tool", "tool_call_id": "c2", "content": "(no output)"},
        {"role": "user", "content": "after"},
    ]


def test_reasoning_goes_back_only_when_asked_in_the_providers_field() -> None:
    turns = (
        Message("assistant", (Reasoning("r"), Text("a"))),
        Message("assistant", (ToolCall("c", "f", "{}"),)),
        Message("assistant", (Text("plain"),)),
    )
    silent = body_for(provider(), "m", request(*turns))["messages"]
    assert silent[0] == {"role": "assistant", "content": "a"}
    auto = body_for(provider(send_reasoning=True), "m", request(*turns))["messages"]
    assert auto[0]["reasoning_content"] == "r" and auto[1]["reasoning_content"] == ""
    assert "reasoning_content" not in auto[2]
    named = provider("openrouter", send_reasoning=True)
    assert body_for(named, "m", request(*turns))["messages"][0]["reasoning"] == "r"
    never = provider("openai", send_reasoning=True)
    assert "reasoning" not in body_for(never, "m", request(*turns))["messages"][0]


def test_profiles_fill_what_the_table_leaves_unset() -> None:
    openai = provider("openai")
    assert (openai.base_url, openai.api_key_env, openai.key_required) == (
        "https://api.openai.com/v1",
        "OPENAI_API_KEY",
        True,
    )
    mine = provider("ollama", base_url="http://gpu:11434/v1/", reasoning_field="none")
    assert (mine.base_url, mine.reasoning_field, mine.stream_options) == (
        "http://gpu:11434/v1",
        "none",
        True,
    )
    custom = resolve(
        "together", ProviderSettings("https://x/v1", "TOGETHER_KEY", {"m": ModelSettings()})
    )
    assert (custom.key_required, custom.reasoning_field, custom.key_hint) == (
        True,
        "none",
        "set TOGETHER_KEY or store one with 'dsh keys set together'",
    )
    assert provider("llamacpp").key_hint == (
        "set LLAMA_API_KEY or store one with 'dsh keys set llamacpp'"
    )
    assert provider("ollama").key_hint == "store one with 'dsh keys set ollama'"


def test_a_custom_provider_needs_a_base_url_but_no_model() -> None:
    with pytest.raises(ConfigError, match="has no base_url"):
        resolve("mine", ProviderSettings(models={"m": ModelSettings()}))
    bare = resolve("ollama", ProviderSettings())
    assert (bare.models, bare.model_ids()) == ({}, [])
    assert bare.caps("anything") is DEFAULT_CAPS


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"ollama": {"models": {"m": {"context_window": 0}}}}, "context_window must be at least 1"),
        ({"ollama": {"models": {"m": {"tools": "yes"}}}}, "expected true or false"),
        ({"ollama": {"reasoning_field": "thoughts"}}, "reasoning_field"),
        ({"ollama": {"idle_timeout_s": 0}}, "idle_timeout_s must be greater than 0"),
        ({"groq": {}}, "extra fields found (groq)"),
        ({"ollama": {"models": "qwen3"}}, "ollama.models: expected a table"),
    ],
)
async def test_bad_config_is_reported_at_start(config: dict[str, Any], message: str) -> None:
    harness = Harness([LlmProvidersPlugin()], {"llm_providers": config}, load_entrypoints=False)
    with pytest.raises(ConfigError) as raised:
        await harness.start()
    assert message in str(raised.value)


async def test_a_provider_without_models_serves_any_model_under_its_name() -> None:
    harness = Harness(
        [LlmProvidersPlugin()], {"llm_providers": {"ollama": {}}}, load_entrypoints=False
    )
    async with harness:
        llm = harness.llm
        assert llm.models() == [] and llm.prefixes() == ["ollama/"]
        assert llm.serves("ollama/qwen3") and not llm.serves("vllm/qwen3")
        assert llm.model_info("ollama/org/some-model") == ModelInfo(
            image_input=False, thinking_default=None
        )
        assert llm.unavailable("ollama/qwen3") is None


async def test_models_are_served_by_provider_with_their_capabilities() -> None:
    config = {
        "llm_providers": {
            "ollama": {
                "models": {
                    "qwen3": {
                        "context_window": 40_960,
                        "reasoning": True,
                        "price": {"input": 0.1, "output": 0.4},
                    }
                }
            },
            "custom": {
                "lab": {"base_url": "http://lab/v1", "models": {"org/big": {"image_input": True}}}
            },
        }
    }
    async with Harness([LlmProvidersPlugin()], config, load_entrypoints=False) as harness:
        assert harness.llm.models() == ["lab/org/big", "ollama/qwen3"]
        info = harness.llm.model_info("ollama/qwen3")
        assert info is not None and (info.context_window, info.thinking_default) == (40_960, True)
        seeing = harness.llm.model_info("lab/org/big")
        assert seeing is not None and seeing.image_input is True
        assert harness.llm.unavailable("ollama/qwen3") is None
        assert harness.llm.pricing("ollama/qwen3") == Price(0.1, 0.4)  # the usage line's price
        [adapter] = [a for a in harness.llm.adapters() if "lab" in repr(a)]
        defaults = adapter.model_info("lab/other")  # type: ignore[attr-defined]
        assert defaults == ModelInfo(image_input=False)  # not listed: the defaults


def test_failures_read_each_error_shape() -> None:
    assert http_failure("p", 503, {}, b"").message == "p answered HTTP 503: (empty body)"
    assert http_failure("p", 418, {}, b"teapot").code == "HTTP_418"
    overflow = http_failure("p", 400, {"x-request-id": "r1"}, b'{"error": "context length 9 > 8"}')
    assert (overflow.code, overflow.request_id) == ("CONTEXT_WINDOW_EXCEEDED", "r1")
    assert http_failure("p", 429, {"Retry-After": "soon"}, b"").retry_after_s is None
    assert http_failure("p", 429, {"Retry-After": "-1"}, b"").retry_after_s is None
    assert http_failure("p", 400, {}, b'{"detail": "no"}').message.endswith('{"detail": "no"}')
    assert error_object(
        "p", {"type": "invalid_request_error", "message": "maximum context"}
    ).code == ("CONTEXT_WINDOW_EXCEEDED")
    assert error_object("p", {"code": "rate_limit_exceeded"}).code == "RATE_LIMIT"
    assert error_object("p", {"code": True, "message": "?"}).code == "SERVER"
    page = not_a_stream("p", 200, "text/html", {}, b"<html>")
    assert page.code == "MALFORMED_RESPONSE" and "<html>" in page.message
    empty = not_a_stream("p", 200, "application/json", {}, b"")
    assert "(empty body)" in empty.message
    assert not_a_stream("p", 200, "application/json", {}, b"[1]").code == "MALFORMED_RESPONSE"
