"""Tool dispatch: concurrency-safe batches, barriers, model order, a result for every call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh import AgentOptions, Harness, Tool, ToolExecution, ToolOutcome, hookimpl
from dsh.loop._dispatch import call_ids, with_unique_call_ids
from dsh.testing import ScriptedAdapter, text_response, tool_calls_response
from dsh.tools._registry import checked_outcome
from dsh.values._content import Image, Message, Text, ToolCall, ToolResult, text_of
from dsh.values._events import (
    AssistantMessage,
    ErrorEvent,
    SessionEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnAborted,
    TurnCompleted,
    TurnEnd,
)
from dsh.values._request import ToolSchema
from dsh_plugins.persistence_jsonl import JsonlStore
from tests.helpers import data_of, kinds


class Probe:
    """Tools that record when they start and finish and wait for a release."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.running = 0
        self.peak = 0
        self.release: dict[str, asyncio.Event] = {}

    def tool(self, name: str, safe: bool) -> Tool:
        self.release[name] = asyncio.Event()

        async def run(args: Any, execution: Any) -> str:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.log.append(f"start {name}")
            try:
                await self.release[name].wait()
            finally:
                self.running -= 1
            self.log.append(f"end {name}")
            return f"{name} done"

        return Tool(ToolSchema(name, name), run, concurrency_safe=safe)


def agent_with(h: Harness, names: list[str]) -> Any:
    calls: list[tuple[str, str, dict[str, Any]]] = [(f"c-{n}", n, {}) for n in names]
    script = [tool_calls_response(calls), text_response("ok")]
    h.llm.register_adapter(["m"], ScriptedAdapter(script))
    return h.agent_loop.create("a", AgentOptions(model="m"))


async def wait_for(condition: Any) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never became true")


async def test_safe_tools_run_together_and_results_keep_the_models_order(
    harness: Harness,
) -> None:
    probe = Probe()
    for name in ("a", "b", "c"):
        harness.tools.register(probe.tool(name, safe=True))
    agent = agent_with(harness, ["a", "b", "c"])
    agent.send("go")
    await wait_for(lambda: probe.running == 3)  # all three at once: the time of the slowest
    for name in ("c", "b", "a"):  # finish in reverse order
        probe.release[name].set()
        await asyncio.sleep(0)
    await agent.wait_idle()
    assert probe.log[3:] == ["end c", "end b", "end a"]
    results = [e.call_id for e in data_of(agent.session.events, ToolResultEvent)]
    assert results == ["c-a", "c-b", "c-c"]
    assert kinds(agent.session.events)[5:11] == ["tool/call"] * 3 + ["tool/result"] * 3


async def test_an_unsafe_tool_is_a_barrier(harness: Harness) -> None:
    probe = Probe()
    harness.tools.register(probe.tool("a", safe=True))
    harness.tools.register(probe.tool("w", safe=False))
    harness.tools.register(probe.tool("c", safe=True))
    for event in probe.release.values():
        event.set()
    agent = agent_with(harness, ["a", "w", "c"])
    agent.send("go")
    await agent.wait_idle()
    assert probe.log == ["start a", "end a", "start w", "end w", "start c", "end c"]
    assert probe.peak == 1


async def test_concurrency_is_bounded_by_config() -> None:
    config = {"agent_loop": {"max_parallel_tools": 2}}
    async with Harness(load_entrypoints=False, config=config) as h:
        probe = Probe()
        for name in ("a", "b", "c"):
            h.tools.register(probe.tool(name, safe=True))
        agent = agent_with(h, ["a", "b", "c"])
        agent.send("go")
        await wait_for(lambda: probe.running == 2)
        for event in probe.release.values():
            event.set()
        await agent.wait_idle()
        assert probe.peak == 2


