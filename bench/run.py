"""The dsh benchmark suite: dsh against two floors, clients doing the same work as fast as
Python allows.

Run ``python bench/run.py`` (``--quick`` for small sizes, ``--scale`` for the scale curves).

**The sides.** Every workload runs three clients against the same mock server, interleaved,
several times (medians; five by default):

- the **floor**: what a careful engineer writes by hand — aiohttp, the request body encoded
  with ``orjson``, the response read in blocks (``response.content.iter_any()``) and split into
  SSE lines by hand, each payload decoded with ``orjson.loads`` (the decoder dsh's adapters
  use: the same on both sides), a plain tool loop over a list of dicts (:func:`floor_call`,
  :func:`floor_tool_loop`);
- the **logged floor**: the floor plus the least dsh's persistence promise costs — every parsed
  chunk kept in memory with its time, beside the messages, the tool calls and their results;
  each kept event encoded (orjson) as one JSON line; what is new written at each checkpoint
  (before each request, before each tool call, at the end of the turn); the file fsynced at the
  end of the turn (:class:`JsonLines`);
- **dsh** as users run it: every entry-point plugin loaded — permissions, budgets, compaction,
  retry, JSONL persistence, otel, the file and shell tools, ... — with the host's echo tool and
  a no-op ``dsh_agent_stream_batch`` observer (a host that shows the stream has one; it
  draws once per network read, as the batch form lets it). The
  tools the floor does not offer are left out of the request (``AgentOptions(tools=...)``),
  not out of the harness.

**The clocks.** W1, W2 and W4 measure the work, not the start: each side imports what it needs
and makes a first request (a one-step tool turn) on the client it is measured with before its
clock starts — the floor on its aiohttp session, dsh on its started harness — so no side pays
imports, connection set-up, thread-pool creation or any other first-use cost inside the clock.
Each clock starts after a full garbage collection and runs from the first measured request to
the client closed (for dsh: the harness closed, its sessions flushed). W3 is the opposite: a
fresh process per run, from spawn to the first streamed token, so each side pays all its own
imports and first-request costs there.

**The figures.** For each side the client process's wall time and CPU time (all its threads);
dsh's ratio to the floor and to the logged floor, for both. **The CPU ratio is the headline**:
on a shared machine wall time also measures the neighbours. The mock server
(``bench/fastmock.py``) runs in its own process and serves answers encoded before the run; it
reports its own CPU time, and a row where it was busy for more than half of a side's wall time
is flagged *server-bound* (the client then mostly waited). Every run checks its output (the
text byte for byte, every tool call executed with the right arguments, the requests the server
saw, the logged floor's lines on disk), so nothing wins by skipping work.

Workloads: W1 one reply of 20,000 deltas; W2 one agent, 200 sequential tool steps, and the same
at 2,000 steps for its growth (dsh's extra CPU per step over the floor at 2,000 steps ÷ at
200); W3 a fresh process from spawn to the first streamed token (with a fourth side, the floor
after importing dsh's stack, :data:`FIRST_TOKEN_STACK`); W4 100 and 1,000 concurrent agents of
5 tool steps each, each side in a fresh process (wall and CPU time, peak memory, memory held
per agent, the garbage collector's share).

To take dsh's cost apart, ``--without persistence_jsonl,budgets`` leaves plugins out on the dsh
side (the header says so: such a run is a decomposition, not the benchmark), and
``--agent-steps N`` gives W4's agents N tool steps instead of 5.
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
import shutil
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
from types import TracebackType
from typing import Any, Protocol

import aiohttp
import orjson
from attrs import field, frozen

MODEL = "deepseek-v4-flash"
ROOT = Path(__file__).resolve().parent.parent
FASTMOCK = Path(__file__).resolve().parent / "fastmock.py"
#: A run whose server was busy longer than this share of a side's wall time is server-bound.
SERVER_BOUND = 0.5
#: The sides of W1, W2 and W4, in the order they run: the floor, the logged floor, dsh.
SIDES = ("floor", "logged", "dsh")


# -- the mock server, in its own process ----------------------------------------------------


def program(url: str, spec: dict[str, Any]) -> None:
    """Have the mock server at ``url`` encode the answers ``spec`` names (outside every
    clock: a blocking call)."""
    request = urllib.request.Request(f"{url}/bench/program", json.dumps(spec).encode())
    request.add_header("Content-Type", "application/json")
    urllib.request.urlopen(request, timeout=300).close()


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

    def program(self, spec: dict[str, Any]) -> None:
        """Encode the answers for the next run (outside every clock)."""
        program(self.url, spec)

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

#: The floor's request headers (its body is encoded with orjson, as dsh's adapter encodes its).
HEADERS = {"Authorization": "Bearer bench", "Content-Type": "application/json"}


async def floor_call(
    session: aiohttp.ClientSession,
    url: str,
    messages: list[dict[str, Any]],
    tools: bool,
    keep: Callable[[str, Any], None] | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """One streamed chat completion: the text and the tool calls. The body is read in blocks,
    as they arrive, and split into lines by hand; each ``data:`` payload is decoded by
    ``orjson.loads`` straight from its bytes. With ``keep`` (the logged floor's
    :meth:`JsonLines.keep`), what each parsed chunk says is kept: the delta as parsed (text or
    tool-call fragments), and the finish reason and the usage when the chunk has them. The
    rest of a chunk (the id, model and fingerprint every chunk repeats) is not kept; dsh keeps
    no more."""
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
    loads = orjson.loads
    pending = b""
    done = False
    request = session.post(f"{url}/chat/completions", data=orjson.dumps(body), headers=HEADERS)
    async with request as response:
        response.raise_for_status()
        async for block in response.content.iter_any():
            lines = (pending + block if pending else block).split(b"\n")
            pending = lines.pop()  # the unfinished line, if the block ended inside one
            for line in lines:
                if line[:6] != b"data: ":
                    continue  # the blank line between events, a comment
                if line.startswith(b"[DONE]", 6):
                    done = True
                    break
                chunk = loads(line[6:])
                for choice in chunk["choices"]:
                    delta = choice.get("delta") or {}
                    if keep is not None:
                        keep("chunk", delta)
                        if choice.get("finish_reason"):
                            keep("finish", choice["finish_reason"])
                    content = delta.get("content")
                    if content:
                        text.append(content)
                    for fragment in delta.get("tool_calls") or ():
                        call = calls.get(fragment["index"])
                        if call is None:
                            call = calls[fragment["index"]] = {"id": "", "name": "", "args": ""}
                        call["id"] = fragment.get("id") or call["id"]
                        function = fragment.get("function") or {}
                        call["name"] = function.get("name") or call["name"]
                        call["args"] += function.get("arguments") or ""
                if keep is not None and chunk.get("usage"):
                    keep("usage", chunk["usage"])
            if done:
                break
    return "".join(text), [calls[i] for i in sorted(calls)]


async def floor_tool_loop(
    session: aiohttp.ClientSession,
    url: str,
    executed: list[str],
    log: JsonLines | None = None,
    tools: bool = True,
) -> str:
    """A plain agent loop over a list of dicts: call, run the tools, repeat (``tools=False``:
    no tool is offered, one call). With a ``log``, the logged floor: every event kept and
    persisted at each checkpoint (:class:`JsonLines`)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    keep = None if log is None else log.keep
    if keep is not None:
        keep("user", messages[0])
    while True:
        if log is not None:
            log.write()  # checkpoint: before the request
        text, calls = await floor_call(session, url, messages, tools, keep)
        if not calls:
            if log is not None:
                log.keep("answer", {"role": "assistant", "content": text})
                log.write()  # checkpoint: the end of the turn
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
        if keep is not None:
            keep("assistant", message)
        for call in calls:
            if log is not None:
                log.keep("tool_call", call)
                log.write()  # checkpoint: before the tool call
            result = echo_text(orjson.loads(call["args"])["text"])
            executed.append(result)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            if keep is not None:
                keep("tool", messages[-1])


