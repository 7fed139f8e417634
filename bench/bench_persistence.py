"""Persistence benchmarks: what checkpoints cost per step, and listing 10,000 stored sessions.

Run ``python bench/bench_persistence.py``. A 200-step tool loop on a scripted adapter runs with
no persistence, with the JSONL store (``fsync = "turn"``: a checkpoint before every model
request and tool call, an fsync at turn end) and with the SQLite store, interleaved; each
figure is a median. The same loop then runs as in ``bench/run.py`` W2 — the DeepSeek adapter
over HTTP against the mock server in its own process — with JSONL on and off. Then 10,000
sessions are stored in SQLite and listed. Last, the stores' raw figures: events written per
second (sessions checkpointed every few events) and the latency of one checkpoint, for JSONL,
SQLite and PostgreSQL — the last only when ``DSH_POSTGRES_DSN`` names a server (the benchmark
says so and skips it otherwise; it works in a schema of its own and drops it). Last, what a
session's whole life costs the JSONL store as W4's agents use it (1,000 opened at once, written,
flushed, closed) against the same files written by bare system calls — a figure dominated by the
disk's fsync and journal, which vary by tens of percent between runs on a shared VM.
"""

from __future__ import annotations

import asyncio
import fcntl
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dsh import AgentOptions, Harness, Tool
from dsh.testing import ScriptedAdapter, text_response, tool_call_response
from dsh.values._content import Text
from dsh.values._events import UserMessage
from dsh.values._request import ToolSchema
from dsh_plugins.persistence_jsonl import JsonlStore
from dsh_plugins.persistence_postgres import PostgresStore
from dsh_plugins.persistence_sqlite import SqliteStore

STEPS = 200
RUNS = 15
SESSIONS = 10_000
#: The store figures: sessions written concurrently, events each, a checkpoint every few.
WRITERS, EVENTS, EVERY = 20, 500, 10
CHECKPOINTS = 500
#: The schema the PostgreSQL figures use (dropped afterwards).
BENCH_SCHEMA = f"dsh_bench_{os.getpid()}"


async def echo(args: Any, execution: Any) -> str:
    return str(args["text"])


def script(steps: int) -> list[Any]:
    calls = [tool_call_response(f"c{i}", "echo", {"text": f"step {i}"}) for i in range(steps)]
    return [*calls, text_response("done")]


async def run_loop(store: object | None) -> float:
    """Seconds from the first message until the turn ended and was flushed."""
    async with Harness(load_entrypoints=False, plugins=[] if store is None else [store]) as h:
        h.tools.register(Tool(ToolSchema("echo", "echo"), echo))
        h.llm.register_adapter(["scripted"], ScriptedAdapter(script(STEPS)))
        agent = h.agent_loop.create("bench", AgentOptions(model="scripted"))
        start = time.perf_counter()
        agent.send("go")
        await agent.wait_idle()
        return time.perf_counter() - start


async def bench_checkpoints(directory: Path) -> float:
    """Print the loop with and without persistence; return the JSONL ratio."""
    times: dict[str, list[float]] = {"none": [], "jsonl": [], "sqlite": []}
    for run in range(RUNS):  # interleaved, so that drift hits every variant alike
        times["none"].append(await run_loop(None))
        times["jsonl"].append(await run_loop(JsonlStore(directory / f"jsonl-{run}")))
        times["sqlite"].append(await run_loop(SqliteStore(directory / f"db-{run}.sqlite")))
    base = statistics.median(times["none"])
    print(f"{STEPS}-step tool loop, scripted adapter (median of {RUNS}):")
    print(f"  no persistence:       {base * 1e3:7.1f} ms")
    ratio = 0.0
    for name, label in (("jsonl", 'JSONL, fsync="turn"'), ("sqlite", 'SQLite, fsync="turn"')):
        median = statistics.median(times[name])
        per_step_us = (median - base) / (STEPS + 1) * 1e6
        print(
            f"  {label + ':':21} {median * 1e3:7.1f} ms  ratio {median / base:.3f}  "
            f"+{per_step_us:.1f} us per step"
        )
        ratio = median / base if name == "jsonl" else ratio
    return ratio


async def http_loop(url: str, persist: bool) -> float:
    """W2 of bench/run.py (200 tool steps over HTTP), with or without the JSONL store."""
    import run  # bench/ is on sys.path (bench_over_http put it there)

    bench = run.Bench()
    config = {"llm_deepseek": {"base_url": url, "api_key": "bench"}}
    disabled = [*run.NOT_BENCHED, *(() if persist else ("persistence_jsonl",))]
    async with Harness(plugins=[bench], config=config, disabled=disabled) as h:
        start = time.perf_counter()
        agent = h.agent_loop.create("w2", run.dsh_options())
        agent.send("go")
        await agent.wait_idle()
        return time.perf_counter() - start


