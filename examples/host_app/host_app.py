"""A web application that embeds one dsh ``Harness``: many agents, each behind a small HTTP API.

::

    POST /agents/{id}/messages   {"text": "..."}: queue a message (the agent is created, or its
                                 stored session resumed, on first use); 202 Accepted
    GET  /agents/{id}/events     server-sent events: the agent's stream chunks and lifecycle
    POST /agents/{id}/abort      {"reason": "..."} (optional): cancel the running step
    GET  /agents                 every live agent and its status

The harness starts and closes with the application (``cleanup_ctx``). A host plugin,
:class:`EventFeed`, turns hook calls into events; :class:`EventHub` fans them out to every
connected client through one bounded ``asyncio.Queue`` per client. Event payloads are JSON made
by dsh's converter, so a chunk reads exactly as it is logged in the session.

Run it with ``python host_app.py --model deepseek-v4-flash`` (see README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web
from attrs import frozen

from dsh import Agent, AgentOptions, Harness, hookimpl
from dsh.plugin import (
    AgentStatus,
    Session,
    SessionEvent,
    StreamChunk,
    ToolResultEvent,
    TurnEndReason,
    unstructure,
)

__all__ = [
    "EventFeed",
    "EventHub",
    "ServerSentEvent",
    "Settings",
    "Subscriber",
    "create_app",
    "main",
]

#: Agent ids: what a client may name an agent (it also names the agent's stored session).
AGENT_ID = "{id:[A-Za-z0-9_-]{1,64}}"


@frozen
class ServerSentEvent:
    """One server-sent event: its ``event:`` name and its JSON ``data:``."""

    name: str
    data: Mapping[str, Any]

    def encode(self) -> bytes:
        payload = json.dumps(self.data, ensure_ascii=False, separators=(",", ":"))
        return f"event: {self.name}\ndata: {payload}\n\n".encode()


# ---------------------------------------------------------------------------------------------
# Fan-out: one queue per connected client.
# ---------------------------------------------------------------------------------------------


class Subscriber:
    """One connected client: the events waiting to be written to it. ``None`` ends its stream.

    At most ``limit`` events wait; a client that falls further behind is cut off (it would only
    fall further) with an ``overflow`` event, and may reconnect.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.queue: asyncio.Queue[ServerSentEvent | None] = asyncio.Queue()
        self.closed = False

    def offer(self, event: ServerSentEvent) -> bool:
        """Queue ``event``; False once the stream is closed (or closes now, overflowing)."""
        if self.closed:
            return False
        if self.queue.qsize() >= self.limit:
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(ServerSentEvent("overflow", {"limit": self.limit}))
            self.close()
            return False
        self.queue.put_nowait(event)
        return True

    def close(self) -> None:
        """End the stream once what is queued has been written."""
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)


class EventHub:
    """Every agent's connected clients; publishing an event offers it to each of them."""

    def __init__(self, queue_size: int = 1000) -> None:
        self.queue_size = queue_size
        self._subscribers: dict[str, set[Subscriber]] = {}

    def subscribe(self, agent_id: str) -> Subscriber:
        subscriber = Subscriber(self.queue_size)
        self._subscribers.setdefault(agent_id, set()).add(subscriber)
        return subscriber

    def unsubscribe(self, agent_id: str, subscriber: Subscriber) -> None:
        subscribers = self._subscribers.get(agent_id, set())
        subscribers.discard(subscriber)
        if not subscribers:
            self._subscribers.pop(agent_id, None)

    def watchers(self, agent_id: str) -> int:
        return len(self._subscribers.get(agent_id, ()))

    def publish(self, agent_id: str, name: str, data: Mapping[str, Any]) -> None:
        event = ServerSentEvent(name, data)
        for subscriber in list(self._subscribers.get(agent_id, ())):
            if not subscriber.offer(event):
                self.unsubscribe(agent_id, subscriber)

    def close(self) -> None:
        """End every stream (the application is shutting down)."""
        for subscribers in self._subscribers.values():
            for subscriber in subscribers:
                subscriber.close()
        self._subscribers.clear()


