"""What a hostile MCP server cannot do to dsh: real servers (:mod:`.hostile_server`, stdio
subprocesses) that write one endless line, nest a message too deeply to parse, name tools as
no model API takes them, send malformed schemas, or offer 10,000 tools."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

pytest.importorskip("mcp")

import httpx2
from mcp.shared.exceptions import MCPError

from dsh_plugins.mcp import McpServers
from dsh_plugins.mcp.client import Connection
from dsh_plugins.mcp.config import McpError
from dsh_plugins.mcp.http import BoundedTransport
from dsh_plugins.mcp.stdio import LineReader, parse
from dsh_plugins.mcp.tools import dsh_name
from tests.plugins.mcp import hostile_server, server_app
from tests.plugins.mcp.support import call, gone, harness, serving, text

HOSTILE = str(Path(hostile_server.__file__).resolve())
#: Far longer than any of these tests may take: a server that is not failed at once would
#: leave the test to pytest's timeout.
NEVER_S = 600
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def hostile(mode: str, pids: Path, **options: Any) -> dict[str, Any]:
    env = {"MCP_TEST_PIDS": str(pids), **options.pop("env", {})}
    return {"command": sys.executable, "args": [HOSTILE, mode], "env": env, **options}


@pytest.fixture
def pids(tmp_path: Path) -> Path:
    return tmp_path / "pids"


def started(pids: Path) -> list[int]:
    return [int(pid) for pid in pids.read_text().split()]


async def all_gone(pids: Path) -> bool:
    return all([await gone(pid) for pid in started(pids)])


def connection(h: Any, name: str) -> Connection:
    servers: McpServers = h.mcp
    return servers._connections[name]


# -- 8: what is read from a server is bounded ------------------------------------------------


def test_the_line_reader_holds_at_most_its_limit() -> None:
    reader = LineReader(10)
    assert reader.feed(b'{"a": 1}\n{"b"') == [b'{"a": 1}']
    assert reader.feed(b": 2}\n\n") == [b'{"b": 2}', b""]
    assert reader.feed(b"0123456789") == []
    assert reader.peak == 10
    assert reader.feed(b"x") == []
    assert reader.failure is not None and reader.failure.code == "MCP_PROTOCOL_ERROR"
    assert "more than max_message_bytes (10 bytes)" in str(reader.failure)
    with pytest.raises(McpError, match="max_message_bytes"):
        reader.feed(b"\n")  # nothing more is read once it failed
    assert reader.peak == 10
    short = LineReader(4)
    assert short.feed(b"12345\n") == [] and short.failure is not None  # too long though it ends


def test_messages_completed_before_the_flood_in_the_same_read_are_delivered() -> None:
    """Found by fuzz/mcp_framing.py: the messages of a read that also overflowed were dropped,
    so how the server's output was cut into reads changed what reached the session."""
    reader = LineReader(8)
    assert reader.feed(b'{"a":1}\n' + b"x" * 20) == [b'{"a":1}']
    assert reader.failure is not None


def test_a_line_that_is_not_json_rpc_is_handed_on_and_a_too_deep_one_is_refused() -> None:
    assert isinstance(parse(b"not json"), ValueError)
    with pytest.raises(McpError, match="nested too deeply to parse") as caught:
        parse(b"[" * 300 + b"]" * 300)
    assert caught.value.code == "MCP_PROTOCOL_ERROR"


#: What a call answered over the limit ends with: an event of an event stream over it ends the
#: stream (the SDK's limit, set to dsh's), so the connection is opened again on the next call;
#: a JSON body over it fails the call alone.
OVER_THE_LIMIT = {
    False: (
        "MCP_SERVER_CRASHED",
        r"Error: MCP server 'web' went away during the call of 'big' \(MCPError: SSE stream "
        r"failed: .*\b100000\b.*\); it is started again on the next call",
    ),
    True: (
        "MCP_ERROR",
        r"Error: MCP server 'web' refused the call of 'big': Failed to parse JSON response: the "
        r"server sent a message of [\d,]+ bytes, over max_message_bytes \(100,000 bytes\) \(MCP "
        r"error -32700\)",
    ),
}


