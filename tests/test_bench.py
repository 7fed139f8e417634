"""The benchmark code runs and reports what it measured (figures are never judged here: no test
times anything). The pre-encoded mock serves exactly the product mock's bytes."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import os
import subprocess
import sys
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from dsh.llm._sse import parse_sse
from dsh.testing.mockserver.catalogue import delta_text, deltas, tool_loop

BENCH = Path(__file__).parent.parent / "bench"


def load(name: str) -> Any:
    """A bench script as a module (``breakdown`` imports ``run``, so bench/ goes on the path)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fastmock = load("fastmock")
bench_startup = load("bench_startup")
breakdown = load("breakdown")
#: The suite as ``breakdown`` imported it: its profiler switch is that module's.
run = breakdown.run

BODY = {"model": "deepseek-v4-flash", "stream": True, "thinking": {"type": "disabled"}}


@pytest.fixture
async def fast_url() -> AsyncIterator[str]:
    server, url = await fastmock.start()
    async with server:
        yield url


async def answer(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    headers = {"Authorization": "Bearer bench"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/chat/completions", json=body, headers=headers) as response,
    ):
        return response.status, await response.read()


async def program(url: str, spec: dict[str, Any]) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/bench/program", json=spec) as response,
    ):
        return response.status, await response.json()


async def stats(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/bench/stats") as response:
        result: dict[str, Any] = await response.json()
        return result


def history(tool_results: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(tool_results):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "echo", "arguments": "{}"},
        }
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"step {i}"})
    return messages


def contents(sse: bytes) -> str:
    """The text the content deltas of an SSE body join to."""
    pieces = []
    for event in parse_sse(sse):
        if event.data != "[DONE]":
            pieces.append(json.loads(event.data)["choices"][0]["delta"].get("content") or "")
    return "".join(pieces)


async def test_deltas_are_the_catalogues_answer_encoded_once(fast_url: str) -> None:
    status, encoded = await program(fast_url, {"name": "deltas", "chunks": 9})
    assert status == 200
    body = {**BODY, "messages": history(0)}
    _, first = await answer(fast_url, body)
    _, second = await answer(fast_url, body)
    assert first == second == fastmock.encode(deltas(body, 9))
    assert contents(first) == delta_text(9)
    assert encoded == {"bytes": len(first)}


async def test_tool_loop_answers_by_the_tool_results_so_far(fast_url: str) -> None:
    await program(fast_url, {"name": "tool-loop", "steps": 2})
    for done in (0, 1, 2):
        body = {**BODY, "messages": history(done)}
        _, served = await answer(fast_url, body)
        assert served == fastmock.encode(tool_loop(body, 2))
        assert (f'"id":"call_{done}"'.encode() in served) == (done < 2)
    _, final = await answer(fast_url, {**BODY, "messages": history(2)})
    assert contents(final) == "finished after 2 steps"


async def test_stats_count_requests_and_report_the_servers_cpu(fast_url: str) -> None:
    before = await stats(fast_url)
    await program(fast_url, {"name": "deltas", "chunks": 3})
    await answer(fast_url, {**BODY, "messages": history(0)})
    after = await stats(fast_url)
    assert after["served"] == before["served"] + 1
    assert after["cpu_s"] >= before["cpu_s"] > 0


async def test_bad_programs_and_unprogrammed_requests_say_what_to_do(fast_url: str) -> None:
    status, error = await program(fast_url, {"name": "nope"})
    assert status == 400 and "use 'deltas' or 'tool-loop'" in error["error"]
    status, _ = await program(fast_url, {"name": "deltas", "chunks": "many"})
    assert status == 400
    status, text = await answer(fast_url, {**BODY, "messages": history(0)})
    assert status == 409 and b"/bench/program" in text


