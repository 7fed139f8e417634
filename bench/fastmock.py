"""A mock DeepSeek server for benchmarks that cannot flatter the client: every answer is
encoded once, before the run, and written as fast as the socket takes it; the server reports
its own CPU time, so a run whose server was the bottleneck can be told apart.

``dsh mock-server`` builds every frame per request (~0.4 s for 20,000 chunks): a client measured
against it mostly waits, and the ratio dsh/floor shrinks towards 1 whatever dsh costs. Here the
per-request work is reading the request, counting its tool results in its bytes (the
``tool-loop`` scenario answers by how far the conversation got) and one write of pre-encoded
bytes, over a bare :class:`asyncio.Protocol` (:class:`Connection`): a web framework's own cost
per request (aiohttp's server, ~0.1 ms) is as much as the floor client's, and made the
many-request workloads wait on the server.

The bytes are those of the product mock's ``deltas`` and ``tool-loop`` scenarios
(:mod:`dsh.testing.mockserver.catalogue`), so outputs can be checked exactly as before.
Requests are not validated: this server measures, the product mock checks.

Run ``python bench/fastmock.py [--port N]``: it prints ``PORT <n>`` once listening.
Endpoints: ``POST /chat/completions``; ``POST /bench/program`` with ``{"name": "deltas",
"chunks": N}`` or ``{"name": "tool-loop", "steps": N}`` (encodes the answers, then serves them
to every request until the next program); ``GET /bench/stats`` → ``{"served", "cpu_s"}``
(requests answered so far, this process's CPU seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

from dsh.testing.mockserver.catalogue import deltas, tool_loop
from dsh.testing.mockserver.scenario import Scenario
from dsh.testing.mockserver.wire import frame_bytes

MODEL = "deepseek-v4-flash"

__all__ = ["Answers", "Connection", "Mock", "encode", "program", "start", "tool_results"]


def encode(scenario: Scenario) -> bytes:
    """The whole SSE body of one answer, as sent."""
    return frame_bytes("".join(scenario.frames))


def _history(done: int) -> dict[str, Any]:
    """A request body with ``done`` tool results and thinking off, to build step ``done``."""
    messages = [{"role": "tool", "content": ""}] * done
    return {"model": MODEL, "thinking": {"type": "disabled"}, "messages": messages}


class Answers:
    """The pre-encoded answers of one program: one body (``deltas``), or one per number of
    tool results already in the conversation (``tool-loop``; a conversation past ``steps``
    results gets the final answer built for ``steps``)."""

    def __init__(self, bodies: list[bytes], by_tool_results: bool) -> None:
        self.bodies = bodies
        self.by_tool_results = by_tool_results

    def answer(self, request_body: bytes) -> bytes:
        if not self.by_tool_results:
            return self.bodies[0]
        done = tool_results(request_body)
        return self.bodies[min(done, len(self.bodies) - 1)]


#: How a tool result's role reads in a request body, compact (orjson, dsh) or spaced
#: (``json.dumps``' default).
TOOL_ROLES = (b'"role":"tool"', b'"role": "tool"')


def tool_results(request_body: bytes) -> int:
    """How many tool results a request's conversation holds, counted in its bytes: a 2,000-step
    conversation's body is ~0.5 MB, and decoding it for every request would make the server,
    not the client, the bottleneck (the benchmark's tool results never contain these bytes)."""
    return sum(request_body.count(role) for role in TOOL_ROLES)


def program(spec: Mapping[str, Any]) -> Answers:
    """Encode the answers ``spec`` asks for; a clear ``ValueError`` for anything else."""
    name = spec.get("name")
    if name == "deltas":
        chunks = int(spec.get("chunks", 20_000))
        return Answers([encode(deltas({"model": MODEL}, chunks))], by_tool_results=False)
    if name == "tool-loop":
        steps = int(spec.get("steps", 5))
        bodies = [encode(tool_loop(_history(done), steps)) for done in range(steps + 1)]
        return Answers(bodies, by_tool_results=True)
    raise ValueError(f"unknown program {name!r}: use 'deltas' or 'tool-loop'")


class Mock:
    """The server's state and its answers: the program and the requests served."""

    def __init__(self) -> None:
        self.answers: Answers | None = None
        self.served = 0

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, str, bytes]:
        """The status, content type and body of the answer to one request."""
        if method == "POST" and path == "/chat/completions":
            if self.answers is None:
                return _json(409, {"error": "POST /bench/program first"})
            self.served += 1
            return 200, "text/event-stream", self.answers.answer(body)
        if method == "POST" and path == "/bench/program":
            try:
                answers = program(json.loads(body))
            except (ValueError, TypeError, AttributeError) as error:
                return _json(400, {"error": str(error)})
            self.answers = answers
            return _json(200, {"bytes": sum(len(b) for b in answers.bodies)})
        if method == "GET" and path == "/bench/stats":
            return _json(200, {"served": self.served, "cpu_s": time.process_time()})
        return _json(404, {"error": f"no route {method} {path}"})


def _json(status: int, value: Any) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(value).encode()


REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 409: "Conflict", 411: "Length Required"}


class Connection(asyncio.Protocol):
    """One client connection: HTTP/1.1 requests with a ``Content-Length`` body, kept alive
    (unless the client says ``Connection: close``), each answered in one write — an event
    stream as one chunk of a chunked body, as a streaming API sends it, anything else with a
    length. The least a server can do per request, so that the client is what is measured."""

    def __init__(self, mock: Mock) -> None:
        self.mock = mock
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.transport is not None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = self.buffer[:end].decode("latin-1").split("\r\n")
            method, target = lines[0].split(" ")[:2]
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            if "content-length" not in headers and method == "POST":
                self.respond(*_json(411, {"error": "send a Content-Length"}), close=True)
                return
            length = int(headers.get("content-length", 0))
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            close = headers.get("connection", "").lower() == "close"
            self.respond(*self.mock.handle(method, target.split("?")[0], body), close=close)

    def respond(self, status: int, content_type: str, body: bytes, close: bool) -> None:
        assert self.transport is not None
        head = f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {content_type}\r\n"
        if close:
            head += "Connection: close\r\n"
        if content_type == "text/event-stream":
            head += f"Transfer-Encoding: chunked\r\n\r\n{len(body):x}\r\n"
            self.transport.write(head.encode() + body + b"\r\n0\r\n\r\n")
        else:
            head += f"Content-Length: {len(body)}\r\n\r\n"
            self.transport.write(head.encode() + body)
        if close:
            self.transport.close()
            self.transport = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def start(port: int = 0) -> tuple[asyncio.Server, str]:
    """The server listening on 127.0.0.1 (``port`` 0: any free port), and its URL."""
    mock = Mock()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(mock), "127.0.0.1", port, backlog=8192)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def serve(port: int) -> None:
    server, url = await start(port)
    print(f"PORT {url.rsplit(':', 1)[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
