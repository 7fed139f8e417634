"""The mode the plugin keeps per session as events are appended (``_modes.ModeTracker``) is the
mode the plain reference reads back from the whole log (``_modes.scan_mode``): for any sequence
of appended events (mode changes, unknown modes, chunks kept packed, messages, compaction
events), sub-agents, resumes, forks, sessions made without hooks, closed sessions used again,
and an observer that logs a mode change while it is told of one. And through a harness: a
resumed session's past modes count, and a mode switched during a turn holds at the next call."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dsh import AgentOptions, DshError, Harness, Tool, ToolExecution, for_events, hookimpl
from dsh.loop._loop import LoopAgent
from dsh.plugin import ApprovalDecided
from dsh.session._session import Session
from dsh.testing import MemoryStore, ScriptedAdapter, text_response, tool_call_response
from dsh.values._agent import PERMISSION_MODES
from dsh.values._chunks import TextDelta
from dsh.values._content import Text, text_of
from dsh.values._events import SessionEvent, StepStart, ToolResultEvent, UserMessage
from dsh.values._rare_events import HistoryPrune, HistorySummary, PermissionModeChange
from dsh.values._request import ToolSchema
from dsh_plugins.permissions import (
    PLAN_NOTE,
    LoggedMode,
    PermissionsConfig,
    PermissionsPlugin,
    effective_mode,
)
from dsh_plugins.permissions._modes import ModeTracker, scan_mode
from tests.helpers import data_of

#: The modes a log may hold: this build's, and one a newer build might log.
MODES = (*PERMISSION_MODES, "yolo")


class Nester:
    """An observer told of each mode change before the policy is (``tryfirst``) that answers
    the one a test arms by logging another: the later change reaches the policy first."""

    def __init__(self) -> None:
        self.then: dict[str, str] = {}  # session id -> the mode to log next

    @hookimpl(tryfirst=True)
    @for_events(PermissionModeChange)
    def dsh_session_event(self, session: Session, event: SessionEvent) -> None:
        mode = self.then.pop(session.id, None)
        if mode is not None:
            session.append(PermissionModeChange(mode))


def other(session: Session, kind: str) -> None:
    """Append an event that is not a mode change, of ``kind``."""
    if kind == "chunk":  # kept packed, announced to nobody
        session.log_chunk(1, 1, TextDelta(0, "x"))
    elif kind == "step":  # kept packed
        session.log(StepStart(1, 1))
    elif kind == "message":
        session.append(UserMessage((Text("hi"),)))
    elif kind == "decided":
        session.append(ApprovalDecided("c", "t", True, "mode", "why"))
    elif kind == "summary":  # compaction: the history before it is replaced, not the log
        session.append(HistorySummary(len(session), "so far", 10, 1))
    else:
        session.append(HistoryPrune(()))


OTHERS = ("chunk", "step", "message", "decided", "summary", "prune")
agents = st.integers(0, 63)  # an agent, modulo how many there are
operations = st.lists(
    st.one_of(
        st.tuples(st.just("mode"), agents, st.sampled_from(MODES)),
        st.tuples(st.just("other"), agents, st.sampled_from(OTHERS)),
        st.tuples(st.just("nested"), agents, st.sampled_from(MODES), st.sampled_from(MODES)),
        st.tuples(st.just("look")),  # at every agent
        st.tuples(st.just("child"), agents),
        st.tuples(st.just("resume"), agents),
        st.tuples(st.just("fork"), agents, st.integers(0, 1000)),
        st.tuples(st.just("loose"), agents),  # a session made without hooks
        st.tuples(st.just("close"), agents),
    ),
    max_size=40,
)


class Play:
    """Plays operations on a harness with the policy, checking that the plugin's mode of every
    agent agrees with the reference wherever a ``look`` asks, and at the end."""

    def __init__(self, harness: Harness, plugin: PermissionsPlugin, nester: Nester) -> None:
        self.harness = harness
        self.modes: ModeTracker = plugin._modes
        self.nester = nester
        self.agents: list[LoopAgent] = []

    def new(self, session: Session | None = None, parent: LoopAgent | None = None) -> None:
        name = f"a{len(self.agents)}"
        self.agents.append(self.harness.agent_loop.create(name, None, session, parent=parent))

    async def run(self, operation: tuple[Any, ...]) -> None:
        what = operation[0]
        if what == "look":
            self.look()
            return
        agent = self.agents[operation[1] % len(self.agents)]
        session, sessions = agent.session, self.harness.sessions
        if what == "mode":
            session.append(PermissionModeChange(operation[2]))
        elif what == "other":
            other(session, operation[2])
        elif what == "nested":
            self.nester.then[session.id] = operation[3]
            session.append(PermissionModeChange(operation[2]))
            self.nester.then.pop(session.id, None)  # a session without hooks tells nobody
        elif what == "child":
            self.new(parent=agent)
        elif what == "resume":  # what recovery.reopen does with the stored events
            self.new(sessions.create(None, session.events, persisted=len(session)))
        elif what == "fork":
            at = operation[2] % len(session) if len(session) else None
            self.new(sessions.fork(session, at))
        elif what == "loose":
            self.new(Session(f"loose-{len(self.agents)}", session.events))
        else:
            await sessions.close(session)  # and used again by the operations after it

    def look(self) -> None:
        for agent in self.agents:
            assert self.modes.mode(agent.session) == scan_mode(agent.session)
            for mode in PERMISSION_MODES:
                config = PermissionsConfig(mode=mode)
                assert judged(config, agent, self.harness, self.modes.mode) == judged(
                    config, agent, self.harness, scan_mode
                )


def judged(
    config: PermissionsConfig, agent: LoopAgent, harness: Harness, logged: LoggedMode
) -> tuple[str, str | None] | str:
    """The effective mode and where it comes from, or the error that refuses it."""
    try:
        return effective_mode(config, agent, harness.family, logged)
    except DshError as exc:
        return str(exc)


async def play(operations: list[tuple[Any, ...]]) -> None:
    plugin, nester = PermissionsPlugin(), Nester()
    config = {"agent_loop": {"max_depth": 100}}
    async with Harness([nester, plugin], config, load_entrypoints=False) as harness:
        game = Play(harness, plugin, nester)
        game.new()
        for operation in operations:
            await game.run(operation)
        game.look()


@settings(max_examples=300, deadline=None)
@given(operations)
def test_the_kept_mode_is_the_scanned_mode(operations: list[tuple[Any, ...]]) -> None:
    asyncio.run(play(operations))


# -- each case once, through the tracker ------------------------------------------------------


async def test_a_session_announced_is_read_once_and_then_kept() -> None:
    plugin = PermissionsPlugin()
    async with Harness([plugin], load_entrypoints=False) as harness:
        source = harness.sessions.create("source")
        source.append(PermissionModeChange("read-only"))
        forked = harness.sessions.fork(source)  # its seed is read when it is created
        assert plugin._modes.mode(forked) == "read-only"
        forked.log_chunk(1, 1, TextDelta(0, "x"))
        forked.append(PermissionModeChange("plan"))
        assert plugin._modes.mode(forked) == scan_mode(forked) == "plan"
        assert plugin._modes.mode(source) == "read-only"


async def test_a_later_change_announced_first_stays_the_latest() -> None:
    plugin, nester = PermissionsPlugin(), Nester()
    async with Harness([nester, plugin], load_entrypoints=False) as harness:
        session = harness.sessions.create("s")
        nester.then["s"] = "read-only"
        session.append(PermissionModeChange("full"))  # "read-only" is logged while it is told
        assert data_of(session.events, PermissionModeChange) == [
            PermissionModeChange("full"),
            PermissionModeChange("read-only"),
        ]
        assert plugin._modes.mode(session) == scan_mode(session) == "read-only"


async def test_a_closed_session_used_again_is_read_from_the_log() -> None:
    plugin = PermissionsPlugin()
    async with Harness([plugin], load_entrypoints=False) as harness:
        session = harness.sessions.create("s")
        session.append(PermissionModeChange("plan"))
        await harness.sessions.close(session)
        assert session not in plugin._modes._sessions  # released
        session.append(PermissionModeChange("full"))  # announced, to a tracker that forgot it
        assert plugin._modes.mode(session) == "full"
        session.append(PermissionModeChange("read-only"))  # announced and read: the same one
        assert plugin._modes.mode(session) == scan_mode(session) == "read-only"


def test_a_session_without_hooks_is_read_as_it_grows() -> None:
    modes = ModeTracker()
    session = Session("s")
    assert modes.mode(session) is None is scan_mode(session)
    session.append(PermissionModeChange("plan"))
    other(session, "chunk")
    assert modes.mode(session) == "plan"
    assert modes.mode(session) == "plan"  # nothing new: nothing read
    other(session, "message")
    assert modes.mode(session) == "plan"  # new events, no new mode
    modes.appended(Session("unknown"), 0, "full")  # never asked about: nothing to keep
    modes.closed(session)
    assert modes.mode(session) == "plan"


# -- through a harness ------------------------------------------------------------------------


def tool(name: str, effect: Any, ran: list[str]) -> Tool:
    async def run(args: Any, execution: ToolExecution) -> str:
        ran.append(name)
        if name == "plan" and execution.agent is not None:
            execution.agent.set_permission_mode("plan")  # as /plan does while a turn runs
        return f"{name} done"

    return Tool(ToolSchema(name, name), run, effect=effect)


async def test_a_resumed_sessions_logged_mode_holds(tmp_path: Path) -> None:
    store = MemoryStore()
    ran: list[str] = []
    options = AgentOptions(model="m", workspace=str(tmp_path))
    async with Harness([store, PermissionsPlugin()], load_entrypoints=False) as harness:
        agent = harness.agent_loop.create("main", options)
        agent.set_permission_mode("read-only")
        session_id = agent.session.id
    async with Harness([store, PermissionsPlugin()], load_entrypoints=False) as again:
        again.tools.register(tool("edit", "write", ran))
        resumed = await again.agent_loop.resume(session_id, options)
        execution = ToolExecution("c1", "edit", json.dumps({}), resumed)
        denied = await again.tools.execute(execution)
    assert denied.code == "DENIED" and ran == []
    assert 'the permissions mode is "read-only"' in text_of(denied.content)


async def test_a_mode_switched_during_a_turn_holds_at_the_next_call() -> None:
    ran: list[str] = []
    adapter = ScriptedAdapter(
        [
            tool_call_response("c1", "plan", {}),
            tool_call_response("c2", "edit", {}),
            text_response("my plan"),
        ]
    )
    async with Harness([PermissionsPlugin()], load_entrypoints=False) as harness:
        harness.llm.register_adapter(["m"], adapter)
        harness.tools.register(tool("plan", "read", ran))
        harness.tools.register(tool("edit", "write", ran))
        agent = harness.agent_loop.create("main", AgentOptions(model="m"))
        agent.send("go")
        await agent.wait_idle()
    assert ran == ["plan"]
    refused = data_of(agent.session.events, ToolResultEvent)[-1]
    assert refused.code == "DENIED" and "plan mode" in text_of(refused.content)
    assert PLAN_NOTE not in (adapter.requests[0].system or "")
    assert PLAN_NOTE in (adapter.requests[1].system or "")
