"""The stdio transport of MCP servers, with bounded reads.

The SDK's own ``stdio_client`` keeps whatever a server writes until it ends a line: a server
that writes one endless line grows the client's memory without bound (and its line splitting
is quadratic in the line's length). Here a message is at most ``max_message_bytes`` long: a
server that writes more without ending the message, or sends one nested too deeply to parse,
ends its connection with :class:`~dsh_plugins.mcp.config.McpError` (``MCP_PROTOCOL_ERROR``),
and :class:`LineReader` never holds more than the limit. Otherwise it behaves as the SDK's
transport: newline-delimited JSON-RPC, the server in its own process group, stopped by closing
its stdin, then ``SIGTERM``, then ``SIGKILL`` to the whole group; the streams it yields are the
ones :class:`mcp.ClientSession` takes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from typing import IO

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types as mcp_types
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from dsh_plugins.mcp.config import McpError

__all__ = ["PROTOCOL_ERROR", "LineReader", "stdio_transport"]

#: The error code of a server that broke the protocol (too long a message, too deep a one).
PROTOCOL_ERROR = "MCP_PROTOCOL_ERROR"
#: The most bytes read from the server's stdout at once.
CHUNK_BYTES = 65_536
#: How long a server has to exit after its stdin is closed, and after ``SIGTERM``.
GRACE_S = 2.0
#: How long the messages accepted before the end have to reach the server.
FLUSH_S = 0.5

Incoming = SessionMessage | Exception


class LineReader:
    """Splits what a server writes into messages (lines) of at most ``limit`` bytes.

    It holds only the unfinished message, so never more than ``limit`` bytes (``peak`` is the
    most it held). When a message would grow past it, :meth:`feed` still returns the messages
    completed before it (a read may hold an answer and then the flood) and sets ``failure``;
    any later :meth:`feed` raises it. ``failure`` is why the server's connection ended, when it
    broke the protocol.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.peak = 0
        self.failure: McpError | None = None
        self._pending = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        """The messages ``chunk`` completes, in order (those before a message over the limit,
        which sets ``failure``); raises ``failure`` once it is set."""
        if self.failure is not None:
            raise self.failure
        lines: list[bytes] = []
        start = 0
        try:
            while (end := chunk.find(b"\n", start)) >= 0:
                self._keep(chunk[start:end])
                lines.append(bytes(self._pending))
                self._pending.clear()
                start = end + 1
            self._keep(chunk[start:])
        except McpError as exc:
            self.failure = exc
        return lines

    def _keep(self, part: bytes) -> None:
        if len(self._pending) + len(part) > self.limit:
            raise McpError(
                f"it sent more than max_message_bytes ({self.limit} bytes) without ending the "
                "message (a message is one line of JSON); dsh stopped reading from it",
                PROTOCOL_ERROR,
            )
        self._pending += part
        self.peak = max(self.peak, len(self._pending))


def parse(line: bytes) -> Incoming:
    """One message; a line that is not JSON-RPC is handed on as the error (the session logs
    and drops it, as the SDK does), but one nested too deeply to parse ends the connection:
    it may be the answer to a request that would otherwise wait for it in vain."""
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValidationError as exc:
        if any("recursion limit" in error["msg"] for error in exc.errors()):
            raise McpError(
                f"it sent a message nested too deeply to parse ({len(line)} bytes; the JSON "
                "parser takes about 250 levels)",
                PROTOCOL_ERROR,
            ) from exc
        return exc


@asynccontextmanager
async def stdio_transport(
    command: str,
    args: tuple[str, ...],
    env: Mapping[str, str],
    cwd: str | None,
    errlog: IO[str],
    reader: LineReader,
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[Incoming], MemoryObjectSendStream[SessionMessage]]
]:
    """Start ``command`` and yield the streams of its messages; ``reader`` frames (and
    bounds) what it writes. Leaving stops the server; when it broke the protocol, the context
    raises that :class:`McpError` (in an exception group)."""
    process = await anyio.open_process(
        [command, *args],
        env=get_default_environment() | dict(env),
        cwd=cwd,
        stderr=errlog,
        start_new_session=True,
    )
    assert process.stdin is not None and process.stdout is not None  # opened with pipes
    read_send, read_receive = anyio.create_memory_object_stream[Incoming](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    written = anyio.Event()
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_read, process.stdout, read_send, reader)
            tasks.start_soon(_write, process.stdin, write_receive, written, read_send)
            try:
                yield read_receive, write_send
            finally:
                with anyio.CancelScope(shield=True):
                    write_send.close()  # the writer ends once it has sent what it took
                    read_receive.close()
                    with anyio.move_on_after(FLUSH_S):
                        await written.wait()
                tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process, broken=reader.failure is not None)


async def _read(
    stdout: ByteReceiveStream, messages: MemoryObjectSendStream[Incoming], reader: LineReader
) -> None:
    async with messages:
        try:
            while True:
                for line in reader.feed(await stdout.receive(CHUNK_BYTES)):
                    await messages.send(parse(line))
                if reader.failure is not None:
                    raise reader.failure
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return  # the server ended its output, or the session is gone
        except McpError as exc:
            reader.failure = exc
            raise


async def _write(
    stdin: ByteSendStream,
    messages: MemoryObjectReceiveStream[SessionMessage],
    done: anyio.Event,
    incoming: MemoryObjectSendStream[Incoming],
) -> None:
    try:
        async with messages:
            async for message in messages:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await stdin.send(data.encode() + b"\n")
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        # The server stopped reading, and may still run: end what the session reads, so a
        # request does not wait for an answer that cannot come.
        incoming.close()
    finally:
        done.set()


async def _stop(process: Process, broken: bool) -> None:
    """Close the server's stdin and give it ``GRACE_S`` to exit (reading and dropping what it
    still writes, so it is not stuck on a full pipe), then end its process group. A server that
    broke the protocol gets no grace: it may be writing without end."""
    assert process.stdin is not None and process.stdout is not None
    async with anyio.create_task_group() as drain:
        drain.start_soon(_discard, process.stdout)
        if not broken:
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await process.stdin.aclose()
            with anyio.move_on_after(GRACE_S):
                await process.wait()
        if process.returncode is None:
            await terminate_posix_process_tree(process, GRACE_S)
        await process.aclose()  # closes the pipes (ending the drain) and reaps the process
        drain.cancel_scope.cancel()


async def _discard(stdout: ByteReceiveStream) -> None:
    with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        while True:
            await stdout.receive(CHUNK_BYTES)