class EventFeed:
    """The host plugin: what the agents do, as events for their clients."""

    def __init__(self, hub: EventHub) -> None:
        self.hub = hub
        self._agent_of_session: dict[str, str] = {}

    @hookimpl
    def dsh_agent_created(self, agent: Agent) -> None:
        self._agent_of_session[agent.session.id] = agent.id

    @hookimpl
    def dsh_agent_disposed(self, agent: Agent) -> None:
        self._agent_of_session.pop(agent.session.id, None)

    @hookimpl
    def dsh_agent_status(self, agent: Agent, status: AgentStatus) -> None:
        self.hub.publish(agent.id, "status", {"status": status})

    @hookimpl
    def dsh_agent_turn_start(self, agent: Agent, turn: int) -> None:
        self.hub.publish(agent.id, "turn-start", {"turn": turn})

    @hookimpl
    def dsh_agent_stream_chunk(
        self, agent: Agent, turn: int, step: int, chunk: StreamChunk
    ) -> None:
        # Called for every token: publishing only copies a reference into each client's queue.
        self.hub.publish(
            agent.id, "chunk", {"turn": turn, "step": step, "chunk": unstructure(chunk)}
        )

    @hookimpl
    def dsh_session_event(self, session: Session, event: SessionEvent) -> None:
        # Tool results are not part of the model's stream; the session log has them.
        agent_id = self._agent_of_session.get(session.id)
        if agent_id is not None and isinstance(event.data, ToolResultEvent):
            self.hub.publish(agent_id, "tool-result", unstructure(event.data))

    @hookimpl
    def dsh_agent_turn_end(self, agent: Agent, turn: int, reason: TurnEndReason) -> None:
        self.hub.publish(agent.id, "turn-end", {"turn": turn, "reason": unstructure(reason)})


# ---------------------------------------------------------------------------------------------
# The application.
# ---------------------------------------------------------------------------------------------


@frozen
class Settings:
    """How new agents are made and how event streams behave."""

    model: str
    system_prompt: str = ""
    heartbeat_s: float = 15.0


HARNESS = web.AppKey("harness", Harness)
HUB = web.AppKey("hub", EventHub)
SETTINGS = web.AppKey("settings", Settings)
CREATING = web.AppKey("creating", asyncio.Lock)


def create_app(
    settings: Settings,
    *,
    plugins: Iterable[object] = (),
    config: Mapping[str, Any] | str | Path | None = None,
    load_entrypoints: bool = True,
    queue_size: int = 1000,
) -> web.Application:
    """The application, with its harness (``plugins``, ``config`` and ``load_entrypoints`` are
    passed to :class:`~dsh.Harness`). Each client may lag ``queue_size`` events behind."""
    app = web.Application()
    hub = EventHub(queue_size)
    app[HUB] = hub
    app[SETTINGS] = settings
    app[CREATING] = asyncio.Lock()
    app[HARNESS] = Harness(
        plugins=[EventFeed(hub), *plugins], config=config, load_entrypoints=load_entrypoints
    )
    app.cleanup_ctx.append(_harness_lifetime)
    app.on_shutdown.append(_end_streams)
    app.router.add_get("/agents", list_agents)
    app.router.add_post(f"/agents/{AGENT_ID}/messages", post_message)
    app.router.add_get(f"/agents/{AGENT_ID}/events", stream_events)
    app.router.add_post(f"/agents/{AGENT_ID}/abort", abort)
    return app


async def _harness_lifetime(app: web.Application) -> AsyncIterator[None]:
    async with app[HARNESS]:
        yield


async def _end_streams(app: web.Application) -> None:
    # Before the server waits for open requests: event streams would otherwise hold it up.
    app[HUB].close()


