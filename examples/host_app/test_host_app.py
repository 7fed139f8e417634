"""The host app over HTTP, with aiohttp's test client; the model is a ``ScriptedAdapter`` (and,
once, dsh's mock DeepSeek server behind the real adapter)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import ClientResponse, web
from host_app import HARNESS, EventHub, ServerSentEvent, Settings, create_app

from dsh import Tool, hookimpl, tool
from dsh.plugin import LlmRequest, StreamChunk, text_of
from dsh.plugin.http import SseParser
from dsh.testing import MemoryStore, ScriptedAdapter, ScriptEntry, hang, text_response
from dsh.testing import tool_call_response as tool_call
from dsh.testing.mock import deepseek_config
from dsh.testing.mockserver import MockServer, reply

if TYPE_CHECKING:  # TestClient is generic from aiohttp 3.10 on
    from aiohttp.test_utils import TestClient

    Client = TestClient[web.Request, web.Application]
    AiohttpClient = Callable[[web.Application], Awaitable[Client]]

Event = tuple[str, Any]


class ScriptedModel:
    """A host plugin serving the model ``scripted`` (and ``tools``) for the test."""

    def __init__(self, script: list[ScriptEntry], tools: tuple[Tool, ...] = ()) -> None:
        self.adapter = ScriptedAdapter(script)
        self.tools = tools

    @hookimpl
    def dsh_register_llm_adapters(self, register: Callable[..., object]) -> None:
        register(["scripted"], self.adapter)

    @hookimpl
    def dsh_register_tools(self, register: Callable[[Tool], object]) -> None:
        for each in self.tools:
            register(each)


async def serve(
    aiohttp_client: AiohttpClient, model: ScriptedModel, *plugins: object, heartbeat_s: float = 15
) -> Client:
    settings = Settings("scripted", heartbeat_s=heartbeat_s)
    app = create_app(settings, plugins=[model, *plugins], load_entrypoints=False)
    return await aiohttp_client(app)


class EventStream:
    """One client of ``GET /agents/{id}/events``: its events, parsed, in order."""

    def __init__(self, response: ClientResponse) -> None:
        self.response = response
        self.parser = SseParser()
        self.pending: list[Event] = []

    async def next(self) -> Event:
        async with asyncio.timeout(5):
            while not self.pending:
                data = await self.response.content.readany()
                if not data:
                    raise EOFError("the event stream ended")
                self.pending += [(e.event, json.loads(e.data)) for e in self.parser.feed(data)]
        return self.pending.pop(0)

    async def rest(self) -> list[Event]:
        """Every event until the stream ends."""
        seen = []
        while True:
            try:
                seen.append(await self.next())
            except EOFError:
                return seen

    async def until(self, name: str, **match: Any) -> list[Event]:
        """Every event up to and including the first ``name`` whose data has ``match``."""
        seen = [await self.next()]
        while not (seen[-1][0] == name and match.items() <= seen[-1][1].items()):
            seen.append(await self.next())
        return seen


async def watch(client: Client, agent_id: str) -> EventStream:
    response = await client.get(f"/agents/{agent_id}/events")
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/event-stream"
    return EventStream(response)


async def send(client: Client, agent_id: str, text: str) -> dict[str, Any]:
    response = await client.post(f"/agents/{agent_id}/messages", json={"text": text})
    assert response.status == 202
    body: dict[str, Any] = await response.json()
    return body


def streamed_text(events: list[Event]) -> str:
    chunks = [data["chunk"] for name, data in events if name == "chunk"]
    return "".join(c["text"] for c in chunks if c["type"] == "text-delta")


def echo_then_hang(request: LlmRequest) -> ScriptEntry:
    """Answer with the user's words, then stream nothing more until aborted."""
    partial: list[StreamChunk] = text_response(f"echo: {text_of(request.messages[-1].content)}")
    return hang(before=partial[:-2])  # without usage and finish


