"""A web front over a pool of agent hosts: any number of these run behind a load balancer.

It holds no conversation state — the pool routes every call to the host that writes the
session, and the sessions live in PostgreSQL — so any replica can take any request, and a
replica that dies loses nothing. A browser's ``EventSource`` reconnects with
``Last-Event-ID``, which is the last seq it saw: the stream continues from there, on whichever
host now runs the session, without a gap or a repeat.

    POST /sessions/{id}/messages   {"text": "..."}     202 once the message is recorded
    POST /sessions/{id}/abort                          202
    GET  /sessions/{id}/events     text/event-stream   id: seq, event: type, data: the event

Run it: ``python examples/cluster/web.py --config cluster.toml --port 8080`` (see README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

import dsh.cluster
from dsh.plugin import DshError, EventCodec

POOL = web.AppKey("pool", dsh.cluster.Pool)
CODEC = EventCodec()


def make_app(pool: dsh.cluster.Pool) -> web.Application:
    """The web front over ``pool`` (the caller opens and closes the pool)."""
    app = web.Application()
    app[POOL] = pool
    app.router.add_post("/sessions/{id}/messages", send)
    app.router.add_post("/sessions/{id}/abort", abort)
    app.router.add_get("/sessions/{id}/events", events)
    return app


async def send(request: web.Request) -> web.Response:
    try:
        body = await request.json()
        text = body["text"]
        if not isinstance(text, str) or not text:
            raise ValueError
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": 'send {"text": "..."} as JSON'}, status=400)
    try:
        await request.app[POOL].send(request.match_info["id"], text)
    except DshError as exc:  # HostLost among them: the caller decides about a repeat
        return web.json_response({"error": str(exc)}, status=503)
    return web.json_response({"session": request.match_info["id"]}, status=202)


async def abort(request: web.Request) -> web.Response:
    await request.app[POOL].abort(request.match_info["id"], "aborted by the user")
    return web.json_response({"session": request.match_info["id"]}, status=202)


async def events(request: web.Request) -> web.StreamResponse:
    last = request.headers.get("Last-Event-ID") or request.query.get("after", "-1")
    try:
        after = int(last)
    except ValueError:
        return web.json_response({"error": "Last-Event-ID must be a seq"}, status=400)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    stream = request.app[POOL].events(request.match_info["id"], after_seq=after)
    try:
        async for event in stream:
            data = json.dumps(CODEC.encode(event)["data"])
            await response.write(f"id: {event.seq}\nevent: {event.type}\ndata: {data}\n\n".encode())
    finally:
        await _close(stream)
    return response


async def _close(stream: AsyncIterator[Any]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


async def main(argv: list[str] | None = None) -> None:
    from dsh.plugin import AgentOptions, load_toml
    from dsh_plugins.cluster.spec import HostSpec

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--config", required=True, help="dsh.toml of the hosts (names the store)")
    parser.add_argument("--address", help="the Ray cluster (default: RAY_ADDRESS or local)")
    parser.add_argument("--model", default="deepseek-flash", help="the agents' model")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    spec = HostSpec(config=load_toml(args.config), options=AgentOptions(model=args.model))
    async with await dsh.cluster.connect(address=args.address, spec=spec) as pool:
        runner = web.AppRunner(make_app(pool))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", args.port).start()
        print(f"serving on http://127.0.0.1:{args.port}")
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
