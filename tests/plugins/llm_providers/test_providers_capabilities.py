"""Capabilities drive behaviour: the compaction thresholds, image input and JSON mode follow
what the config says a provider's model can do, not DeepSeek's numbers."""

from __future__ import annotations

import asyncio
from typing import Any

from dsh import AgentOptions, Harness
from dsh.values._content import Image, Text
from dsh.values._events import TurnCompleted, TurnEnd, TurnError, UserMessage
from dsh_plugins.compaction import CompactionPlugin
from dsh_plugins.llm_providers import LlmProvidersPlugin
from dsh_plugins.llm_providers.request import image_note
from tests.plugins.llm_providers.support import ProfileServer, Reply, serve

MODELS = {
    "small": {"context_window": 4_000},
    "capped": {"context_window": 65_536, "max_output_tokens": 2_048},
    "unknown": {},
    "eyes": {"image_input": True},
    "plain": {"json_mode": False},
}
PICTURE = Image("data:image/png;base64,iVBORw0KGgo=", "image/png")


def config(base_url: str = "http://127.0.0.1:9/v1") -> dict[str, Any]:
    return {"llm_providers": {"ollama": {"base_url": base_url, "models": MODELS}}}


async def test_compaction_thresholds_follow_the_models_window_and_output_limit() -> None:
    compaction = CompactionPlugin()
    async with Harness([LlmProvidersPlugin(), compaction], config(), load_entrypoints=False):
        small = ("ollama/small", 4_000, 2_000, 2_000)  # half the window, not 16k
        capped = ("ollama/capped", 65_536, 2_048, 63_488)  # the output limit
        unknown = ("ollama/unknown", 128_000, 16_384, 111_616)  # the configured defaults
        for model, window, reserve, threshold in (small, capped, unknown):
            assert compaction.context_window(model) == window
            assert compaction.reserve(model) == reserve
            assert compaction.threshold(model) == threshold


async def run(server: ProfileServer, options: AgentOptions, *content: Any) -> list[Any]:
    async with Harness(
        [LlmProvidersPlugin()], config(server.base_url), load_entrypoints=False
    ) as h:
        agent = h.agent_loop.create("a", options)
        agent.send(list(content))
        async with asyncio.timeout(10):
            await agent.wait_idle()
        return list(agent.session.events)


async def test_an_image_reaches_a_vision_model_and_becomes_a_note_for_others() -> None:
    async with serve("ollama") as server:
        server.queue(Reply(text="a cat"), Reply(text="I cannot see it"))
        seen = await run(server, AgentOptions(model="ollama/eyes"), Text("what?"), PICTURE)
        blind = await run(server, AgentOptions(model="ollama/small"), Text("what?"), PICTURE)
    parts = server.bodies[0]["messages"][0]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": PICTURE.url}}
    assert server.bodies[1]["messages"][0]["content"] == f"what?\n{image_note('small')}"
    for events in (seen, blind):
        assert [e.data.reason for e in events if isinstance(e.data, TurnEnd)] == [TurnCompleted()]
        [user] = [e.data for e in events if isinstance(e.data, UserMessage)]
        assert PICTURE in user.content  # the session keeps the image either way


async def test_json_mode_is_refused_for_a_model_without_it_and_nothing_is_sent() -> None:
    async with serve("ollama") as server:
        options = AgentOptions(model="ollama/plain", response_format="json_object")
        events = await run(server, options, Text("answer in json"))
    [reason] = [e.data.reason for e in events if isinstance(e.data, TurnEnd)]
    assert isinstance(reason, TurnError) and reason.failure.code == "INVALID_REQUEST"
    assert server.bodies == []


def test_before_the_harness_starts_the_configured_reserve_applies() -> None:
    assert CompactionPlugin().reserve("any") == 16_384
