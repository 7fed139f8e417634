"""``dsh mcp serve --transport http``: the Host and Origin checks on every listening address,
the bearer token (required off loopback, compared in constant time, never logged), and the
options that follow the command (``--config`` after ``serve``, as MCP clients write them).

Real HTTP on 127.x only: ``127.0.0.2`` is a loopback address that is not one of the three
names the MCP SDK protects by itself, the audit's case; ``0.0.0.0`` is refused before
anything is bound."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import httpx2
import structlog
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent
from structlog.testing import capture_logs

from dsh import AgentOptions, Harness, hookimpl
from dsh._log import configure_logging
from dsh.cli import main
from dsh.testing import ScriptedAdapter, text_response
from dsh_plugins.mcp import McpPlugin, commands, serve

TOKEN = "s3cret-token-0123456789"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class Model:
    def __init__(self, adapter: ScriptedAdapter) -> None:
        self.adapter = adapter

    @hookimpl
    def dsh_register_llm_adapters(self, register: Any) -> None:
        register(["scripted"], self.adapter)


def texts(result: CallToolResult) -> list[str]:
    return [c.text for c in result.content if isinstance(c, TextContent)]


def listening(host: str) -> socket.socket:
    """A socket listening on a free port of ``host``: a client can connect at once (the
    kernel queues it), before the server accepts; no waiting for the server to start."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, 0))
    sock.listen(16)
    return sock


@asynccontextmanager
async def serving(server: Any, host: str = "127.0.0.1", **guards: Any) -> AsyncIterator[str]:
    """``server`` over streamable HTTP on ``host`` with ``guards``; yields the endpoint."""
    sock = listening(host)
    port = sock.getsockname()[1]
    uv = serve.http_server(server, host, port, **guards)
    task = asyncio.create_task(uv.serve(sockets=[sock]))
    try:
        yield f"http://{host}:{port}/mcp"
    finally:
        uv.should_exit = True
        await asyncio.wait_for(task, 30)
        sock.close()


