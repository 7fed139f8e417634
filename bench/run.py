"""The dsh benchmark suite: dsh against a floor client doing exactly the same work.

Run ``python bench/run.py`` (``--quick`` for small sizes). The mock DeepSeek server runs in its
own process on 127.0.0.1, so each side's figures are its own. For every workload the floor — bare
aiohttp, SSE lines split by hand, ``json.loads``, a plain tool loop over a list of dicts — and dsh
run interleaved, several times; the table shows medians and the ratio dsh/floor. dsh runs in its
default configuration: entry-point plugins (the DeepSeek adapter, JSONL persistence, retry,
compaction, budgets, ...) plus a no-op ``dsh_agent_stream_chunk`` observer; only the built-in
tool plugins are left out, so that both sides send the model the same one tool. Every run
checks its output (the assembled text byte for byte, every tool call executed with the right
arguments, the number of requests the server saw), so nothing wins by skipping work.

Workloads: W1 one reply of 20,000 deltas; W2 one agent, 200 sequential tool steps; W3 a fresh
process from spawn to the first streamed token; W4 100 and 1,000 concurrent agents of 5 tool
steps each (wall time, peak memory, memory per agent).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

MODEL = "deepseek-v4-flash"
ROOT = Path(__file__).resolve().parent.parent


# -- the mock server, in its own process ----------------------------------------------------


class Server:
    """``dsh mock-server`` in a child process, controlled over HTTP."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dsh", "mock-server", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while not self._up():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("the mock server did not start")
            time.sleep(0.05)

    def _up(self) -> bool:
        try:
            self.stats()
        except OSError:
            return False
        return True

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(f"{self.url}/mock/stats", timeout=5) as response:
            stats: dict[str, int] = json.load(response)
        return stats

    def queue(self, specs: list[Any]) -> None:
        data = json.dumps(specs).encode()
        request = urllib.request.Request(f"{self.url}/mock/queue", data, method="POST")
        request.add_header("Content-Type", "application/json")
        urllib.request.urlopen(request, timeout=30).close()

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


# -- the floor client -------------------------------------------------------------------------


async def floor_call(
    session: aiohttp.ClientSession, url: str, messages: list[dict[str, Any]], tools: bool
) -> tuple[str, list[dict[str, Any]]]:
    """One streamed chat completion: the text and the tool calls, SSE split by hand."""
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "thinking": {"type": "disabled"},
    }
    if tools:
        body["tools"] = [ECHO_SCHEMA]
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    headers = {"Authorization": "Bearer bench"}
    async with session.post(f"{url}/chat/completions", json=body, headers=headers) as response:
        async for line in response.content:
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                break
            for choice in json.loads(data)["choices"]:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    text.append(delta["content"])
                for fragment in delta.get("tool_calls") or ():
                    call = calls.setdefault(fragment["index"], {"id": "", "name": "", "args": ""})
                    call["id"] = fragment.get("id") or call["id"]
                    function = fragment.get("function") or {}
                    call["name"] = function.get("name") or call["name"]
                    call["args"] += function.get("arguments") or ""
    return "".join(text), [calls[i] for i in sorted(calls)]