async def test_abort_gives_every_call_a_result(harness: Harness) -> None:
    probe = Probe()
    harness.tools.register(probe.tool("fast", safe=True))
    harness.tools.register(probe.tool("slow", safe=True))
    harness.tools.register(probe.tool("later", safe=False))
    probe.release["fast"].set()
    agent = agent_with(harness, ["fast", "slow", "later", "unknown"])
    agent.send("go")
    await wait_for(lambda: "end fast" in probe.log and probe.running == 1)
    agent.abort("enough")
    await agent.wait_idle()
    results = {e.call_id: e for e in data_of(agent.session.events, ToolResultEvent)}
    assert list(results) == ["c-fast", "c-slow", "c-later", "c-unknown"]
    assert (results["c-fast"].is_error, results["c-fast"].code) == (False, None)
    assert results["c-slow"].code == "ABORTED"
    assert results["c-later"].code == "ABORTED_BEFORE_DISPATCH"
    assert "never started (aborted: enough)" in text_of(results["c-later"].content)
    assert [e.call_id for e in data_of(agent.session.events, ToolCallEvent)] == [
        "c-fast",
        "c-slow",
    ]
    assert data_of(agent.session.events, TurnEnd)[0].reason == TurnAborted("enough")


async def test_dispose_while_a_batch_runs() -> None:
    async with Harness(load_entrypoints=False) as h:
        probe = Probe()
        h.tools.register(probe.tool("a", safe=True))
        h.tools.register(probe.tool("b", safe=True))
        agent = agent_with(h, ["a", "b"])
        agent.send("go")
        await wait_for(lambda: probe.running == 2)
        await agent.dispose()
        results = data_of(agent.session.events, ToolResultEvent)
        assert [r.code for r in results] == ["ABORTED", "ABORTED"]
        assert "the agent was disposed" in text_of(results[0].content)


# -- every call has exactly one result, whatever happens to it -------------------------------


Calls = list[tuple[str, str, dict[str, Any]]]


def one_result_per_call(events: Any) -> dict[str, Any]:
    """The result of each call the model made, by call id, in the model's order; fails unless
    there is exactly one each (and every logged ``tool/call`` is one of them)."""
    messages = data_of(events, AssistantMessage)
    calls = [b.id for m in messages for b in m.content if isinstance(b, ToolCall)]
    results = data_of(events, ToolResultEvent)
    assert calls == [r.call_id for r in results], (calls, results)
    assert len(set(calls)) == len(calls), calls
    assert {e.call_id for e in data_of(events, ToolCallEvent)} <= set(calls)
    return {r.call_id: r for r in results}


def raising(exc: BaseException) -> Tool:
    async def run(args: Any, execution: Any) -> str:
        raise exc

    return Tool(ToolSchema(type(exc).__name__.lower(), "Raise.", {"type": "object"}), run)


class DenyNamed:
    """A permission policy in miniature: denies the calls of one tool."""

    def __init__(self, name: str) -> None:
        self.name = name

    @hookimpl
    async def dsh_tools_execute(self, execution: ToolExecution, call_next: Any) -> ToolOutcome:
        if execution.name == self.name:
            return ToolOutcome.error("DENIED", "not allowed")
        outcome: ToolOutcome = await call_next(execution)
        return outcome


async def test_every_error_path_gives_each_call_one_result_and_the_host_goes_on() -> None:
    tools = [raising(exc) for exc in (RuntimeError("x"), SystemExit(3), KeyboardInterrupt())]
    tools.append(Tool(ToolSchema("guarded", "Denied.", {"type": "object"}), echo))
    tools.append(Tool(ToolSchema("typed", "Wants n.", {"type": "object", "required": ["n"]}), echo))
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("c1", "runtimeerror", {}),
        ("c2", "systemexit", {}),
        ("c3", "keyboardinterrupt", {}),
        ("c4", "guarded", {}),
        ("c5", "nope", {}),
        ("c6", "typed", {}),
    ]
    script = [tool_calls_response(calls), text_response("done"), text_response("again")]
    async with Harness(load_entrypoints=False, plugins=[DenyNamed("guarded")]) as h:
        for tool in tools:
            h.tools.register(tool)
        h.llm.register_adapter(["m"], ScriptedAdapter(script))
        agent = h.agent_loop.create("a", AgentOptions(model="m"))
        agent.send("go")
        await agent.wait_idle()
        results = one_result_per_call(agent.session.events)
        codes = {call_id: r.code for call_id, r in results.items()}
        assert codes == {
            "c1": "TOOL_ERROR",
            "c2": "TOOL_ERROR",
            "c3": "TOOL_ERROR",
            "c4": "DENIED",
            "c5": "UNKNOWN_TOOL",
            "c6": "INVALID_ARGS",
        }
        assert "raised SystemExit (3); a tool cannot exit" in text_of(results["c2"].content)
        assert "raised KeyboardInterrupt; a tool cannot exit" in text_of(results["c3"].content)
        agent.send("still there?")  # the harness (and this test process) kept running
        await agent.wait_idle()
        ends = data_of(agent.session.events, TurnEnd)
        assert ends[0].reason == ends[1].reason == TurnCompleted()


