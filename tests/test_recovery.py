"""Checkpoints, crash recovery, resume and fork, against the in-memory store of dsh.testing."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import socket
from typing import Any

import pytest
from structlog.testing import capture_logs

from dsh import AgentOptions, DshError, Harness, Tool, hookimpl
from dsh.loop._failures import SESSION_NOT_SAVED
from dsh.loop._recovery import NOT_STARTED, UNKNOWN, closing_events, pending_messages
from dsh.session._session import Session, SessionBusy, Writer, agent_id_of, new_session_id
from dsh.testing import MemoryStore, ScriptedAdapter, hang, text_response, tool_call_response
from dsh.values._content import Text, ToolCall
from dsh.values._events import (
    AssistantMessage,
    ErrorEvent,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnCompleted,
    TurnEnd,
    TurnError,
    TurnInterrupted,
    TurnStart,
    UserMessage,
)
from dsh.values._rare_events import SeedEnd
from dsh.values._request import ToolSchema
from tests.helpers import data_as, data_of, kinds, of_type


def log(*pairs: tuple[str, Any]) -> list[SessionEvent]:
    return [SessionEvent(t, i, 0.0, d) for i, (t, d) in enumerate(pairs)]


def test_closing_events_close_an_open_turn() -> None:
    events = log(
        ("user/message", UserMessage((Text("go"),))),
        ("turn/start", TurnStart(1)),
        ("step/start", StepStart(1, 1)),
        ("tool/call", ToolCallEvent(1, 1, "a", "t", "{}")),
        ("tool/result", ToolResultEvent(1, 1, "a", (Text("ok"),))),
        ("tool/call", ToolCallEvent(1, 1, "b", "t", "{}")),
        ("tool/call", ToolCallEvent(1, 1, "c", "t", "{}")),
    )
    assert closing_events(events) == [
        ("tool/result", ToolResultEvent(1, 1, "b", UNKNOWN, True, "TOOL_OUTCOME_UNKNOWN")),
        ("tool/result", ToolResultEvent(1, 1, "c", UNKNOWN, True, "TOOL_OUTCOME_UNKNOWN")),
        ("step/end", StepEnd(1, 1)),
        ("turn/end", TurnEnd(1, TurnInterrupted())),
    ]
    calls = tuple(ToolCall(i, "t", "{}") for i in "xyz")
    with_message = [
        *events[:3],
        SessionEvent("assistant/message", 3, 0.0, AssistantMessage(1, 1, (Text("t"), *calls))),
        SessionEvent("tool/call", 4, 0.0, ToolCallEvent(1, 1, "x", "t", "{}")),
        SessionEvent("tool/result", 5, 0.0, ToolResultEvent(1, 1, "x", (Text("ok"),))),
        SessionEvent("tool/call", 6, 0.0, ToolCallEvent(1, 1, "y", "t", "{}")),
    ]
    assert closing_events(with_message)[:2] == [
        ("tool/result", ToolResultEvent(1, 1, "y", UNKNOWN, True, "TOOL_OUTCOME_UNKNOWN")),
        ("tool/result", ToolResultEvent(1, 1, "z", NOT_STARTED, True, "ABORTED_BEFORE_DISPATCH")),
    ]
    between_steps = events[:2]
    assert closing_events(between_steps) == [("turn/end", TurnEnd(1, TurnInterrupted()))]
    closed = [*between_steps, SessionEvent("turn/end", 2, 0.0, TurnEnd(1, TurnInterrupted()))]
    assert closing_events(closed) == []
    assert closing_events([]) == []


def test_a_step_that_ended_is_not_closed_again() -> None:
    events = log(
        ("turn/start", TurnStart(1)),
        ("step/start", StepStart(1, 1)),
        ("step/end", StepEnd(1, 1)),
    )
    assert closing_events(events) == [("turn/end", TurnEnd(1, TurnInterrupted()))]


async def test_checkpoints_come_before_requests_and_tool_calls() -> None:
    store = MemoryStore()
    stored_at_tool_time: list[str] = []

    async def observe(args: Any, execution: Any) -> str:
        stored_at_tool_time.extend(e.type for e in store.stored["a-session"])
        return "ok"

    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        h.tools.register(Tool(ToolSchema("observe", "o"), observe))
        h.llm.register_adapter(
            ["m"], ScriptedAdapter([tool_call_response("c1", "observe", {}), text_response("x")])
        )
        agent = h.agent_loop.create("a", AgentOptions(model="m"), session_id="a-session")
        agent.send("go")
        await agent.wait_idle()
        assert store.checkpoints == 4  # two model requests, one tool call, the turn's end
        assert store.flushes == 1
    assert stored_at_tool_time[-1] == "tool/call"
    assert store.flushes == 2  # and once more when the harness closed


async def crash_mid_tool(store: MemoryStore) -> None:
    """Run an agent until it is inside a tool, queue two messages, and "crash"."""
    inside = asyncio.Event()

    async def stuck(args: Any, execution: Any) -> str:
        inside.set()
        await asyncio.Event().wait()
        return "never"

    h = Harness(load_entrypoints=False, plugins=[store])
    await h.start()
    h.tools.register(Tool(ToolSchema("stuck", "s"), stuck))
    h.llm.register_adapter(["m"], ScriptedAdapter([tool_call_response("c1", "stuck", {})]))
    agent = h.agent_loop.create("a", AgentOptions(model="m"), session_id="a-session")
    agent.send("first")
    await inside.wait()
    agent.send("second")
    agent.steer("steer me")
    await asyncio.sleep(0)  # let the background checkpoints of the queued messages run
    # The process dies here: nothing after the last checkpoint reaches the store.
    durable = list(store.stored["a-session"])
    drivers = [task for task in asyncio.all_tasks() if task.get_name() == "dsh:a"]
    for task in drivers:
        task.cancel()
    # A dead process runs no cleanup; this one's cancelled driver does (it closes its session),
    # so let it finish now, then put the store back as the crash left it: the log as it was,
    # nothing pending, no writer (the OS releases a dead holder's lock).
    await asyncio.gather(*drivers, return_exceptions=True)
    store.stored["a-session"] = durable
    store.live.clear()
    store.release("a-session")


async def test_resume_after_a_crash_closes_the_turn_and_restores_the_queue() -> None:
    store = MemoryStore()
    await crash_mid_tool(store)
    stored = list(store.stored["a-session"])
    assert [e.type for e in stored][-3:] == ["tool/call", "inbox/queued", "inbox/queued"]
    adapter = ScriptedAdapter([text_response("answered")])
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        h.llm.register_adapter(["m"], adapter)
        agent = await h.agent_loop.resume("a-session", AgentOptions(model="m"))
        assert agent.id == "a"
        await agent.wait_idle()
        events = agent.session.events
        assert events[: len(stored)] == tuple(stored)
        tail = kinds(events[len(stored) :])
        assert tail == [
            "session/end-seed", "tool/result", "step/end", "turn/end",
            "user/message", "user/message", "turn/start",
            "step/start", "chunks", "assistant/message", "step/end", "turn/end",
        ]  # fmt: skip
        assert events[len(stored)].data == SeedEnd(len(stored))
        assert data_as(events[len(stored) + 1], ToolResultEvent).code == "TOOL_OUTCOME_UNKNOWN"
        assert data_as(events[len(stored) + 3], TurnEnd).reason == TurnInterrupted()
        # Both queued messages (the steering one too) ran as the next turn, in order.
        contents = [e.content for e in data_of(events, UserMessage)[-2:]]
        assert contents == [(Text("second"),), (Text("steer me"),)]
        assert data_of(events, TurnStart)[-1].turn == 2
        history = adapter.requests[0].messages
        assert [m.role for m in history] == ["user", "assistant", "user", "user", "user"]
    assert pending_messages(store.stored["a-session"]) == []


async def test_resume_of_a_closed_session_only_marks_the_seed() -> None:
    store = MemoryStore()
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        h.llm.register_adapter(["m"], ScriptedAdapter([text_response("a")]))
        agent = h.agent_loop.create("a", AgentOptions(model="m"), session_id="a-session")
        agent.send("go")
        await agent.wait_idle()
        before = agent.session.derive_messages()
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        agent = await h.agent_loop.resume("a-session", agent_id="again")
        assert agent.id == "again"
        assert kinds(agent.session.events)[-2:] == ["turn/end", "session/end-seed"]
        assert agent.session.derive_messages() == before
        assert agent.session.persisted == len(agent.session.events) - 1
        other = h.sessions.create("b-session")
        other.append(UserMessage((Text("x"),)))
        await other.flush()
        h.sessions.create("empty")
        assert [s.id for s in await h.sessions.stored()] == ["b-session", "a-session"]
        [found] = await h.sessions.stored(query="b-", limit=5)
        assert (found.id, found.events) == ("b-session", 1)


async def test_resume_of_an_unknown_session_says_why(harness: Harness) -> None:
    with pytest.raises(DshError, match="no stored session 'nope': is a persistence plugin"):
        await harness.agent_loop.resume("nope")


async def test_fork_is_refused_inside_an_open_turn(harness: Harness) -> None:
    adapter = ScriptedAdapter([hang()])
    harness.llm.register_adapter(["m"], adapter)
    agent = harness.agent_loop.create("a", AgentOptions(model="m"), session_id="a-session")
    agent.send("go")
    await adapter.started.wait()  # the turn is open: its model call has begun
    with pytest.raises(DshError, match="turn 1 is still open there"):
        harness.sessions.fork(agent.session)
    child = harness.sessions.fork(agent.session, at_seq=0)
    assert [e.type for e in child.events] == ["user/message"] and child.parent == "a-session"
    agent.abort()
    await agent.wait_idle()
    assert len(harness.sessions.fork(agent.session).events) == len(agent.session.events)


async def test_messages_sent_while_idle_are_not_logged_as_queued(harness: Harness) -> None:
    harness.llm.register_adapter(["m"], ScriptedAdapter([text_response("a")]))
    agent = harness.agent_loop.create("a", AgentOptions(model="m"), session_id="a-session")
    agent.send("go")
    await agent.wait_idle()
    assert of_type(agent.session.events, "inbox/queued") == []
    assert data_of(agent.session.events, UserMessage)[0].queued_seq is None


async def test_new_agents_never_reuse_a_session_id(harness: Harness) -> None:
    first = harness.agent_loop.create("a")
    assert re.fullmatch(r"a-\d{8}-\d{6}-[0-9a-f]{4}", first.session.id)
    ids = {new_session_id("a") for _ in range(20)}
    assert len(ids) > 1  # random suffixes: two runs in the same second do not collide
    assert agent_id_of(first.session.id) == "a" == agent_id_of("a-session")
    assert agent_id_of("custom") == "custom"


async def test_a_disposed_agents_session_is_flushed_and_forgotten() -> None:
    closed: list[str] = []

    class Watch:
        @hookimpl
        def dsh_session_closed(self, session: Any) -> None:
            closed.append(session.id)

    store = MemoryStore()
    async with Harness(load_entrypoints=False, plugins=[store, Watch()]) as h:
        h.llm.register_adapter(["m"], ScriptedAdapter([text_response("a")]))
        agent = h.agent_loop.create("a", AgentOptions(model="m"), session_id="a-session")
        agent.send("go")
        await agent.wait_idle()
        await agent.dispose()
        assert closed == ["a-session"]
        assert h.sessions.get("a-session") is None
        assert store.stored["a-session"] == list(agent.session.events)
        await h.sessions.close(agent.session)  # twice: nothing more happens
        assert closed == ["a-session"]


async def test_closing_logs_a_failed_flush() -> None:
    class Broken:
        @hookimpl
        def dsh_session_flush(self) -> None:
            raise OSError("disk gone")

    async with Harness(load_entrypoints=False, plugins=[Broken()]) as h:
        session = h.sessions.create("s")
        with capture_logs() as logs:
            await h.sessions.close(session)
        assert logs[0]["event"] == "session flush failed while closing"
        h.plugins.pm.unregister(name="Broken")
        h.plugins.runtime.invalidate()


# -- saving: a turn whose log was not saved is not a success ---------------------------------


class FullDisk(MemoryStore):
    """A store whose writes fail with ENOSPC while ``full`` (``at`` says which: "checkpoint",
    "flush" or both) — the disk-full boundary, with everything above it real."""

    def __init__(self, *at: str) -> None:
        super().__init__()
        self.full = set(at)

    def _fail(self, where: str) -> None:
        if where in self.full:
            raise OSError(errno.ENOSPC, "No space left on device")

    @hookimpl
    def dsh_session_checkpoint(self, session: Session) -> None:
        self._fail("checkpoint")
        super().dsh_session_checkpoint(session)

    @hookimpl
    def dsh_session_flush(self, session: Session) -> None:
        self._fail("flush")
        super().dsh_session_flush(session)


async def run_one_turn(store: MemoryStore) -> tuple[Harness, Any]:
    h = Harness(load_entrypoints=False, plugins=[store])
    await h.start()
    h.llm.register_adapter(["m"], ScriptedAdapter([text_response("answer")] * 2))
    agent = h.agent_loop.create("a", AgentOptions(model="m"), session_id="a-session")
    agent.send("go")
    await agent.wait_idle()
    return h, agent


async def test_a_turn_whose_events_cannot_be_written_ends_with_an_error() -> None:
    store = FullDisk()
    h = Harness(load_entrypoints=False, plugins=[store])
    await h.start()
    adapter = ScriptedAdapter([text_response("answer"), text_response("again")])
    h.llm.register_adapter(["m"], adapter)
    agent = h.agent_loop.create("a", AgentOptions(model="m"), session_id="a-session")
    original = adapter.stream

    def fill_the_disk(request: Any) -> Any:
        store.full = {"checkpoint", "flush"}  # the disk fills up while the model answers
        return original(request)

    adapter.stream = fill_the_disk  # type: ignore[method-assign]
    with capture_logs() as logs:
        agent.send("go")
        await agent.wait_idle()
    events = agent.session.events
    assert kinds(events)[-2:] == ["error", "turn/end"]  # one error: the flush is only logged
    error = data_as(events[-2], ErrorEvent)
    assert error.code == SESSION_NOT_SAVED and "No space left on device" in error.message
    reason = data_as(events[-1], TurnEnd).reason
    assert isinstance(reason, TurnError) and reason.failure.code == SESSION_NOT_SAVED
    assert any(entry["event"] == "session still not saved" for entry in logs)
    assert kinds(store.stored["a-session"]) == ["user/message", "turn/start", "step/start"]
    store.full = set()  # space returns: the events kept in memory are written
    adapter.stream = original  # type: ignore[method-assign]
    agent.send("again")
    await agent.wait_idle()
    assert store.stored["a-session"] == list(agent.session.events)
    assert data_as(agent.session.events[-1], TurnEnd).reason == TurnCompleted()
    await h.close()


async def test_a_failed_flush_after_the_turn_end_is_logged_after_it() -> None:
    store = FullDisk("flush")  # writes work, syncs fail
    h, agent = await run_one_turn(store)
    events = agent.session.events
    assert kinds(events)[-2:] == ["turn/end", "error"]
    assert events[-2].data.reason.type == "completed"  # all was written before the end...
    assert events[-1].data.code == SESSION_NOT_SAVED  # ...but not made durable
    await h.hooks.harness_stop(h)


async def test_a_claim_that_fails_for_another_reason_says_why_and_forgets_the_session() -> None:
    async with Harness(load_entrypoints=False, plugins=[FullDisk("checkpoint")]) as h:
        session = h.sessions.create("s")
        why = "cannot open session 's' for writing: plugin 'FullDisk' failed in dsh_session_checkp"
        with pytest.raises(DshError, match=why):
            await h.sessions.claim(session)
        assert h.sessions.get("s") is None
        with pytest.raises(DshError, match=why):  # no longer live: nothing more to forget
            await h.sessions.claim(session)


def test_a_writer_names_its_process_host_and_start() -> None:
    assert str(Writer(42, "box", 0.0)) == "process 42 on host 'box' (since 1970-01-01 00:00:00 UTC)"
    busy = SessionBusy("s", None)
    assert "open for writing by another process (not yet identified)" in str(busy)
    me = Writer.this_process()
    assert me.pid == os.getpid() and me.host == socket.gethostname()
