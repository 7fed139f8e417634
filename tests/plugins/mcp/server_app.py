"""MCP servers for the tests, written with the SDK's own server API (``MCPServer``).

Run as a script: ``server_app.py stdio`` serves :func:`build` over stdio; ``silent`` never
answers (a server that never starts); ``broken`` writes to stderr and exits 3 (one that fails
to start). ``MCP_TEST_RESTART_GATE`` names a file a restarted server waits for before it
starts. ``MCP_TEST_MARKER`` names a file the ``hang`` tool appends ``cancelled`` to when the
client cancels it, so a test can see that an abort reached the server; ``MCP_TEST_PIDS``
names a file every server appends its process id to, so a test can check none is left.
"""

from __future__ import annotations

import os

if __name__ == "__main__" and os.environ.get("MCP_TEST_PIDS"):
    # Noted before the SDK's imports, which take a second or more on a loaded machine: a test
    # that stops a server before it starts must still learn which process to look for.
    with open(os.environ["MCP_TEST_PIDS"], "a") as _pids:
        _pids.write(f"{os.getpid()}\n")

import asyncio
import sys
import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ListToolsResult,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

#: A 1x1 PNG, base64.
PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
    "rkJggg=="
)
READ_ONLY = ToolAnnotations(read_only_hint=True)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)


class TestServer(MCPServer[Any]):
    """``MCPServer`` whose tool list can be made to fail (``listing_fails``)."""

    listing_fails = False
    #: Tools per ``tools/list`` page; 0: one page.
    page_size = 0

    async def _handle_list_tools(self, ctx: Any, params: Any) -> ListToolsResult:
        """Pages of ``page_size`` tools, the cursor being the index of the next one."""
        tools = await self.list_tools()
        if not self.page_size:
            return ListToolsResult(tools=tools)
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + self.page_size
        cursor = str(end) if end < len(tools) else None
        return ListToolsResult(tools=tools[start:end], next_cursor=cursor)

    async def list_tools(self) -> list[Any]:
        if self.listing_fails:
            raise MCPError(INTERNAL_ERROR, "the tool list is being rebuilt")
        return await super().list_tools()


def _started_pids() -> int:
    with open(os.environ["MCP_TEST_PIDS"]) as file:
        return len(file.read().split())


def _started(path: str) -> int:
    with open(path) as file:
        return sum(line.startswith("start ") for line in file)


def _note(variable: str, line: str) -> None:
    path = os.environ.get(variable)
    if path:
        with open(path, "a") as file:
            file.write(line + "\n")


def build(name: str = "test") -> TestServer:
    """A server with one tool per behaviour the client must handle."""
    server = TestServer(name, log_level="WARNING")

    @server.tool(description="Echo the text back.", annotations=READ_ONLY)
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Delete a thing.", annotations=DESTRUCTIVE)
    def delete(path: str) -> str:
        return f"deleted {path}"

    @server.tool(description="Add a note.", annotations=ToolAnnotations(destructive_hint=False))
    def note(text: str) -> str:
        return f"noted {text}"

    @server.tool(description="Numbers, structured only.", annotations=READ_ONLY)
    def stats() -> CallToolResult:
        return CallToolResult(content=[], structured_content={"count": 2, "ok": True})

    @server.tool(description="Every other kind of content.", annotations=READ_ONLY)
    def kinds() -> CallToolResult:
        return CallToolResult(
            content=[
                AudioContent(data="AAAA", mime_type="audio/wav"),
                ResourceLink(name="readme", uri="file:///readme.md"),
                EmbeddedResource(
                    resource=TextResourceContents(uri="file:///notes.txt", text="the notes")
                ),
                EmbeddedResource(
                    resource=BlobResourceContents(
                        uri="file:///logo.bin", blob="AAAA", mime_type="application/octet-stream"
                    )
                ),
                EmbeddedResource(resource=BlobResourceContents(uri="file:///raw", blob="AAAA")),
            ],
            structured_content={"ignored": "because there is text"},
        )

    @server.tool(description="Refuses with a protocol error.", annotations=READ_ONLY)
    def refuse() -> str:
        raise MCPError(INVALID_PARAMS, "no such record")

    @server.tool(description="A request header.", annotations=READ_ONLY)
    def header(name: str, ctx: Context) -> str:
        return (ctx.headers or {}).get(name, "(none)")

    @server.tool(description="A picture and its caption.", annotations=READ_ONLY)
    def picture() -> CallToolResult:
        return CallToolResult(
            content=[TextContent(text="a pixel"), ImageContent(data=PIXEL, mime_type="image/png")]
        )

    @server.tool(description="Always fails.", annotations=READ_ONLY)
    def fail() -> CallToolResult:
        return CallToolResult(content=[TextContent(text="the disk is on fire")], is_error=True)

    @server.tool(description="A megabyte of text.", annotations=READ_ONLY)
    def big() -> str:
        return "x" * 1_000_000

    @server.tool(description="Never answers.", annotations=READ_ONLY)
    async def hang() -> str:
        _note("MCP_TEST_MARKER", "started")
        try:
            await asyncio.sleep(3600)
        except BaseException:
            _note("MCP_TEST_MARKER", "cancelled")
            raise
        return "never"

    @server.tool(description="Answers once three calls of it run at once.", annotations=READ_ONLY)
    async def slow(label: str) -> str:
        # Each call notes its start and answers only once three have started (or after 30 s,
        # saying so): calls made one after another cannot all answer in time.
        _note("MCP_TEST_MARKER", f"start {label}")
        path = os.environ.get("MCP_TEST_MARKER", "")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if _started(path) >= 3:
                return f"slow {label}"
            await asyncio.sleep(0.01)
        return f"slow {label}, alone"

    @server.tool(description="Exits the server process mid-call.", annotations=READ_ONLY)
    def crash() -> str:
        print("crashing on purpose", file=sys.stderr, flush=True)
        os._exit(3)

    @server.tool(description="Offers one more tool, extra.", annotations=READ_ONLY)
    async def grow(ctx: Context) -> str:
        server.add_tool(lambda: "extra result", name="extra", description="Added later.")
        server.remove_tool("note")
        await ctx.session.send_resource_list_changed()  # not about tools: the client ignores it
        await ctx.session.send_tool_list_changed()
        await ctx.session.send_tool_list_changed()  # twice: the client reads the list in order
        return "grown"

    @server.tool(description="Announces a tool list it cannot give.", annotations=READ_ONLY)
    async def rebuild(ctx: Context) -> str:
        server.listing_fails = True
        await ctx.session.send_tool_list_changed()
        return "rebuilding"

    @server.tool(description="Which process serves.", annotations=READ_ONLY)
    def pid() -> str:
        return str(os.getpid())

    return server


def main(mode: str) -> None:
    gate = os.environ.get("MCP_TEST_RESTART_GATE")
    if gate and _started_pids() > 1:
        while not os.path.exists(gate):  # a restart waits until the test lets it start
            time.sleep(0.01)
    if mode == "silent":
        time.sleep(3600)
    elif mode == "broken":
        print("starting the test server", file=sys.stderr)
        print("fatal: no configuration found", file=sys.stderr)
        sys.exit(3)
    else:
        server = build()
        server.page_size = 4 if mode == "paged" else 0
        server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1])