async def echo(args: Any, execution: Any) -> str:
    return "ok"


async def test_a_middleware_that_exits_is_a_tool_error(harness: Harness) -> None:
    class Exiting:
        @hookimpl
        def dsh_tools_execute(self) -> None:
            raise SystemExit("bye")

    async with Harness(load_entrypoints=False, plugins=[Exiting()]) as h:
        outcome = await h.tools.execute(ToolExecution("c", "any", "{}"))
    assert outcome.code == "TOOL_ERROR"
    assert text_of(outcome.content) == (
        "Error: the tool raised SystemExit (bye); a tool cannot exit the process"
    )


class FailingToolCheckpoint:
    """A store whose checkpoint fails when tool calls are about to run (a full disk)."""

    @hookimpl
    def dsh_session_checkpoint(self, session: Any) -> None:
        if session.events[-1].type == "tool/call":
            raise OSError(28, "No space left on device")


async def test_a_failed_checkpoint_before_the_calls_still_gives_each_one_result() -> None:
    calls: Calls = [("c1", "echo", {}), ("c2", "echo", {}), ("c3", "other", {})]
    async with Harness(load_entrypoints=False, plugins=[FailingToolCheckpoint()]) as h:
        h.tools.register(Tool(ToolSchema("echo", "Echo.", {"type": "object"}), echo))
        h.llm.register_adapter(["m"], ScriptedAdapter([tool_calls_response(calls)]))
        agent = h.agent_loop.create("a", AgentOptions(model="m"))
        agent.send("go")
        await agent.wait_idle()
        events = agent.session.events
    results = one_result_per_call(events)
    assert [r.code for r in results.values()] == ["ABORTED_BEFORE_DISPATCH"] * 3
    assert text_of(results["c1"].content) == (
        "Error: tool call never started: the step failed (plugin 'FailingToolCheckpoint' failed "
        "in dsh_session_checkpoint: OSError: [Errno 28] No space left on device)"
    )
    [error] = data_of(events, ErrorEvent)
    assert "No space left on device" in error.message
    assert data_of(events, TurnEnd)[-1].reason.type == "error"
    assert [e.call_id for e in data_of(events, ToolCallEvent)] == ["c1"]  # c1 ran alone


# -- duplicate tool-call ids ----------------------------------------------------------------


async def test_duplicate_call_ids_are_made_unique_before_the_history(harness: Harness) -> None:
    harness.tools.register(Tool(ToolSchema("echo", "Echo.", {"type": "object"}), echo))
    first: Calls = [("call_0", "echo", {}), ("call_0", "echo", {}), ("", "echo", {})]
    second: Calls = [("call_0", "echo", {}), ("call_0_2", "echo", {})]
    script = [
        tool_calls_response(first),
        tool_calls_response(second),
        text_response("done"),
        text_response("again"),
    ]
    adapter = ScriptedAdapter(script)
    harness.llm.register_adapter(["m"], adapter)
    agent = harness.agent_loop.create("a", AgentOptions(model="m"))
    agent.send("go")
    await agent.wait_idle()
    events = agent.session.events
    messages = data_of(events, AssistantMessage)
    ids = [[b.id for b in m.content if isinstance(b, ToolCall)] for m in messages]
    assert ids[:2] == [["call_0", "call_0_2", "call_2"], ["call_0_3", "call_0_2_2"]]
    assert list(one_result_per_call(events)) == [*ids[0], *ids[1]]
    # what the model is shown pairs every result with exactly one call
    history = adapter.requests[-1].messages
    shown = [b.id for m in history for b in m.content if isinstance(b, ToolCall)]
    answered = [b.tool_call_id for m in history for b in m.content if isinstance(b, ToolResult)]
    assert shown == answered == [*ids[0], *ids[1]]
    assert agent.status == "idle"