class JsonLines:
    """The logged floor's log of one turn: the least dsh's persistence promise makes any
    harness do besides the floor's work. Every event kept in memory with its time
    (:meth:`keep`: what each parsed chunk says, see :func:`floor_call`; the messages, the tool
    calls and their results) and encoded (orjson) as one JSON line as it is kept; what is new
    written to the turn's file at each checkpoint (:meth:`write`: before each request, before
    each tool call, at the end of the turn); at the end of the turn the file, and its new
    directory entry, made durable (:meth:`close`, in a worker thread). Encoding each event as
    it comes into one growing buffer costs ~0.4 µs an event; encoding a checkpoint's events at
    once, ~2.5 µs (20,000 short-lived objects at a time, and their memory). A lower bound, not
    a rival: no hooks, no assembly, no typed events, no writer lock, nothing to resume from."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[tuple[float, str, Any]] = []
        self._pending = bytearray()
        self._fd: int | None = None

    def keep(self, kind: str, data: Any) -> None:
        """Keep one event, with its time, and encode its line."""
        at = time.time()
        line = {"seq": len(self.events), "time": at, "type": kind, "data": data}
        self._pending += orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE)
        self.events.append((at, kind, data))

    def write(self) -> None:
        """A checkpoint: the lines not yet written, written (the file made at the first)."""
        if not self._pending:
            return
        if self._fd is None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
            self._fd = os.open(self.path, flags, 0o600)
        os.write(self._fd, self._pending)
        self._pending.clear()

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

    def dsh_agent_stream_batch(self, chunks: Any) -> None:
        return None


#: The plugins the benchmark itself leaves out of dsh: none. Every entry-point plugin loads, as
#: when a user runs dsh; the tools the floor does not offer are left out of the request only
#: (:func:`dsh_options`).
NOT_BENCHED: tuple[str, ...] = ()
#: Where ``--without`` puts the plugins it leaves out, for this process and the ones it spawns.
WITHOUT_ENV = "DSH_BENCH_WITHOUT"


def bench_disabled() -> tuple[str, ...]:
    """The plugins the dsh side leaves out: :data:`NOT_BENCHED`, and those ``--without`` named."""
    named = os.environ.get(WITHOUT_ENV, "").split(",")
    return NOT_BENCHED + tuple(name.strip() for name in named if name.strip())


def dsh_harness(url: str, bench: Bench, side: str = "dsh") -> Any:
    from dsh import Harness

    config = {"llm_deepseek": {"base_url": url, "api_key": "bench"}}
    return Harness(plugins=[bench], config=config, disabled=dsh_disabled(side))


#: ``--layers``' partial dsh sides: the entry-point plugins each keeps (every other one is left
#: out). ``dsh-core`` is the loop, the session log and the DeepSeek adapter, with nothing that
#: persists, checks or counts; ``dsh-jsonl`` adds JSONL persistence; the ``dsh`` side is all of it.
LAYER_SIDES: dict[str, tuple[str, ...]] = {
    "dsh-core": ("llm_deepseek",),
    "dsh-jsonl": ("llm_deepseek", "persistence_jsonl"),
}


def dsh_disabled(side: str) -> tuple[str, ...]:
    """The entry-point plugins the dsh side ``side`` leaves out: the ``dsh`` side
    :func:`bench_disabled`'s, a partial side (:data:`LAYER_SIDES`) all but those it keeps."""
    if side not in LAYER_SIDES:
        return bench_disabled()
    from importlib.metadata import entry_points

    kept = LAYER_SIDES[side]
    return tuple(sorted(e.name for e in entry_points(group="dsh") if e.name not in kept))


