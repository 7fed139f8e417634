"""``dsh mcp serve``: a dsh agent as an MCP server, so another MCP client (Claude Desktop,
Claude Code, Cursor, another dsh) can delegate a task to it.

The server has one tool, ``ask(prompt, session_id?)``: it runs one turn of an agent of this
harness and answers with the agent's last message, and, when the agent has an ``output_type``,
with the turn's typed value as ``structuredContent``. Without ``session_id`` a new conversation
starts; with the id an earlier answer gave, the conversation goes on (a session stored by a
persistence plugin is resumed). Turns of one conversation run one at a time.

The served agent works in permission mode ``read-only`` unless told otherwise, and its
sub-agents in the same mode. A tool call the policy asks about is put to the MCP client as an
elicitation, when the client supports it; otherwise it is denied, and the answer says why.

Over HTTP the ``Host`` and ``Origin`` headers are checked whatever the listening address (the
SDK checks them only on ``127.0.0.1``, ``localhost`` and ``::1``), and a bearer token, when
given, is required of every request: :func:`refusal` says why a server must not start (a
non-loopback address without a token).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import itertools
from collections.abc import Sequence
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

import dsh
from dsh.plugin import (
    Agent,
    AgentOptions,
    AssistantMessage,
    DshError,
    Harness,
    OutputResult,
    PermissionMode,
    PermissionModeChange,
    SessionEvent,
    ToolExecution,
    TurnCompleted,
    TurnEnd,
    brief,
    get_logger,
    hookimpl,
    outcome,
    text_of,
)

__all__ = [
    "DEFAULT_MODE",
    "Approval",
    "BearerToken",
    "Conversations",
    "build",
    "http_server",
    "is_loopback",
    "refusal",
    "run_http",
    "run_stdio",
    "security",
]

log = get_logger("dsh.mcp.serve")

#: The permission mode of a served agent unless one is given.
DEFAULT_MODE: PermissionMode = "read-only"

ASK = (
    "Ask a dsh agent to do a task or answer a question; it works with its own model and tools "
    "and answers when its turn ends. Pass the session_id of an earlier answer to continue "
    "that conversation; leave it out to start a new one."
)


class Approval(BaseModel):
    """What the MCP client is asked when a tool call needs approval."""

    allow: bool = Field(description="Run this tool call")


class _Asking:
    """One ``ask`` call while its turn runs: the client's request (``None`` when called
    directly), and notes for the answer about calls that were not run."""

    def __init__(self, context: Context[Any, Any] | None) -> None:
        self.context = context
        self.notes: list[str] = []


class Conversations:
    """The agents ``ask`` talks to, by session id. A plugin of the harness (:func:`build`
    registers it): it keeps the agents' sub-agents in ``mode`` and answers approval questions
    of all of them by asking the MCP client whose ``ask`` is running."""

    def __init__(
        self, harness: Harness, options: AgentOptions, mode: PermissionMode = DEFAULT_MODE
    ) -> None:
        self._harness = harness
        self._options = options
        self._mode = mode
        self._agents: dict[str, Agent] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._asking: dict[str, _Asking] = {}
        self._ids = itertools.count(1)

    async def ask(
        self,
        prompt: str,
        session_id: str | None = None,
        ctx: Context[Any, Any] | None = None,
    ) -> CallToolResult:
        """Run one turn; the answer, notes on calls that were not run, then the session id
        to continue with; the typed value (an agent with an ``output_type``) as structured
        content."""
        try:
            agent = await self._agent(session_id)
        except DshError as exc:
            return _result(f"unknown session_id {session_id!r}: {exc}", is_error=True)
        lock = self._locks.setdefault(agent.session.id, asyncio.Lock())
        async with lock:
            asking = self._asking[agent.session.id] = _Asking(ctx)
            try:
                start = len(agent.session.events)
                agent.send(prompt)
                await agent.wait_idle()
                events = agent.session.events[start:]
            except asyncio.CancelledError:
                # The client cancelled its request: the turn must not go on working unseen.
                agent.abort("the MCP client cancelled the call")
                raise
            finally:
                del self._asking[agent.session.id]
        note = f"session_id: {agent.session.id} (pass it to ask to continue this conversation)"
        if agent.status == "waiting":  # [permissions] approval = "defer": the turn is parked
            return _result(*_waiting(agent), note, is_error=True)
        answer, ended = _answer(events)
        if ended is not None:
            text = f"the turn ended {ended}\n{answer}".rstrip()
            return _result(text, *asking.notes, note, is_error=True)
        # The accepted value is a JSON object (a type that is not one is wrapped in "result").
        typed = [e.data.value for e in events if isinstance(e.data, OutputResult)]
        return _result(answer, *asking.notes, note, structured=typed[-1] if typed else None)

    async def _agent(self, session_id: str | None) -> Agent:
        if session_id is not None and session_id in self._agents:
            return self._agents[session_id]
        agent_id = f"mcp-{next(self._ids)}"
        agent: Agent
        if session_id is None:
            agent = self._harness.agent_loop.create(agent_id, self._options)
        else:
            agent = await self._harness.agent_loop.resume(session_id, self._options, agent_id)
        _keep_mode(agent, self._mode)
        self._agents[agent.session.id] = agent
        return agent

    def _root(self, agent: Agent | None) -> Agent | None:
        """The served agent ``agent`` is (or descends from), or ``None`` if it is not ours."""
        while agent is not None:
            parent = self._harness.family.parent_of(agent)
            if parent is None:
                return agent if self._agents.get(agent.session.id) is agent else None
            agent = parent
        return None

    @hookimpl
    async def dsh_tools_approve(self, execution: ToolExecution, reason: str) -> bool | None:
        """Ask the MCP client whose ``ask`` runs the call's turn, through an elicitation. When
        it cannot be asked, answer ``None`` (nobody could be asked: denied) with a note in the
        answer; ``False`` is the client's no."""
        root = self._root(execution.agent)
        if root is None:
            return None
        asking = self._asking.get(root.session.id)
        if asking is None:  # a sub-agent still working after its parent's turn ended
            return None
        call = f"{execution.name} {brief(execution.arguments, 300)}"
        why = _cannot_ask(asking.context)
        if asking.context is None or why is not None:
            asking.notes.append(
                f"not run: {call} needs approval ({reason}), and {why or 'nobody can be asked'}: "
                "serve with another --mode, or allow it with a [permissions] rule"
            )
            return None
        message = f"The dsh agent wants to run {call}. It needs approval: {reason}. Allow it?"
        try:
            answer = await asking.context.elicit(message, Approval)
        except (MCPError, ValueError) as exc:
            text = exc.error.message if isinstance(exc, MCPError) else str(exc)
            asking.notes.append(f"not run: {call}: asking the MCP client failed ({text})")
            return None
        if answer.action == "accept" and answer.data.allow:
            return True
        asking.notes.append(f"not run: {call}: the MCP client did not approve it")
        return False