def _error(status: type[web.HTTPError], message: str) -> web.HTTPError:
    return status(text=json.dumps({"error": message}), content_type="application/json")


async def _json_body(request: web.Request, required: bool) -> dict[str, Any]:
    if not required and not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except ValueError:
        raise _error(web.HTTPBadRequest, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise _error(web.HTTPBadRequest, "the body must be a JSON object")
    return body


async def _agent(app: web.Application, agent_id: str) -> tuple[Agent, str]:
    """The live agent ``agent_id`` and how it came to be: ``live`` (it was), ``resumed`` (from
    its stored session) or ``created``."""
    harness = app[HARNESS]
    async with app[CREATING]:  # two first messages to one agent must not both create it
        agent = harness.agents.get(agent_id)
        if agent is not None:
            return agent, "live"
        settings = app[SETTINGS]
        options = AgentOptions(model=settings.model, system_prompt=settings.system_prompt)
        session_id = f"{agent_id}-session"
        if await harness.sessions.load(session_id) is None:
            return harness.agent_loop.create(agent_id, options, session_id=session_id), "created"
        return await harness.agent_loop.resume(session_id, options, agent_id), "resumed"


async def post_message(request: web.Request) -> web.Response:
    body = await _json_body(request, required=True)
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        raise _error(web.HTTPBadRequest, 'send {"text": "..."} with a non-empty string')
    agent, origin = await _agent(request.app, request.match_info["id"])
    agent.send(text)
    created = origin != "live"
    reply = {"agent": agent.id, "created": created, "resumed": origin == "resumed"}
    return web.json_response(reply, status=202)


async def abort(request: web.Request) -> web.Response:
    agent_id = request.match_info["id"]
    agent = request.app[HARNESS].agents.get(agent_id)
    if agent is None:
        raise _error(web.HTTPNotFound, f"no agent {agent_id!r}")
    reason = (await _json_body(request, required=False)).get("reason", "aborted by a client")
    running = agent.status == "running"
    agent.abort(str(reason))
    return web.json_response({"agent": agent_id, "aborting": running}, status=202)


async def list_agents(request: web.Request) -> web.Response:
    harness = request.app[HARNESS]
    agents = [{"id": a.id, "status": a.status} for a in harness.agents.list()]
    return web.json_response({"agents": agents})


async def stream_events(request: web.Request) -> web.StreamResponse:
    """Server-sent events for one agent (it need not exist yet), until the client leaves or the
    application stops. A comment line goes out every ``heartbeat_s`` of silence."""
    agent_id = request.match_info["id"]
    hub = request.app[HUB]
    subscriber = hub.subscribe(agent_id)  # before the headers go out: nothing is missed after
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    try:
        await response.prepare(request)
        await response.write(b": connected\n\n")
        await _pump(subscriber, response, request.app[SETTINGS].heartbeat_s)
    except ConnectionResetError:
        pass  # the client went away
    finally:
        hub.unsubscribe(agent_id, subscriber)
    return response


async def _pump(subscriber: Subscriber, response: web.StreamResponse, heartbeat_s: float) -> None:
    while True:
        try:
            event = await asyncio.wait_for(subscriber.queue.get(), heartbeat_s)
        except TimeoutError:
            await response.write(b": keep-alive\n\n")
            continue
        if event is None:
            return
        await response.write(event.encode())


def main(argv: Sequence[str] | None = None) -> None:
    """``python host_app.py``: serve until interrupted."""
    parser = argparse.ArgumentParser(description="A web app embedding a dsh harness.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--model", default="deepseek-v4-flash")
    parser.add_argument("--system-prompt", default="")
    parser.add_argument("--config", help="dsh TOML config (default: ./dsh.toml if present)")
    args = parser.parse_args(argv)
    config = args.config or ("dsh.toml" if Path("dsh.toml").is_file() else None)
    settings = Settings(args.model, args.system_prompt)
    web.run_app(create_app(settings, config=config), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