class Written(asyncio.Transport):
    """A transport that keeps what the protocol writes, and whether it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.data = b""
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.data += bytes(data)

    def close(self) -> None:
        self.closed = True


def test_the_mock_answers_requests_in_pieces_and_on_one_connection() -> None:
    connection, transport = fastmock.Connection(fastmock.Mock()), Written()
    connection.connection_made(transport)
    stats = b"GET /bench/stats HTTP/1.1\r\nHost: t\r\n\r\n"
    connection.data_received(stats[:9])  # a request cut anywhere waits for the rest
    assert transport.data == b""
    connection.data_received(
        stats[9:] + b"GET /nowhere?x=1 HTTP/1.1\r\n\r\n"
        b"POST /bench/program HTTP/1.1\r\nConnection: close\r\n\r\n"
    )
    responses = transport.data.split(b"HTTP/1.1 ")[1:]
    assert [response[:3] for response in responses] == [b"200", b"404", b"411"]
    assert b'"served": 0' in responses[0] and b"no route GET /nowhere" in responses[1]
    assert b"Connection: close" in responses[2] and transport.closed
    connection.connection_lost(None)
    assert connection.transport is None


async def test_the_logged_floor_persists_every_event_it_keeps(
    fast_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The logged floor: every parsed chunk, message, tool call and tool result kept in order
    and written as a JSON line at the checkpoints (before each request, before each tool call,
    at the end of the turn), then made durable."""
    await program(fast_url, {"name": "tool-loop", "steps": 2})
    log = run.JsonLines(tmp_path / "a.jsonl")
    checkpoints: list[list[str]] = []
    write = log.write

    def checkpoint() -> None:
        write()
        checkpoints.append([kind for _, kind, _ in log.events])

    monkeypatch.setattr(log, "write", checkpoint)
    executed: list[str] = []
    async with aiohttp.ClientSession() as session:
        text = await run.floor_tool_loop(session, fast_url, executed, log)
    assert text == "finished after 2 steps" and len(executed) == 2
    lines = [json.loads(line) for line in (tmp_path / "a.jsonl").read_bytes().splitlines()]
    assert [line["seq"] for line in lines] == list(range(len(log.events)))
    kinds = [line["type"] for line in lines]
    assert kinds[0] == "user" and kinds[-1] == "answer"
    assert kinds.count("assistant") == kinds.count("tool_call") == kinds.count("tool") == 2
    chunks = [line["data"] for line in lines if line["type"] == "chunk"]
    assert len(chunks) > 3 and sum("tool_calls" in delta for delta in chunks) >= 2
    assert kinds.count("finish") == kinds.count("usage") == 3  # one of each a response
    assert all(isinstance(line["time"], float) for line in lines)
    assert lines[-1]["data"] == {"role": "assistant", "content": text}
    assert log.persisted() == len(lines)
    # Three requests, two tool calls, the end of the turn: six checkpoints, in that order.
    ends = [written[-1] for written in checkpoints]
    assert ends == ["user", "tool_call", "tool", "tool_call", "tool", "answer"]


def test_the_suite_measures_every_side_against_the_fast_mock_in_its_own_process() -> None:
    server = run.FastServer()
    try:
        for workload, size in ((run.w1, 40), (run.w2, 3)):
            measure = run.measuring(workload, server, size)
            medians = run.interleaved(1, measure)
            assert list(medians.samples) == ["floor", "logged", "dsh"]
            for sample in medians.samples.values():
                assert sample.wall > 0 and sample.cpu > 0 and sample.server_cpu > 0
            assert "<= 1.3x:" in run.row("W", medians, 1.3)
        # Each side: a warm-up turn of one tool step (two requests) before each measured run.
        assert server.stats()[0] == 3 * (2 + 1) + 3 * (2 + 4)
    finally:
        server.close()
    assert server.process.returncode is not None


def test_only_runs_the_workloads_it_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert run.workloads("w1, W3") == {"W1", "W3"}
    for bad in ("W5", "", " , "):
        with pytest.raises(SystemExit, match="choose from W1, W2, W3, W4"):
            run.workloads(bad)
    server = run.FastServer()
    try:
        sizes = {"chunks": 30, "steps": 2, "growth_steps": 4, "agents": (2,), "agent_steps": 1}
        run.report(server, 1, sizes, {}, frozenset({"W1"}))
        assert server.stats()[0] == 3 * (2 + 1)  # a warm-up and one W1 request per side
    finally:
        server.close()
    out = capsys.readouterr().out
    assert "W1 one reply, 30 deltas" in out
    assert "W2" not in out and "W3" not in out and "W4" not in out