def _cannot_ask(context: Context[Any, Any] | None) -> str | None:
    """Why the client of ``context`` cannot be asked for approval, or ``None`` if it can (it
    declared form elicitation: an empty elicitation capability means form)."""
    if context is None:
        return None
    capabilities = context.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None or (elicitation.form is None and elicitation.url is not None):
        return "this MCP client cannot be asked (it does not support elicitation)"
    return None


def _keep_mode(agent: Agent, mode: PermissionMode) -> None:
    """Put ``agent`` in permission ``mode`` unless its session is in it already."""
    last = next(agent.session.events.select(PermissionModeChange, reverse=True), None)
    if last is None or not (isinstance(last.data, PermissionModeChange) and last.data.mode == mode):
        agent.set_permission_mode(mode)


def _waiting(agent: Agent) -> list[str]:
    """What a parked turn waits for, and how to decide it."""
    return [
        f"the turn waits for approval of {p.name} {brief(p.summary, 300)} ({p.reason}): decide "
        f"it with dsh approvals allow|deny {p.session_id} {p.call_id}; the turn then goes on"
        for p in agent.pending_approvals()
    ]


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


def _result(
    *texts: str, is_error: bool = False, structured: dict[str, Any] | None = None
) -> CallToolResult:
    content: list[Any] = [TextContent(text=t) for t in texts]
    return CallToolResult(content=content, is_error=is_error, structured_content=structured)