def dsh_options(tools: bool = True) -> Any:
    """The agent's options: the floor's one tool offered (``tools=False``: none, as the floor
    offers none in W1); the other registered tools stay in the harness, out of the request."""
    from dsh import AgentOptions

    return AgentOptions(model=MODEL, thinking=False, tools=("echo",) if tools else ())


def assistant_text(agent: Any) -> str:
    from dsh.values._content import text_of

    # Backwards, as dsh's own readers do: a session's events are built as they are read.
    last = next(e for e in reversed(agent.session.events) if e.type == "assistant/message")
    return text_of(last.data.content)


# -- the clients the workloads drive --------------------------------------------------------


class Client(Protocol):
    """One side of a run: a client that runs agent turns against the mock server."""

    executed: list[str]

    async def turn(self, name: str, tools: bool = True) -> str:
        """One agent's turn to its answer (its tools run); the answer's text."""

    async def close(self) -> None:
        """Close the client (and, for dsh, flush its sessions); idempotent."""


class FloorClient:
    """The floor's side (``logs=None``) or the logged floor's (one JSON-lines file per turn
    under ``logs``): one aiohttp session, connections kept alive, no connection limit."""

    def __init__(self, url: str, logs: Path | None = None) -> None:
        self.url = url
        self.logs = logs
        self.executed: list[str] = []
        #: The logged floor's logs, one per turn, kept (what it keeps is part of its memory).
        self.kept: list[JsonLines] = []
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def turn(self, name: str, tools: bool = True) -> str:
        log = None
        if self.logs is not None:
            log = JsonLines(self.logs / f"{name}.jsonl")
            self.kept.append(log)
        return await floor_tool_loop(self.session, self.url, self.executed, log, tools)

    async def close(self) -> None:
        await self.session.close()


class DshClient:
    """dsh's side: a harness with every entry-point plugin (less ``--without``'s), started; or
    a partial side of ``--layers`` (:func:`dsh_disabled`)."""

    def __init__(self, url: str, side: str = "dsh") -> None:
        self.bench = Bench()
        self.executed = self.bench.executed
        self.harness = dsh_harness(url, self.bench, side)

    async def turn(self, name: str, tools: bool = True) -> str:
        agent = self.harness.agent_loop.create(name, dsh_options(tools))
        agent.send("go")
        await agent.wait_idle()
        return assistant_text(agent)

    async def close(self) -> None:
        await self.harness.close()  # idempotent


class Opened:
    """``async with Opened(side, url, logs) as client``: the side's client, started (dsh's
    harness loaded and started), closed on the way out unless the run closed it already."""

    def __init__(self, side: str, url: str, logs: Path) -> None:
        self.side, self.url, self.logs = side, url, logs
        self.client: FloorClient | DshClient | None = None

    async def __aenter__(self) -> FloorClient | DshClient:
        if self.side == "dsh" or self.side in LAYER_SIDES:
            client = DshClient(self.url, self.side)
            await client.harness.start()
            self.client = client
            return client
        check(self.side in ("floor", "logged"), f"unknown side {self.side!r}")
        self.client = FloorClient(self.url, self.logs if self.side == "logged" else None)
        return self.client

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.client is not None:
            await self.client.close()


#: The warm-up turn's program: one tool step and the answer (two requests).
WARM_UP = {"name": "tool-loop", "steps": 1}


async def warm_up(client: Client, steps: int = 1) -> None:
    """One turn of ``steps`` tool steps before the clock, on the client about to be measured:
    its imports, its connection, its first-use work (the worker thread of the logged floor's
    fsync, dsh's lazily built codecs and validators) are paid outside the clock."""
    text = await client.turn("warm-up")
    check(text == f"finished after {steps} steps", f"warm-up: wrong answer {text!r}")
    client.executed.clear()


