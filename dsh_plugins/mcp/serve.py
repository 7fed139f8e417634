"""``dsh mcp serve``: a dsh agent as an MCP server, so another MCP client (Claude Desktop,
Claude Code, Cursor, another dsh) can delegate a task to it.

The server has one tool, ``ask(prompt, session_id?)``: it runs one turn of an agent of this
harness and answers with the agent's last message. Without ``session_id`` a new conversation
starts; with the id an earlier answer gave, the conversation goes on (a session stored by a
persistence plugin is resumed). Turns of one conversation run one at a time.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from dsh.agent import Agent, AgentOptions
from dsh.content import text_of
from dsh.errors import DshError
from dsh.events import AssistantMessage, SessionEvent, TurnCompleted, TurnEnd
from dsh.eventtext import outcome
from dsh.harness import Harness

__all__ = ["Conversations", "build", "http_server", "run_http", "run_stdio"]

ASK = (
    "Ask a dsh agent to do a task or answer a question; it works with its own model and tools "
    "and answers when its turn ends. Pass the session_id of an earlier answer to continue "
    "that conversation; leave it out to start a new one."
)


class Conversations:
    """The agents ``ask`` talks to, by session id."""

    def __init__(self, harness: Harness, options: AgentOptions) -> None:
        self._harness = harness
        self._options = options
        self._agents: dict[str, Agent] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._ids = itertools.count(1)

    async def ask(self, prompt: str, session_id: str | None = None) -> CallToolResult:
        """Run one turn; the answer, then the session id to continue with."""
        try:
            agent = await self._agent(session_id)
        except DshError as exc:
            return _result(f"unknown session_id {session_id!r}: {exc}", is_error=True)
        lock = self._locks.setdefault(agent.session.id, asyncio.Lock())
        async with lock:
            start = len(agent.session.events)
            agent.send(prompt)
            await agent.wait_idle()
            events = agent.session.events[start:]
        answer, ended = _answer(events)
        note = f"session_id: {agent.session.id} (pass it to ask to continue this conversation)"
        if ended is not None:
            return _result(f"the turn ended {ended}\n{answer}".rstrip(), note, is_error=True)
        return _result(answer, note)

    async def _agent(self, session_id: str | None) -> Agent:
        if session_id is not None and session_id in self._agents:
            return self._agents[session_id]
        agent_id = f"mcp-{next(self._ids)}"
        agent: Agent
        if session_id is None:
            agent = self._harness.agent_loop.create(agent_id, self._options)
        else:
            agent = await self._harness.agent_loop.resume(session_id, self._options, agent_id)
        self._agents[agent.session.id] = agent
        return agent


def _answer(events: Sequence[SessionEvent]) -> tuple[str, str | None]:
    """The text of the turn's last assistant message, and how the turn ended unless it
    completed."""
    answer, ended = "", None
    for event in events:
        if isinstance(event.data, AssistantMessage):
            answer = text_of(event.data.content)
        elif isinstance(event.data, TurnEnd) and not isinstance(event.data.reason, TurnCompleted):
            ended = outcome(event.data.reason)
    return answer, ended


def _result(*texts: str, is_error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=t) for t in texts], is_error=is_error)


def build(harness: Harness, options: AgentOptions, name: str = "dsh") -> MCPServer[Any]:
    """An MCP server whose ``ask`` tool runs turns of agents of ``harness``."""
    conversations = Conversations(harness, options)
    server: MCPServer[Any] = MCPServer(
        name,
        instructions="A dsh agent. Call ask with a task; continue with the session_id it gives.",
        log_level="WARNING",
    )
    hints = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=True)
    server.add_tool(conversations.ask, name="ask", description=ASK, annotations=hints)
    return server


async def run_stdio(server: MCPServer[Any]) -> None:
    """Serve on this process's stdin and stdout until stdin closes."""
    await server.run_stdio_async()


#: Seconds a stopping HTTP server waits for connected clients before cancelling them.
SHUTDOWN_GRACE_S = 2


def http_server(server: MCPServer[Any], host: str, port: int) -> uvicorn.Server:
    """A uvicorn server for the streamable HTTP endpoint ``http://<host>:<port>/mcp``.

    A stopping server gives connected clients :data:`SHUTDOWN_GRACE_S` to finish, then cancels
    their requests: a client that keeps its event stream open must not hold the shutdown."""
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=SHUTDOWN_GRACE_S
    )
    return uvicorn.Server(config)


async def run_http(server: MCPServer[Any], host: str, port: int) -> None:
    """Serve streamable HTTP until interrupted."""
    await http_server(server, host, port).serve()
