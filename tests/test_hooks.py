"""The hook runtime: every call style, call order, containment and validation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pluggy
import pytest
from structlog.testing import capture_logs

from dsh import Harness, HookError, PluginLoadError, Stop, for_events, hookimpl
from dsh.hooks._caller import HOOK_STYLES, HookRuntime
from dsh.hooks._loading import Plugins
from dsh.testing import text_response
from dsh.tools._registry import ToolExecution, ToolOutcome
from dsh.values._agent import Continuation
from dsh.values._chunks import StreamChunk, TextDelta
from dsh.values._content import Text, text_of
from dsh.values._events import (
    SessionEvent,
    StepStart,
    TurnCompleted,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from dsh.values._request import LlmRequest
from tests.helpers import scripted_agent


def plugins(*objs: object) -> Plugins:
    p = Plugins()
    for index, obj in enumerate(objs):
        p.register(obj, name=f"p{index}")
    return p


def runtime(*objs: object) -> HookRuntime:
    return plugins(*objs).runtime


class Replace:
    def __init__(self, value: Any) -> None:
        self.value = value

    @hookimpl
    def dsh_agent_turn_continuation(self, decision: Continuation) -> Any:
        return self.value


class Record:
    def __init__(self, log: list[str], name: str, result: Any = None) -> None:
        self.log, self.name, self.result = log, name, result

    @hookimpl
    def dsh_agent_turn_continuation(self, decision: Continuation) -> Any:
        self.log.append(self.name)
        return self.result


async def waterfall(rt: HookRuntime, value: Any) -> Any:
    kwargs = {"agent": None, "turn": 1, "decision": value}
    return await rt.waterfall("dsh_agent_turn_continuation", "decision", kwargs)


# -- waterfall -------------------------------------------------------------------------------


async def test_waterfall_none_passes_the_value_on() -> None:
    assert await waterfall(runtime(Replace(None)), Continuation(True)) == Continuation(True)


async def test_waterfall_new_value_replaces_and_the_chain_continues() -> None:
    log: list[str] = []
    # pluggy calls the last registered first: Record then Replace(False).
    rt = runtime(Replace(Continuation(False, "x")), Record(log, "after"))
    assert await waterfall(rt, Continuation(True)) == Continuation(False, "x")
    assert log == ["after"]


async def test_waterfall_stop_ends_the_chain() -> None:
    log: list[str] = []
    rt = runtime(Record(log, "never"), Replace(Stop(Continuation(False, "stop"))))
    assert await waterfall(rt, Continuation(True)) == Continuation(False, "stop")
    assert log == []


async def test_waterfall_mixes_sync_and_async_implementations() -> None:
    class AsyncFlip:
        @hookimpl
        async def dsh_agent_turn_continuation(self, decision: Continuation) -> Continuation:
            await asyncio.sleep(0)
            return Continuation(not decision.proceed, decision.reason + "a")

    class SyncFlip:
        @hookimpl
        def dsh_agent_turn_continuation(self, decision: Continuation) -> Continuation:
            return Continuation(not decision.proceed, decision.reason + "s")

    rt = runtime(AsyncFlip(), SyncFlip())
    assert await waterfall(rt, Continuation(True, "")) == Continuation(True, "sa")


async def test_waterfall_exception_names_plugin_and_hook() -> None:
    class Broken:
        @hookimpl
        def dsh_agent_turn_continuation(self) -> None:
            raise ValueError("bad")

    with pytest.raises(
        HookError,
        match=r"plugin 'p0' failed in dsh_agent_turn_continuation: "
        r"ValueError: bad",
    ) as info:
        await waterfall(runtime(Broken()), Continuation(True))
    assert info.value.plugin == "p0" and isinstance(info.value.error, ValueError)


async def test_call_order_is_pluggys_including_tryfirst_and_trylast() -> None:
    log: list[str] = []

    class First(Record):
        @hookimpl(tryfirst=True)
        def dsh_agent_turn_continuation(self, decision: Continuation) -> Any:
            self.log.append(self.name)

    class Last(Record):
        @hookimpl(trylast=True)
        def dsh_agent_turn_continuation(self, decision: Continuation) -> Any:
            self.log.append(self.name)

    objs = [Last(log, "last"), Record(log, "a"), First(log, "first"), Record(log, "b")]
    p = plugins(*objs)
    await waterfall(p.runtime, Continuation(True))
    assert log == ["first", "b", "a", "last"]
    pluggy_order = [
        p.pm.get_name(i.plugin)
        for i in reversed(p.pm.hook.dsh_agent_turn_continuation.get_hookimpls())
    ]
    assert pluggy_order == ["p2", "p3", "p1", "p0"]


async def test_impls_take_any_subset_of_arguments() -> None:
    seen: list[Any] = []

    class Subset:
        @hookimpl
        def dsh_agent_turn_continuation(self, turn: int) -> None:
            seen.append(turn)

    await waterfall(runtime(Subset()), Continuation(True))
    assert seen == [1]


# -- middleware ------------------------------------------------------------------------------


def execution(name: str = "t") -> ToolExecution:
    return ToolExecution("c1", name, "{}")


async def terminal(execution: ToolExecution) -> ToolOutcome:
    return ToolOutcome.error("RAN", execution.name)


async def middleware(rt: HookRuntime, value: ToolExecution) -> ToolOutcome:
    result: ToolOutcome = await rt.middleware("dsh_tools_execute", "execution", value, terminal)
    return result


async def test_middleware_without_implementations_runs_the_terminal() -> None:
    assert (await middleware(runtime(), execution())).code == "RAN"


async def test_middleware_can_veto() -> None:
    class Deny:
        @hookimpl
        def dsh_tools_execute(self, execution: ToolExecution, call_next: Any) -> ToolOutcome:
            return ToolOutcome.error("DENIED", "no")

    assert (await middleware(runtime(Deny()), execution())).code == "DENIED"


async def test_middleware_can_wrap_and_change_the_input() -> None:
    log: list[str] = []

    class Rename:
        @hookimpl
        async def dsh_tools_execute(self, execution: ToolExecution, call_next: Any) -> Any:
            log.append("before")
            outcome = await call_next(ToolExecution("c1", "renamed", "{}"))
            log.append("after")
            return ToolOutcome(outcome.content, True, "WRAPPED")

    outcome = await middleware(runtime(Rename()), execution())
    assert outcome.code == "WRAPPED" and text_of(outcome.content) == "Error: renamed"
    assert log == ["before", "after"]


async def test_middleware_errors_from_downstream_are_not_blamed_on_the_caller() -> None:
    class Pass:
        @hookimpl
        async def dsh_tools_execute(self, execution: ToolExecution, call_next: Any) -> Any:
            return await call_next(execution)

    class Broken:
        @hookimpl
        def dsh_tools_execute(self, execution: ToolExecution, call_next: Any) -> Any:
            raise KeyError("inner")

    # Pass is called first (registered last) and Broken raises downstream of it.
    with pytest.raises(HookError) as info:
        await middleware(runtime(Broken(), Pass()), execution())
    assert info.value.plugin == "p0"

    async def failing(execution: ToolExecution) -> ToolOutcome:
        raise OSError("terminal")

    with pytest.raises(OSError, match="terminal"):
        await runtime(Pass()).middleware("dsh_tools_execute", "execution", execution(), failing)


async def test_llm_stream_middleware_may_be_an_async_generator() -> None:
    class Upper:
        @hookimpl
        async def dsh_llm_stream(self, request: LlmRequest, call_next: Any) -> Any:
            async for chunk in await call_next(request):
                yield TextDelta(chunk.index, chunk.text.upper())

    async def source(request: LlmRequest) -> AsyncIterator[StreamChunk]:
        yield TextDelta(0, "hi")

    rt = runtime(Upper())
    stream = await rt.middleware("dsh_llm_stream", "request", LlmRequest("m", ()), source)
    assert [c async for c in stream] == [TextDelta(0, "HI")]


# -- notify, first, parallel -----------------------------------------------------------------


async def test_notify_contains_failures_and_calls_everyone() -> None:
    seen: list[str] = []

    class Broken:
        @hookimpl
        async def dsh_agent_status(self, status: str) -> None:
            raise RuntimeError("observer bug")

    class Watch:
        @hookimpl
        def dsh_agent_status(self, status: str) -> None:
            seen.append(status)

    with capture_logs() as logs:
        await runtime(Watch(), Broken()).notify(
            "dsh_agent_status", {"agent": None, "status": "idle"}
        )
    assert seen == ["idle"]
    assert logs[0]["hook"] == "dsh_agent_status" and logs[0]["plugin"] == "p1"


def test_notify_sync_contains_failures() -> None:
    seen: list[int] = []

    class Broken:
        @hookimpl
        def dsh_session_event(self, event: Any) -> None:
            raise RuntimeError("observer bug")

    class Watch:
        @hookimpl
        def dsh_session_event(self, event: Any) -> None:
            seen.append(event)

    with capture_logs() as logs:
        runtime(Watch(), Broken()).notify_sync("dsh_session_event", {"session": None, "event": 7})
    assert seen == [7]
    assert logs[0]["log_level"] == "error"


async def test_first_returns_the_first_non_none_result() -> None:
    class NoOpinion:
        @hookimpl
        def dsh_session_load(self, session_id: str) -> None:
            return None

    class Has:
        @hookimpl
        async def dsh_session_load(self, session_id: str) -> list[Any]:
            return [session_id]

    assert await runtime(Has(), NoOpinion()).first("dsh_session_load", {"session_id": "s"}) == ["s"]
    assert await runtime(NoOpinion()).first("dsh_session_load", {"session_id": "s"}) is None

    class Broken:
        @hookimpl
        def dsh_session_load(self) -> None:
            raise ValueError("x")

    with pytest.raises(HookError, match="dsh_session_load"):
        await runtime(Broken()).first("dsh_session_load", {"session_id": "s"})


async def test_parallel_runs_concurrently_and_raises_failures_together() -> None:
    both_running = asyncio.Event()
    running = 0

    class Slow:
        @hookimpl
        async def dsh_session_flush(self) -> None:
            nonlocal running
            running += 1
            if running == 2:
                both_running.set()
            await asyncio.wait_for(both_running.wait(), 10)  # in turn, it would wait forever

    await runtime(Slow(), Slow()).parallel("dsh_session_flush", {"session": None})

    class Broken:
        def __init__(self, message: str) -> None:
            self.message = message

        @hookimpl
        async def dsh_session_flush(self) -> None:
            raise OSError(self.message)

    settled: list[str] = []

    class Fine:
        @hookimpl
        async def dsh_session_flush(self) -> None:
            await asyncio.sleep(0.01)
            settled.append("fine")

    rt = runtime(Broken("a"), Fine(), Broken("b"))
    with pytest.raises(ExceptionGroup) as info:
        await rt.parallel("dsh_session_flush", {"session": None})
    assert sorted(str(cast(HookError, e).error) for e in info.value.exceptions) == ["a", "b"]
    assert settled == ["fine"]
    await runtime().parallel("dsh_session_flush", {"session": None})


async def test_parallel_runs_sync_implementations_inline_and_contains_their_failures() -> None:
    ran: list[str] = []

    class Sync:
        @hookimpl
        def dsh_session_checkpoint(self) -> None:
            ran.append("sync")

    class SyncBroken:
        @hookimpl
        def dsh_session_checkpoint(self) -> None:
            raise OSError("disk full")

    class Async:
        @hookimpl
        async def dsh_session_checkpoint(self) -> None:
            ran.append("async")

    await runtime(Sync()).parallel("dsh_session_checkpoint", {"session": None})
    assert ran == ["sync"]
    with pytest.raises(ExceptionGroup) as info:
        await runtime(Async(), SyncBroken(), Sync()).parallel(
            "dsh_session_checkpoint", {"session": None}
        )
    assert [str(cast(HookError, e).error) for e in info.value.exceptions] == ["disk full"]
    assert ran == ["sync", "sync", "async"]  # everyone ran, the failure did not stop them


def test_register_style_hands_each_plugin_a_bound_register() -> None:
    got: list[tuple[str, str]] = []

    class A:
        @hookimpl
        def dsh_register_tools(self, register: Any) -> None:
            register("tool-a")

    rt = runtime(A())
    rt.call_register("dsh_register_tools", lambda owner: lambda x: got.append((owner, x)), None)  # type: ignore[arg-type]
    assert got == [("p0", "tool-a")]

    class Broken:
        @hookimpl
        def dsh_register_tools(self) -> None:
            raise ValueError("bad")

    with pytest.raises(HookError, match="dsh_register_tools"):
        runtime(Broken()).call_register("dsh_register_tools", lambda o: print, None)  # type: ignore[arg-type]


# -- validation ------------------------------------------------------------------------------


def test_pluggy_wrappers_are_rejected() -> None:
    class Wrapper:
        @hookimpl(wrapper=True)
        def dsh_agent_request(self) -> Any:
            return (yield)

    with pytest.raises(
        PluginLoadError, match="pluggy wrapper, but dsh_agent_request is a waterfall"
    ):
        plugins(Wrapper())

    class RegisterWrapper:
        @hookimpl(wrapper=True)
        def dsh_register_tools(self) -> Any:
            return (yield)

    with pytest.raises(PluginLoadError, match="register hook"):
        plugins(RegisterWrapper())

    class OldWrapper:
        @hookimpl(hookwrapper=True)
        def dsh_tools_execute(self) -> Any:
            yield

    p = Plugins()
    with pytest.raises(PluginLoadError, match="middleware"):
        p.register(OldWrapper(), name="old")
    assert p.pm.get_plugin("old") is None


def test_async_impls_are_rejected_on_sync_styles() -> None:
    class AsyncObserver:
        @hookimpl
        async def dsh_session_event(self) -> None:
            pass

    with pytest.raises(PluginLoadError, match="'async def', but dsh_session_event is notify-sync"):
        plugins(AsyncObserver())


def test_misspelled_hook_fails_loudly_even_without_the_marker() -> None:
    class Typo:
        def dsh_agnet_request(self) -> None:
            pass

    with pytest.raises(PluginLoadError, match="'dsh_agnet_request', which is not a dsh hook"):
        plugins(Typo())


def test_unmarked_dsh_functions_are_implementations() -> None:
    class Unmarked:
        def dsh_agent_status(self) -> None:
            pass

        not_a_hook = 1

    p = plugins(Unmarked())
    assert [i.plugin for i in p.runtime.impls("dsh_agent_status")] == ["p0"]


def test_registering_the_same_name_twice_fails() -> None:
    p = plugins(Replace(None))
    with pytest.raises(PluginLoadError, match="cannot be registered"):
        p.register(Replace(None), name="p0")


def test_every_hook_has_a_style_and_a_docstring() -> None:
    from dsh.hooks import _specs as hookspecs

    for name, style in HOOK_STYLES.items():
        doc = getattr(hookspecs, name).__doc__
        assert doc and doc.strip(), name
        assert style in {
            "register",
            "notify",
            "notify-sync",
            "waterfall",
            "middleware",
            "first",
            "parallel",
        }


async def test_two_harnesses_run_side_by_side_with_different_plugins() -> None:
    class Mark:
        def __init__(self, tag: str) -> None:
            self.tag = tag

        @hookimpl
        def dsh_system_prompt_assemble(self, assembly: Any) -> Any:
            return None

    async with (
        Harness(load_entrypoints=False, plugins=[Mark("a")]) as one,
        Harness(load_entrypoints=False) as two,
    ):
        assert len(one.plugins.runtime.impls("dsh_system_prompt_assemble")) == 1
        assert two.plugins.runtime.impls("dsh_system_prompt_assemble") == []
        assert one.plugins.pm is not two.plugins.pm
        assert isinstance(one.plugins.pm, pluggy.PluginManager)


# -- notifiers: the notify-sync hooks called per streamed chunk ---------------------------------


def test_a_hook_without_implementations_has_a_notifier_that_does_nothing() -> None:
    notify = runtime().notifier("dsh_agent_stream_chunk")
    assert notify is runtime().notifier("dsh_session_event")  # one shared do-nothing call
    assert notify(None, 1, 1, TextDelta(0, "x")) is None


def test_a_notifier_passes_each_implementation_the_arguments_it_names() -> None:
    seen: list[tuple[Any, ...]] = []

    class Everything:  # the spec's arguments in the spec's order: called as it is
        @hookimpl
        def dsh_agent_stream_chunk(self, agent: Any, turn: int, step: int, chunk: Any) -> None:
            seen.append(("all", agent, turn, step, chunk))

    class OnlyChunk:
        @hookimpl
        def dsh_agent_stream_chunk(self, chunk: Any) -> None:
            seen.append(("chunk", chunk))

    class Reordered:
        @hookimpl
        def dsh_agent_stream_chunk(self, chunk: Any, agent: Any) -> None:
            seen.append(("reordered", chunk, agent))

    class Nothing:
        @hookimpl
        def dsh_agent_stream_chunk(self) -> None:
            seen.append(("nothing",))

    hooks = runtime(Everything(), OnlyChunk(), Reordered(), Nothing())
    hooks.notifier("dsh_agent_stream_chunk")("agent", 2, 3, "delta")
    # pluggy's call order (last registered first), as notify_sync calls them
    assert seen == [
        ("nothing",),
        ("reordered", "delta", "agent"),
        ("chunk", "delta"),
        ("all", "agent", 2, 3, "delta"),
    ]
    seen.clear()
    hooks.notify_sync(
        "dsh_agent_stream_chunk", {"agent": "agent", "turn": 2, "step": 3, "chunk": "delta"}
    )
    assert [s[0] for s in seen] == ["nothing", "reordered", "chunk", "all"]


def test_a_notifier_contains_failures_like_notify_sync() -> None:
    seen: list[int] = []

    class Broken:
        @hookimpl
        def dsh_session_event(self, event: Any) -> None:
            raise RuntimeError("observer bug")

    class Watch:
        @hookimpl
        def dsh_session_event(self, session: Any, event: Any) -> None:
            seen.append(event)

    with capture_logs() as logs:
        runtime(Watch(), Broken()).notifier("dsh_session_event")(None, 7)
    assert seen == [7]
    assert logs[0]["log_level"] == "error"
    assert logs[0]["hook"] == "dsh_session_event" and logs[0]["plugin"] == "p1"


def test_a_notifier_is_kept_until_the_implementations_change() -> None:
    seen: list[str] = []

    class Watch:
        def __init__(self, name: str) -> None:
            self.name = name

        @hookimpl
        def dsh_session_event(self, event: Any) -> None:
            seen.append(self.name)

    p = plugins(Watch("a"))
    first = p.runtime.notifier("dsh_session_event")
    assert p.runtime.notifier("dsh_session_event") is first
    p.register(Watch("b"), name="b")
    p.runtime.notifier("dsh_session_event")(None, 1)
    assert seen == ["b", "a"]
    p.pm.unregister(name="b")
    p.runtime.invalidate()  # as Plugins.register does
    seen.clear()
    p.runtime.notifier("dsh_session_event")(None, 1)
    assert seen == ["a"]


# -- plugins that take no part in sessions ---------------------------------------------------


class SessionWatcher:
    """Counts the session hooks it is called for; on once the harness has started, when
    ``on_at_start`` (as a store is once its configuration gave it a place)."""

    def __init__(self, on_at_start: bool) -> None:
        self.on_at_start = on_at_start
        self.session_hooks_active = False
        self.calls: list[str] = []

    @hookimpl
    def dsh_harness_start(self, harness: Harness) -> None:
        self.calls.append("start")
        self.session_hooks_active = self.on_at_start

    @hookimpl
    def dsh_session_created(self, session: object) -> None:
        self.calls.append("created")

    @hookimpl
    def dsh_session_event(self, session: object, event: object) -> None:
        self.calls.append("event")

    @hookimpl
    def dsh_session_checkpoint(self, session: object) -> None:
        self.calls.append("checkpoint")


async def test_a_plugin_off_for_sessions_is_left_out_of_the_session_hooks_only() -> None:
    off, on = SessionWatcher(on_at_start=False), SessionWatcher(on_at_start=True)
    async with Harness(plugins=[off, on], load_entrypoints=False) as h:
        agent, _ = scripted_agent(h, [text_response("hello")])
        agent.send("hi")
        await agent.wait_idle()
    assert off.calls == ["start"]  # the lifecycle hooks still reach it
    assert on.calls[:3] == ["start", "created", "event"]
    assert {"event", "checkpoint"} <= set(on.calls)


async def test_stores_configured_off_take_no_part_in_sessions(tmp_path: Path) -> None:
    from dsh_plugins.persistence_jsonl import JsonlStore
    from dsh_plugins.persistence_sqlite import SqliteStore

    jsonl, sqlite = JsonlStore(directory=tmp_path), SqliteStore()  # SQLite is off by default
    async with Harness(plugins=[jsonl, sqlite], load_entrypoints=False) as h:
        takers = [impl.plugin for impl in h.plugins.runtime.impls("dsh_session_checkpoint")]
        assert h.plugins.pm.get_name(jsonl) in takers
        assert h.plugins.pm.get_name(sqlite) not in takers
        assert sqlite.session_hooks_active is False


# -- implementations that want some events only ----------------------------------------------


class Seen:
    """Logs the events its ``dsh_session_event`` is called for; fails on a turn's end."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def seen(self, event: SessionEvent) -> None:
        self.log.append(f"{type(self).__name__}:{type(event.data).__name__}")
        if isinstance(event.data, TurnEnd):
            raise RuntimeError("a failing observer")