def test_unique_ids_leave_a_message_without_clashes_as_it_is() -> None:
    message = Message("assistant", (Text("hi"), ToolCall("a", "t", "{}")))
    used: set[str] = set()
    assert with_unique_call_ids(message, used) is message
    assert used == {"a"}
    assert with_unique_call_ids(Message("assistant", (Text("hi"),)), used).content == (Text("hi"),)


def test_unique_ids_keep_the_other_blocks_where_they_were() -> None:
    message = Message("assistant", (Text("a"), ToolCall("a", "t", "{}"), Text("b")))
    renamed = with_unique_call_ids(message, {"a"})
    assert renamed.content == (Text("a"), ToolCall("a_2", "t", "{}"), Text("b"))


@given(
    st.lists(st.sampled_from(["", "a", "a_2", "a_3", "b", "call_2"]), max_size=8),
    st.lists(st.sampled_from(["a", "a_2", "b", "call_2"]), max_size=4),
)
def test_unique_ids_are_unique_and_keep_what_they_can(ids: list[str], earlier: list[str]) -> None:
    events = [
        SessionEvent("tool/result", n, 0.0, ToolResultEvent(1, 1, i, (Text(""),)))
        for n, i in enumerate(earlier)
    ]
    message = Message("assistant", tuple(ToolCall(i, "t", "{}") for i in ids))
    used = call_ids(events)
    out = [b.id for b in with_unique_call_ids(message, used).content if isinstance(b, ToolCall)]
    assert used == set(earlier) | set(out)
    assert len(out) == len(ids) and all(out)
    assert len(set(out) | set(earlier)) == len(out) + len(set(earlier))
    for index, (before, after) in enumerate(zip(ids, out, strict=True)):
        clashes = not before or before in earlier or before in ids[:index]
        assert (after == before) != clashes


# -- tool results are checked at the boundary -------------------------------------------------


class Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


def returning(name: str, value: Any) -> Tool:
    async def run(args: Any, execution: Any) -> Any:
        return value

    return Tool(ToolSchema(name, "Return a value.", {"type": "object"}), run)


class TextSubclass(Text):
    """A block the type check lets through but the log would read back as a plain Text."""


RETURNS: dict[str, tuple[Any, str | None]] = {
    # name: (what the tool returns, the text stored; None: a TOOL_ERROR)
    "text": ("plain", "plain"),
    "number": (4.5, "4.5"),
    "flag": (True, "true"),
    "nothing": (None, ""),
    "mapping": ({"n": 1, "é": [1, 2]}, '{"n": 1, "é": [1, 2]}'),
    "sequence": ([1, "two", None], '[1, "two", null]'),
    "utf8": ("café".encode(), "café"),
    "bytearray": (bytearray(b"ab"), "ab"),
    "blocks": ((Text("a"), Text("b")), None),
    "binary": (b"\xff\xfe", None),
    "object": (Opaque(), None),
    "mixed": ([Text("a"), 1], None),
    "deep-object": ({"x": Opaque()}, None),
    "bad-block": (Text(5), None),  # type: ignore[arg-type]
    "subclass": ((TextSubclass("s"),), None),
}