@contextmanager
def log_directory() -> Iterator[Path]:
    """A fresh directory for the logged floor's files, beside dsh's sessions
    (``XDG_DATA_HOME``: the same file system), removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="floor-", dir=os.environ.get("XDG_DATA_HOME")))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def timed(
    side: str,
    server: FastServer,
    spec: dict[str, Any],
    requests: int,
    work: Callable[[Client], Awaitable[str]],
) -> tuple[str, list[str], Sample]:
    """One side's run of ``work``: the client opened and warmed up, ``spec`` programmed, then
    the clock from the first request to the client closed. The answer, the tools executed,
    the sample; the server must have seen ``requests`` requests."""
    with log_directory() as logs:
        async with Opened(side, server.url, logs) as client:
            server.program(WARM_UP)
            await warm_up(client)
            server.program(spec)
            with server.watch(requests, f"{spec['name']} {side}") as spent:
                clock = Clock()
                text = await work(client)
                await client.close()
                wall, cpu = clock.stop()
            if isinstance(client, FloorClient):
                for log in client.kept:
                    check(log.persisted() == len(log.events), f"{side}: events not persisted")
    return text, client.executed, Sample(wall, cpu, spent[0])


# -- workloads ------------------------------------------------------------------------------


async def w1(side: str, server: FastServer, chunks: int) -> Sample:
    from dsh.testing.mockserver.catalogue import delta_text

    expected = delta_text(chunks)
    spec = {"name": "deltas", "chunks": chunks}
    text, _, sample = await timed(
        side, server, spec, 1, lambda client: client.turn("w1", tools=False)
    )
    check(text == expected, f"W1 {side}: the assembled text differs")
    return sample


async def w2(side: str, server: FastServer, steps: int) -> Sample:
    spec = {"name": "tool-loop", "steps": steps}
    text, executed, sample = await timed(
        side, server, spec, steps + 1, lambda client: client.turn("w2")
    )
    check(text == f"finished after {steps} steps", f"W2 {side}: wrong final answer {text!r}")
    check(executed == [echo_text(f"step {i}") for i in range(steps)], f"W2 {side}: tool calls")
    return sample


#: W3's floor: its imports, one request, the body read in blocks and split by hand, orjson. Each
#: side of W3 ends its process at the first token (``os._exit``): a count of its instructions
#: (``bench/breakdown.py --cachegrind``) then covers the same span as its clock.
FIRST_TOKEN_FLOOR = """
import asyncio, os, sys, time, aiohttp, orjson
async def main():
    body = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "go"}],
            "stream": True, "thinking": {"type": "disabled"}}
    headers = {"Authorization": "Bearer bench", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as s:
        async with s.post(sys.argv[1] + "/chat/completions", data=orjson.dumps(body),
                          headers=headers) as r:
            pending = b""
            async for block in r.content.iter_any():
                lines = (pending + block).split(b"\\n")
                pending = lines.pop()
                for line in lines:
                    if line[:6] != b"data: " or line.startswith(b"[DONE]", 6):
                        continue
                    if orjson.loads(line[6:])["choices"][0]["delta"].get("content"):
                        print("FIRST", time.process_time(), flush=True)
                        os._exit(0)
asyncio.run(main())
"""

#: W3's logged floor: the floor, with the user message kept and written to a new file as a JSON
#: line before the request, and every chunk's delta kept with its time.
FIRST_TOKEN_LOGGED = """
import asyncio, os, sys, time, aiohttp, orjson
def line(seq, at, kind, data):
    return orjson.dumps({"seq": seq, "time": at, "type": kind, "data": data},
                        option=orjson.OPT_APPEND_NEWLINE)
async def main():
    message = {"role": "user", "content": "go"}
    events = [(time.time(), "user", message)]
    path = os.path.join(os.environ["XDG_DATA_HOME"], f"w3-{os.getpid()}.jsonl")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    os.write(fd, line(0, *events[0]))
    body = {"model": "deepseek-v4-flash", "messages": [message],
            "stream": True, "thinking": {"type": "disabled"}}
    headers = {"Authorization": "Bearer bench", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as s:
        async with s.post(sys.argv[1] + "/chat/completions", data=orjson.dumps(body),
                          headers=headers) as r:
            pending = b""
            async for block in r.content.iter_any():
                lines = (pending + block).split(b"\\n")
                pending = lines.pop()
                for raw in lines:
                    if raw[:6] != b"data: " or raw.startswith(b"[DONE]", 6):
                        continue
                    delta = orjson.loads(raw[6:])["choices"][0]["delta"]
                    events.append((time.time(), "chunk", delta))
                    if delta.get("content"):
                        print("FIRST", time.process_time(), flush=True)
                        os.close(fd)
                        os.unlink(path)
                        os._exit(0)
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
    disabled = [name for name in sys.argv[2].split(",") if name]  # the parent's bench_disabled()
    options = AgentOptions(model="deepseek-v4-flash", thinking=False, tools=())
    async with Harness(plugins=[first], config=config, disabled=disabled) as h:
        agent = h.agent_loop.create("w3", options)
        agent.send("go")
        await first.seen.wait()
        os._exit(0)
asyncio.run(main())
"""


#: W3's fourth side: the floor, after importing the stack dsh starts on (attrs, cattrs, pluggy;
#: structlog only when a line is logged) and discovering the ``dsh`` entry points, as any
#: harness on that stack that finds its plugins by entry point does before its first request.
FIRST_TOKEN_STACK = (
    "import attrs, cattrs, pluggy, importlib.metadata\n"
    "importlib.metadata.entry_points(group='dsh')" + FIRST_TOKEN_FLOOR
)
#: What each side of W3 runs in its child process.
FIRST_TOKEN = {
    "floor": FIRST_TOKEN_FLOOR,
    "logged": FIRST_TOKEN_LOGGED,
    "stack": FIRST_TOKEN_STACK,
    "dsh": FIRST_TOKEN_DSH,
}
#: W3's sides, in the order they run.
W3_SIDES = ("floor", "logged", "stack", "dsh")


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
    """One W4 measurement, in this (fresh) process, after a warm-up turn of one agent: wall and
    CPU time, peak memory, memory held per agent (resident memory with every agent done but
    still alive — dsh's agents in their harness, the logged floor's logs — minus before), the
    CPU time the garbage collector took and how many full collections ran while the clock
    ran, and how many more objects the collector tracks per agent (counted with every agent
    done but still alive; the count is not timed)."""
    with Collections() as collections, log_directory() as logs:
        async with Opened(side, url, logs) as client:
            await warm_up(client, steps)

            async def run_agents() -> list[str]:
                return list(await asyncio.gather(*(client.turn(f"w4-{i}") for i in range(agents))))

            clock, texts, held_kb, tracked = await _measured(run_agents, collections)
            await client.close()
            wall, cpu = clock.stop()
            if isinstance(client, FloorClient):
                persisted = [log.persisted() for log in client.kept]
                check(persisted == [len(log.events) for log in client.kept], "W4 log")
        gc_cpu, full = collections.cpu, collections.full
    check(texts == [f"finished after {steps} steps"] * agents, f"W4 {side}: final answers")
    check(len(client.executed) == agents * steps, f"W4 {side}: tool calls executed")
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
    """One W4 run of ``side`` in a fresh process: one agent's warm-up turn, then ``agents``
    agents at once."""
    server.program({"name": "tool-loop", "steps": steps})
    with server.watch((agents + 1) * (steps + 1), f"W4 {side}") as spent:
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
    """The medians of several interleaved runs of each side, and the load after them."""

    samples: dict[str, Sample]
    load: float
    #: Each side's lowest and highest CPU seconds over the runs.
    spread: dict[str, tuple[float, float]] = field(factory=dict)

    @property
    def floor(self) -> Sample:
        return self.samples["floor"]

    @property
    def dsh(self) -> Sample:
        return self.samples["dsh"]

    def cpu_ratio(self, base: str = "floor") -> float:
        """dsh's CPU time as a multiple of ``base``'s (``floor`` or ``logged``)."""
        return self.dsh.cpu / self.samples[base].cpu

    def wall_ratio(self, base: str = "floor") -> float:
        return self.dsh.wall / self.samples[base].wall

    @property
    def server_bound(self) -> bool:
        return max(s.server_share for s in self.samples.values()) > SERVER_BOUND


def median_sample(samples: Sequence[Sample]) -> Sample:
    return Sample(
        statistics.median(s.wall for s in samples),
        statistics.median(s.cpu for s in samples),
        statistics.median(s.server_cpu for s in samples),
    )


def interleaved(
    runs: int, measure: Callable[[str], Sample], sides: Sequence[str] = SIDES
) -> Medians:
    """``runs`` rounds of one run of each of ``sides`` in turn (the floor first, dsh last);
    the medians."""
    samples: dict[str, list[Sample]] = {side: [] for side in sides}
    for _ in range(runs):
        for side, taken in samples.items():
            taken.append(measure(side))
    medians = {side: median_sample(taken) for side, taken in samples.items()}
    return Medians(medians, os.getloadavg()[0], cpu_spread(samples))


def cpu_spread(samples: dict[str, list[Sample]]) -> dict[str, tuple[float, float]]:
    """Each side's lowest and highest CPU seconds."""
    return {
        side: (min(s.cpu for s in taken), max(s.cpu for s in taken))
        for side, taken in samples.items()
    }


def spread_line(m: Medians) -> str:
    """The range of each side's CPU seconds over the runs (how far a median can be trusted)."""
    ranges = ", ".join(f"{side} {low:.3f} to {high:.3f}s" for side, (low, high) in m.spread.items())
    return f"{'   CPU, lowest to highest run':<34} {ranges}"


def reference(label: str, cpu: float, m: Medians) -> str:
    """The line of another reference side: its CPU, as a multiple of the floor's, and dsh's
    as a multiple of it."""
    return (
        f"{label:<34} {cpu:>7.3f}s CPU: {cpu / m.floor.cpu:.2f}x the floor; "
        f"dsh {m.dsh.cpu / cpu:.2f}x it"
    )


#: The columns of one measure (CPU or wall): each side's seconds, then dsh ÷ each floor.
COLUMNS = f"{'floor':>7} {'logged':>7} {'dsh':>7} {'÷floor':>7} {'÷logged':>8}"


def header() -> str:
    return (
        f"{'':<34} {'------------- CPU time --------------':<39}   "
        f"{'------------- wall time -------------':<39}\n"
        f"{'workload':<34} {COLUMNS}   {COLUMNS}   {'busy':>4} {'load':>4}  CPU target"
    )


def _measure(m: Medians, kind: str) -> str:
    """The columns of one measure (``cpu`` or ``wall``) of a row."""
    seconds = {side: getattr(sample, kind) for side, sample in m.samples.items()}
    logged = seconds.get("logged")

    def ratio(base: float | None) -> str:
        return f"{seconds['dsh'] / base:>6.2f}x" if base else f"{'—':>7}"

    return (
        f"{seconds['floor']:>6.3f}s "
        + (f"{logged:>6.3f}s " if logged is not None else f"{'—':>7} ")
        + f"{seconds['dsh']:>6.3f}s {ratio(seconds['floor'])} {ratio(logged):>8}"
    )


def row(name: str, m: Medians, target: float) -> str:
    """One workload's line: CPU and wall time per side and dsh's ratios to both floors, the
    server's busiest share, the load, and whether dsh ÷ the floor (CPU) meets ``target``."""
    busy = max(s.server_share for s in m.samples.values())
    met = "met" if m.cpu_ratio() <= target else "not met"
    flag = "  SERVER-BOUND" if m.server_bound else ""
    return (
        f"{name:<34} {_measure(m, 'cpu')}   {_measure(m, 'wall')}   {busy:>4.0%} {m.load:>4.1f}"
        f"  <= {target}x: {met}{flag}"
    )


def per_unit(m: Medians, units: int, base: str = "floor") -> float:
    """dsh's CPU seconds per unit of work beyond ``base``'s."""
    return (m.dsh.cpu - m.samples[base].cpu) / units


def over_floors(m: Medians, units: int, unit: str, scale: float, symbol: str) -> str:
    """dsh's extra CPU per unit over the floor and over the logged floor."""
    return (
        f"{'   dsh CPU per ' + unit + ' over the floor':<34} "
        f"{per_unit(m, units) * scale:+.2f} {symbol}; over the logged floor "
        f"{per_unit(m, units, 'logged') * scale:+.2f} {symbol}"
    )


def growth(small: Medians, large: Medians, steps: int, more: int) -> str:
    """W2's growth: dsh's extra CPU per step over each floor at ``more`` steps ÷ at ``steps``
    (1.0: a step costs the same whatever the history before it; quadratic terms push it up).
    A step is a model call (``steps`` tool steps and the answer)."""
    parts = []
    for base, label in (("floor", "the floor"), ("logged", "the logged floor")):
        before, after = per_unit(small, steps + 1, base), per_unit(large, more + 1, base)
        times = after / before if before > 0 else float("nan")
        part = f"over {label} {before * 1e3:.3f} -> {after * 1e3:.3f} ms = {times:.2f}x"
        if base == "floor":
            met = "met" if times <= GROWTH_TARGET else "not met"
            part += f" (<= {GROWTH_TARGET}x: {met})"
        parts.append(part)
    return f"   W2 growth {steps:,} -> {more:,} steps, dsh's extra CPU per step " + "; ".join(parts)


def machine() -> str:
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} cores, load {load()}"
    )