def test_without_leaves_plugins_out_of_every_dsh_side_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run.bench_disabled() == run.NOT_BENCHED == ()  # every plugin, as users run dsh
    monkeypatch.setenv(run.WITHOUT_ENV, " persistence_jsonl, budgets,")
    assert run.bench_disabled() == (*run.NOT_BENCHED, "persistence_jsonl", "budgets")
    harness = run.dsh_harness("http://127.0.0.1:9", run.Bench())
    assert harness.plugins.disabled >= {"persistence_jsonl", "budgets"}
    server = run.FastServer()
    try:
        sizes = {"chunks": 30, "steps": 2, "growth_steps": 4, "agents": (2,), "agent_steps": 3}
        env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}
        run.report(server, 1, sizes, env, frozenset({"W3", "W4"}))
        # W3 once a side (four sides); W4 a warm-up agent and 2 agents x 4 requests a side.
        assert server.stats()[0] == 4 + 3 * 3 * (3 + 1)
    finally:
        server.close()
    # The dsh sides of W3 and W4 run in child processes; they left the JSONL store out too
    # (and the logged floor removes its files).
    assert list(tmp_path.rglob("*.jsonl")) == []
    out = capsys.readouterr().out
    assert "dsh side without persistence_jsonl, budgets: a decomposition" in out
    assert "W4 2 agents x 3 steps" in out
    assert "objects the collector tracks" in out and "CPU in garbage collection" in out
    assert "memory held per agent" in out and "floor importing dsh's stack" in out


def test_the_scale_curves_run_w4_without_its_reference_side(tmp_path: Path) -> None:
    server = run.FastServer()
    try:
        env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}
        _, figures = run.w4_medians(server, 1, 2, 1, env, ("floor", "dsh"))
        assert sorted(figures) == ["dsh", "floor"]
        # Two sides, each a warm-up agent and two agents of two requests.
        assert server.stats()[0] == 2 * 3 * (1 + 1)
    finally:
        server.close()


async def test_a_layer_side_keeps_only_its_plugins() -> None:
    from importlib.metadata import entry_points

    every = {e.name for e in entry_points(group="dsh")}
    for side, kept in run.LAYER_SIDES.items():
        assert set(run.dsh_disabled(side)) == every - set(kept)
        client = run.DshClient("http://127.0.0.1:9", side)
        await client.harness.start()
        try:
            names = set(client.harness.plugins.names())
        finally:
            await client.close()
        assert set(kept) <= names and not names & set(run.dsh_disabled(side))


def test_layers_run_dsh_a_layer_at_a_time_and_say_what_the_target_leaves(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    server = run.FastServer()
    try:
        sizes = {"chunks": 30, "steps": 2, "growth_steps": 4, "agents": (1, 2), "agent_steps": 1}
        env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}
        run.layers(server, 1, sizes, env, frozenset({"W1", "W2", "W4"}))
        # Five sides: W2 a warm-up turn (two requests) and three requests; W4, its largest
        # size only, a warm-up agent and two agents of two requests.
        assert server.stats()[0] == 5 * (2 + 3) + 5 * 3 * 2
    finally:
        server.close()
    out = capsys.readouterr().out
    assert "W1" not in out  # the layers are W2's and W4's
    for name in run.LAYER_NAMES.values():
        assert sum(line.startswith(f"   {name} ") for line in out.splitlines()) == 2
    assert "W2 2 sequential tool steps: CPU time" in out and "W4 2 agents x 1 steps" in out
    assert out.count("the core alone spends") + out.count("nothing is left for dsh") == 2


