"""A mock DeepSeek server for benchmarks that cannot flatter the client: every answer is
encoded once, before the run, and written as fast as the socket takes it; the server reports
its own CPU time, so a run whose server was the bottleneck can be told apart.

``dsh mock-server`` builds every frame per request (~0.4 s for 20,000 chunks): a client measured
against it mostly waits, and the ratio dsh/floor shrinks towards 1 whatever dsh costs. Here the
per-request work is reading the request, counting its tool results (the ``tool-loop`` scenario
answers by how far the conversation got) and one write of pre-encoded bytes.

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

from aiohttp import web

from dsh.testing.mockserver.catalogue import deltas, tool_loop
from dsh.testing.mockserver.scenario import Scenario
from dsh.testing.mockserver.wire import frame_bytes

MODEL = "deepseek-v4-flash"

__all__ = ["Answers", "encode", "make_app", "program"]


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
        messages = json.loads(request_body).get("messages", ())
        done = sum(1 for message in messages if message.get("role") == "tool")
        return self.bodies[min(done, len(self.bodies) - 1)]


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


def make_app() -> web.Application:
    """The server's routes, around one mutable state: the program and the served count."""
    state: dict[str, Any] = {"answers": None, "served": 0}

    async def chat(request: web.Request) -> web.StreamResponse:
        answers: Answers | None = state["answers"]
        if answers is None:
            return web.json_response({"error": "POST /bench/program first"}, status=409)
        body = answers.answer(await request.read())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(body)
        await response.write_eof()
        state["served"] += 1
        return response

    async def set_program(request: web.Request) -> web.Response:
        try:
            answers = program(await request.json())
        except (ValueError, TypeError, AttributeError) as error:
            return web.json_response({"error": str(error)}, status=400)
        state["answers"] = answers
        return web.json_response({"bytes": sum(len(b) for b in answers.bodies)})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"served": state["served"], "cpu_s": time.process_time()})

    app = web.Application(client_max_size=1 << 30)
    app.router.add_post("/chat/completions", chat)
    app.router.add_post("/bench/program", set_program)
    app.router.add_get("/bench/stats", stats)
    return app


async def serve(port: int) -> None:
    runner = web.AppRunner(make_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=8192)
    await site.start()
    print(f"PORT {runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
