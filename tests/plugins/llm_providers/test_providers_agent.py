"""An agent completes a tool-using conversation against each built-in profile's loopback
server, and each endpoint's quirks show on the wire."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from dsh import AgentOptions, Harness, hookimpl
from dsh.tools._registry import Tool, ToolExecution
from dsh.values._content import Reasoning, Text, ToolCall
from dsh.values._errors import LlmError
from dsh.values._events import AssistantMessage, SessionEvent, TurnCompleted, TurnEnd, TurnError
from dsh.values._request import LlmRequest, ToolSchema
from dsh_plugins.llm_providers import BUILT_IN, LlmProvidersPlugin
from tests.plugins.llm_providers.support import (
    DIALECTS,
    BreakOff,
    Fail,
    ProfileServer,
    Reply,
    serve,
)

KEYS = {"OPENAI_API_KEY": "sk-openai", "OPENROUTER_API_KEY": "sk-or-v1-test"}
LOOKUP = ToolSchema(
    "lookup",
    "Look a word up.",
    {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)


class LookupTool:
    """A host plugin with one tool that always finds 42."""

    @hookimpl
    def dsh_register_tools(self, register: Callable[..., Any]) -> None:
        register(Tool(LOOKUP, _lookup))


async def _lookup(args: Any, execution: ToolExecution) -> str:
    return f"{args['q']} = 42"


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    for name in ("VLLM_API_KEY", "LLAMA_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def config_for(server: ProfileServer, **provider: Any) -> dict[str, Any]:
    models = provider.pop("models", {"m1": {"context_window": 32_000}})
    table = {"base_url": server.base_url, "models": models, **provider}
    return {"llm_providers": {server.dialect.name: table}}


async def converse(
    server: ProfileServer, config: dict[str, Any], options: AgentOptions | None = None
) -> list[SessionEvent]:
    """One turn of an agent on ``<profile>/m1``; its session events."""
    plugins = [LlmProvidersPlugin(), LookupTool()]
    async with Harness(plugins, config, load_entrypoints=False) as harness:
        model = f"{server.dialect.name}/m1"
        agent = harness.agent_loop.create("a", options or AgentOptions(model=model))
        agent.send("What is x?")
        async with asyncio.timeout(10):
            await agent.wait_idle()
        return list(agent.session.events)


def ends(events: list[SessionEvent]) -> list[Any]:
    return [e.data.reason for e in events if isinstance(e.data, TurnEnd)]


def messages(events: list[SessionEvent]) -> list[AssistantMessage]:
    return [e.data for e in events if isinstance(e.data, AssistantMessage)]


@pytest.mark.parametrize("profile", BUILT_IN)
async def test_a_tool_using_conversation_on_every_profile(profile: str) -> None:
    async with serve(profile) as server:
        server.queue(
            Reply(reasoning="I should look it up.", calls=(("call_1", "lookup", '{"q": "x"}'),)),
            Reply(text="x is 42.", prompt_tokens=40, cached_tokens=16),
        )
        events = await converse(server, config_for(server))
    assert ends(events) == [TurnCompleted()]
    first, second = messages(events)
    reasoning = (Reasoning("I should look it up."),) if DIALECTS[profile].reasoning_field else ()
    assert first.content == (*reasoning, ToolCall("call_1", "lookup", '{"q": "x"}'))
    assert first.model == f"{profile}/m1"
    assert second.content == (Text("x is 42."),)
    assert second.usage is not None
    assert (second.usage.input_tokens, second.usage.cache_read_tokens) == (24, 16)
    # The second request carried the call and its result, answered by id.
    wire = server.bodies[1]["messages"]
    assert wire[-2]["tool_calls"][0]["id"] == "call_1"
    assert wire[-2]["content"] is None
    assert wire[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "x = 42"}
    assert "reasoning" not in wire[-2] and "reasoning_content" not in wire[-2]
    assert server.bodies[0]["tools"][0]["function"]["name"] == "lookup"


@pytest.mark.parametrize("profile", BUILT_IN)
async def test_each_profile_sends_its_own_quirks(profile: str) -> None:
    async with serve(profile) as server:
        server.queue(Reply(text="ok"))
        options = AgentOptions(model=f"{profile}/m1", max_tokens=100)
        events = await converse(server, config_for(server), options)
    assert ends(events) == [TurnCompleted()]
    body = server.bodies[0]
    limit = "max_completion_tokens" if profile == "openai" else "max_tokens"
    assert body[limit] == 100
    assert ("stream_options" in body) == (profile != "llamacpp")
    authorization = server.headers[0].get("Authorization")
    assert authorization == (f"Bearer {DIALECTS[profile].key}" if DIALECTS[profile].key else None)
    assert messages(events)[0].usage is not None  # llama.cpp sends it unasked


async def test_openai_refuses_max_tokens_so_the_quirk_matters() -> None:
    async with serve("openai") as server:
        options = AgentOptions(model="openai/m1", max_tokens=100)
        events = await converse(server, config_for(server, token_limit_field="max_tokens"), options)
    [reason] = ends(events)
    assert isinstance(reason, TurnError)
    assert reason.failure.code == "INVALID_REQUEST"
    assert "max_tokens" in reason.failure.message


async def test_openrouter_error_mid_stream_fails_the_turn_with_its_status() -> None:
    async with serve("openrouter") as server:
        server.queue(BreakOff("Partial", 502), BreakOff("Partial", 502))
        events = await converse(server, config_for(server))
    [reason] = ends(events)
    assert isinstance(reason, TurnError)
    assert (reason.failure.code, reason.failure.status) == ("SERVER", 502)
    assert "upstream provider went away" in reason.failure.message


async def test_vllm_error_object_is_read() -> None:
    async with serve("vllm") as server:
        server.queue(BreakOff("Hal", 400, "maximum context length is 4096 tokens"))
        events = await converse(server, config_for(server))
    [reason] = ends(events)
    assert isinstance(reason, TurnError)
    assert reason.failure.code == "CONTEXT_WINDOW_EXCEEDED"


async def test_http_errors_keep_status_and_retry_after() -> None:
    async with serve("ollama") as server:
        server.queue(Fail(429, "slow down", (("Retry-After", "120"),)))
        events = await converse(server, config_for(server))
    [reason] = ends(events)
    assert isinstance(reason, TurnError)
    failure = reason.failure
    assert (failure.code, failure.status, failure.retry_after_s) == ("RATE_LIMIT", 429, 120.0)
    assert "slow down" in failure.message


async def test_a_wrong_key_is_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    async with serve("openai") as server:
        events = await converse(server, config_for(server))
    [reason] = ends(events)
    assert isinstance(reason, TurnError)
    assert (reason.failure.code, reason.failure.status) == ("AUTH", 401)


async def test_tool_results_reach_the_model_in_order() -> None:
    async with serve("vllm") as server:
        server.queue(
            Reply(calls=(("a", "lookup", '{"q": "p"}'), ("b", "lookup", '{"q": "q"}'))),
            Reply(text="done"),
        )
        events = await converse(server, config_for(server))
    assert ends(events) == [TurnCompleted()]
    tools = [m for m in server.bodies[1]["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tools] == [("a", "p = 42"), ("b", "q = 42")]


async def test_a_model_the_table_does_not_list_is_served_with_the_default_capabilities() -> None:
    async with serve("openrouter") as server:
        server.queue(
            Reply(calls=(("call_1", "lookup", '{"q": "x"}'),)),
            Reply(text="x is 42."),
        )
        config = {"llm_providers": {"openrouter": {"base_url": server.base_url}}}
        options = AgentOptions(model="openrouter/anthropic/claude-sonnet-4")
        events = await converse(server, config, options)
    assert ends(events) == [TurnCompleted()]
    assert messages(events)[1].content == (Text("x is 42."),)
    first = server.bodies[0]
    assert first["model"] == "anthropic/claude-sonnet-4"
    assert first["tools"][0]["function"]["name"] == "lookup"  # tools: on by default


async def test_a_table_entry_overrides_the_defaults_and_json_mode_is_off_without_one() -> None:
    async with serve("ollama") as server:
        config = config_for(server, models={"listed": {"tools": False, "json_mode": True}})
        async with Harness([LlmProvidersPlugin()], config, load_entrypoints=False) as harness:
            assert harness.llm.models() == ["ollama/listed"]
            adapter = harness.llm.adapter_for("ollama/listed")
            assert harness.llm.adapter_for("ollama/other") is adapter
            schema = (LOOKUP,)
            listed = LlmRequest("ollama/listed", (), tools=schema, response_format="json_object")
            await harness.llm.complete(listed)
            assert "tools" not in server.bodies[0]
            unlisted = LlmRequest("ollama/other", (), response_format="json_object")
            with pytest.raises(LlmError, match="ollama/other has no JSON mode"):
                await harness.llm.complete(unlisted)
    assert len(server.bodies) == 1
