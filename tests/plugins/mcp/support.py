"""A harness with MCP servers from :mod:`.server_app`, a scripted model and a permission
policy; an HTTP server on loopback; process checks. Needs the ``mcp`` SDK."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import uvicorn

from dsh import AgentOptions, Harness, ToolExecution, ToolOutcome, hookimpl
from dsh.testing import ScriptedAdapter, ScriptEntry
from dsh.values._agent import Agent
from dsh.values._content import Text
from dsh.values._events import SessionEvent
from dsh_plugins.mcp import McpPlugin
from dsh_plugins.mcp.serve import http_server
from dsh_plugins.permissions import PermissionsPlugin
from tests.plugins.mcp import server_app

APP = str(Path(server_app.__file__).resolve())


def stdio(mode: str = "stdio", **options: Any) -> dict[str, Any]:
    """Config of a stdio server running :mod:`.server_app` in ``mode``."""
    return {"command": sys.executable, "args": [APP, mode], **options}


class Approver:
    """A host answering approval questions with ``answer``, recording them."""

    def __init__(self, answer: bool | None) -> None:
        self.answer = answer
        self.asked: list[str] = []

    @hookimpl
    def dsh_tools_approve(self, execution: ToolExecution, reason: str) -> bool | None:
        self.asked.append(execution.name)
        return self.answer


def harness(
    servers: dict[str, Any], mode: str = "full", hosts: Sequence[object] = (), **mcp: Any
) -> Harness:
    config = {"mcp": {"servers": servers, **mcp}, "permissions": {"mode": mode}}
    return Harness(
        load_entrypoints=False,
        plugins=[McpPlugin(), PermissionsPlugin(), *hosts],
        config=config,
    )


def agent(h: Harness, script: Sequence[ScriptEntry]) -> tuple[Agent, ScriptedAdapter]:
    adapter = ScriptedAdapter(script)
    h.llm.register_adapter(["scripted"], adapter)
    return h.agent_loop.create("main", AgentOptions(model="scripted")), adapter


async def call(h: Harness, name: str, /, **args: Any) -> ToolOutcome:
    return await h.tools.execute(ToolExecution("c1", name, json.dumps(args)))


def text(outcome: ToolOutcome) -> str:
    return "".join(b.text for b in outcome.content if isinstance(b, Text))


def results(events: Sequence[SessionEvent]) -> list[Any]:
    return [e.data for e in events if e.type == "tool/result"]


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text())


async def gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether process ``pid`` ends within ``within_s`` seconds."""
    deadline = asyncio.get_running_loop().time() + within_s
    while alive(pid):
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


@asynccontextmanager
async def serving(server: Any, json_response: bool = False) -> AsyncIterator[str]:
    """``server`` (an SDK ``MCPServer``) on a free loopback port; yields its endpoint URL. With
    ``json_response`` it answers a request with a JSON body instead of an event stream (the
    SDK's own app, without dsh's serving checks)."""
    if json_response:
        app = server.streamable_http_app(json_response=True)
        uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    else:
        uv = http_server(server, "127.0.0.1", 0)
    task = asyncio.create_task(uv.serve())
    try:
        async with asyncio.timeout(10):
            while not uv.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        port = uv.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        uv.should_exit = True
        await asyncio.wait_for(task, 10)


@asynccontextmanager
async def web_server(name: str = "web") -> AsyncIterator[str]:
    async with serving(server_app.build(name)) as url:
        yield url