def test_a_layer_row_shows_each_layers_share_and_the_room_the_target_leaves() -> None:
    cpu = {"floor": 1.0, "logged": 1.25, "dsh-core": 2.0, "dsh-jsonl": 2.5, "dsh": 3.0}
    m = run.Medians({side: run.Sample(c, c, 0.0) for side, c in cpu.items()}, 0.5)
    lines = run.layer_rows("W2", m, 10, 1.6)
    assert lines[3].split()[-2:] == ["+100000.0", "µs"]  # the core: 1 s over the floor, 10 steps
    assert lines[4].split()[-2:] == ["+50000.0", "µs"]  # the JSONL layer adds 0.5 s
    assert lines[4].split()[-4:-2] == ["+150000.0", "µs"]
    # 1.6 x the floor less the logged floor: 0.35 s over 10 steps; the core spends 1 s.
    assert "leaves 35000.0 µs a step" in lines[-1] and "(2.9x that)" in lines[-1]
    assert "nothing is left" in run.layer_rows("W4", m, 10, 1.2)[-1]


def test_a_clock_starts_after_the_garbage_of_earlier_runs_is_collected() -> None:
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    gc.disable()  # no automatic collection between the two looks
    try:
        left = weakref.ref(Cycle())
        assert left() is not None  # unreachable, but only the cyclic collector frees it
        run.Clock().stop()
        assert left() is None
    finally:
        gc.enable()


def test_time_set_aside_is_not_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    now = {"wall": 10.0, "cpu": 5.0}
    monkeypatch.setattr(run.time, "perf_counter", lambda: now["wall"])
    monkeypatch.setattr(run.time, "process_time", lambda: now["cpu"])
    clock = run.Clock()
    now["wall"] += 1.0
    now["cpu"] += 0.5
    with clock.aside():  # e.g. counting the objects the collector tracks
        now["wall"] += 7.0
        now["cpu"] += 3.0
    now["wall"] += 1.0
    assert clock.stop() == (2.0, 0.5)


def test_collections_count_the_collectors_cpu_and_full_collections() -> None:
    with run.Collections() as collections:
        gc.collect(0)
        assert collections.cpu >= 0.0 and collections.full == 0
        collections.restart()
        gc.collect()
        gc.collect()
        assert collections.full == 2
        spent = collections.cpu
    assert collections._note not in gc.callbacks  # entered and left
    gc.collect()
    assert collections.full == 2 and collections.cpu == spent


def test_w4_rows_show_memory_against_both_floors_and_the_collectors_share() -> None:
    side = {"peak_kb": 2048.0, "held_kb": 3000.0, "gc_cpu": 0.25, "full_collections": 3.0}
    figures = {
        "floor": {**side, "tracked": 30.0},
        "logged": {**side, "held_kb": 9000.0, "tracked": 300.0},
        "dsh": {**side, "held_kb": 6000.0, "tracked": 280.0},
    }
    lines = run.w4_rows(samples(1.0, 2.0, logged_cpu=1.25), figures, 100)
    assert lines[0].split()[4:7] == ["30.0", "90.0", "60.0"]
    assert (
        "dsh 2.00x the floor, 0.67x the logged floor   (<= 60 KB at 1,000 agents: met)"
        in (lines[0])
    )
    assert lines[1].split()[-4:] == ["2.0", "2.0", "2.0", "MB"]
    assert lines[2].split()[-5:] == ["30", "300", "280", "per", "agent"]
    assert "(25% / 20% / 12% of the CPU; full collections 3 / 3 / 3)" in lines[3]


def samples(
    floor_cpu: float, dsh_cpu: float, server_cpu: float = 0.0, logged_cpu: float | None = None
) -> Any:
    sides = {"floor": run.Sample(1.0, floor_cpu, server_cpu)}
    if logged_cpu is not None:
        sides["logged"] = run.Sample(1.0, logged_cpu, server_cpu)
    sides["dsh"] = run.Sample(1.0, dsh_cpu, server_cpu)
    return run.Medians(sides, 1.0)