async def floor_tool_loop(session: aiohttp.ClientSession, url: str, executed: list[str]) -> str:
    """A plain agent loop over a list of dicts: call, run the tools, repeat."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    while True:
        text, calls = await floor_call(session, url, messages, tools=True)
        if not calls:
            return text
        messages.append(
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["args"]},
                    }
                    for c in calls
                ],
            }
        )
        for call in calls:
            result = echo_text(json.loads(call["args"])["text"])
            executed.append(result)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


ECHO_SCHEMA = {
    "type": "function",
    "function": {
        "name": "echo",
        "description": "Echo the text.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
}


def echo_text(text: str) -> str:
    return f"echo: {text}"


# -- the dsh side ---------------------------------------------------------------------------


class Bench:
    """The host plugin dsh runs with: the echo tool and a no-op stream observer."""

    def __init__(self) -> None:
        self.executed: list[str] = []
        self.first_token: asyncio.Event | None = None

    def dsh_register_tools(self, register: Any) -> None:
        from dsh import Tool
        from dsh.request import ToolSchema

        async def echo(args: Any, execution: Any) -> str:
            result = echo_text(args["text"])
            self.executed.append(result)
            return result

        schema = ToolSchema("echo", "Echo the text.", ECHO_SCHEMA["function"]["parameters"])  # type: ignore[index]
        register(Tool(schema, echo, concurrency_safe=True))

    def dsh_agent_stream_chunk(self, chunk: Any) -> None:
        return None


#: The built-in tool plugins would offer the model eight more tools than the floor client sends;
#: the same request on both sides means the same tools. Everything else stays in.
NOT_BENCHED = ("tools_fs", "tools_shell", "permissions")


def dsh_harness(url: str, bench: Bench) -> Any:
    from dsh import Harness

    config = {"llm_deepseek": {"base_url": url, "api_key": "bench"}}
    return Harness(plugins=[bench], config=config, disabled=NOT_BENCHED)


def dsh_options() -> Any:
    from dsh import AgentOptions

    return AgentOptions(model=MODEL, thinking=False)


def assistant_text(agent: Any) -> str:
    from dsh.content import text_of

    last = [e for e in agent.session.events if e.type == "assistant/message"][-1]
    return text_of(last.data.content)


# -- workloads ------------------------------------------------------------------------------


async def w1(side: str, server: Server, chunks: int) -> float:
    from dsh_plugins.mock_server.catalogue import delta_text

    expected = delta_text(chunks)
    server.queue([{"name": "deltas", "chunks": chunks}])
    served = server.stats()["served"]
    if side == "floor":
        async with aiohttp.ClientSession() as session:
            start = time.perf_counter()
            text, _ = await floor_call(
                session, server.url, [{"role": "user", "content": "go"}], False
            )
            elapsed = time.perf_counter() - start
    else:
        async with dsh_harness(server.url, Bench()) as h:
            start = time.perf_counter()
            agent = h.agent_loop.create("w1", dsh_options())
            agent.send("go")
            await agent.wait_idle()
            elapsed = time.perf_counter() - start
            text = assistant_text(agent)
    check(text == expected, f"W1 {side}: the assembled text differs")
    check(server.stats()["served"] == served + 1, f"W1 {side}: expected one request")
    return elapsed


async def w2(side: str, server: Server, steps: int) -> float:
    server.queue([{"name": "tool-loop", "steps": steps}] * (steps + 1))
    served = server.stats()["served"]
    if side == "floor":
        executed: list[str] = []
        async with aiohttp.ClientSession() as session:
            start = time.perf_counter()
            text = await floor_tool_loop(session, server.url, executed)
            elapsed = time.perf_counter() - start
    else:
        bench = Bench()
        async with dsh_harness(server.url, bench) as h:
            start = time.perf_counter()
            agent = h.agent_loop.create("w2", dsh_options())
            agent.send("go")
            await agent.wait_idle()
            elapsed = time.perf_counter() - start
            text = assistant_text(agent)
        executed = bench.executed
    check(text == f"finished after {steps} steps", f"W2 {side}: wrong final answer {text!r}")
    check(executed == [echo_text(f"step {i}") for i in range(steps)], f"W2 {side}: tool calls")
    check(server.stats()["served"] == served + steps + 1, f"W2 {side}: request count")
    return elapsed


FIRST_TOKEN_FLOOR = """
import asyncio, json, sys, aiohttp
async def main():
    body = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "go"}],
            "stream": True, "thinking": {"type": "disabled"}}
    async with aiohttp.ClientSession() as s:
        async with s.post(sys.argv[1] + "/chat/completions", json=body,
                          headers={"Authorization": "Bearer bench"}) as r:
            async for line in r.content:
                if not line.startswith(b"data: "):
                    continue
                if json.loads(line[6:])["choices"][0]["delta"].get("content"):
                    print("FIRST", flush=True)
                    return
asyncio.run(main())
"""

FIRST_TOKEN_DSH = """
import asyncio, os, sys
from dsh import AgentOptions, Harness, hookimpl
class First:
    def __init__(self): self.seen = asyncio.Event()
    @hookimpl
    def dsh_agent_stream_chunk(self, chunk):
        if chunk.type == "text-delta" and chunk.text and not self.seen.is_set():
            print("FIRST", flush=True)
            self.seen.set()
async def main():
    first = First()
    config = {"llm_deepseek": {"base_url": sys.argv[1], "api_key": "bench"}}
    disabled = ("tools_fs", "tools_shell", "permissions")
    async with Harness(plugins=[first], config=config, disabled=disabled) as h:
        agent = h.agent_loop.create("w3", AgentOptions(model="deepseek-v4-flash", thinking=False))
        agent.send("go")
        await first.seen.wait()
        os._exit(0)
asyncio.run(main())
"""


def w3(side: str, server: Server, env: dict[str, str]) -> float:
    server.queue(["text"])
    script = FIRST_TOKEN_FLOOR if side == "floor" else FIRST_TOKEN_DSH
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", script, server.url], stdout=subprocess.PIPE, env=env
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    elapsed = time.perf_counter() - start
    child.wait(30)
    check(line.strip() == b"FIRST", f"W3 {side}: no first token")
    return elapsed


def rss_kb() -> float:
    """This process's resident memory now (Linux ``/proc``; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024
    except OSError:
        return 0.0