@pytest.mark.parametrize("json_response", [False, True], ids=["event-stream", "json"])
async def test_an_http_server_answering_over_the_limit_fails_that_call(
    json_response: bool,
) -> None:
    """A streamable HTTP server's answer is bounded as a stdio server's message is: an event
    of its event stream, or its JSON body, over ``max_message_bytes`` fails that call with the
    limit named, and the server's next call is answered."""
    async with serving(server_app.build("web"), json_response=json_response) as url:
        server = {"url": url, "max_message_bytes": 100_000, "timeout_s": NEVER_S}
        async with harness({"web": server}) as h:
            over = await call(h, "mcp__web__big")  # a megabyte of text, JSON-encoded
            after = await call(h, "mcp__web__echo", text="again")
            mcp: McpServers = h.mcp
            [status] = mcp.status()
    code, message = OVER_THE_LIMIT[json_response]
    assert over.code == code
    assert re.fullmatch(message, text(over)), text(over)
    assert text(after) == "echo: again"
    assert status.state == "running"


async def test_a_body_longer_than_it_declares_is_cut_at_the_limit() -> None:
    """A response whose ``Content-Length`` is within the limit but whose body is not (or that
    declares none) is read up to the limit, then refused; one that declares more is refused
    before its body is read; an event stream is left to the SDK, which bounds each event."""
    sent: list[int] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        size = int(request.url.params["size"])
        sent.append(size)
        body = httpx2.ByteStream(b"x" * size)
        return httpx2.Response(200, headers={"content-type": "application/json"}, stream=body)

    bounded = BoundedTransport(1000, httpx2.MockTransport(answer))
    async with httpx2.AsyncClient(transport=bounded) as client:
        assert (await client.get("http://127.0.0.1/?size=1000")).content == b"x" * 1000
        with pytest.raises(httpx2.StreamError, match=r"more than 1,000 bytes, over max_messa"):
            await client.get("http://127.0.0.1/?size=1001")
        declared = httpx2.Response(200, headers={"content-length": "5000"}, content=b"")
        refusing = BoundedTransport(1000, httpx2.MockTransport(lambda _: declared))
        async with httpx2.AsyncClient(transport=refusing) as eager:
            with pytest.raises(httpx2.StreamError, match=r"of 5,000 bytes, over max_message_bytes"):
                await eager.get("http://127.0.0.1/")
        events = httpx2.Response(
            200, headers={"content-type": "text/event-stream"}, content=b"data: " + b"y" * 5000
        )
        streaming = BoundedTransport(1000, httpx2.MockTransport(lambda _: events))
        async with httpx2.AsyncClient(transport=streaming) as sse:
            assert len((await sse.get("http://127.0.0.1/")).content) == 5006  # the SDK bounds it
    assert sent == [1000, 1001]


async def test_a_server_writing_one_endless_line_fails_and_is_restarted(pids: Path) -> None:
    limit = 100_000
    server = hostile("flood", pids, timeout_s=NEVER_S)
    async with harness({"h": server}, max_message_bytes=limit) as h:
        flooded = await call(h, "mcp__h__flood")
        reader = connection(h, "h").reader
        mcp: McpServers = h.mcp
        [failed] = mcp.status()
        after = await call(h, "mcp__h__echo", text="again")
        [running] = mcp.status()
    assert flooded.code == "MCP_PROTOCOL_ERROR"
    assert text(flooded) == (
        "Error: MCP server 'h' failed: it sent more than max_message_bytes (100000 bytes) "
        "without ending the message (a message is one line of JSON); dsh stopped reading from "
        "it; it is started again on the next call"
    )
    assert reader is not None and 0 < reader.peak <= limit
    assert (failed.state, failed.error) == ("failed", text(flooded).removeprefix("Error: "))
    assert text(after) == "called echo"
    assert running.state == "running"
    assert len(started(pids)) == 2  # the flooding one and its successor
    assert await all_gone(pids)


async def test_calls_beside_a_flood_all_end_with_its_reason(pids: Path) -> None:
    async with harness({"h": hostile("flood", pids)}, max_message_bytes=1024) as h:
        outcomes = await asyncio.gather(*(call(h, "mcp__h__flood") for _ in range(2)))
    assert [o.code for o in outcomes] == ["MCP_PROTOCOL_ERROR"] * 2
    assert text(outcomes[0]) == text(outcomes[1])
    assert "max_message_bytes (1024 bytes)" in text(outcomes[1])
    assert await all_gone(pids)


async def test_a_server_that_stops_reading_is_gone_for_the_call_and_restarted(
    pids: Path,
) -> None:
    async with harness({"h": hostile("deaf", pids)}) as h:
        unheard = await call(h, "mcp__h__echo", text="hello?")
        again = await call(h, "mcp__h__echo", text="hello?")  # a new server, as deaf
    assert unheard.code == again.code == "MCP_SERVER_CRASHED"
    assert text(unheard) == (
        "Error: MCP server 'h' went away during the call of 'echo' (MCPError: Connection "
        "closed); it is started again on the next call"
    )
    assert len(started(pids)) == 2
    assert await all_gone(pids)