def test_a_row_gives_dshs_ratios_to_both_floors_in_cpu_and_wall_time() -> None:
    m = run.Medians(
        {
            "floor": run.Sample(0.5, 0.25, 0.0),
            "logged": run.Sample(1.0, 0.5, 0.0),
            "dsh": run.Sample(2.0, 1.0, 0.0),
        },
        0.5,
    )
    line = run.row("W1 one reply", m, 1.3)
    assert "0.250s  0.500s  1.000s   4.00x    2.00x" in line  # CPU
    assert "0.500s  1.000s  2.000s   4.00x    2.00x" in line  # wall
    assert line.endswith("<= 1.3x: not met")
    assert "÷floor" in run.header() and "÷logged" in run.header()
    # Without a logged floor (the scale curves), its columns are blank.
    assert "—" in run.row("W", samples(1.0, 1.2), 1.3) and "met" in run.row("W", m, 4.0)


def test_per_unit_lines_and_the_growth_of_w2_against_both_floors() -> None:
    small = samples(0.2, 0.4, logged_cpu=0.3)  # 10 steps and the answer: 11 model calls
    large = samples(2.0, 6.4, logged_cpu=3.0)  # 100 steps: 101 model calls
    line = run.over_floors(small, 11, "step", 1e3, "ms")
    assert line.split()[-8:] == ["+18.18", "ms;", "over", "the", "logged", "floor", "+9.09", "ms"]
    grown = run.growth(small, large, 10, 100)
    assert "over the floor 18.182 -> 43.564 ms = 2.40x (<= 1.2x: not met)" in grown
    assert "over the logged floor 9.091 -> 33.663 ms = 3.70x" in grown
    flat = run.growth(small, samples(2.0, 4.02, logged_cpu=3.0), 10, 100)
    assert "= 1.10x (<= 1.2x: met)" in flat
    assert "nan" in run.growth(samples(1.0, 1.0, logged_cpu=1.0), large, 10, 100)


def test_reference_sides_run_between_the_floor_and_dsh_and_report_against_both() -> None:
    order: list[str] = []
    cpu = {"floor": 1.0, "stack": 1.25, "dsh": 2.5}

    def measure(side: str) -> Any:
        order.append(side)
        return run.Sample(1.0, cpu[side], 0.0)

    m = run.interleaved(2, measure, ("floor", "stack", "dsh"))
    assert order == ["floor", "stack", "dsh"] * 2
    assert m.spread["stack"] == (1.25, 1.25)
    assert "floor 1.000 to 1.000s, stack 1.250 to 1.250s, dsh 2.500 to 2.500s" in run.spread_line(m)
    assert (m.floor.cpu, m.samples["stack"].cpu, m.dsh.cpu) == (1.0, 1.25, 2.5)
    line = run.reference("   the least", m.samples["stack"].cpu, m)
    assert line.endswith("1.250s CPU: 1.25x the floor; dsh 2.00x it")


def test_the_stack_side_of_w3_imports_dshs_stack_then_runs_the_floor() -> None:
    script = run.FIRST_TOKEN["stack"]
    assert script.startswith("import attrs, cattrs, pluggy")
    assert script.endswith(run.FIRST_TOKEN_FLOOR) and "entry_points(group='dsh')" in script
    assert list(run.FIRST_TOKEN) == list(run.W3_SIDES)
    for side in ("floor", "logged"):  # the floors read blocks and decode with orjson
        assert "iter_any()" in run.FIRST_TOKEN[side] and "orjson.loads" in run.FIRST_TOKEN[side]
    assert "tools=()" in run.FIRST_TOKEN["dsh"]


def test_a_busy_server_flags_the_row() -> None:
    assert "SERVER-BOUND" in run.row("W", samples(1, 2, server_cpu=0.6), 1.3)
    assert "SERVER-BOUND" not in run.row("W", samples(1, 2, server_cpu=0.4), 1.3)


