"""The dsh benchmark suite: dsh against a floor client doing exactly the same work.

Run ``python bench/run.py`` (``--quick`` for small sizes, ``--scale`` for the scale curves).
The mock server (``bench/fastmock.py``) runs in its own process on 127.0.0.1 and serves every
answer from bytes encoded before the run, as fast as the socket takes them; it reports its own
CPU time, and a run in which it was busy for more than half the client's wall time is flagged
*server-bound* (the client then mostly waited, and the ratio says little). For every workload
the floor — bare aiohttp, SSE lines split by hand, ``json.loads``, a plain tool loop over a list
of dicts — and dsh run interleaved, several times; the table shows medians of the client
process's wall time and CPU time, and both ratios dsh/floor. The CPU ratio is the headline: on a
shared machine wall time also measures the neighbours.

dsh runs in its default configuration: entry-point plugins (the DeepSeek adapter, JSONL
persistence, retry, compaction, budgets, ...) plus a no-op ``dsh_agent_stream_chunk`` observer;
only the built-in tool plugins are left out, so that both sides send the model the same one
tool. Each side's clock runs from the first request to its client closed (for dsh: the harness
closed, sessions flushed). Every run checks its output (the assembled text byte for byte, every
tool call executed with the right arguments, the number of requests the server saw), so nothing
wins by skipping work.

To take dsh's cost apart, ``--without persistence_jsonl,budgets`` leaves more plugins out on the
dsh side (the header says so: such a run is a decomposition, not the benchmark), and
``--agent-steps N`` gives W4's agents N tool steps instead of 5 (1 and 9 separate what an agent
costs once from what each step costs).

Workloads: W1 one reply of 20,000 deltas; W2 one agent, 200 sequential tool steps; W3 a fresh
process from spawn to the first streamed token; W4 100 and 1,000 concurrent agents of 5 tool
steps each (wall time, CPU time, peak memory, memory held per agent). W3 and W4 also run a
reference side, the least any harness that meets their requirements does besides the floor's
work: for W3 the floor after importing dsh's stack (attrs, cattrs, structlog, pluggy, orjson)
and discovering the ``dsh`` entry points (:data:`FIRST_TOKEN_STACK`); for W4 the floor keeping
every event and persisting it as JSON lines, durable at the end of the turn
(:class:`JsonLines`). Its line says what it costs against the floor, and dsh against it.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import cProfile
import gc
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
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from attrs import field, frozen

MODEL = "deepseek-v4-flash"
ROOT = Path(__file__).resolve().parent.parent
FASTMOCK = Path(__file__).resolve().parent / "fastmock.py"
#: A run whose server was busy longer than this share of the client's wall time is server-bound.
SERVER_BOUND = 0.5


# -- the mock server, in its own process ----------------------------------------------------


@frozen
class Sample:
    """One side's measurement of one run: the client's wall and CPU seconds, and the server's
    CPU seconds over the same run."""

    wall: float
    cpu: float
    server_cpu: float

    @property
    def server_share(self) -> float:
        return self.server_cpu / self.wall if self.wall > 0 else 0.0


class FastServer:
    """``bench/fastmock.py`` in a child process, programmed and read over HTTP."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(FASTMOCK)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "PORT":
            self.process.kill()
            raise RuntimeError("the benchmark mock server did not start")
        self.url = f"http://127.0.0.1:{line[1]}"

    def _post(self, path: str, payload: Any) -> None:
        request = urllib.request.Request(f"{self.url}{path}", json.dumps(payload).encode())
        request.add_header("Content-Type", "application/json")
        urllib.request.urlopen(request, timeout=120).close()

    def program(self, spec: dict[str, Any]) -> None:
        """Encode the answers for the next run (outside every clock)."""
        self._post("/bench/program", spec)

    def stats(self) -> tuple[int, float]:
        """Requests served so far and the server's CPU seconds."""
        with urllib.request.urlopen(f"{self.url}/bench/stats", timeout=30) as response:
            stats = json.load(response)
        return int(stats["served"]), float(stats["cpu_s"])

    @contextmanager
    def watch(self, requests: int, what: str) -> Iterator[list[float]]:
        """Yield a list that receives the server's CPU seconds spent inside the block, and check
        that the block made exactly ``requests`` requests."""
        served, cpu = self.stats()
        spent: list[float] = []
        yield spent
        served_after, cpu_after = self.stats()
        check(served_after == served + requests, f"{what}: expected {requests} request(s)")
        spent.append(cpu_after - cpu)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