class All(Seen):
    @hookimpl
    def dsh_session_event(self, event: SessionEvent) -> None:
        self.seen(event)


class Turns(Seen):
    @hookimpl
    @for_events(TurnStart, TurnEnd)
    def dsh_session_event(self, event: SessionEvent) -> None:
        self.seen(event)


class Users(Seen):
    @for_events(UserMessage)
    @hookimpl
    def dsh_session_event(self, session: object, event: SessionEvent) -> None:
        self.seen(event)


class LoudStart(TurnStart):
    """A subclass of a wanted class is wanted too."""


def test_for_events_filters_the_implementations_by_the_class_of_the_data() -> None:
    log: list[str] = []
    rt = runtime(All(log), Turns(log), Users(log))
    notify = rt.notifier("dsh_session_event")
    events: list[Any] = [
        UserMessage((Text("hi"),)),
        TurnStart(1),
        LoudStart(2),
        StepStart(1, 1),
        StepStart(1, 2),
        TurnEnd(1, TurnCompleted()),
    ]
    with capture_logs() as logs:
        for seq, data in enumerate(events):
            notify(None, SessionEvent("x", seq, 0.0, data))
    order = [line for line in log if not line.startswith("All:")]
    assert order == [
        "Users:UserMessage",
        "Turns:TurnStart",
        "Turns:LoudStart",
        "Turns:TurnEnd",
    ]
    assert [line for line in log if line.startswith("All:")] == [
        f"All:{type(data).__name__}" for data in events
    ]
    failed = sorted(entry["plugin"] for entry in logs if entry["event"] == "hook failed")
    assert failed == ["p0", "p1"]  # contained and logged, as without the filter


def test_observed_tells_whether_an_implementation_takes_a_class_of_event_data() -> None:
    p = plugins(Turns([]))
    observed = p.runtime.observed
    assert observed("dsh_session_event", TurnStart) and observed("dsh_session_event", LoudStart)
    assert not observed("dsh_session_event", StepStart)
    assert not plugins().runtime.observed("dsh_session_event", TurnStart)  # nobody implements it
    p.register(Users([]), name="users")  # registering drops what was worked out
    assert observed("dsh_session_event", UserMessage) and not observed(
        "dsh_session_event", StepStart
    )
    p.register(All([]), name="all")
    assert observed("dsh_session_event", StepStart)


def test_for_events_needs_a_class() -> None:
    with pytest.raises(TypeError, match="at least one"):
        for_events()


def test_for_events_on_a_hook_without_an_event_is_refused_at_load() -> None:
    class Misplaced:
        @hookimpl
        @for_events(TurnEnd)
        def dsh_agent_stream_chunk(self, chunk: object) -> None: ...

    with pytest.raises(PluginLoadError, match="carries no event"):
        plugins(Misplaced())