def test_scale_rows_flag_super_linear_cost_and_growing_memory() -> None:
    linear = [run.Point(10, samples(1, 2), 50.0), run.Point(100, samples(10, 20), 50.0)]
    lines = run.growth_rows("W", "unit", linear)
    assert "work x10: dsh cost x10.0, floor x10.0, dsh over the floor x10.0" in lines[1]
    assert not any("SUPER-LINEAR" in line or "GROWS" in line for line in lines)
    worse = [run.Point(10, samples(1, 2), 50.0), run.Point(100, samples(10, 40), 80.0)]
    flagged = run.growth_rows("W", "unit", worse)[1]
    assert "SUPER-LINEAR (dsh's own share too)" in flagged and "MEMORY/AGENT GROWS" in flagged
    shared = [run.Point(10, samples(1, 2)), run.Point(100, samples(25, 26))]
    assert "SUPER-LINEAR  load" in run.growth_rows("W", "unit", shared)[1]


@pytest.mark.parametrize(
    ("dsh_cpu", "dsh_gc", "without", "whose"),
    [
        # x15 in all, x10 without the collector: the super-linear term is the collector's
        (30.0, 12.0, "without the collector dsh x10.0, floor x10.0", "(the collector's)"),
        # x20 without the collector as well: dsh's own
        (40.0, 4.0, "without the collector dsh x20.0", "(dsh's own share too)"),
    ],
)
def test_scale_rows_tell_the_collectors_growth_from_the_rest(
    dsh_cpu: float, dsh_gc: float, without: str, whose: str
) -> None:
    points = [
        run.Point(10, samples(1, 2), 50.0, (0.1, 0.2)),
        run.Point(100, samples(12, dsh_cpu), 50.0, (3.0, dsh_gc)),
    ]
    line = run.growth_rows("W", "unit", points)[1]
    assert without in line and f"SUPER-LINEAR {whose}" in line


def test_the_breakdown_puts_each_function_in_its_layer() -> None:
    assert breakdown.layer("/x/dsh/llm/_sse.py:40(feed)") == "SSE parsing"
    assert breakdown.layer("/usr/lib/json/decoder.py:332(decode)") == "JSON decoding"
    assert breakdown.layer("<attrs generated init dsh.values._chunks.TextDelta>:1(__init__)") == (
        "chunk objects"
    )
    assert breakdown.layer("/x/pluggy/_hooks.py:490(__call__)") == "hook calls (pluggy)"
    assert breakdown.layer("~:0(<built-in method time.monotonic>)") == breakdown.OTHER


def test_the_breakdown_profiles_every_side() -> None:
    server = run.FastServer()
    try:
        table = breakdown.breakdown("W1", "chunk", 30, run.measuring(run.w1, server, 30))
    finally:
        server.close()
    assert "| SSE parsing |" in table and "| JSON decoding |" in table
    assert "| the floors' loop (bench/run.py) |" in table
    assert "| floor µs/chunk | logged floor | dsh | dsh - floor |" in table
    assert "| **total (profiled)** |" in table


def test_the_layers_are_counted_per_w2_step_and_per_w4_agent() -> None:
    command = breakdown.cachegrind_command("dsh-core", "W4", 50)
    assert command[-4:] == ["--times", "1", "--agents", "50"]
    assert command[-8:-4] == ["--spin", "dsh-core", "--workload", "W4"]
    cost = {"floor": 10, "logged": 12, "dsh-core": 25, "dsh-jsonl": 30, "dsh": 40}

    def count(command: list[str]) -> int:
        side, size = command[command.index("--spin") + 1], int(command[-1])
        per = cost[side] * (100 if "W4" in command else 1)
        return 1_000_000 + per * size

    table = breakdown.layer_table(count, {"W2": (5, 15), "W4": (2, 4)})
    assert "| W2 per step (5 → 15) | ÷ floor | the layer adds | W4 per agent (2 → 4) |" in table
    assert "| floor | 10 | 1.00x |  | 1,000 | 1.00x |  |" in table
    assert "| dsh core (loop, session log, adapter) | 25 | 2.50x |  | 2,500 | 2.50x |  |" in table
    assert "| + JSONL persistence | 30 | 3.00x | +5 | 3,000 | 3.00x | +500 |" in table
    assert "| + every other plugin (dsh) | 40 | 4.00x | +10 | 4,000 | 4.00x | +1,000 |" in table


