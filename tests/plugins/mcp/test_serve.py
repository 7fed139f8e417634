"""``dsh mcp serve``: a dsh agent as an MCP server, driven by the SDK's own client over
streamable HTTP (in process) and over stdio (``dsh`` as a real subprocess)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import io
import json
import shutil
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

import dsh
from dsh import AgentOptions, Harness, hookimpl
from dsh.loop._output import FINAL_RESULT
from dsh.testing import (
    MemoryStore,
    ScriptedAdapter,
    error_response,
    text_response,
    tool_call_response,
)
from dsh.testing.mock import deepseek_config
from dsh.testing.mockserver import MockServer, reply
from dsh_plugins.mcp import McpPlugin, commands, serve
from tests.plugins.mcp.support import serving


class Model:
    """A host plugin serving the scripted model ``scripted``."""

    def __init__(self, adapter: ScriptedAdapter) -> None:
        self.adapter = adapter

    @hookimpl
    def dsh_register_llm_adapters(self, register: Any) -> None:
        register(["scripted"], self.adapter)


def texts(result: CallToolResult) -> list[str]:
    return [c.text for c in result.content if isinstance(c, TextContent)]


def session_id(result: CallToolResult) -> str:
    note = texts(result)[-1]
    assert note.startswith("session_id: ")
    return note.removeprefix("session_id: ").split(" ", 1)[0]


@asynccontextmanager
async def client(url: str) -> AsyncIterator[ClientSession]:
    async with (
        streamable_http_client(url) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def test_serve_over_http_two_turns_keep_their_session() -> None:
    adapter = ScriptedAdapter([text_response("Paris."), text_response("About 2.1 million.")])
    async with Harness(load_entrypoints=False, plugins=[Model(adapter)]) as h:
        server = serve.build(h, AgentOptions(model="scripted"))
        async with serving(server) as url, client(url) as session:
            listed = await session.list_tools()
            first = await session.call_tool("ask", {"prompt": "Capital of France?"})
            second = await session.call_tool(
                "ask", {"prompt": "How many people live there?", "session_id": session_id(first)}
            )
            fresh = await session.call_tool("ask", {"prompt": "Hello?"})
        agents = len(h.agents.list())
    [ask] = listed.tools
    assert ask.name == "ask"
    assert ask.input_schema["required"] == ["prompt"]
    assert set(ask.input_schema["properties"]) == {"prompt", "session_id"}  # no ctx
    assert ask.annotations is not None and ask.annotations.read_only_hint is False
    assert (texts(first)[0], first.is_error) == ("Paris.", False)
    assert (texts(second)[0], session_id(second)) == ("About 2.1 million.", session_id(first))
    # The second turn's request carries the first turn: one conversation.
    history = [m.role for m in adapter.requests[1].messages]
    assert history[-3:] == ["user", "assistant", "user"]
    assert fresh.is_error and session_id(fresh) != session_id(first)
    assert texts(fresh)[0].startswith("the turn ended error: ")
    assert agents == 2


async def test_ask_with_an_unknown_session_id_is_an_error() -> None:
    async with Harness(load_entrypoints=False, plugins=[Model(ScriptedAdapter([]))]) as h:
        conversations = serve.Conversations(h, AgentOptions(model="scripted"))
        result = await conversations.ask("hi", session_id="nope")
    assert result.is_error
    assert texts(result)[0].startswith("unknown session_id 'nope': no stored session 'nope'")


async def test_a_failed_turn_is_an_error_result_with_what_was_said() -> None:
    adapter = ScriptedAdapter([error_response("SERVER", "the model is down")])
    async with Harness(load_entrypoints=False, plugins=[Model(adapter)]) as h:
        conversations = serve.Conversations(h, AgentOptions(model="scripted"))
        result = await conversations.ask("hi")
    assert result.is_error
    assert texts(result)[0] == "the turn ended error: SERVER: the model is down"


@dataclasses.dataclass
class City:
    name: str
    population: int


async def test_the_server_reports_dsh_s_version_and_a_typed_answer_as_structured_content() -> None:
    script = [
        tool_call_response("c1", FINAL_RESULT, {"name": "Oslo", "population": 700000}),
        text_response("Oslo has about 700000 people."),
    ]
    typed = AgentOptions(model="scripted", output_type=City)
    async with Harness(load_entrypoints=False, plugins=[Model(ScriptedAdapter(script))]) as h:
        server = serve.build(h, typed)
        async with (
            serving(server) as url,
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            initialized = await session.initialize()
            answer = await session.call_tool("ask", {"prompt": "Oslo?"})
        plain = serve.Conversations(h, AgentOptions(model="scripted"))
        untyped = await plain.ask("hi")  # the script has run out: an error, and no value
    assert initialized.server_info.name == "dsh"
    assert initialized.server_info.version == dsh.__version__ != ""
    assert not answer.is_error
    assert answer.structured_content == {"name": "Oslo", "population": 700000}
    assert untyped.structured_content is None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands.configure(parser)
    return parser.parse_args(["serve", *argv])


async def test_the_serve_command_over_http() -> None:
    adapter = ScriptedAdapter([text_response("hello from dsh")])
    h = Harness(load_entrypoints=False, plugins=[McpPlugin(), Model(adapter)])
    port = free_port()
    args = serve_args("--transport", "http", "--port", str(port), "-m", "scripted")
    running = asyncio.create_task(commands.run(h, args))
    try:
        result = None
        for _ in range(500):
            try:
                async with client(f"http://127.0.0.1:{port}/mcp") as session:
                    result = await session.call_tool("ask", {"prompt": "hi"})
                break
            except Exception:
                if running.done():
                    raise
                await asyncio.sleep(0.02)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert result is not None and texts(result)[0] == "hello from dsh"
    assert not h.started


async def test_the_serve_command_on_stdio_ends_when_stdin_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BytesIO()))
    h = Harness(load_entrypoints=False, plugins=[McpPlugin(), Model(ScriptedAdapter([]))])
    assert await asyncio.wait_for(commands.run(h, serve_args("-m", "scripted")), 30) == 0


async def test_the_serve_command_needs_a_served_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    h = Harness(load_entrypoints=False, plugins=[McpPlugin()], config={})
    assert await commands.run(h, serve_args()) == 2
    assert "dsh mcp serve: no adapter serves the model '': pass --model" in capsys.readouterr().err


async def test_dsh_mcp_serve_on_stdio_keeps_a_session_across_two_turns(
    mock_server: MockServer, tmp_path: Path
) -> None:
    section = deepseek_config(mock_server)["llm_deepseek"]
    config = tmp_path / "dsh.toml"
    config.write_text(
        f'[llm_deepseek]\nbase_url = "{section["base_url"]}"\napi_key = "{section["api_key"]}"\n'
    )
    params = StdioServerParameters(
        command=sys.executable,
        # As the Claude Desktop and Cursor entry in docs/mcp.md writes it: options after serve.
        args=["-m", "dsh", "mcp", "serve", "-m", "deepseek-flash", "--config", str(config)],
        env={
            "DSH_DISABLE_PLUGINS": (
                "persistence_jsonl,persistence_sqlite,tools_fs,tools_shell,subagents"
            )
        },
        cwd=str(tmp_path),
    )
    errors = (tmp_path / "stderr").open("w")
    try:
        async with asyncio.timeout(60):
            async with (
                stdio_client(params, errlog=errors) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                first = await session.call_tool("ask", {"prompt": 'Say "one"'})
                second = await session.call_tool(
                    "ask", {"prompt": 'Say "two"', "session_id": session_id(first)}
                )
    finally:
        errors.close()
    assert not first.is_error and not second.is_error, (tmp_path / "stderr").read_text()
    assert session_id(second) == session_id(first)
    assert "one" in texts(first)[0] and "two" in texts(second)[0]
    second_request = mock_server.requests[-1].body["messages"]
    assert [m["role"] for m in second_request if m["role"] != "system"] == [
        "user",
        "assistant",
        "user",
    ]


async def test_ask_resumes_a_stored_session_in_a_later_process() -> None:
    store = MemoryStore()
    first_model = ScriptedAdapter([text_response("Noted: the code is 42.")])
    async with Harness(load_entrypoints=False, plugins=[store, Model(first_model)]) as h:
        first = await serve.Conversations(h, AgentOptions(model="scripted")).ask("Code is 42.")
    later_model = ScriptedAdapter([text_response("It is 42.")])
    async with Harness(load_entrypoints=False, plugins=[store, Model(later_model)]) as h:
        conversations = serve.Conversations(h, AgentOptions(model="scripted"))
        later = await conversations.ask("What is the code?", session_id=session_id(first))
    assert (texts(later)[0], session_id(later)) == ("It is 42.", session_id(first))
    said = [m.role for m in later_model.requests[0].messages]
    assert said[-3:] == ["user", "assistant", "user"]


def _desktop_entry() -> dict[str, Any]:
    """The Claude Desktop / Cursor entry of ``docs/mcp.md``, as a user copies it."""
    page = (Path(__file__).parents[3] / "docs" / "mcp.md").read_text()
    block = page.split('```json\n{\n  "mcpServers"', 1)[1].split("```", 1)[0]
    entry: dict[str, Any] = json.loads('{\n  "mcpServers"' + block)["mcpServers"]["dsh"]
    return entry


async def test_the_docs_desktop_entry_runs_as_written(
    mock_server: MockServer, tmp_path: Path
) -> None:
    """Its command and arguments, with the user's paths put in: a project directory and a
    ``dsh.toml`` elsewhere that points dsh at the mock server. The official MCP client starts
    it over stdio, as Claude Desktop and Cursor do, and asks; the agent writes in its
    workspace (``--mode workspace-write``), nowhere else."""
    entry = _desktop_entry()
    assert entry["command"] == "dsh"
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    section = deepseek_config(mock_server)["llm_deepseek"]
    config = home / "dsh.toml"
    config.write_text(
        f'[llm_deepseek]\nbase_url = "{section["base_url"]}"\napi_key = "{section["api_key"]}"\n'
    )
    paths = {"/path/to/project": str(project), "/path/to/dsh.toml": str(config)}
    args = [paths.get(arg, arg) for arg in entry["args"]]
    command = shutil.which("dsh")
    params = StdioServerParameters(
        command=command or sys.executable,
        args=args if command else ["-m", "dsh", *args],
        env={"DSH_DISABLE_PLUGINS": "persistence_jsonl,persistence_sqlite,tools_shell"},
        cwd=str(home),
    )
    mock_server.queue(
        reply(tool_calls=[("c1", "write_file", json.dumps({"path": "note.txt", "content": "hi"}))]),
        reply(text="Wrote the note."),
    )
    errors = (tmp_path / "stderr").open("w")
    try:
        async with asyncio.timeout(60):
            async with (
                stdio_client(params, errlog=errors) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                answer = await session.call_tool("ask", {"prompt": "Write a note"})
    finally:
        errors.close()
    assert not answer.is_error, (tmp_path / "stderr").read_text()
    assert texts(answer)[0] == "Wrote the note."
    assert (project / "note.txt").read_text() == "hi"