class Server:
    """``dsh mock-server`` in a child process, controlled over HTTP: the product mock, with its
    queue of scenarios and faults, for the scripts that need them (``soak.py``, the plugin
    cost scripts). The suite itself measures against :class:`FastServer`."""

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


#: Set by ``bench/breakdown.py``: a profiler that runs exactly while a :class:`Clock` does.
PROFILER: cProfile.Profile | None = None


class Clock:
    """Wall and CPU time of this process from construction to :meth:`stop`.

    It starts after a full garbage collection: the runs share a process, and a run must not
    pay for collecting what the run before it left (a dsh run after a dsh run spent ~1.3 µs per
    chunk of W1 freeing its predecessor's 20,000-event session). What a run collects of its
    own objects while it runs is counted."""

    def __init__(self) -> None:
        gc.collect()
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        if PROFILER is not None:
            PROFILER.enable()

    def stop(self) -> tuple[float, float]:
        if PROFILER is not None:
            PROFILER.disable()
        return time.perf_counter() - self.wall, time.process_time() - self.cpu

    @contextmanager
    def aside(self) -> Iterator[None]:
        """Time spent in the block is not counted (a look the workload itself does not take)."""
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.wall += time.perf_counter() - wall
            self.cpu += time.process_time() - cpu


class Collections:
    """The CPU time this process spends in the cyclic garbage collector while it is entered,
    and how many collections of the oldest generation (which walk every tracked object) ran."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.full = 0
        self._start = 0.0

    def _note(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.process_time()
            return
        self.cpu += time.process_time() - self._start
        self.full += info["generation"] == 2

    def restart(self) -> None:
        """Count from now (a :class:`Clock` starts with a collection of its own)."""
        self.cpu, self.full = 0.0, 0

    def __enter__(self) -> Collections:
        gc.callbacks.append(self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._note)


# -- the floor client -------------------------------------------------------------------------


async def floor_call(
    session: aiohttp.ClientSession,
    url: str,
    messages: list[dict[str, Any]],
    tools: bool,
    kept: list[Any] | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """One streamed chat completion: the text and the tool calls, SSE split by hand. Each
    parsed chunk is appended to ``kept`` (with its time) when one is given."""
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
            chunk = json.loads(data)
            if kept is not None:
                kept.append((time.time(), "chunk", chunk))
            for choice in chunk["choices"]:
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


async def floor_tool_loop(
    session: aiohttp.ClientSession,
    url: str,
    executed: list[str],
    log: JsonLines | None = None,
) -> str:
    """A plain agent loop over a list of dicts: call, run the tools, repeat. With a ``log``, the
    least a loop does that keeps and persists what happened (:class:`JsonLines`)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    kept = None if log is None else log.events
    if kept is not None:
        kept.append((time.time(), "user", messages[0]))
    while True:
        if log is not None:
            log.write()  # before the request
        text, calls = await floor_call(session, url, messages, tools=True, kept=kept)
        if not calls:
            if log is not None:
                log.events.append((time.time(), "answer", text))
                log.write()
                await asyncio.to_thread(log.close)  # durable at the end of the turn
            return text
        message = {
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
        messages.append(message)
        if log is not None:
            log.events.append((time.time(), "assistant", message))
            log.write()  # before the tool calls
        for call in calls:
            result = echo_text(json.loads(call["args"])["text"])
            executed.append(result)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            if kept is not None:
                kept.append((time.time(), "tool", messages[-1]))


class JsonLines:
    """The least W4's requirements make any harness do besides the floor's work, for one agent:
    every parsed chunk kept in memory with its time, beside the messages; what is new written
    to the agent's file as JSON lines (orjson) before each request and before each tool call;
    at the end of the turn the file, and its new directory entry, made durable (in a worker
    thread). A lower bound, not a rival: it has no hooks, no assembly, no typed events, no
    writer lock and nothing to resume from."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[tuple[float, str, Any]] = []
        self._fd: int | None = None
        self._written = 0

    def write(self) -> None:
        new = self.events[self._written :]
        if not new:
            return
        if self._fd is None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
            self._fd = os.open(self.path, flags, 0o600)
        os.write(
            self._fd,
            b"".join(
                orjson.dumps(
                    {"seq": seq, "time": at, "type": kind, "data": data},
                    option=orjson.OPT_APPEND_NEWLINE,
                )
                for seq, (at, kind, data) in enumerate(new, self._written)
            ),
        )
        self._written = len(self.events)

    def persisted(self) -> int:
        """How many event lines the file holds."""
        return self.path.read_bytes().count(b"\n")

    def close(self) -> None:
        assert self._fd is not None, "a turn writes before it ends"
        os.fsync(self._fd)
        os.close(self._fd)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


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
        from dsh.values._request import ToolSchema

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
#: Where ``--without`` puts the plugins it leaves out, for this process and the ones it spawns.
WITHOUT_ENV = "DSH_BENCH_WITHOUT"


def bench_disabled() -> tuple[str, ...]:
    """The plugins the dsh side leaves out: :data:`NOT_BENCHED`, and those ``--without`` named."""
    named = os.environ.get(WITHOUT_ENV, "").split(",")
    return NOT_BENCHED + tuple(name.strip() for name in named if name.strip())


def dsh_harness(url: str, bench: Bench) -> Any:
    from dsh import Harness

    config = {"llm_deepseek": {"base_url": url, "api_key": "bench"}}
    return Harness(plugins=[bench], config=config, disabled=bench_disabled())


def dsh_options() -> Any:
    from dsh import AgentOptions

    return AgentOptions(model=MODEL, thinking=False)


def assistant_text(agent: Any) -> str:
    from dsh.values._content import text_of

    # Backwards, as dsh's own readers do: a session's events are built as they are read.
    last = next(e for e in reversed(agent.session.events) if e.type == "assistant/message")
    return text_of(last.data.content)


# -- workloads ------------------------------------------------------------------------------


async def w1(side: str, server: FastServer, chunks: int) -> Sample:
    from dsh.testing.mockserver.catalogue import delta_text

    expected = delta_text(chunks)
    server.program({"name": "deltas", "chunks": chunks})
    with server.watch(1, f"W1 {side}") as spent:
        if side == "floor":
            async with aiohttp.ClientSession() as session:
                clock = Clock()
                text, _ = await floor_call(
                    session, server.url, [{"role": "user", "content": "go"}], False
                )
        else:
            async with dsh_harness(server.url, Bench()) as h:
                clock = Clock()
                agent = h.agent_loop.create("w1", dsh_options())
                agent.send("go")
                await agent.wait_idle()
            text = assistant_text(agent)
        wall, cpu = clock.stop()
    check(text == expected, f"W1 {side}: the assembled text differs")
    return Sample(wall, cpu, spent[0])


async def w2(side: str, server: FastServer, steps: int) -> Sample:
    server.program({"name": "tool-loop", "steps": steps})
    with server.watch(steps + 1, f"W2 {side}") as spent:
        if side == "floor":
            executed: list[str] = []
            async with aiohttp.ClientSession() as session:
                clock = Clock()
                text = await floor_tool_loop(session, server.url, executed)
        else:
            bench = Bench()
            async with dsh_harness(server.url, bench) as h:
                clock = Clock()
                agent = h.agent_loop.create("w2", dsh_options())
                agent.send("go")
                await agent.wait_idle()
            text = assistant_text(agent)
            executed = bench.executed
        wall, cpu = clock.stop()
    check(text == f"finished after {steps} steps", f"W2 {side}: wrong final answer {text!r}")
    check(executed == [echo_text(f"step {i}") for i in range(steps)], f"W2 {side}: tool calls")
    return Sample(wall, cpu, spent[0])


FIRST_TOKEN_FLOOR = """
import asyncio, json, sys, time, aiohttp
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
                    print("FIRST", time.process_time(), flush=True)
                    return
asyncio.run(main())
"""

FIRST_TOKEN_DSH = """
import asyncio, os, sys, time
from dsh import AgentOptions, Harness, hookimpl
class First:
    def __init__(self): self.seen = asyncio.Event()
    @hookimpl
    def dsh_agent_stream_chunk(self, chunk):
        if chunk.type == "text-delta" and chunk.text and not self.seen.is_set():
            print("FIRST", time.process_time(), flush=True)
            self.seen.set()
async def main():
    first = First()
    config = {"llm_deepseek": {"base_url": sys.argv[1], "api_key": "bench"}}
    disabled = sys.argv[2].split(",")  # the parent's bench_disabled()
    async with Harness(plugins=[first], config=config, disabled=disabled) as h:
        agent = h.agent_loop.create("w3", AgentOptions(model="deepseek-v4-flash", thinking=False))
        agent.send("go")
        await first.seen.wait()
        os._exit(0)
asyncio.run(main())
"""


#: W3's third side: the floor, after importing the stack dsh is built on (attrs, cattrs,
#: structlog, pluggy, orjson) and discovering the ``dsh`` entry points, as any harness on that
#: stack that finds its plugins by entry point does before its first request.
FIRST_TOKEN_STACK = (
    "import attrs, cattrs, structlog, pluggy, orjson, importlib.metadata\n"
    "importlib.metadata.entry_points(group='dsh')" + FIRST_TOKEN_FLOOR
)
#: What each side of W3 runs in its child process.
FIRST_TOKEN = {"floor": FIRST_TOKEN_FLOOR, "stack": FIRST_TOKEN_STACK, "dsh": FIRST_TOKEN_DSH}


def compile_bytecode() -> None:
    """Write the bytecode of dsh's packages, as installing them does. In a working tree a source
    newer than its cached bytecode (edited, with ``PYTHONDONTWRITEBYTECODE`` set) is compiled
    again by every spawned process: ~4 ms a module that no installed dsh pays."""
    for package in ("dsh", "dsh_plugins"):
        compileall.compile_dir(ROOT / package, quiet=1)


def w3(side: str, server: FastServer, env: dict[str, str]) -> Sample:
    """Spawn to first token; the CPU time is the child's own, read when it saw the token."""
    server.program({"name": "deltas", "chunks": 50})
    script = FIRST_TOKEN[side]
    with server.watch(1, f"W3 {side}") as spent:
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-c", script, server.url, ",".join(bench_disabled())],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert child.stdout is not None
        line = child.stdout.readline().split()
        wall = time.perf_counter() - start
        child.wait(30)
    check(len(line) == 2 and line[0] == b"FIRST", f"W3 {side}: no first token")
    return Sample(wall, float(line[1]), spent[0])


def rss_kb() -> float:
    """This process's resident memory now (Linux ``/proc``; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024
    except OSError:
        return 0.0


def peak_rss_kb() -> float:
    """This process's peak resident memory. ``VmHWM`` starts afresh at ``exec``, where
    ``ru_maxrss`` keeps the peak of the process that forked us (the suite, holding W1's data)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1])
    except OSError:
        pass
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


async def _measured(
    work: Callable[[], Awaitable[Any]], collections: Collections
) -> tuple[Clock, Any, float, float]:
    """Run ``work`` (every agent to its end) with a started :class:`Clock`: the clock, what
    ``work`` returned, the memory held after it (resident KB, minus before) and how many more
    objects the collector tracks (counted aside from the clock)."""
    base_kb, before = rss_kb(), len(gc.get_objects())
    clock = Clock()
    collections.restart()
    result = await work()
    held_kb = rss_kb() - base_kb
    with clock.aside():
        tracked = len(gc.get_objects()) - before
    return clock, result, held_kb, tracked


async def w4_run(side: str, url: str, agents: int, steps: int) -> dict[str, float]:
    """One W4 measurement, in this (fresh) process: wall and CPU time, peak memory, memory held
    per agent (resident memory with every agent done but still alive, minus before), the CPU
    time the garbage collector took and how many full collections ran while the clock ran, and
    how many more objects the collector tracks per agent (counted with every agent done but
    still alive; the count is not timed)."""
    with Collections() as collections, tempfile.TemporaryDirectory() as directory:
        if side in ("floor", "logged"):
            executed: list[str] = []
            logs = [
                JsonLines(Path(directory, f"w4-{i}.jsonl")) if side == "logged" else None
                for i in range(agents)
            ]
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as session:
                clock, texts, held_kb, tracked = await _measured(
                    lambda: asyncio.gather(
                        *(floor_tool_loop(session, url, executed, log) for log in logs)
                    ),
                    collections,
                )
            wall, cpu = clock.stop()
            persisted = [log.persisted() for log in logs if log is not None]
            check(persisted == [len(log.events) for log in logs if log is not None], "W4 log")
        else:
            bench = Bench()
            async with dsh_harness(url, bench) as h:

                async def run_agents() -> list[Any]:
                    created = [h.agent_loop.create(f"w4-{i}", dsh_options()) for i in range(agents)]
                    for agent in created:
                        agent.send("go")
                    await asyncio.gather(*(agent.wait_idle() for agent in created))
                    return created

                clock, created, held_kb, tracked = await _measured(run_agents, collections)
                texts = [assistant_text(agent) for agent in created]
            wall, cpu = clock.stop()
            executed = bench.executed
        gc_cpu, full = collections.cpu, collections.full
    check(list(texts) == [f"finished after {steps} steps"] * agents, f"W4 {side}: final answers")
    check(len(executed) == agents * steps, f"W4 {side}: tool calls executed")
    return {
        "wall": wall,
        "cpu": cpu,
        "peak_kb": peak_rss_kb(),
        "held_kb": held_kb,
        "gc_cpu": gc_cpu,
        "full_collections": full,
        "tracked": tracked / agents,
    }


def w4(
    side: str, server: FastServer, agents: int, steps: int, env: dict[str, str]
) -> dict[str, float]:
    server.program({"name": "tool-loop", "steps": steps})
    with server.watch(agents * (steps + 1), f"W4 {side}") as spent:
        out = subprocess.run(
            [sys.executable, __file__, "--w4-child", side, server.url, str(agents), str(steps)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
    figures: dict[str, float] = json.loads(out.splitlines()[-1])
    figures["server_cpu"] = spent[0]
    return figures


# -- running and reporting ------------------------------------------------------------------


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f"benchmark output check failed: {message}")


@frozen
class Medians:
    """The medians of several interleaved runs of both sides, and the load around them."""

    floor: Sample
    dsh: Sample
    load: float
    #: The medians of other sides run between them (W3's ``stack``), by side.
    others: dict[str, Sample] = field(factory=dict)

    @property
    def cpu_ratio(self) -> float:
        return self.dsh.cpu / self.floor.cpu

    @property
    def wall_ratio(self) -> float:
        return self.dsh.wall / self.floor.wall

    @property
    def server_bound(self) -> bool:
        return max(self.floor.server_share, self.dsh.server_share) > SERVER_BOUND


def median_sample(samples: Sequence[Sample]) -> Sample:
    return Sample(
        statistics.median(s.wall for s in samples),
        statistics.median(s.cpu for s in samples),
        statistics.median(s.server_cpu for s in samples),
    )


def interleaved(runs: int, measure: Callable[[str], Sample], others: Sequence[str] = ()) -> Medians:
    """``runs`` runs of each side, floor, ``others`` and dsh alternating; the medians."""
    samples: dict[str, list[Sample]] = {side: [] for side in ("floor", *others, "dsh")}
    for _ in range(runs):
        for side, taken in samples.items():
            taken.append(measure(side))
    medians = {side: median_sample(taken) for side, taken in samples.items()}
    floor, dsh = medians.pop("floor"), medians.pop("dsh")
    return Medians(floor, dsh, os.getloadavg()[0], medians)


def reference(label: str, cpu: float, m: Medians) -> str:
    """The line of a reference side: its CPU, as a multiple of the floor's, and dsh's as a
    multiple of it."""
    return (
        f"{label:<34} {cpu:>9.3f}s CPU: {cpu / m.floor.cpu:.2f}x the floor; "
        f"dsh {m.dsh.cpu / cpu:.2f}x it"
    )


def header() -> str:
    return (
        f"{'workload':<34} {'wall floor':>10} {'dsh':>8} {'ratio':>6}   "
        f"{'cpu floor':>9} {'dsh':>8} {'ratio':>6}   {'server busy f/d':>15}  {'load':>4}"
    )


def row(name: str, m: Medians, target: str) -> str:
    busy = f"{m.floor.server_share:>6.0%} /{m.dsh.server_share:>5.0%}"
    flag = "  SERVER-BOUND" if m.server_bound else ""
    return (
        f"{name:<34} {m.floor.wall:>9.3f}s {m.dsh.wall:>7.3f}s {m.wall_ratio:>5.2f}x   "
        f"{m.floor.cpu:>8.3f}s {m.dsh.cpu:>7.3f}s {m.cpu_ratio:>5.2f}x   {busy:>15}  "
        f"{m.load:>4.1f}  cpu target {target}{flag}"
    )


def machine() -> str:
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    )


#: W4's sides: the floor, the floor keeping and persisting its events (:class:`JsonLines`),
#: dsh.
W4_SIDES = ("floor", "logged", "dsh")


def w4_medians(
    server: FastServer,
    runs: int,
    agents: int,
    steps: int,
    env: dict[str, str],
    sides: Sequence[str] = W4_SIDES,
) -> tuple[Medians, dict[str, dict[str, float]]]:
    """W4 interleaved: the time medians, and per side the medians of the other figures of
    :func:`w4_run` (CPU seconds, peak memory and memory held per agent in KB, the collector's
    CPU seconds, its full collections, the objects it tracks per agent), for ``sides`` (floor
    and dsh at least; :data:`W4_SIDES` by default), run in that order."""
    results: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for _ in range(runs):
        for side in sides:
            results[side].append(w4(side, server, agents, steps, env))
    samples = {
        side: median_sample([Sample(r["wall"], r["cpu"], r["server_cpu"]) for r in rs])
        for side, rs in results.items()
    }
    figures = {
        side: {key: statistics.median(r[key] for r in rs) for key in W4_FIGURES}
        for side, rs in results.items()
    }
    return Medians(samples["floor"], samples["dsh"], os.getloadavg()[0]), figures


#: What :func:`w4_medians` reports per side besides the time medians.
W4_FIGURES = ("cpu", "peak_kb", "held_kb", "gc_cpu", "full_collections", "tracked")


def w4_rows(m: Medians, figures: dict[str, dict[str, float]], agents: int) -> list[str]:
    """The lines under a W4 row: the least a loop that keeps and persists its events costs,
    memory, and what the garbage collector cost each side."""
    floor, logged, dsh = figures["floor"], figures["logged"], figures["dsh"]
    return [
        reference("   floor keeping + persisting events", logged["cpu"], m)
        + f"; held {logged['held_kb'] / agents:.1f} KB per agent",
        f"{'   peak memory of the process':<34} {floor['peak_kb'] / 1024:>9.1f}  "
        f"{dsh['peak_kb'] / 1024:>7.1f} MB",
        f"{'   memory held per agent':<34} {floor['held_kb'] / agents:>9.1f}  "
        f"{dsh['held_kb'] / agents:>7.1f} KB   (target <= 40 KB at 1,000 agents)",
        f"{'   objects the collector tracks':<34} {floor['tracked']:>9.0f}  "
        f"{dsh['tracked']:>7.0f} per agent",
        f"{'   CPU in garbage collection':<34} {floor['gc_cpu']:>9.3f}s {dsh['gc_cpu']:>7.3f}s "
        f"  ({floor['gc_cpu'] / m.floor.cpu:.0%} / {dsh['gc_cpu'] / m.dsh.cpu:.0%} of the CPU; "
        f"full collections {floor['full_collections']:.0f} / {dsh['full_collections']:.0f})",
    ]


#: The workloads ``--only`` may name.
WORKLOADS = frozenset({"W1", "W2", "W3", "W4"})


def workloads(names: str) -> frozenset[str]:
    """The workloads ``--only`` names (comma-separated, any case)."""
    chosen = frozenset(name.strip().upper() for name in names.split(",") if name.strip())
    unknown = sorted(chosen - WORKLOADS)
    if unknown or not chosen:
        raise SystemExit(f"--only: unknown workload(s) {unknown}; choose from W1, W2, W3, W4")
    return chosen


def report(
    server: FastServer,
    runs: int,
    sizes: dict[str, Any],
    env: dict[str, str],
    only: frozenset[str] = WORKLOADS,
) -> None:
    print(f"dsh benchmark — {machine()}; medians of {runs} interleaved runs")
    if bench_disabled() != NOT_BENCHED:
        left_out = ", ".join(bench_disabled()[len(NOT_BENCHED) :])
        print(f"dsh side without {left_out}: a decomposition, not the benchmarked configuration")
    print(header())
    chunks, steps = sizes["chunks"], sizes["steps"]
    if "W1" in only:
        m = interleaved(runs, lambda side: asyncio.run(w1(side, server, chunks)))
        print(row(f"W1 one reply, {chunks:,} deltas", m, "<= 1.3x"))
        print(f"{'   dsh CPU per chunk over the floor':<34} {per_unit(m, chunks) * 1e6:>8.1f} µs")
    if "W2" in only:
        m = interleaved(runs, lambda side: asyncio.run(w2(side, server, steps)))
        print(row(f"W2 {steps} sequential tool steps", m, "<= 1.3x"))
        print(f"{'   dsh CPU per step over the floor':<34} {per_unit(m, steps + 1) * 1e3:>8.3f} ms")
    if "W3" in only:
        compile_bytecode()
        m = interleaved(runs, lambda side: w3(side, server, env), others=("stack",))
        print(row("W3 spawn to first token", m, "<= 1.3x"))
        print(reference("   floor importing dsh's stack", m.others["stack"].cpu, m))
    for agents in sizes["agents"] if "W4" in only else ():
        m, figures = w4_medians(server, runs, agents, sizes["agent_steps"], env)
        print(row(f"W4 {agents:,} agents x {sizes['agent_steps']} steps", m, "<= 1.5x"))
        print("\n".join(w4_rows(m, figures, agents)))
    print(f"finished — load {os.getloadavg()[0]:.1f}")


def per_unit(m: Medians, units: int) -> float:
    """dsh's CPU seconds per unit of work beyond the floor's."""
    return (m.dsh.cpu - m.floor.cpu) / units


# -- scale curves ---------------------------------------------------------------------------

#: 10x more work may cost at most this many times 10x more.
LINEAR_SLACK = 1.1


@frozen
class Point:
    """One size of a scale curve: the work done and the medians measured."""

    size: int
    medians: Medians
    held_kb: float = 0.0
    #: CPU seconds each side spent in the garbage collector (floor, dsh), where measured.
    gc_cpu: tuple[float, float] | None = None

    def without_collector(self) -> tuple[float, float]:
        """Each side's CPU seconds (floor, dsh) less what the collector took."""
        floor_gc, dsh_gc = self.gc_cpu or (0.0, 0.0)
        return self.medians.floor.cpu - floor_gc, self.medians.dsh.cpu - dsh_gc


def growth_rows(name: str, unit: str, points: Sequence[Point]) -> list[str]:
    """One line per size: CPU per unit on each side, and how cost grew from the size before
    against how the work grew; a growth above ``LINEAR_SLACK`` times the work is flagged, and
    marked as dsh's own when the part dsh adds over the floor grew that fast as well (where
    only the floor's part did, the cause is shared: bytes sent, the HTTP stack). Where the
    collector's CPU was measured, the growth without it is shown too, and a super-linear growth
    that is linear without it is marked as the collector's."""
    lines = []
    for before, point in zip((None, *points), points, strict=False):
        m = point.medians
        extra = (m.dsh.cpu - m.floor.cpu) / point.size * 1e6
        line = (
            f"{name} {point.size:>8,}  cpu floor {m.floor.cpu:>8.3f}s  dsh {m.dsh.cpu:>8.3f}s "
            f"({m.cpu_ratio:>4.2f}x)  per {unit}: dsh {m.dsh.cpu / point.size * 1e6:>7.1f} µs, "
            f"over the floor {extra:>7.1f} µs"
        )
        if point.held_kb:
            line += f"  held {point.held_kb:>6.1f} KB/agent"
        if before is not None:
            work = point.size / before.size
            dsh_growth = m.dsh.cpu / before.medians.dsh.cpu
            floor_growth = m.floor.cpu / before.medians.floor.cpu
            extra_growth = (m.dsh.cpu - m.floor.cpu) / (
                before.medians.dsh.cpu - before.medians.floor.cpu
            )
            line += (
                f"  | work x{work:.0f}: dsh cost x{dsh_growth:.1f}, floor x{floor_growth:.1f}, "
                f"dsh over the floor x{extra_growth:.1f}"
            )
            if point.gc_cpu is not None and before.gc_cpu is not None:
                (floor_now, dsh_now), (floor_then, dsh_then) = (
                    point.without_collector(),
                    before.without_collector(),
                )
                bare = dsh_now / dsh_then
                line += (
                    f"; without the collector dsh x{bare:.1f}, floor x{floor_now / floor_then:.1f}"
                )
            else:
                bare = dsh_growth
            if dsh_growth > work * LINEAR_SLACK:
                line += "  SUPER-LINEAR"
                if bare <= work * LINEAR_SLACK:
                    line += " (the collector's)"
                elif extra_growth > work * LINEAR_SLACK:
                    line += " (dsh's own share too)"
            if before.held_kb and point.held_kb > before.held_kb * LINEAR_SLACK:
                line += "  MEMORY/AGENT GROWS"
        line += f"  load {m.load:.1f}" + ("  SERVER-BOUND" if m.server_bound else "")
        lines.append(line)
    return lines


def measuring(
    workload: Callable[[str, FastServer, int], Coroutine[Any, Any, Sample]],
    server: FastServer,
    size: int,
) -> Callable[[str], Sample]:
    """One side's run of ``workload`` at ``size``, in a fresh event loop."""
    return lambda side: asyncio.run(workload(side, server, size))


def scale(
    server: FastServer, runs: int, env: dict[str, str], only: frozenset[str] = WORKLOADS
) -> None:
    """The scale curves of the workloads in ``only`` (W3 has none: it is one spawn)."""
    print(f"dsh scale curves — {machine()}; medians of {runs} interleaved runs (CPU time)")
    if "W1" in only:
        sizes = (2_000, 20_000, 200_000)
        points = [Point(n, interleaved(runs, measuring(w1, server, n))) for n in sizes]
        print("\n".join(growth_rows("W1 chunks", "chunk", points)), flush=True)
    if "W2" in only:
        points = [Point(n, interleaved(runs, measuring(w2, server, n))) for n in (50, 200, 800)]
        print("\n".join(growth_rows("W2 steps ", "step ", points)), flush=True)
    if "W4" in only:
        points = []
        for agents in (100, 1_000, 5_000):
            m, figures = w4_medians(server, max(1, runs // 2), agents, 5, env, ("floor", "dsh"))
            collector = (figures["floor"]["gc_cpu"], figures["dsh"]["gc_cpu"])
            points.append(Point(agents, m, figures["dsh"]["held_kb"] / agents, collector))
        print("\n".join(growth_rows("W4 agents", "agent", points)), flush=True)
    print(f"finished — load {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--scale", action="store_true", help="how cost grows with the work")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument(
        "--only", default=",".join(sorted(WORKLOADS)), help="the workloads to run, e.g. W1,W3"
    )
    parser.add_argument(
        "--without", default="", help="more plugins the dsh side leaves out, e.g. persistence_jsonl"
    )
    parser.add_argument(
        "--agent-steps", type=int, default=5, help="W4's tool steps per agent (--scale keeps 5)"
    )
    parser.add_argument("--w4-child", nargs=4, metavar=("SIDE", "URL", "AGENTS", "STEPS"))
    args = parser.parse_args()
    if args.without:
        os.environ[WITHOUT_ENV] = args.without  # the W4 children inherit it
    if args.w4_child:
        side, url, agents, steps = args.w4_child
        print(json.dumps(asyncio.run(w4_run(side, url, int(agents), int(steps)))))
        return
    quick = args.quick
    runs = args.runs or (2 if quick else 3 if args.scale else 5)
    sizes = {
        "chunks": 500 if quick else 20_000,
        "steps": 10 if quick else 200,
        "agents": (10, 30) if quick else (100, 1000),
        "agent_steps": args.agent_steps,
    }
    with tempfile.TemporaryDirectory() as data:
        env = {**os.environ, "XDG_DATA_HOME": data}
        os.environ["XDG_DATA_HOME"] = data
        server = FastServer()
        try:
            if args.scale:
                scale(server, runs, env, workloads(args.only))
            else:
                report(server, runs, sizes, env, workloads(args.only))
        finally:
            server.close()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