def test_spin_runs_w4_agents_of_a_layer_side_in_this_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs: list[tuple[str, int, int, dict[str, float]]] = []
    real = run.w4_run

    async def w4_run(side: str, url: str, agents: int, steps: int) -> dict[str, float]:
        figures: dict[str, float] = await real(side, url, agents, steps)  # checks the answers
        runs.append((side, agents, steps, figures))
        return figures

    opened: list[Any] = []
    real_enter = run.Opened.__aenter__

    async def enter(self: Any) -> Any:
        client = await real_enter(self)
        opened.append(client)
        return client

    monkeypatch.setattr(run, "w4_run", w4_run)
    monkeypatch.setattr(run.Opened, "__aenter__", enter)
    breakdown.spin("dsh-jsonl", 2, 1, "W4")
    [(side, agents, steps, figures)] = runs
    assert (side, agents, steps) == ("dsh-jsonl", 2, run.AGENT_STEPS)
    assert figures["cpu"] > 0 and figures["wall"] > 0
    [client] = opened
    assert set(client.harness.plugins.disabled) == set(run.dsh_disabled("dsh-jsonl"))


def test_the_breakdown_counts_instructions_per_chunk_and_step_with_cachegrind() -> None:
    report = "==1== \n==1== I   refs:      2,059,875,749\n"
    assert breakdown.instructions(report) == 2_059_875_749
    with pytest.raises(RuntimeError, match="no instruction count"):
        breakdown.instructions("valgrind: not found")
    command = breakdown.cachegrind_command("logged", "W2", 50)
    assert command[:2] == ["valgrind", "--tool=cachegrind"] and sys.executable in command
    assert command[-6:] == ["--workload", "W2", "--times", "1", "--steps", "50"]
    assert breakdown.cachegrind_command("dsh", "W1", 9)[-2:] == ["--chunks", "9"]
    cost = {"floor": 10, "logged": 20, "dsh": 40}  # instructions per unit of each side

    def count(command: list[str]) -> int:
        side, size = command[command.index("--spin") + 1], int(command[-1])
        return 1_000_000 + cost[side] * size  # a fixed start, then the work

    table = breakdown.instruction_table(count, {"W1": (10, 110), "W2": (5, 15)})
    assert "| W1 per chunk (10 → 110 chunks) | 10 | 20 | 40 | 4.00x | 2.00x |" in table
    assert "| W2 per step (5 → 15 steps) | 10 | 20 | 40 | 4.00x | 2.00x |" in table
    spawned = breakdown.first_token_command("dsh", "http://127.0.0.1:1")
    assert spawned[:2] == ["valgrind", "--tool=cachegrind"]
    assert spawned[-4:-1] == ["-c", run.FIRST_TOKEN["dsh"], "http://127.0.0.1:1"]
    whole = {
        run.FIRST_TOKEN[side]: n for side, n in (("floor", 100), ("logged", 125), ("dsh", 150))
    }
    row = breakdown.first_token_row(lambda command: whole[command[-3]], "http://127.0.0.1:1")
    assert row == "| W3 spawn to first token (whole process) | 100 | 125 | 150 | 1.50x | 1.20x |"


def test_sampled_stacks_are_charged_to_their_innermost_layer_and_set_up_left_out() -> None:
    raw = "\n".join(
        [
            "main (x.py:1);feed (dsh/llm/_sse.py:40) 3",
            "main (x.py:1);raw_decode (json/decoder.py:353) 2",
            "main (x.py:1);__aenter__ (dsh/app/_harness.py:120);load (dsh/hooks/_loading.py:9) 7",
            "main (x.py:1);<built-in> (~:0) 1",
            "",
            "not a sample line",
        ]
    )
    layers, left_out = breakdown.sampled_layers(raw)
    assert layers == {"SSE parsing": 3, "JSON decoding": 2, breakdown.OTHER: 1}
    assert left_out == 7
    table = breakdown.spy_table(raw, per_sample_us=0.5)
    assert "| SSE parsing | 3 | 50.0% | 1.50 |" in table
    assert table.startswith("6 samples in the measured work (7 in set-up left out)")