def build(
    harness: Harness,
    options: AgentOptions,
    name: str = "dsh",
    mode: PermissionMode = DEFAULT_MODE,
) -> MCPServer[Any]:
    """An MCP server whose ``ask`` tool runs turns of agents of ``harness`` in permission
    ``mode``, their tools confined to ``options.workspace``."""
    conversations = Conversations(harness, options, mode)
    harness.plugins.register(conversations)
    server: MCPServer[Any] = MCPServer(
        name,
        version=dsh.__version__,
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

#: The names of this machine's loopback interface the SDK trusts.
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_WILDCARDS = ("", "0.0.0.0", "::")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is on this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def refusal(host: str, token: str | None) -> str | None:
    """Why an HTTP server on ``host`` must not start (one line), or ``None``: every web page
    and every machine that reaches a non-loopback address could run the agent, so it needs a
    token."""
    if token or is_loopback(host):
        return None
    return (
        f"--host {host} is not a loopback address, so anyone who reaches it could run the "
        "agent: give a bearer token (--token, DSH_MCP_TOKEN or [mcp.serve] token)"
    )


def _host_names(name: str) -> list[str]:
    """The ``Host`` header patterns that ``name`` means: with any port, and without one,
    unless it names its port (``host:8765``, ``host:*``)."""
    if name.count(":") > 1 and not name.startswith("["):  # a bare IPv6 address
        name = f"[{name}]"
    if name.endswith("]") or ":" not in name:
        return [name, f"{name}:*"]
    return [name]


def security(
    host: str, allowed_hosts: Sequence[str] = (), allowed_origins: Sequence[str] = ()
) -> TransportSecuritySettings:
    """The ``Host`` and ``Origin`` checks for a server listening on ``host``: the loopback
    names and ``host`` itself (unless it is a wildcard), plus ``allowed_hosts``; loopback
    origins plus ``allowed_origins``. A request without ``Origin`` (not from a browser)
    passes that check."""
    names = [*_LOOPBACK_HOSTS, *([] if host in _WILDCARDS else [host]), *allowed_hosts]
    hosts = list(dict.fromkeys(value for name in names for value in _host_names(name)))
    origins = [f"http://{name}:*" for name in _LOOPBACK_HOSTS]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=list(dict.fromkeys([*origins, *allowed_origins])),
    )


class BearerToken:
    """ASGI middleware: an HTTP request without ``Authorization: Bearer <token>`` gets 401.
    The token is compared in constant time and never logged."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._authorized(Headers(scope=scope)):
            client = scope.get("client")
            log.warning(
                "refused an MCP request without the bearer token",
                client=f"{client[0]}:{client[1]}" if client else None,
            )
            response = Response(
                "a bearer token is required (Authorization: Bearer <token>)",
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="dsh"'},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, headers: Headers) -> bool:
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        # Header values are Latin-1 as received: their bytes are compared with the token's.
        given = credentials.strip().encode("latin-1")
        return hmac.compare_digest(given, self._token) and scheme.lower() == "bearer"


def http_server(
    server: MCPServer[Any],
    host: str,
    port: int,
    *,
    token: str | None = None,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
) -> uvicorn.Server:
    """A uvicorn server for the streamable HTTP endpoint ``http://<host>:<port>/mcp``, with
    the :func:`security` checks, and the ``token`` required when given.

    A stopping server gives connected clients :data:`SHUTDOWN_GRACE_S` to finish, then cancels
    their requests: a client that keeps its event stream open must not hold the shutdown."""
    checks = security(host, allowed_hosts, allowed_origins)
    app: ASGIApp = server.streamable_http_app(host=host, transport_security=checks)
    if token:
        app = BearerToken(app, token)
    log.info(
        "serving MCP over streamable HTTP",
        endpoint=f"http://{host}:{port}/mcp",
        bearer_token="required" if token else "not required",
        allowed_hosts=checks.allowed_hosts,
        allowed_origins=checks.allowed_origins,
    )
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=SHUTDOWN_GRACE_S
    )
    return uvicorn.Server(config)


async def run_http(
    server: MCPServer[Any],
    host: str,
    port: int,
    *,
    token: str | None = None,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
) -> None:
    """Serve streamable HTTP until interrupted."""
    uv = http_server(
        server,
        host,
        port,
        token=token,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
    )
    await uv.serve()