async def test_a_server_flooding_outside_a_dsh_call_is_failed_at_once(pids: Path) -> None:
    """The flood answers a request made past the tool registry: no call notices the end, the
    connection does, and the next call starts the server again."""
    server = hostile("flood", pids)
    async with harness({"h": server}, max_message_bytes=1024) as h:
        conn = connection(h, "h")
        assert conn._session is not None and conn._runner is not None
        runner = conn._runner[0]
        with pytest.raises(MCPError, match="Connection closed"):
            await conn._session.call_tool("flood", {})
        await asyncio.wait({runner})
        mcp: McpServers = h.mcp
        [failed] = mcp.status()
        after = await call(h, "mcp__h__echo", text="again")
    assert failed.state == "failed"
    assert failed.error is not None and "max_message_bytes (1024 bytes)" in failed.error
    assert text(after) == "called echo"
    assert await all_gone(pids)


async def test_a_server_flooding_before_it_starts_fails_at_once(pids: Path) -> None:
    server = hostile("flood-at-start", pids, start_timeout_s=NEVER_S)
    async with harness({"h": server}, max_message_bytes=4096) as h:
        mcp: McpServers = h.mcp
        [status] = mcp.status()
    assert (status.state, status.code) == ("failed", "MCP_START_FAILED")
    assert status.error == (
        "MCP server 'h' failed to start: it sent more than max_message_bytes (4096 bytes) "
        "without ending the message (a message is one line of JSON); dsh stopped reading from it"
    )
    assert await all_gone(pids)


# -- 10 (the part the transport does): a tool list too deep to parse -------------------------


async def test_a_schema_too_deep_to_parse_fails_its_server_at_once(pids: Path) -> None:
    servers = {"deep": hostile("deep", pids, start_timeout_s=NEVER_S)}
    async with harness(servers) as h:
        mcp: McpServers = h.mcp
        [status] = mcp.status()
    assert (status.state, status.code) == ("failed", "MCP_START_FAILED")
    assert (status.error or "").startswith(
        "MCP server 'deep' failed to start: it sent a message nested too deeply to parse ("
    )
    assert await all_gone(pids)


# -- 9: the names offered to a model ---------------------------------------------------------


async def test_tool_names_are_safe_stable_unique_and_map_back_exactly(pids: Path) -> None:
    with capture_logs() as logs:
        async with harness({"h": hostile("names", pids)}) as h:
            names = [n for n in h.tools.names() if n.startswith("mcp__h__")]
            answers = {n: text(await call(h, n)) for n in names}
            mcp: McpServers = h.mcp
            [status] = mcp.status()
    long, unicode, accented, dotted = (
        dsh_name("h", n)
        for n in (
            hostile_server.LONG,
            hostile_server.UNICODE,
            hostile_server.ACCENTED,
            hostile_server.DOTTED,
        )
    )
    assert sorted(names) == sorted([long, unicode, accented, dotted, "mcp__h__ok"])
    assert all(NAME.match(name) for name in names)
    assert long == "mcp__h__" + "n" * 47 + "_91c45f5c"
    assert (unicode, accented, dotted) == (
        "mcp__h__407dd16f",
        "mcp__h__creer_fiche_65bbf2bc",
        "mcp__h__files_read_601e4eb6",
    )
    assert answers == {
        long: f"called {hostile_server.LONG}",
        unicode: f"called {hostile_server.UNICODE}",
        accented: f"called {hostile_server.ACCENTED}",
        dotted: f"called {hostile_server.DOTTED}",
        "mcp__h__ok": "called ok",
    }
    taken = hostile_server.TAKEN
    why = f"its dsh name 'mcp__h__{taken}' is that of its tool 'files.read' already"
    assert status.problems == (f"tool {taken!r} is not offered: {why}",)
    warnings = [e for e in logs if e["event"] == "MCP tool not offered"]
    assert [(e["server"], e["tool"], e["error"]) for e in warnings] == [("h", taken, why)]
    assert await all_gone(pids)


def test_dsh_names_of_long_server_names_still_fit() -> None:
    server = "s" * 32
    assert len(dsh_name(server, "n" * 5000)) == 64
    assert dsh_name(server, "ok") == f"mcp__{server}__ok"
    assert dsh_name("files", "read.file/v2") == "mcp__files__read_file_v2_467b8cc0"
    assert dsh_name("files", "Ü") == "mcp__files__U_" + dsh_name("files", "Ü")[-8:]
    assert dsh_name("files", "a.b") != dsh_name("files", "a/b")


# -- 10: malformed schemas are refused at registration ---------------------------------------