def test_spin_runs_w1_for_a_sampling_profiler(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[int] = []
    close = run.FastServer.close

    def count_then_close(server: Any) -> None:
        served.append(server.stats()[0])
        close(server)

    monkeypatch.setattr(run.FastServer, "close", count_then_close)
    breakdown.spin("floor", 20, 2)
    breakdown.spin("dsh", 3, 1, "W2")
    assert served == [2 * (2 + 1), 2 + 4]  # each run a warm-up; W2: three steps and the answer


def test_start_up_cases_run_interleaved_and_report_against_their_baselines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[str] = []

    def child_times(code: str, env: dict[str, str]) -> tuple[float, float]:
        ran.append(code)
        return 0.5, 0.25

    monkeypatch.setattr(bench_startup, "child_times", child_times)
    medians = bench_startup.measure(2, ("python", "dsh --help"))
    help_code = bench_startup.CASES["dsh --help"][0]
    assert ran == ["pass", help_code] * 3  # a warm-up round, then two
    assert medians == {"python": (0.5, 0.25), "dsh --help": (0.5, 0.25)}
    lines = bench_startup.report({"python": (0.03, 0.02), "dsh --help": (0.3, 0.25)})
    assert lines[1].split() == ["python", "0.030s", "0.020s"]
    assert lines[2].endswith("0.250s   +230 ms over python (12.50x)")


def test_a_start_up_case_is_a_real_child_and_a_failing_one_is_an_error() -> None:
    medians = bench_startup.measure(1, ("python", "dsh --help"))
    assert medians["dsh --help"][1] > medians["python"][1] > 0
    with pytest.raises(subprocess.CalledProcessError):
        bench_startup.child_times("raise SystemExit(3)", dict(os.environ))


async def test_the_floor_reads_blocks_that_cut_lines_anywhere() -> None:
    """The floor splits SSE lines by hand: a block may end inside a line, a payload or the
    ``[DONE]``; what it assembles is what the stream says."""
    stream = fastmock.encode(tool_loop({"messages": history(1)}, 3))

    async def dribble(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for start in range(0, len(stream), 7):
            await response.write(stream[start : start + 7])
            await asyncio.sleep(0)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/chat/completions", dribble)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    kept: list[Any] = []
    try:
        async with aiohttp.ClientSession() as session:
            text, calls = await run.floor_call(
                session, url, history(1), True, lambda kind, data: kept.append((0.0, kind, data))
            )
    finally:
        await runner.cleanup()
    assert text == ""
    assert calls == [{"id": "call_1", "name": "echo", "args": '{"text": "step 1"}'}]
    kinds = [kind for _, kind, _ in kept]
    assert kinds.count("chunk") == stream.count(b"data: {")  # each chunk's delta, with its time
    assert kinds[-2:] == ["finish", "usage"] and len(kinds) == kinds.count("chunk") + 2


async def test_dsh_runs_with_every_plugin_and_offers_only_the_floors_tools() -> None:
    client = run.DshClient("http://127.0.0.1:9")
    await client.harness.start()
    try:
        names = set(client.harness.plugins.names())
    finally:
        await client.close()
    assert {"permissions", "tools_fs", "tools_shell", "persistence_jsonl", "budgets"} <= names
    assert run.dsh_options().tools == ("echo",) and run.dsh_options(tools=False).tools == ()


def test_the_quick_mode_runs_every_workload_and_prints_both_ratios(tmp_path: Path) -> None:
    """``bench/run.py --quick``, as a user runs it (figures are not judged)."""
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--quick", "--runs", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    out = done.stdout
    assert "÷floor" in out and "÷logged" in out
    for workload in (
        "W1 one reply, 500 deltas",
        "W2 10 sequential tool steps",
        "W2 100 sequential tool steps",
        "W2 growth 10 -> 100 steps",
        "W3 spawn to first token",
        "W4 10 agents x 5 steps",
        "W4 30 agents x 5 steps",
        "memory held per agent",
        "over the logged floor",
        "CPU, lowest to highest run",
    ):
        assert workload in out
    assert out.rstrip().splitlines()[-1].startswith("finished — load")