def bench_over_http() -> None:
    """Print W2 with JSONL on and off; the loop's model calls cross real HTTP."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import run

    server = run.Server()
    times: dict[bool, list[float]] = {False: [], True: []}
    try:
        for _ in range(9):
            for persist in (False, True):
                server.queue([{"name": "tool-loop", "steps": STEPS}] * (STEPS + 1))
                times[persist].append(asyncio.run(http_loop(server.url, persist)))
    finally:
        server.close()
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"{STEPS}-step tool loop over HTTP (bench/run.py W2, median of 9):")
    print(f"  JSONL off {off * 1e3:7.1f} ms, on {on * 1e3:7.1f} ms, ratio {on / off:.3f}")


async def store_sessions(path: Path, count: int) -> None:
    """``count`` small sessions in one SQLite database."""
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        for n in range(count):
            session = h.sessions.create(f"session-{n:05}")
            session.append(UserMessage((Text(f"question number {n}"),)))
            await session.flush()


async def bench_listing(directory: Path) -> float:
    path = directory / "many.sqlite"
    start = time.perf_counter()
    await store_sessions(path, SESSIONS)
    print(f"stored {SESSIONS:,} SQLite sessions in {time.perf_counter() - start:.1f} s")
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        timings = {}
        for label, query, limit in (
            ("newest 50", None, 50),
            ("all 10,000", None, SESSIONS),
            ("search 'number 9999'", "number 9999", 50),
        ):
            start = time.perf_counter()
            found = await h.sessions.stored(query, limit)
            timings[label] = time.perf_counter() - start
            print(f"  list {label:22} {timings[label] * 1e3:7.1f} ms  ({len(found)} found)")
    return max(timings.values())


def stores(directory: Path) -> dict[str, Any]:
    """A factory of each store to measure, keyed by label (PostgreSQL when a DSN is set)."""
    made: dict[str, Any] = {
        "JSONL": lambda n: JsonlStore(directory / f"s-jsonl-{n}"),
        "SQLite": lambda n: SqliteStore(directory / f"s-{n}.sqlite"),
    }
    dsn = os.environ.get("DSH_POSTGRES_DSN")
    if dsn:
        made["PostgreSQL"] = lambda n: PostgresStore(dsn, schema=BENCH_SCHEMA)
    else:
        print("PostgreSQL: skipped (set DSH_POSTGRES_DSN to a server to measure it)")
    return made


async def events_per_second(store: object) -> float:
    """``WRITERS`` sessions written at once, ``EVENTS`` events each, a checkpoint every
    ``EVERY`` events and a flush at the end: events stored per second."""

    async def write(h: Harness, n: int) -> None:
        session = h.sessions.create(f"writer-{n}")
        for i in range(EVENTS):
            session.append(UserMessage((Text(f"event {i} of writer {n}"),)))
            if i % EVERY == EVERY - 1:
                await session.checkpoint()
        await session.flush()

    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        start = time.perf_counter()
        await asyncio.gather(*(write(h, n) for n in range(WRITERS)))
        return WRITERS * EVENTS / (time.perf_counter() - start)


async def checkpoint_latency(store: object) -> list[float]:
    """Seconds each of ``CHECKPOINTS`` checkpoints took, one event appended before each."""
    timings = []
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        session = h.sessions.create("latency")
        for i in range(CHECKPOINTS):
            session.append(UserMessage((Text(f"event {i}"),)))
            start = time.perf_counter()
            await session.checkpoint()
            timings.append(time.perf_counter() - start)
    return sorted(timings)


async def bench_stores(directory: Path) -> None:
    print(
        f"stores: {WRITERS} sessions x {EVENTS} events at once, a checkpoint every {EVERY}; "
        f"then {CHECKPOINTS} checkpoints of one event each"
    )
    try:
        for n, (label, make) in enumerate(stores(directory).items()):
            rate = await events_per_second(make(n))
            latency = await checkpoint_latency(make(n + 100))
            p50, p99 = latency[len(latency) // 2], latency[int(len(latency) * 0.99)]
            print(
                f"  {label + ':':12} {rate:9,.0f} events/s   checkpoint p50 {p50 * 1e3:6.2f} ms  "
                f"p99 {p99 * 1e3:6.2f} ms"
            )
    finally:
        await drop_bench_schema()


#: The session lifecycle figures: sessions opened at once, steps each, two checkpoints a step.
LIVES, LIFE_STEPS, LIFE_RUNS = 1_000, 6, 5


async def jsonl_lives(directory: Path) -> float:
    """CPU seconds for ``LIVES`` sessions at once, each as a W4 agent uses the JSONL store:
    created, ``LIFE_STEPS`` steps of a few events with two checkpoints each, a turn's flush
    (its fsync), closed."""

    async def life(h: Harness, session: Any) -> None:
        session.append(UserMessage((Text("go"),)))
        for step in range(LIFE_STEPS):
            session.append(UserMessage((Text(f"step {step}: the request"),)))
            await session.checkpoint()
            session.append(UserMessage((Text(f"step {step}: the tool result"),)))
            await session.checkpoint()
        await session.flush()
        await h.sessions.close(session)

    async with Harness(load_entrypoints=False, plugins=[JsonlStore(directory)]) as h:
        start = time.process_time()
        sessions = [h.sessions.create(f"life-{n}") for n in range(LIVES)]
        await asyncio.gather(*(life(h, session) for session in sessions))
        return time.process_time() - start


async def bare_lives(directory: Path) -> float:
    """The floor of :func:`jsonl_lives`: the same files by bare system calls — a locked lock
    file naming its holder, the session file, one ``pwrite`` per checkpoint of bytes encoded
    beforehand, the file's and its directory's fsync in a worker thread, close and unlink."""
    line = b'{"type":"user/message","seq":0,"time":1.0,"data":{"content":[]}}\n' * 2

    def sync(fd: int) -> None:
        os.fsync(fd)
        parent = os.open(directory, os.O_RDONLY)
        os.fsync(parent)
        os.close(parent)

    async def life(n: int) -> None:
        path = directory / f"bare-{n}.jsonl"
        lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.pwrite(lock, b'{"pid": 1}', 0)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        for offset in range(0, 2 * LIFE_STEPS * len(line), len(line)):
            os.pwrite(fd, line, offset)
            await asyncio.sleep(0)  # a checkpoint lets the other sessions run
        await asyncio.to_thread(sync, fd)
        os.close(fd)
        os.unlink(f"{path}.lock")
        os.close(lock)

    start = time.process_time()
    await asyncio.gather(*(life(n) for n in range(LIVES)))
    return time.process_time() - start


async def bench_lifecycle(directory: Path) -> None:
    """What opening, writing and closing a session costs the JSONL store: W4's 1,000 agents
    each open one (a lock file and a session file), checkpoint it twice a step, fsync it at
    turn end and close it. Interleaved with the bare system calls, medians."""
    jsonl: list[float] = []
    bare: list[float] = []
    for run in range(LIFE_RUNS):
        jsonl.append(await jsonl_lives(directory / f"jsonl-{run}"))
        (directory / f"bare-{run}").mkdir()
        bare.append(await bare_lives(directory / f"bare-{run}"))
    dsh, floor = statistics.median(jsonl) / LIVES, statistics.median(bare) / LIVES
    print(
        f"session lifecycle ({LIVES:,} at once, {LIFE_STEPS} steps, 2 checkpoints a step, "
        f"a flush, a close): JSONL {dsh * 1e6:.0f} us CPU per session, bare system calls "
        f"{floor * 1e6:.0f} us: {dsh / floor:.2f}x (medians of {LIFE_RUNS})"
    )


async def drop_bench_schema() -> None:
    dsn = os.environ.get("DSH_POSTGRES_DSN")
    if dsn:
        asyncpg: Any = importlib.import_module("asyncpg")
        db = await asyncpg.connect(dsn)
        try:
            await db.execute(f'DROP SCHEMA IF EXISTS "{BENCH_SCHEMA}" CASCADE')
        finally:
            await db.close()


async def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        ratio = await bench_checkpoints(Path(tmp))
        slowest = await bench_listing(Path(tmp))
        await bench_stores(Path(tmp))
        await bench_lifecycle(Path(tmp))
    print(f"JSONL checkpoint overhead target <= 1.10: {'met' if ratio <= 1.10 else 'NOT met'}")
    print(f"SQLite listing target well under 1 s: {'met' if slowest < 0.25 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    code = asyncio.run(main())
    with tempfile.TemporaryDirectory() as data:
        import os

        os.environ["XDG_DATA_HOME"] = data
        bench_over_http()
    sys.exit(code)