async def test_malformed_schemas_are_refused_and_the_other_tools_go_on(pids: Path) -> None:
    servers = {
        "h": hostile("schemas", pids),
        "picky": hostile("schemas", pids, tools=["good", "not_a_tool"]),
    }
    with capture_logs() as logs:
        async with harness(servers) as h:
            names = [n for n in h.tools.names() if n.startswith("mcp__h__")]
            good = await call(h, "mcp__h__good")
            mcp: McpServers = h.mcp
            status, picky = mcp.status()
    assert names == ["mcp__h__also_good", "mcp__h__good"]
    assert picky.tools == ("mcp__picky__good",)
    assert picky.problems == (
        "tool 'not_a_tool' is not offered: the server's entry for it is invalid at "
        "/inputSchema: Input should be a valid dictionary",
    )
    assert text(good) == "called good"
    assert status.state == "running"
    where = {
        "bad_type": "at /type: expected one of",
        "bad_required": "at /required: expected an array of property names, got integer 5",
        "bad_properties": "at /properties: expected an object of schemas by name, got array",
        "bad_nested": "at /properties/path/properties/a~1b/type: expected one of",
    }
    unreadable = [
        "tool 'not_a_tool' is not offered: the server's entry for it is invalid at "
        "/inputSchema: Input should be a valid dictionary",
        "tool '#7' is not offered: the server's entry for it is invalid at /name: Input should "
        "be a valid string",
    ]
    assert list(status.problems[:2]) == unreadable
    assert len(status.problems) == 2 + len(where)
    for problem, (tool, place) in zip(status.problems[2:], where.items(), strict=True):
        assert problem.startswith(
            f"tool {tool!r} is not offered: tool 'mcp__h__{tool}' of 'mcp' is refused: its "
            f"input schema is invalid {place}"
        )
    warned = [
        e["tool"] for e in logs if e["event"] == "MCP tool not offered" and e["server"] == "h"
    ]
    assert warned == ["not_a_tool", "#7", *where]
    assert await all_gone(pids)


async def test_a_tool_list_that_is_no_list_fails_the_server(pids: Path) -> None:
    async with harness({"h": hostile("no-list", pids)}) as h:
        mcp: McpServers = h.mcp
        [status] = mcp.status()
    assert status.error == (
        "MCP server 'h' failed to start: its tools/list answer has no list of tools"
    )
    assert await all_gone(pids)


# -- 11: how many tools one server may offer -------------------------------------------------


async def test_a_server_with_10000_tools_offers_the_first_max_tools(pids: Path) -> None:
    servers = {"many": hostile("many", pids), "few": hostile("many", pids, max_tools=3)}
    with capture_logs() as logs:
        async with harness(servers) as h:
            many = [n for n in h.tools.names() if n.startswith("mcp__many__")]
            few = [n for n in h.tools.names() if n.startswith("mcp__few__")]
            mcp: McpServers = h.mcp
            status = {s.name: s for s in mcp.status()}
    assert many == [f"mcp__many__tool_{i:05}" for i in range(128)]
    assert few == [f"mcp__few__tool_{i:05}" for i in range(3)]
    assert status["many"].problems == (
        "it offers more than max_tools (128) tools: only the first 128 are offered",
    )
    warnings = [e for e in logs if e["event"].startswith("MCP server offers more tools")]
    assert sorted((e["server"], e["max_tools"]) for e in warnings) == [("few", 3), ("many", 128)]
    assert await all_gone(pids)


async def test_a_paged_tool_list_is_read_only_as_far_as_the_cap(pids: Path, tmp_path: Path) -> None:
    pages = tmp_path / "pages"
    server = hostile("many-paged", pids, env={"MCP_TEST_PAGES": str(pages)})
    async with harness({"paged": server}, max_tools=100) as h:
        offered = [n for n in h.tools.names() if n.startswith("mcp__paged__")]
    assert len(offered) == 100
    assert pages.read_text().split() == ["0", "50", "100"]  # 150 kept: more than 100, stop
    assert await all_gone(pids)


def test_dsh_mcp_list_notes_the_tools_not_offered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dsh.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "")
    (tmp_path / "dsh.toml").write_text(
        f"[mcp.servers.h]\ncommand = {json.dumps(sys.executable)}\n"
        f'args = [{json.dumps(HOSTILE)}, "many"]\nmax_tools = 2\n'
    )
    try:
        assert main(["--log-level", "critical", "mcp", "list"]) == 0
    finally:
        structlog.reset_defaults()
    assert capsys.readouterr().out.splitlines()[1:] == [
        "    mcp__h__tool_00000",
        "    mcp__h__tool_00001",
        "    note: it offers more than max_tools (2) tools: only the first 2 are offered",
    ]
