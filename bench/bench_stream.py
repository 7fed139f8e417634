"""Streaming overhead of dsh's core: a long reply from the product mock server into an agent on
the DeepSeek adapter alone (no other plugin), against a bare aiohttp client reading the same
stream in blocks, splitting SSE lines by hand and decoding with ``orjson`` (the floor of
``bench/run.py``, whose W1 is the benchmark: every plugin loaded, a faster mock server, imports
and first requests outside the clock on both sides, which this script does not do).

    python bench/bench_stream.py [--chunks 20000] [--runs 5]

The mock server runs in a child process, so the CPU time measured here is the client's alone.
Runs are interleaved (bare, dsh, bare, dsh, ...) and the medians are compared. This is a
benchmark, not a test: it prints numbers and asserts only that both clients read the same text.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import time
from collections.abc import Awaitable, Callable
from multiprocessing.queues import Queue
from typing import Any

import aiohttp
import orjson

from dsh import AgentOptions, Harness
from dsh._log import configure_logging
from dsh.testing.mockserver import MockServer
from dsh.values._content import text_of
from dsh.values._events import AssistantMessage
from dsh_plugins.llm_deepseek import DeepSeekPlugin

MODEL = "deepseek-v4-flash"
KEY = "bench-key"


def serve(urls: Queue[str]) -> None:
    """The child process: a mock server until ``POST /mock/shutdown``."""

    async def main() -> None:
        async with MockServer(api_key=KEY) as server:
            urls.put(server.url)
            await server.wait_closed()

    asyncio.run(main())


async def queue_long_reply(url: str, chunks: int) -> None:
    async with aiohttp.ClientSession() as session:
        scenario = [{"name": "long-text", "chunks": chunks}]
        async with session.post(f"{url}/mock/queue", json=scenario) as response:
            response.raise_for_status()


async def bare_client(url: str) -> str:
    """What a careful hand-written client does: read the body in blocks, split the lines by
    hand, ``orjson.loads`` each ``data:`` payload."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "go"}], "stream": True}
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    pieces: list[str] = []
    pending = b""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{url}/chat/completions", data=orjson.dumps(body), headers=headers
        ) as response,
    ):
        async for block in response.content.iter_any():
            lines = (pending + block).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if line[:6] != b"data: " or line.startswith(b"[DONE]", 6):
                    continue
                for choice in orjson.loads(line[6:])["choices"]:
                    pieces.append(choice["delta"].get("content") or "")
    return "".join(pieces)


async def dsh_client(url: str) -> str:
    """A real agent on the DeepSeek adapter: every chunk logged, observed and assembled."""
    config = {"llm_deepseek": {"base_url": url, "api_key": KEY}}
    async with Harness(load_entrypoints=False, plugins=[DeepSeekPlugin], config=config) as h:
        agent = h.agent_loop.create("bench", AgentOptions(model=MODEL))
        agent.send("go")
        await agent.wait_idle()
        (message,) = (e.data for e in agent.session.events if isinstance(e.data, AssistantMessage))
        return text_of(message.content)


async def measure(client: Callable[[str], Awaitable[str]], url: str) -> tuple[float, float, str]:
    wall, cpu = time.perf_counter(), time.process_time()
    text = await client(url)
    return time.perf_counter() - wall, time.process_time() - cpu, text


async def run(url: str, chunks: int, runs: int) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {"bare": [], "dsh": []}
    clients: dict[str, Callable[[str], Awaitable[str]]] = {"bare": bare_client, "dsh": dsh_client}
    texts: set[str] = set()
    for _ in range(runs):
        for name, client in clients.items():
            await queue_long_reply(url, chunks)
            wall, cpu, text = await measure(client, url)
            results[name].append((wall, cpu))
            texts.add(text)
    assert len(texts) == 1, "the two clients read different texts"
    return results


def report(results: dict[str, list[tuple[float, float]]], chunks: int, runs: int) -> None:
    medians: dict[str, Any] = {
        name: (statistics.median(w for w, _ in rows), statistics.median(c for _, c in rows))
        for name, rows in results.items()
    }
    print(f"{chunks} streamed chunks, median of {runs} interleaved runs")
    print(f"{'client':8} {'wall s':>8} {'cpu s':>8} {'cpu µs/chunk':>13}")
    for name, (wall, cpu) in medians.items():
        print(f"{name:8} {wall:8.3f} {cpu:8.3f} {cpu / chunks * 1e6:13.1f}")
    (bare_wall, bare_cpu), (dsh_wall, dsh_cpu) = medians["bare"], medians["dsh"]
    print(f"ratio dsh/bare: wall {dsh_wall / bare_wall:.2f}x, cpu {dsh_cpu / bare_cpu:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    configure_logging(level="warning")
    context = multiprocessing.get_context("spawn")
    urls: Queue[str] = context.Queue()
    server = context.Process(target=serve, args=(urls,), daemon=True)
    server.start()
    url = urls.get(timeout=30)
    try:
        results = asyncio.run(run(url, args.chunks, args.runs))
    finally:
        asyncio.run(shutdown(url))
        server.join(timeout=10)
    report(results, args.chunks, args.runs)


async def shutdown(url: str) -> None:
    async with aiohttp.ClientSession() as session, session.post(f"{url}/mock/shutdown"):
        pass


if __name__ == "__main__":
    main()