async def w4_run(side: str, url: str, agents: int, steps: int) -> dict[str, float]:
    """One W4 measurement, in this (fresh) process: wall time, peak memory, memory held per
    agent (resident memory with every agent done but still alive, minus before)."""
    if side == "floor":
        executed: list[str] = []
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            base_kb = rss_kb()
            start = time.perf_counter()
            texts = list(
                await asyncio.gather(
                    *(floor_tool_loop(session, url, executed) for _ in range(agents))
                )
            )
            elapsed = time.perf_counter() - start
            held_kb = rss_kb() - base_kb
    else:
        bench = Bench()
        async with dsh_harness(url, bench) as h:
            base_kb = rss_kb()
            start = time.perf_counter()
            created = [h.agent_loop.create(f"w4-{i}", dsh_options()) for i in range(agents)]
            for agent in created:
                agent.send("go")
            await asyncio.gather(*(agent.wait_idle() for agent in created))
            elapsed = time.perf_counter() - start
            held_kb = rss_kb() - base_kb
            texts = [assistant_text(agent) for agent in created]
        executed = bench.executed
    check(texts == [f"finished after {steps} steps"] * agents, f"W4 {side}: final answers")
    check(len(executed) == agents * steps, f"W4 {side}: tool calls executed")
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"wall": elapsed, "peak_kb": peak_kb, "held_kb": held_kb}


def w4(side: str, server: Server, agents: int, steps: int, env: dict[str, str]) -> dict[str, float]:
    server.queue([{"name": "tool-loop", "steps": steps}] * (agents * (steps + 1)))
    served = server.stats()["served"]
    out = subprocess.run(
        [sys.executable, __file__, "--w4-child", side, server.url, str(agents), str(steps)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    check(server.stats()["served"] == served + agents * (steps + 1), f"W4 {side}: requests")
    figures: dict[str, float] = json.loads(out.splitlines()[-1])
    return figures


# -- running and reporting ------------------------------------------------------------------


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f"benchmark output check failed: {message}")


def interleaved(runs: int, measure: Callable[[str], float]) -> tuple[float, float]:
    floor: list[float] = []
    dsh: list[float] = []
    for _ in range(runs):
        floor.append(measure("floor"))
        dsh.append(measure("dsh"))
    return statistics.median(floor), statistics.median(dsh)


def row(name: str, floor: float, dsh: float, unit: str, target: str) -> str:
    return f"{name:<34} {floor:>10.3f} {dsh:>10.3f} {unit:<4} {dsh / floor:>6.2f}x  {target}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--w4-child", nargs=4, metavar=("SIDE", "URL", "AGENTS", "STEPS"))
    args = parser.parse_args()
    if args.w4_child:
        side, url, agents, steps = args.w4_child
        print(json.dumps(asyncio.run(w4_run(side, url, int(agents), int(steps)))))
        return
    quick = args.quick
    runs = args.runs or (2 if quick else 5)
    sizes = {
        "chunks": 500 if quick else 20_000,
        "steps": 10 if quick else 200,
        "agents": (10, 30) if quick else (100, 1000),
        "agent_steps": 5,
    }
    with tempfile.TemporaryDirectory() as data:
        env = {**os.environ, "XDG_DATA_HOME": data}
        os.environ["XDG_DATA_HOME"] = data
        server = Server()
        try:
            report(server, runs, sizes, env)
        finally:
            server.close()


def report(server: Server, runs: int, sizes: dict[str, Any], env: dict[str, str]) -> None:
    print(
        f"dsh benchmark — {time.strftime('%Y-%m-%d')}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cores; medians of {runs} interleaved runs"
    )
    print(f"{'workload':<34} {'floor':>10} {'dsh':>10} {'':<4} {'ratio':>7}  target")
    chunks, steps = sizes["chunks"], sizes["steps"]
    f, d = interleaved(runs, lambda side: asyncio.run(w1(side, server, chunks)))
    print(row(f"W1 one reply, {chunks:,} deltas", f, d, "s", "<= 1.5x"))
    f, d = interleaved(runs, lambda side: asyncio.run(w2(side, server, steps)))
    print(row(f"W2 {steps} sequential tool steps", f, d, "s", "<= 1.5x"))
    per_step_ms = (d - f) / (steps + 1) * 1000
    print(f"{'   dsh cost per step':<34} {per_step_ms:>21.3f} ms")
    f, d = interleaved(runs, lambda side: w3(side, server, env))
    print(row("W3 spawn to first token", f, d, "s", "<= 1.5x"))
    for agents in sizes["agents"]:
        results = {
            side: [
                w4(side, server, agents, sizes["agent_steps"], env)
                for _ in range(max(1, runs // 2))
            ]
            for side in ("floor", "dsh")
        }
        wall = {s: statistics.median(r["wall"] for r in rs) for s, rs in results.items()}
        per_agent = {
            s: statistics.median(r["held_kb"] / agents for r in rs) for s, rs in results.items()
        }
        peak = {s: statistics.median(r["peak_kb"] / 1024 for r in rs) for s, rs in results.items()}
        print(
            row(f"W4 {agents:,} agents x 5 steps, wall", wall["floor"], wall["dsh"], "s", "<= 2x")
        )
        print(
            f"{'   peak memory of the process':<34} {peak['floor']:>10.1f} {peak['dsh']:>10.1f} MB"
        )
        print(
            f"{'   memory held per agent':<34} {per_agent['floor']:>10.1f} "
            f"{per_agent['dsh']:>10.1f} KB   (target < 60 KB)"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
