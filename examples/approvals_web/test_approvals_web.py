"""The approvals web host over HTTP, with aiohttp's test client; the model is a
``ScriptedAdapter`` and the sessions live in an in-memory store shared by the apps of a test
(as a disk is shared by a host and its restart)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from approvals_web import HARNESS, Settings, create_app

from dsh import Agent, Tool, hookimpl
from dsh.plugin import ToolSchema, text_of
from dsh.testing import MemoryStore, ScriptedAdapter, text_response, tool_call_response
from dsh_plugins.permissions import PermissionsPlugin

if TYPE_CHECKING:  # TestClient is generic from aiohttp 3.10 on
    from aiohttp.test_utils import TestClient

    Client = TestClient[web.Request, web.Application]
    AiohttpClient = Callable[[web.Application], Awaitable[Client]]


class Model:
    """The model ``scripted`` and a ``deploy`` tool, which runs commands (so it asks)."""

    def __init__(self, *script: Any) -> None:
        self.adapter = ScriptedAdapter(list(script))
        self.deployed: list[str] = []

    @hookimpl
    def dsh_register_llm_adapters(self, register: Callable[..., object]) -> None:
        register(["scripted"], self.adapter)

    @hookimpl
    def dsh_register_tools(self, register: Callable[[Tool], object]) -> None:
        async def deploy(args: Any, execution: Any) -> str:
            self.deployed.append(execution.call_id)
            return "deployed"

        register(Tool(ToolSchema("deploy", "Deploy."), deploy, effect="execute"))


async def serve(aiohttp_client: AiohttpClient, model: Model, store: MemoryStore) -> Client:
    plugins = [model, store, PermissionsPlugin()]
    app = create_app(Settings("scripted"), plugins=plugins, load_entrypoints=False)
    return await aiohttp_client(app)


def agent_of(client: Client, name: str) -> Agent:
    """The app's agent ``name`` (it exists once a message was sent to it)."""
    agent = client.app[HARNESS].agents.get(name)
    assert agent is not None
    return agent


async def parked(client: Client, name: str = "ops") -> dict[str, Any]:
    """Send a message whose answer calls ``deploy``; the waiting call, once parked."""
    response = await client.post(f"/agents/{name}/messages", json={"text": "ship it"})
    assert response.status == 202
    await agent_of(client, name).wait_idle()
    listing = await (await client.get("/approvals")).json()
    [waiting] = listing["waiting"]
    return dict(waiting)


async def test_a_parked_call_is_listed_and_approved(aiohttp_client: AiohttpClient) -> None:
    model = Model(tool_call_response("c1", "deploy", {}), text_response("shipped"))
    client = await serve(aiohttp_client, model, MemoryStore())
    waiting = await parked(client)
    assert (waiting["session"], waiting["call"], waiting["tool"]) == ("ops", "c1", "deploy")
    assert waiting["effect"] == "execute" and waiting["deadline"] is None
    page = await (await client.get("/")).text()
    assert 'action="/approvals/ops/c1/allow"' in page and "Deny" in page
    response = await client.post("/approvals/ops/c1/allow", json={})
    assert await response.json() == {"session": "ops", "call": "c1", "decision": "allowed"}
    agent = agent_of(client, "ops")
    await agent.wait_idle()
    assert model.deployed == ["c1"] and agent.status == "idle"
    again = await client.post("/approvals/ops/c1/deny")
    assert again.status == 409 and "already decided" in (await again.json())["error"]
    assert "No call waits" in await (await client.get("/")).text()


async def test_the_deny_button_tells_the_model_why(aiohttp_client: AiohttpClient) -> None:
    model = Model(tool_call_response("c1", "deploy", {}), text_response("ok"))
    client = await serve(aiohttp_client, model, MemoryStore())
    await parked(client)
    response = await client.post(
        "/approvals/ops/c1/deny", data={"reason": "freeze week"}, allow_redirects=False
    )
    assert response.status == 303 and response.headers["Location"] == "/"
    await agent_of(client, "ops").wait_idle()
    assert model.deployed == []
    result = model.adapter.requests[-1].messages[-1].content[0]
    assert "freeze week" in text_of(result.content)  # type: ignore[union-attr]


async def test_a_call_parked_before_a_restart_is_decided_after_it(
    aiohttp_client: AiohttpClient,
) -> None:
    store = MemoryStore()
    first = await serve(aiohttp_client, Model(tool_call_response("c1", "deploy", {})), store)
    await parked(first)
    await first.close()  # the host stops: the turn stays parked in the store
    model = Model(text_response("shipped"))
    second = await serve(aiohttp_client, model, store)
    assert (await (await second.get("/approvals")).json()) == {"waiting": []}  # not live here
    response = await second.post("/approvals/ops/c1/allow", json={"reason": "go"})
    assert response.status == 200
    await agent_of(second, "ops").wait_idle()
    assert model.deployed == ["c1"]


async def test_bad_requests_are_answered_in_json(aiohttp_client: AiohttpClient) -> None:
    model = Model(tool_call_response("c1", "deploy", {}))
    client = await serve(aiohttp_client, model, MemoryStore())
    await parked(client)
    unknown = await client.post("/approvals/ops/c9/allow")
    assert unknown.status == 404 and "no call 'c9'" in (await unknown.json())["error"]
    empty = await client.post("/agents/ops/messages", json={"text": " "})
    assert empty.status == 400
    broken = await client.post("/agents/ops/messages", data=b"{", headers={"Content-Type": "x"})
    assert broken.status == 400 and "not JSON" in (await broken.json())["error"]
    listed = await client.post("/agents/ops/messages", json=["text"])
    assert listed.status == 400
    assert model.deployed == []