async def test_every_client_of_an_agent_gets_the_same_stream(
    aiohttp_client: AiohttpClient,
) -> None:
    client = await serve(aiohttp_client, ScriptedModel([text_response("Hello!")]))
    first, second = await watch(client, "a"), await watch(client, "a")

    assert await send(client, "a", "hi") == {"agent": "a", "created": True, "resumed": False}

    seen = await first.until("turn-end")
    assert await second.until("turn-end") == seen
    assert seen[:3] == [
        ("status", {"status": "running"}),
        ("turn-start", {"turn": 1}),
        (
            "chunk",
            {
                "turn": 1,
                "step": 1,
                "chunk": {"type": "block-start", "index": 0, "block_type": "text"},
            },
        ),
    ]
    assert streamed_text(seen) == "Hello!"
    assert seen[-2] == (
        "chunk",
        {"turn": 1, "step": 1, "chunk": {"type": "finish", "reason": {"type": "stop"}}},
    )
    assert seen[-1] == ("turn-end", {"turn": 1, "reason": {"type": "completed"}})
    for stream in (first, second):
        assert await stream.next() == ("status", {"status": "idle"})


async def test_an_abort_mid_stream_ends_the_turn_aborted_for_every_client(
    aiohttp_client: AiohttpClient,
) -> None:
    model = ScriptedModel([echo_then_hang, text_response("Still here.")])
    client = await serve(aiohttp_client, model)
    first, second = await watch(client, "a"), await watch(client, "a")
    await send(client, "a", "count to a million")
    for stream in (first, second):
        await stream.until("chunk", chunk={"type": "text-delta", "index": 0, "text": "e"})

    response = await client.post("/agents/a/abort", json={"reason": "the user pressed stop"})
    assert response.status == 202
    assert await response.json() == {"agent": "a", "aborting": True}

    aborted = {"turn": 1, "reason": {"type": "aborted", "reason": "the user pressed stop"}}
    for stream in (first, second):
        assert (await stream.until("turn-end"))[-1] == ("turn-end", aborted)
        assert await stream.next() == ("status", {"status": "idle"})

    assert await send(client, "a", "are you there?") == {
        "agent": "a",
        "created": False,
        "resumed": False,
    }
    for stream in (first, second):
        events = await stream.until("turn-end")
        assert streamed_text(events) == "Still here."
        assert events[-1] == ("turn-end", {"turn": 2, "reason": {"type": "completed"}})


async def test_agents_work_side_by_side(aiohttp_client: AiohttpClient) -> None:
    client = await serve(aiohttp_client, ScriptedModel([echo_then_hang, echo_then_hang]))
    a, b = await watch(client, "a"), await watch(client, "b")
    await send(client, "a", "one")
    await send(client, "b", "two")

    # Both are mid-answer at the same time, and each client sees only its own agent.
    block_end = {"type": "block-end", "index": 0}
    seen_a = await a.until(
        "chunk", chunk={**block_end, "block": {"type": "text", "text": "echo: one"}}
    )
    seen_b = await b.until(
        "chunk", chunk={**block_end, "block": {"type": "text", "text": "echo: two"}}
    )
    assert (streamed_text(seen_a), streamed_text(seen_b)) == ("echo: one", "echo: two")
    listing = await (await client.get("/agents")).json()
    assert sorted(listing["agents"], key=lambda agent: str(agent["id"])) == [
        {"id": "a", "status": "running"},
        {"id": "b", "status": "running"},
    ]

    await client.post("/agents/a/abort")
    assert (await a.until("turn-end"))[-1][1]["reason"] == {
        "type": "aborted",
        "reason": "aborted by a client",
    }
    harness = client.app[HARNESS]
    assert [(agent.id, agent.status) for agent in harness.agents.list()] == [
        ("a", "idle"),
        ("b", "running"),
    ]
    await client.post("/agents/b/abort", json={})
    assert (await b.until("turn-end"))[-1][1]["reason"]["type"] == "aborted"


async def test_tool_results_are_part_of_the_feed(aiohttp_client: AiohttpClient) -> None:
    @tool
    def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    model = ScriptedModel([tool_call("c1", "add", {"a": 1, "b": 2}), text_response("3")], (add,))
    client = await serve(aiohttp_client, model)
    stream = await watch(client, "a")
    await send(client, "a", "1 + 2?")
    events = await stream.until("turn-end")
    result = {"turn": 1, "step": 1, "call_id": "c1", "content": [{"type": "text", "text": "3"}]}
    assert ("tool-result", result) in events
    assert streamed_text(events) == "3"