@asynccontextmanager
async def client(url: str, token: str | None = None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def post(url: str, **headers: str) -> httpx2.Response:
    """An ``initialize`` request with ``headers`` (``Host`` and ``Origin`` as given)."""
    async with httpx2.AsyncClient(timeout=60) as http:
        return await http.post(url, content=json.dumps(INITIALIZE), headers={**ACCEPT, **headers})


def host_of(url: str) -> str:
    return url.split("/")[2]


async def test_host_and_origin_are_checked_on_a_loopback_address_the_sdk_does_not_know() -> None:
    adapter = ScriptedAdapter([text_response("hello")])
    async with Harness(load_entrypoints=False, plugins=[Model(adapter)]) as h:
        server = serve.build(h, AgentOptions(model="scripted"))
        async with serving(server, "127.0.0.2") as url:
            evil_host = await post(url, Host="evil.example")
            evil_origin = await post(url, Origin="http://evil.example")
            evil_port_origin = await post(url, Origin="http://127.0.0.2.evil.example:80")
            plain = await post(url)
            local_origin = await post(url, Origin="http://localhost:3000")
            async with client(url) as session:
                result = await session.call_tool("ask", {"prompt": "hi"})
    assert (evil_host.status_code, evil_host.text) == (421, "Invalid Host header")
    assert (evil_origin.status_code, evil_origin.text) == (403, "Invalid Origin header")
    assert evil_port_origin.status_code == 403
    assert plain.status_code == 200 and local_origin.status_code == 200
    assert texts(result)[0] == "hello"
    assert adapter.requests and len(adapter.requests) == 1  # only the real client ran the agent


async def test_allowed_hosts_and_origins_are_configurable() -> None:
    async with Harness(load_entrypoints=False, plugins=[Model(ScriptedAdapter([]))]) as h:
        server = serve.build(h, AgentOptions(model="scripted"))
        guards = {"allowed_hosts": ["dsh.internal"], "allowed_origins": ["https://app.example"]}
        async with serving(server, "127.0.0.2", **guards) as url:
            named = await post(url, Host="dsh.internal:8765")
            bare = await post(url, Host="dsh.internal")
            origin = await post(url, Origin="https://app.example")
            other = await post(url, Host="other.internal")
    assert (named.status_code, bare.status_code, origin.status_code) == (200, 200, 200)
    assert other.status_code == 421


def test_the_patterns_of_allowed_hosts() -> None:
    checks = serve.security("::1", ["fe80::1", "[fe80::2]", "h:8765", "g:*"])
    assert checks.allowed_hosts == [
        "127.0.0.1",
        "127.0.0.1:*",
        "localhost",
        "localhost:*",
        "[::1]",
        "[::1]:*",
        "[fe80::1]",
        "[fe80::1]:*",
        "[fe80::2]",
        "[fe80::2]:*",
        "h:8765",
        "g:*",
    ]
    # A wildcard address adds no name: clients reach it by names given as allowed hosts.
    assert "0.0.0.0:*" not in serve.security("0.0.0.0").allowed_hosts
    assert checks.enable_dns_rebinding_protection


async def test_a_token_is_required_of_every_request_when_given() -> None:
    adapter = ScriptedAdapter([text_response("authorized")])
    async with Harness(load_entrypoints=False, plugins=[Model(adapter)]) as h:
        server = serve.build(h, AgentOptions(model="scripted"))
        async with serving(server, "127.0.0.2", token=TOKEN) as url:
            missing = await post(url)
            wrong = await post(url, Authorization="Bearer wrong-token")
            prefix = await post(url, Authorization=f"Bearer {TOKEN[:-1]}")
            scheme = await post(url, Authorization=f"Basic {TOKEN}")
            evil_host = await post(url, Host="evil.example", Authorization=f"Bearer {TOKEN}")
            lower = await post(url, Authorization=f"bearer {TOKEN}")
            async with client(url, TOKEN) as session:
                result = await session.call_tool("ask", {"prompt": "hi"})
    for refused in (missing, wrong, prefix, scheme):
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == 'Bearer realm="dsh"'
        assert TOKEN not in refused.text
    assert evil_host.status_code == 421  # the token does not lift the Host check
    assert lower.status_code == 200
    assert texts(result)[0] == "authorized"


def test_which_addresses_need_a_token() -> None:
    for loopback in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"):
        assert serve.is_loopback(loopback)
        assert serve.refusal(loopback, None) is None
    for open_ in ("0.0.0.0", "::", "192.168.1.5", "example.com"):
        assert not serve.is_loopback(open_)
        reason = serve.refusal(open_, None)
        assert reason is not None and "\n" not in reason
        assert reason.startswith(f"--host {open_} is not a loopback address")
        assert serve.refusal(open_, TOKEN) is None


def serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands.configure(parser)
    return parser.parse_args(["serve", *argv])


class Bound(AssertionError):
    """The server would have listened."""


@pytest.fixture
def no_binding(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """``serve.run_http`` replaced: what it was given is recorded, nothing listens."""
    calls: list[dict[str, Any]] = []

    async def run_http(server: Any, host: str, port: int, **guards: Any) -> None:
        calls.append({"host": host, "port": port, **guards})

    monkeypatch.setattr(serve, "run_http", run_http)
    return calls


def harness(config: dict[str, Any] | None = None) -> Harness:
    plugins = [McpPlugin(), Model(ScriptedAdapter([]))]
    return Harness(load_entrypoints=False, plugins=plugins, config=config or {})


async def test_serve_refuses_an_open_address_without_a_token(
    no_binding: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(commands.TOKEN_VARIABLE, raising=False)
    h = harness()
    args = serve_args("--transport", "http", "--host", "0.0.0.0", "-m", "scripted")
    assert await commands.run(h, args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("dsh mcp serve: --host 0.0.0.0 is not a loopback address")
    assert no_binding == [] and not h.started


async def test_the_token_comes_from_the_option_the_environment_or_the_config(
    no_binding: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(commands.TOKEN_VARIABLE, raising=False)
    monkeypatch.setenv("SERVE_TOKEN_FOR_TEST", "from-config")
    configured = {"mcp": {"serve": {"token": "${SERVE_TOKEN_FOR_TEST}"}}}
    http = ("--transport", "http", "--host", "0.0.0.0", "-m", "scripted")
    assert await commands.run(harness(configured), serve_args(*http)) == 0
    monkeypatch.setenv(commands.TOKEN_VARIABLE, "from-env")
    assert await commands.run(harness(configured), serve_args(*http)) == 0
    assert await commands.run(harness(configured), serve_args(*http, "--token", "opt")) == 0
    assert [call["token"] for call in no_binding] == ["from-config", "from-env", "opt"]


async def test_serve_passes_allowed_hosts_and_origins_from_options_and_config(
    no_binding: list[dict[str, Any]],
) -> None:
    config = {"mcp": {"serve": {"allowed_hosts": ["a.lan"], "allowed_origins": ["https://a"]}}}
    args = serve_args(
        "--transport", "http", "-m", "scripted", "--allow-host", "b.lan", "--allow-origin", "x"
    )
    assert await commands.run(harness(config), args) == 0
    [call] = no_binding
    assert (call["host"], call["token"]) == ("127.0.0.1", None)
    assert call["allowed_hosts"] == ["a.lan", "b.lan"]
    assert call["allowed_origins"] == ["https://a", "x"]


async def test_serve_refuses_a_token_variable_that_is_not_set(
    no_binding: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(commands.TOKEN_VARIABLE, raising=False)
    monkeypatch.delenv("NOT_SET_FOR_TEST", raising=False)
    config = {"mcp": {"serve": {"token": "${NOT_SET_FOR_TEST}"}}}
    assert await commands.run(harness(config), serve_args("--transport", "http")) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsh mcp serve: [mcp.serve] token refers to the environment variable")
    assert no_binding == []


async def test_serve_refuses_a_workspace_that_is_not_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing"
    assert await commands.run(harness(), serve_args("--workspace", str(missing))) == 2
    assert capsys.readouterr().err == (
        f"dsh mcp serve: the workspace {str(missing)!r} is not a directory\n"
    )


@pytest.fixture
def debug_logs() -> Iterator[None]:
    """structlog at debug level (what a user with --log-level debug sees), reset after."""
    configure_logging("json", "debug", io.StringIO())
    yield
    structlog.reset_defaults()


async def test_the_token_is_never_logged(
    debug_logs: None,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.delenv(commands.TOKEN_VARIABLE, raising=False)
    sock = listening("127.0.0.2")
    port = sock.getsockname()[1]
    real_http_server = serve.http_server
    servers: list[Any] = []

    async def run_http(server: Any, host: str, port: int, **guards: Any) -> None:
        servers.append(real_http_server(server, host, port, **guards))
        await servers[0].serve(sockets=[sock])

    monkeypatch.setattr(serve, "run_http", run_http)
    adapter = ScriptedAdapter([text_response("done")])
    h = Harness(load_entrypoints=False, plugins=[McpPlugin(), Model(adapter)])
    argv = ("--transport", "http", "--host", "127.0.0.2", "--port", str(port), "--token", TOKEN)
    url = f"http://127.0.0.2:{port}/mcp"
    with capture_logs() as logs:
        running = asyncio.create_task(commands.run(h, serve_args(*argv, "-m", "scripted")))
        try:
            unauthorized = await post(url, Authorization=f"Bearer {TOKEN}x")
            evil = await post(url, Host="evil.example", Authorization=f"Bearer {TOKEN}")
            async with client(url, TOKEN) as session:
                result = await session.call_tool("ask", {"prompt": "hi"})
        finally:
            for uv in servers:
                uv.should_exit = True
            code = await asyncio.wait_for(running, 60)
            sock.close()
    assert code == 0
    assert (unauthorized.status_code, evil.status_code) == (401, 421)
    assert texts(result)[0] == "done"
    events = [entry["event"] for entry in logs]
    assert "serving MCP over streamable HTTP" in events
    assert "refused an MCP request without the bearer token" in events
    assert "evil.example" in caplog.text  # the SDK logged the refused request, not the token
    captured = capsys.readouterr()
    for text in (repr(logs), caplog.text, captured.out, captured.err):
        assert TOKEN not in text


def test_global_options_may_follow_the_serve_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the Claude Desktop and Cursor entry in docs/mcp.md writes it: ``dsh mcp serve ...
    --config FILE``; the log options work there too."""
    config = tmp_path / "elsewhere.toml"
    config.write_text('[terminal_ui]\nmodel = "model-from-the-config"\n')
    monkeypatch.chdir(tmp_path)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    argv = ["mcp", "serve", "--config", str(config), "--log-level", "error", "--log-format", "json"]
    try:
        # The parse accepted the options, and the config was read: its model is not served.
        assert main(argv) == 2
    finally:
        structlog.reset_defaults()  # the CLI configures logging process-wide
    assert err.getvalue().startswith(
        "dsh mcp serve: no adapter serves the model 'model-from-the-config': pass --model"
    )
