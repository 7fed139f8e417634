"""What a served agent may do: ``read-only`` unless a mode is given (its sub-agents too), its
tools confined to ``--workspace``, and a call that needs approval put to the MCP client as an
elicitation (accepted, declined, failed), or denied with a reason the client reads when the
client cannot be asked. The client is the SDK's own, over streamable HTTP; only the model is
scripted."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession
from mcp.client.session import ClientRequestContext, ElicitationFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    INVALID_REQUEST,
    CallToolResult,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    TextContent,
)

from dsh import AgentOptions, Harness, ToolExecution, hookimpl, tool
from dsh.testing import MemoryStore, ScriptedAdapter, hang, text_response, tool_call_response
from dsh.values._events import SessionEvent, ToolResultEvent, TurnAborted, TurnEnd
from dsh.values._rare_events import PermissionModeChange, SubagentStart
from dsh_plugins.mcp import serve
from dsh_plugins.permissions import PermissionsPlugin
from dsh_plugins.subagents import SubagentsPlugin
from dsh_plugins.tools_fs import FsToolsPlugin

Elicit = ElicitationFnT


class Host:
    """The scripted model, and tools that record their calls: ``deploy`` runs commands (so
    ``workspace-write`` asks about it), ``tag`` declares no effect (``read-only`` asks)."""

    def __init__(self, adapter: ScriptedAdapter) -> None:
        self.adapter = adapter
        self.deployed: list[str] = []

        @tool(effect="execute")
        def deploy(target: str) -> str:
            """Deploy to a target.

            Args:
                target: Where to.
            """
            self.deployed.append(target)
            return f"deployed to {target}"

        @tool
        def tag(name: str) -> str:
            """Tag the release (an undeclared effect: read-only mode asks about it).

            Args:
                name: The tag.
            """
            self.deployed.append(f"tag {name}")
            return f"tagged {name}"

        self.tools = [deploy, tag]

    @hookimpl
    def dsh_register_llm_adapters(self, register: Any) -> None:
        register(["scripted"], self.adapter)

    @hookimpl
    def dsh_register_tools(self, register: Any) -> None:
        for each in self.tools:
            register(each)


def texts(result: CallToolResult) -> list[str]:
    return [c.text for c in result.content if isinstance(c, TextContent)]


def harness(host: Host, *more: object, mode: str = "workspace-write") -> Harness:
    """A harness whose configured ``[permissions] mode`` is ``mode`` (dsh's default)."""
    plugins = [PermissionsPlugin(), FsToolsPlugin(), host, *more]
    config = {"permissions": {"mode": mode}}
    return Harness(load_entrypoints=False, plugins=plugins, config=config)


@asynccontextmanager
async def serving(server: Any) -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)  # connections queue until the server accepts them: nothing to wait for
    port = sock.getsockname()[1]
    uv = serve.http_server(server, "127.0.0.1", port)
    task = asyncio.create_task(uv.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        uv.should_exit = True
        await asyncio.wait_for(task, 30)
        sock.close()


async def ask(server: Any, prompt: str, elicit: Elicit | None = None) -> CallToolResult:
    """One ``ask`` call by an SDK client (answering elicitations with ``elicit`` if given)."""
    async with (
        serving(server) as url,
        streamable_http_client(url) as (read, write),
        ClientSession(read, write, elicitation_callback=elicit) as session,
    ):
        await session.initialize()
        return await session.call_tool("ask", {"prompt": prompt})


def answering(action: str, content: dict[str, Any] | None, asked: list[str]) -> Elicit:
    async def elicit(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params.message)
        assert isinstance(params, ElicitRequestFormParams)
        assert params.requested_schema["required"] == ["allow"]
        return ElicitResult(action=action, content=content)  # type: ignore[arg-type]

    return elicit


def results_in(events: Sequence[SessionEvent]) -> list[ToolResultEvent]:
    return [e.data for e in events if isinstance(e.data, ToolResultEvent)]


def modes_in(events: Sequence[SessionEvent]) -> list[str]:
    return [e.data.mode for e in events if isinstance(e.data, PermissionModeChange)]


def tool_results(h: Harness) -> list[ToolResultEvent]:
    [agent] = h.agents.list()
    return results_in(agent.session.events)


def write_script(path: str = "note.txt") -> list[Any]:
    call = tool_call_response("c1", "write_file", {"path": path, "content": "hello"})
    return [call, text_response("I tried.")]


async def test_a_served_agent_is_read_only_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[permissions] mode`` is ``workspace-write``, as for ``dsh chat``; the served agent
    still may not write."""
    monkeypatch.chdir(tmp_path)
    host = Host(ScriptedAdapter(write_script()))
    async with harness(host) as h:
        result = await ask(serve.build(h, AgentOptions(model="scripted")), "Write a note")
        [denied] = tool_results(h)
        [agent] = h.agents.list()
        modes = modes_in(agent.session.events)
    assert not (tmp_path / "note.txt").exists()
    assert denied.is_error and denied.code == "DENIED"
    assert "read-only" in json.dumps(denied.content, default=str)
    assert modes == ["read-only"]
    assert texts(result)[0] == "I tried."


async def test_a_given_mode_and_workspace_let_it_write_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    monkeypatch.chdir(tmp_path)
    host = Host(ScriptedAdapter(write_script()))
    async with harness(host, mode="read-only") as h:
        options = AgentOptions(model="scripted", workspace=str(workspace))
        await ask(serve.build(h, options, mode="workspace-write"), "Write a note")
        [written] = tool_results(h)
    assert not written.is_error
    assert (workspace / "note.txt").read_text() == "hello"
    assert not (tmp_path / "note.txt").exists()


def deploy_script() -> list[Any]:
    return [tool_call_response("c1", "deploy", {"target": "prod"}), text_response("Over.")]


async def test_a_call_that_needs_approval_asks_the_client_which_accepts() -> None:
    host = Host(ScriptedAdapter(deploy_script()))
    asked: list[str] = []
    async with harness(host) as h:
        server = serve.build(h, AgentOptions(model="scripted"), mode="workspace-write")
        result = await ask(server, "Deploy", answering("accept", {"allow": True}, asked))
    assert host.deployed == ["prod"]
    [message] = asked
    assert message.startswith('The dsh agent wants to run deploy {"target": "prod"}.')
    assert "Allow it?" in message
    assert texts(result)[0] == "Over." and len(texts(result)) == 2  # no note: it ran


@pytest.mark.parametrize(
    ("action", "content"), [("decline", None), ("cancel", None), ("accept", {"allow": False})]
)
async def test_a_call_the_client_does_not_approve_is_denied(
    action: str, content: dict[str, Any] | None
) -> None:
    host = Host(ScriptedAdapter(deploy_script()))
    asked: list[str] = []
    async with harness(host) as h:
        server = serve.build(h, AgentOptions(model="scripted"), mode="workspace-write")
        result = await ask(server, "Deploy", answering(action, content, asked))
        [denied] = tool_results(h)
    assert host.deployed == [] and len(asked) == 1
    assert denied.code == "DENIED"
    assert (
        texts(result)[1] == 'not run: deploy {"target": "prod"}: the MCP client did not approve it'
    )


async def test_a_client_without_elicitation_gets_the_reason_in_the_answer() -> None:
    host = Host(ScriptedAdapter(deploy_script()))
    async with harness(host) as h:
        server = serve.build(h, AgentOptions(model="scripted"), mode="workspace-write")
        result = await ask(server, "Deploy")
        [denied] = tool_results(h)
    assert host.deployed == [] and denied.code == "DENIED"
    assert not result.is_error
    assert texts(result)[0] == "Over."
    note = texts(result)[1]
    assert note.startswith('not run: deploy {"target": "prod"} needs approval (deploy runs')
    assert note.endswith(
        "and this MCP client cannot be asked (it does not support elicitation): serve with "
        "another --mode, or allow it with a [permissions] rule"
    )
    assert texts(result)[2].startswith("session_id: ")


async def test_with_approval_defer_a_call_nobody_can_approve_parks_the_turn() -> None:
    host = Host(ScriptedAdapter(deploy_script()))
    plugins = [PermissionsPlugin(), FsToolsPlugin(), host]
    config = {"permissions": {"approval": "defer"}}
    async with Harness(load_entrypoints=False, plugins=plugins, config=config) as h:
        server = serve.build(h, AgentOptions(model="scripted"), mode="workspace-write")
        result = await ask(server, "Deploy")
        [agent] = h.agents.list()
        assert agent.status == "waiting" and tool_results(h) == []
        session = agent.session.id
    assert host.deployed == [] and result.is_error
    [waiting, note] = texts(result)
    assert waiting.startswith('the turn waits for approval of deploy {"target": "prod"} (deploy')
    assert waiting.endswith(f"dsh approvals allow|deny {session} c1; the turn then goes on")
    assert note.startswith(f"session_id: {session}")


async def test_an_elicitation_that_fails_denies_the_call() -> None:
    async def refuse(context: ClientRequestContext, params: ElicitRequestParams) -> ErrorData:
        return ErrorData(code=INVALID_REQUEST, message="no forms here")

    host = Host(ScriptedAdapter(deploy_script()))
    async with harness(host) as h:
        server = serve.build(h, AgentOptions(model="scripted"), mode="workspace-write")
        result = await ask(server, "Deploy", refuse)
    assert host.deployed == []
    assert texts(result)[1] == (
        'not run: deploy {"target": "prod"}: asking the MCP client failed (no forms here)'
    )


async def test_an_answer_that_does_not_fit_the_form_denies_the_call() -> None:
    host = Host(ScriptedAdapter(deploy_script()))
    async with harness(host) as h:
        server = serve.build(h, AgentOptions(model="scripted"), mode="workspace-write")
        result = await ask(server, "Deploy", answering("accept", {"allow": "perhaps"}, []))
    assert host.deployed == []
    assert texts(result)[1].startswith('not run: deploy {"target": "prod"}: asking the MCP')
    assert "does not match the requested schema" in texts(result)[1]


async def test_called_without_a_client_nobody_can_be_asked() -> None:
    host = Host(ScriptedAdapter([*deploy_script(), text_response("Not served.")]))
    async with harness(host) as h:
        conversations = serve.Conversations(h, AgentOptions(model="scripted"), "workspace-write")
        h.plugins.register(conversations)
        result = await conversations.ask("Deploy")
        [agent] = h.agents.list()
        # Between turns nobody is asking either: a late call of the served agent is denied.
        late = ToolExecution("c9", "deploy", '{"target": "x"}', agent)
        after = await conversations.dsh_tools_approve(late, "it runs commands")
        # Calls of agents that are not served are left to other approvers.
        other = h.agent_loop.create("other", AgentOptions(model="scripted"))
        other.send("hi")
        await other.wait_idle()
        foreign = await conversations.dsh_tools_approve(
            ToolExecution("c8", "deploy", "{}", other), "it runs commands"
        )
        unowned = await conversations.dsh_tools_approve(
            ToolExecution("c7", "deploy", "{}"), "it runs commands"
        )
    assert host.deployed == []
    assert "needs approval (" in texts(result)[1]
    assert texts(result)[1].endswith(
        "and nobody can be asked: serve with another --mode, or allow it with a [permissions] rule"
    )
    assert (after, foreign, unowned) == (None, None, None)
    assert modes_in(other.session.events) == []  # an agent that is not served keeps its mode


async def test_sub_agents_work_in_the_served_mode_and_ask_the_same_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sub-agent is held to the served agent's mode (the permissions plugin judges it in the
    strictest of its own mode and its ancestors'): in ``[permissions] mode``
    (``workspace-write``) alone it would write, and tag without asking. Its approval questions
    go to the client whose ask runs. Its own session logs no mode: a stricter profile mode
    would stay its own."""
    monkeypatch.chdir(tmp_path)
    task = {"description": "note", "prompt": "Write a note, then tag"}
    script = [
        tool_call_response("p1", "task", task),  # the served agent delegates
        tool_call_response("s1", "write_file", {"path": "note.txt", "content": "x"}),
        tool_call_response("s2", "tag", {"name": "v1"}),
        text_response("Could not write; tagged."),  # the sub-agent's answer
        text_response("Done."),
    ]
    host = Host(ScriptedAdapter(script))
    asked: list[str] = []
    store = MemoryStore()
    async with harness(host, SubagentsPlugin(), store) as h:
        server = serve.build(h, AgentOptions(model="scripted"))
        result = await ask(server, "Go", answering("accept", {"allow": True}, asked))
        [served] = h.agents.list()
        [start] = [e.data for e in served.session.events if isinstance(e.data, SubagentStart)]
        child = await h.sessions.load(start.session_id)
    assert not (tmp_path / "note.txt").exists()
    assert host.deployed == ["tag v1"]
    # Read-only mode asks about the delegation too; both questions reached this client.
    assert [message.split(" ", 7)[6] for message in asked] == ["task", "tag"]
    assert texts(result)[0] == "Done."
    assert child is not None
    assert modes_in(child) == []
    results = {result.call_id: result for result in results_in(child)}
    assert results["s1"].code == "DENIED" and not results["s2"].is_error


async def test_a_resumed_session_is_put_in_the_served_mode_once() -> None:
    store = MemoryStore()
    first = Host(ScriptedAdapter([text_response("one")]))
    async with harness(first, store) as h:
        conversations = serve.Conversations(h, AgentOptions(model="scripted"))
        answer = await conversations.ask("hi")
    session_id = texts(answer)[-1].removeprefix("session_id: ").split(" ", 1)[0]
    later = Host(ScriptedAdapter([text_response("two")]))
    async with harness(later, store) as h:
        conversations = serve.Conversations(h, AgentOptions(model="scripted"), "full")
        await conversations.ask("again", session_id)
        [agent] = h.agents.list()
        modes = modes_in(agent.session.events)
    assert modes == ["read-only", "full"]


async def test_a_cancelled_ask_aborts_its_turn() -> None:
    adapter = ScriptedAdapter([hang()])
    async with harness(Host(adapter)) as h:
        conversations = serve.Conversations(h, AgentOptions(model="scripted"))
        asking = asyncio.create_task(conversations.ask("Work forever"))
        await adapter.started.wait()
        asking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asking
        [agent] = h.agents.list()
        await agent.wait_idle()
        [end] = [e.data for e in agent.session.events if isinstance(e.data, TurnEnd)]
    assert isinstance(end.reason, TurnAborted)
    assert end.reason.reason == "the MCP client cancelled the call"