async def test_tool_results_are_converted_or_refused_and_the_session_reloads(
    tmp_path: Path,
) -> None:
    names = list(RETURNS)
    calls: Calls = [(f"c-{name}", name, {}) for name in names]
    config = {"persistence_jsonl": {"dir": str(tmp_path)}}
    script = [tool_calls_response(calls), text_response("done")]
    async with Harness(load_entrypoints=False, plugins=[JsonlStore], config=config) as h:
        for name in names:
            h.tools.register(returning(name, RETURNS[name][0]))
        h.llm.register_adapter(["m"], ScriptedAdapter(script))
        agent = h.agent_loop.create("a", AgentOptions(model="m"), session_id="s")
        agent.send("go")
        await agent.wait_idle()
    async with Harness(load_entrypoints=False, plugins=[JsonlStore], config=config) as h:
        loaded = await h.sessions.load("s")
    assert loaded is not None
    results = one_result_per_call(loaded)
    for name in names:
        result, expected = results[f"c-{name}"], RETURNS[name][1]
        if name == "blocks":
            assert result.content == (Text("a"), Text("b"))
        elif expected is None:
            assert (result.is_error, result.code) == (True, "TOOL_ERROR"), name
        else:
            assert (result.content, result.is_error) == ((Text(expected),), False), name
    assert data_of(loaded, TurnEnd)[-1].reason.type == "completed"


def error_text(outcome: ToolOutcome) -> str:
    assert outcome.is_error and outcome.code == "TOOL_ERROR"
    return text_of(outcome.content)


async def test_refusals_say_what_a_tool_may_return(harness: Harness) -> None:
    for name in ("binary", "object", "mixed", "deep-object", "bad-block"):
        harness.tools.register(returning(name, RETURNS[name][0]))
    said = {
        name: error_text(await harness.tools.execute(ToolExecution("c", name, "")))
        for name in ("binary", "object", "mixed", "deep-object", "bad-block")
    }
    assert said["binary"] == (
        "Error: tool 'binary': the tool returned 2 bytes that are not UTF-8 text (invalid start "
        "byte at byte 0); a tool returns text"
    )
    assert said["object"] == (
        "Error: tool 'object': the tool returned a Opaque, which has no text form; a tool "
        "returns a str, content blocks, bytes of UTF-8 text or JSON values"
    )
    assert "mixes content blocks and values" in said["mixed"]
    assert "a dict that is not made of JSON values" in said["deep-object"]
    assert (
        said["bad-block"]
        == "Error: tool 'bad-block': the tool returned a malformed Text block: Text(text=5)"
    )


class Returns:
    """A middleware that answers every call with ``outcome`` instead of running the tool."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome

    @hookimpl
    def dsh_tools_execute(self) -> Any:
        return self.outcome


@pytest.mark.parametrize(
    ("outcome", "problem"),
    [
        ({"content": "x"}, "a dict where a ToolOutcome belongs"),
        (ToolOutcome([Text("a")]), "content of type list, not a tuple of blocks"),  # type: ignore[arg-type]
        (ToolOutcome(("a",)), "a str among its content blocks"),  # type: ignore[arg-type]
        (ToolOutcome((Image(b"x"),)), "a malformed Image block: Image(url=b'x', mime_type=None)"),  # type: ignore[arg-type]
        (ToolOutcome((Text("a"),), "yes"), "an is_error or code of the wrong type ('yes', None)"),  # type: ignore[arg-type]
        (ToolOutcome((Text("a"),), True, 5), "an is_error or code of the wrong type (True, 5)"),  # type: ignore[arg-type]
        (
            ToolOutcome((TextSubclass("a"),)),
            "a result the session log would not read back unchanged",
        ),
    ],
)
async def test_a_middleware_outcome_the_log_cannot_store_is_a_tool_error(
    outcome: Any, problem: str
) -> None:
    async with Harness(load_entrypoints=False, plugins=[Returns(outcome)]) as h:
        assert h.tools.round_trip  # the test suite sets DSH_DEBUG
        said = error_text(await h.tools.execute(ToolExecution("c", "t", "")))
    assert said == f"Error: tool 't' produced {problem}"


async def test_the_round_trip_check_is_for_debug_and_test_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outcome = ToolOutcome((TextSubclass("a"),))
    monkeypatch.delenv("DSH_DEBUG")
    async with Harness(load_entrypoints=False, plugins=[Returns(outcome)]) as h:
        assert not h.tools.round_trip
        assert await h.tools.execute(ToolExecution("c", "t", "")) is outcome
    assert checked_outcome(outcome, "t", round_trip=True).code == "TOOL_ERROR"
    good = ToolOutcome((Text("a"), Image("data:,x", "text/plain")), True, "X")
    assert checked_outcome(good, "t", round_trip=True) is good