def load() -> str:
    """The 1-, 5- and 15-minute load averages."""
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


#: The tool steps of each W4 agent, unless ``--agent-steps`` says otherwise (the scale curves
#: and ``bench/breakdown.py`` always run these).
AGENT_STEPS = 5
#: The targets of issue 36 (CPU, dsh ÷ the fast floor).
TARGETS = {"W1": 1.3, "W2": 1.6, "W3": 1.4, "W4": 2.2}
#: W2's extra CPU per step over the floor at 10x the steps ÷ at the base size, at most.
GROWTH_TARGET = 1.2
#: W4's memory held per agent at 1,000 agents, at most (KB).
HELD_TARGET_KB = 60


def w4_medians(
    server: FastServer,
    runs: int,
    agents: int,
    steps: int,
    env: dict[str, str],
    sides: Sequence[str] = SIDES,
) -> tuple[Medians, dict[str, dict[str, float]]]:
    """W4 interleaved: the time medians, and per side the medians of the other figures of
    :func:`w4_run` (CPU seconds, peak memory and memory held per agent in KB, the collector's
    CPU seconds, its full collections, the objects it tracks per agent), for ``sides`` (floor
    and dsh at least; :data:`SIDES` by default), run in that order."""
    results: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for _ in range(runs):
        for side in sides:
            results[side].append(w4(side, server, agents, steps, env))
    taken = {
        side: [Sample(r["wall"], r["cpu"], r["server_cpu"]) for r in rs]
        for side, rs in results.items()
    }
    samples = {side: median_sample(runs_of_side) for side, runs_of_side in taken.items()}
    figures = {
        side: {key: statistics.median(r[key] for r in rs) for key in W4_FIGURES}
        for side, rs in results.items()
    }
    return Medians(samples, os.getloadavg()[0], cpu_spread(taken)), figures