async def test_an_agent_resumes_its_stored_session_after_a_restart(
    aiohttp_client: AiohttpClient,
) -> None:
    store = MemoryStore()  # stands in for persistence_jsonl or persistence_sqlite
    client = await serve(aiohttp_client, ScriptedModel([text_response("Noted.")]), store)
    stream = await watch(client, "a")
    await send(client, "a", "my number is 42")
    await stream.until("turn-end")
    await client.close()

    model = ScriptedModel([text_response("It was 42.")])
    client = await serve(aiohttp_client, model, store)
    stream = await watch(client, "a")
    assert await send(client, "a", "what was my number?") == {
        "agent": "a",
        "created": True,
        "resumed": True,
    }
    await stream.until("turn-end")
    history = [text_of(message.content) for message in model.adapter.requests[0].messages]
    assert history == ["my number is 42", "Noted.", "what was my number?"]


async def test_bad_requests_say_what_is_wrong(aiohttp_client: AiohttpClient) -> None:
    client = await serve(aiohttp_client, ScriptedModel([]))

    async def error(response: ClientResponse) -> tuple[int, str]:
        return response.status, (await response.json())["error"]

    messages = "/agents/a/messages"
    assert await error(await client.post(messages, data="text")) == (400, "the body is not JSON")
    assert await error(await client.post(messages, json=["hi"])) == (
        400,
        "the body must be a JSON object",
    )
    empty = await client.post(messages, json={"text": " "})
    assert await error(empty) == (400, 'send {"text": "..."} with a non-empty string')
    assert await error(await client.post("/agents/zz/abort")) == (404, "no agent 'zz'")
    assert (await client.get("/agents/a.b/events")).status == 404
    assert (await client.get("/agents")).status == 200


async def test_an_idle_abort_is_accepted_and_changes_nothing(
    aiohttp_client: AiohttpClient,
) -> None:
    client = await serve(aiohttp_client, ScriptedModel([text_response("Hi.")]))
    stream = await watch(client, "a")
    await send(client, "a", "hello")
    await stream.until("status", status="idle")
    response = await client.post("/agents/a/abort")
    assert await response.json() == {"agent": "a", "aborting": False}


async def test_stopping_the_app_ends_the_streams_and_closes_the_harness(
    aiohttp_client: AiohttpClient,
) -> None:
    client = await serve(aiohttp_client, ScriptedModel([echo_then_hang]))
    stream = await watch(client, "a")
    await send(client, "a", "hello")
    await stream.until("turn-start")
    harness = client.app[HARNESS]
    agent = harness.agents.get("a")
    assert agent is not None

    await client.server.close()

    await stream.rest()  # returns: the stream ended
    assert not harness.started
    assert agent.status == "disposed"
    assert agent.session.events[-1].type == "turn/end"


async def test_a_quiet_stream_gets_keep_alive_comments(aiohttp_client: AiohttpClient) -> None:
    client = await serve(aiohttp_client, ScriptedModel([]), heartbeat_s=0.01)
    stream = await watch(client, "a")
    async with asyncio.timeout(5):
        while stream.parser.comments < 3:  # ": connected", then keep-alives
            stream.parser.feed(await stream.response.content.readany())


def test_a_client_that_falls_behind_is_cut_off() -> None:
    hub = EventHub(queue_size=2)
    slow = hub.subscribe("a")
    for n in range(3):
        hub.publish("a", "n", {"n": n})
    assert hub.watchers("a") == 0
    queued = [slow.queue.get_nowait() for _ in range(slow.queue.qsize())]
    assert queued == [ServerSentEvent("overflow", {"limit": 2}), None]
    assert not slow.offer(ServerSentEvent("n", {"n": 3}))
    hub.close()  # nobody left to tell


async def test_the_real_adapter_against_the_mock_server(
    aiohttp_client: AiohttpClient,
    mock_server: MockServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What production looks like: entry-point plugins, the DeepSeek adapter, real HTTP."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))  # where persistence_jsonl writes
    mock_server.queue(reply(text="Hello from the mock server."))
    settings = Settings("deepseek-v4-flash", system_prompt="Be brief.")
    client = await aiohttp_client(create_app(settings, config=deepseek_config(mock_server)))
    stream = await watch(client, "a")
    await send(client, "a", "hi")
    events = await stream.until("turn-end")
    assert streamed_text(events) == "Hello from the mock server."
    assert events[-1] == ("turn-end", {"turn": 1, "reason": {"type": "completed"}})
    assert mock_server.requests[0].body["messages"][-1] == {"role": "user", "content": "hi"}
