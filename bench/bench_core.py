"""Core benchmarks: assembler throughput, the loop's per-step overhead, import time.

Run ``python bench/bench_core.py``. Every figure is a median of interleaved runs and is printed
beside a baseline measured in the same run, so the ratios hold on any machine.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from dsh import AgentOptions, Harness, Tool, hookimpl
from dsh.llm._assembler import BlockAssembler
from dsh.testing import ScriptedAdapter, text_response, tool_call_response
from dsh.values._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishStop,
    StreamChunk,
    TextDelta,
    TokenUsage,
    UsageChunk,
)
from dsh.values._content import Text
from dsh.values._request import ToolSchema

RUNS = 5


def median_of(fn: Callable[[], float], runs: int = RUNS) -> float:
    return statistics.median(fn() for _ in range(runs))


# -- assembler -------------------------------------------------------------------------------


def delta_stream(n: int) -> list[StreamChunk]:
    pieces = ["héllo", " wörld", " ✓ ", "abcd"]
    deltas: list[StreamChunk] = [TextDelta(i % 3, pieces[i % 4]) for i in range(n)]
    texts = ["".join(pieces[i % 4] for i in range(k, n, 3)) for k in range(3)]
    return [
        *(BlockStart(k, "text") for k in range(3)),
        *deltas,
        *(BlockEnd(k, Text(texts[k])) for k in range(3)),
        UsageChunk(TokenUsage(1, n)),
        Finish(FinishStop()),
    ]


def time_assembler(chunks: list[StreamChunk]) -> float:
    start = time.perf_counter()
    assembler = BlockAssembler()
    for chunk in chunks:
        assembler.push(chunk)
    assembler.result()
    return time.perf_counter() - start


def time_bare_fold(chunks: list[StreamChunk]) -> float:
    """The least any fold can do: append each delta's text to its block's list."""
    start = time.perf_counter()
    parts: dict[int, list[str]] = {}
    for chunk in chunks:
        if isinstance(chunk, TextDelta):
            parts.setdefault(chunk.index, []).append(chunk.text)
    {k: "".join(v) for k, v in parts.items()}
    return time.perf_counter() - start


def bench_assembler() -> None:
    n = 100_000
    chunks = delta_stream(n)
    small = delta_stream(n // 10)
    dsh_s = median_of(lambda: time_assembler(chunks))
    bare_s = median_of(lambda: time_bare_fold(chunks))
    small_s = median_of(lambda: time_assembler(small))
    print(f"assembler, {n:,} deltas: {n / dsh_s:,.0f} deltas/s ({dsh_s * 1e3:.1f} ms)")
    print(f"  bare fold baseline:     {n / bare_s:,.0f} deltas/s")
    print(f"  ratio dsh/bare = {dsh_s / bare_s:.2f}")
    print(f"  linearity: 100k vs 10k time ratio = {dsh_s / small_s:.1f} (10.0 = linear)")


# -- the loop --------------------------------------------------------------------------------


class NoOp:
    """A plugin on the per-step and per-chunk hooks that does nothing."""

    @hookimpl
    def dsh_agent_request(self, request: Any) -> None:
        return None

    @hookimpl
    def dsh_agent_step_result(self, message: Any) -> None:
        return None

    @hookimpl
    def dsh_agent_stream_chunk(self, chunk: Any) -> None:
        return None

    @hookimpl
    def dsh_session_event(self, event: Any) -> None:
        return None

    @hookimpl
    def dsh_agent_turn_continuation(self, decision: Any) -> None:
        return None


async def echo(args: Any, execution: Any) -> str:
    return str(args["text"])


def script(steps: int) -> list[Any]:
    calls = [tool_call_response(f"c{i}", "echo", {"text": f"step {i}"}) for i in range(steps)]
    return [*calls, text_response("done")]


async def run_loop(steps: int, plugins: int) -> float:
    async with Harness(load_entrypoints=False, plugins=[NoOp() for _ in range(plugins)]) as h:
        h.tools.register(Tool(ToolSchema("echo", "echo"), echo))
        h.llm.register_adapter(["scripted"], ScriptedAdapter(script(steps)))
        agent = h.agent_loop.create("bench", AgentOptions(model="scripted"))
        start = time.perf_counter()
        agent.send("go")
        await agent.wait_idle()
        elapsed = time.perf_counter() - start
        assert sum(e.type == "tool/result" for e in agent.session.events) == steps
        return elapsed


async def run_bare(steps: int) -> float:
    """The same model script consumed by a plain loop: stream, collect calls, run the tool."""
    adapter = ScriptedAdapter(script(steps))
    history: list[Any] = []
    start = time.perf_counter()
    while True:
        calls: list[BlockEnd] = []
        async for chunk in adapter.stream(None):  # type: ignore[arg-type]
            if isinstance(chunk, BlockEnd):
                calls.append(chunk)
        history.extend(calls)
        if not any(c.block.type == "tool-call" for c in calls):
            break
        for call in calls:
            history.append(await echo({"text": call.index}, None))
    return time.perf_counter() - start


async def bench_loop() -> None:
    steps = 200
    loop_s, bare_s = [], []
    for _ in range(RUNS):  # interleaved, so drift hits both sides alike
        bare_s.append(await run_bare(steps))
        loop_s.append(await run_loop(steps, plugins=5))
    dsh_t, bare_t = statistics.median(loop_s), statistics.median(bare_s)
    per_step_ms = (dsh_t - bare_t) / (steps + 1) * 1e3
    print(f"loop, {steps} tool steps + answer, 5 no-op plugins: {dsh_t * 1e3:.1f} ms")
    print(f"  bare consumer of the same script:               {bare_t * 1e3:.1f} ms")
    print(f"  dsh overhead per step: {per_step_ms:.3f} ms (target < 0.5 ms)")


# -- import time -----------------------------------------------------------------------------


def import_ms(statement: str) -> float:
    """Wall time of ``statement`` in a fresh interpreter (its own imports only)."""
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout) * 1000


def bench_imports() -> None:
    plain = statistics.median(import_ms("import dsh") for _ in range(RUNS))
    harness = statistics.median(import_ms("from dsh import Harness") for _ in range(RUNS))
    print(
        f"import dsh: {plain:.1f} ms (target < 150 ms); from dsh import Harness: {harness:.1f} ms"
    )


if __name__ == "__main__":
    bench_assembler()
    asyncio.run(bench_loop())
    bench_imports()