#: What :func:`w4_medians` reports per side besides the time medians.
W4_FIGURES = ("cpu", "peak_kb", "held_kb", "gc_cpu", "full_collections", "tracked")


def w4_rows(m: Medians, figures: dict[str, dict[str, float]], agents: int) -> list[str]:
    """The lines under a W4 row: memory held per agent and peak memory, the objects the
    collector tracks and what the collector cost, per side (floor, logged floor, dsh)."""
    f, lg, d = figures["floor"], figures["logged"], figures["dsh"]
    held = {side: figures[side]["held_kb"] / agents for side in SIDES}
    met = "met" if held["dsh"] <= HELD_TARGET_KB else "not met"
    return [
        f"{'   memory held per agent':<34} {held['floor']:>6.1f}  {held['logged']:>6.1f}  "
        f"{held['dsh']:>6.1f} KB   dsh {held['dsh'] / held['floor']:.2f}x the floor, "
        f"{held['dsh'] / held['logged']:.2f}x the logged floor   "
        f"(<= {HELD_TARGET_KB} KB at 1,000 agents: {met})",
        f"{'   peak memory of the process':<34} {f['peak_kb'] / 1024:>6.1f}  "
        f"{lg['peak_kb'] / 1024:>6.1f}  {d['peak_kb'] / 1024:>6.1f} MB",
        f"{'   objects the collector tracks':<34} {f['tracked']:>6.0f}  {lg['tracked']:>6.0f}  "
        f"{d['tracked']:>6.0f} per agent",
        f"{'   CPU in garbage collection':<34} {f['gc_cpu']:>6.3f}s {lg['gc_cpu']:>6.3f}s "
        f"{d['gc_cpu']:>6.3f}s  ({f['gc_cpu'] / m.floor.cpu:.0%} / "
        f"{lg['gc_cpu'] / m.samples['logged'].cpu:.0%} / {d['gc_cpu'] / m.dsh.cpu:.0%} of the "
        f"CPU; full collections {f['full_collections']:.0f} / {lg['full_collections']:.0f} / "
        f"{d['full_collections']:.0f})",
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
    print(f"dsh benchmark — {machine()}; medians of {runs} interleaved runs", flush=True)
    print(
        "floor: aiohttp, blocks split by hand, orjson; logged floor: + every event kept, one "
        "JSON line each, written at each checkpoint, fsynced at turn end; dsh: every plugin"
    )
    if bench_disabled() != NOT_BENCHED:
        left_out = ", ".join(bench_disabled()[len(NOT_BENCHED) :])
        print(f"dsh side without {left_out}: a decomposition, not the benchmarked configuration")
    print(header(), flush=True)
    chunks, steps, more = sizes["chunks"], sizes["steps"], sizes["growth_steps"]
    if "W1" in only:
        m = interleaved(runs, measuring(w1, server, chunks))
        print(row(f"W1 one reply, {chunks:,} deltas", m, TARGETS["W1"]))
        print(spread_line(m))
        print(over_floors(m, chunks, "chunk", 1e6, "µs"), flush=True)
    if "W2" in only:
        m = interleaved(runs, measuring(w2, server, steps))
        print(row(f"W2 {steps:,} sequential tool steps", m, TARGETS["W2"]))
        print(spread_line(m))
        print(over_floors(m, steps + 1, "step", 1e3, "ms"), flush=True)
        large = interleaved(runs, measuring(w2, server, more))
        print(row(f"W2 {more:,} sequential tool steps", large, TARGETS["W2"]))
        print(spread_line(large))
        print(over_floors(large, more + 1, "step", 1e3, "ms"))
        print(growth(m, large, steps, more), flush=True)
    if "W3" in only:
        compile_bytecode()
        m = interleaved(runs, lambda side: w3(side, server, env), W3_SIDES)
        print(row("W3 spawn to first token", m, TARGETS["W3"]))
        print(spread_line(m))
        print(reference("   floor importing dsh's stack", m.samples["stack"].cpu, m), flush=True)
    for agents in sizes["agents"] if "W4" in only else ():
        m, figures = w4_medians(server, runs, agents, sizes["agent_steps"], env)
        print(row(f"W4 {agents:,} agents x {sizes['agent_steps']} steps", m, TARGETS["W4"]))
        print(spread_line(m))
        print("\n".join(w4_rows(m, figures, agents)), flush=True)
    print(f"finished — load {load()}")


# -- layer by layer -------------------------------------------------------------------------

#: ``--layers``' sides, in the order they run: the two floors, then dsh a layer at a time.
LAYERED = ("floor", "logged", "dsh-core", "dsh-jsonl", "dsh")
LAYER_NAMES = {
    "floor": "floor",
    "logged": "logged floor (the least persistence)",
    "dsh-core": "dsh core (loop, session log, adapter)",
    "dsh-jsonl": "  + JSONL persistence",
    "dsh": "  + every other plugin (dsh)",
}
#: The layer each dsh side adds to: what it adds is its cost less that side's.
LAYER_BELOW = {"dsh-jsonl": "dsh-core", "dsh": "dsh-jsonl"}


def layer_rows(name: str, m: Medians, steps: int, target: float) -> list[str]:
    """``--layers``' lines of one workload: each side's CPU, as a multiple of the floor's and
    per step (a model call) over it, what each dsh layer adds, and what the ``target`` leaves:
    the CPU per step dsh may spend beyond the logged floor's, against what the core alone (no
    persistence, no plugin) spends over the floor."""
    floor = m.floor.cpu
    lines = [f"{name}: CPU time, ÷ the floor, per step over the floor, what the layer adds"]
    for side in LAYERED:
        cpu = m.samples[side].cpu
        line = (
            f"   {LAYER_NAMES[side]:<38} {cpu:>7.3f}s  {cpu / floor:>5.2f}x  "
            f"{(cpu - floor) / steps * 1e6:>+8.1f} µs"
        )
        if side in LAYER_BELOW:
            line += f"  {(cpu - m.samples[LAYER_BELOW[side]].cpu) / steps * 1e6:>+8.1f} µs"
        lines.append(line)
    budget = (target * floor - m.samples["logged"].cpu) / steps * 1e6
    core = (m.samples["dsh-core"].cpu - floor) / steps * 1e6
    lines.append(
        f"   <= {target}x the floor leaves {budget:.1f} µs a step beyond the logged floor for "
        f"everything else dsh does; the core alone spends {core:.1f} µs a step over the floor"
        f" ({core / budget:.1f}x that)"
        if budget > 0
        else f"   <= {target}x the floor is below the logged floor: nothing is left for dsh"
    )
    return lines


def layers(
    server: FastServer,
    runs: int,
    sizes: dict[str, Any],
    env: dict[str, str],
    only: frozenset[str] = WORKLOADS,
) -> None:
    """W2 and W4 (its largest size) with dsh built up a layer at a time (:data:`LAYERED`):
    where dsh's CPU goes, and how much of it the targets leave room for."""
    print(f"dsh layer by layer — {machine()}; medians of {runs} interleaved runs", flush=True)
    print(
        "dsh core: the DeepSeek adapter and no other entry-point plugin; + JSONL persistence; "
        "+ every other plugin: dsh as benchmarked"
    )
    if "W2" in only:
        steps = sizes["steps"]
        m = interleaved(runs, measuring(w2, server, steps), LAYERED)
        name = f"W2 {steps:,} sequential tool steps"
        print("\n".join(layer_rows(name, m, steps + 1, TARGETS["W2"])), flush=True)
    if "W4" in only:
        agents, per = sizes["agents"][-1], sizes["agent_steps"]
        m, _ = w4_medians(server, runs, agents, per, env, LAYERED)
        name = f"W4 {agents:,} agents x {per} steps"
        print("\n".join(layer_rows(name, m, agents * (per + 1), TARGETS["W4"])), flush=True)
    print(f"finished — load {load()}")


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
            f"({m.cpu_ratio():>4.2f}x)  per {unit}: dsh {m.dsh.cpu / point.size * 1e6:>7.1f} µs, "
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


#: The scale curves compare dsh with the fast floor only.
FLOOR_DSH = ("floor", "dsh")


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
        points = [Point(n, interleaved(runs, measuring(w1, server, n), FLOOR_DSH)) for n in sizes]
        print("\n".join(growth_rows("W1 chunks", "chunk", points)), flush=True)
    if "W2" in only:
        points = [
            Point(n, interleaved(runs, measuring(w2, server, n), FLOOR_DSH)) for n in (50, 200, 800)
        ]
        print("\n".join(growth_rows("W2 steps ", "step ", points)), flush=True)
    if "W4" in only:
        points = []
        for agents in (100, 1_000, 5_000):
            m, figures = w4_medians(server, max(1, runs // 2), agents, AGENT_STEPS, env, FLOOR_DSH)
            collector = (figures["floor"]["gc_cpu"], figures["dsh"]["gc_cpu"])
            points.append(Point(agents, m, figures["dsh"]["held_kb"] / agents, collector))
        print("\n".join(growth_rows("W4 agents", "agent", points)), flush=True)
    print(f"finished — load {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--scale", action="store_true", help="how cost grows with the work")
    parser.add_argument(
        "--layers", action="store_true", help="W2 and W4 with dsh built up a layer at a time"
    )
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument(
        "--only", default=",".join(sorted(WORKLOADS)), help="the workloads to run, e.g. W1,W3"
    )
    parser.add_argument(
        "--without", default="", help="more plugins the dsh side leaves out, e.g. persistence_jsonl"
    )
    parser.add_argument(
        "--agent-steps",
        type=int,
        default=AGENT_STEPS,
        help=f"W4's tool steps per agent (--scale keeps {AGENT_STEPS})",
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
        "growth_steps": 100 if quick else 2_000,
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
            elif args.layers:
                layers(server, runs, sizes, env, workloads(args.only))
            else:
                report(server, runs, sizes, env, workloads(args.only))
        finally:
            server.close()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
