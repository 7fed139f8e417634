"""Session-store conformance kit: the contract every persistence plugin keeps, as tests.

Subclass :class:`SessionStoreContract` in a test module, name the subclass ``Test...`` and
implement :meth:`~SessionStoreContract.make_store`; pytest then runs every check on your store::

    from dsh.testing.stores import SessionStoreContract

    class TestMyStore(SessionStoreContract):
        def make_store(self, directory):
            return MyStore(directory / "sessions")

``make_store(directory)`` returns a store plugin configured on ``directory``; it is called
again on the same directory to "restart" (a new process reading what the old one stored). A
store whose writes can be torn by a crash (a file) also implements :meth:`tear`.

The checks: every event type (core, plugin-registered, and unknown ones kept as raw data)
round-trips; random event logs round-trip through store and load (hypothesis); a torn tail is
ignored and cut on the next append; concurrent sessions and concurrent stores on one location
stay apart; a session has one writer — a second store (a second process) cannot resume it or
replace it while the first holds it, and can once the first closed it, and two stores resuming,
appending to, checkpointing and closing one session in any order (hypothesis) never both hold
it and never lose what the holder committed; a writer that loaded a
session another one has written since gets :class:`~dsh.session._session.SessionConflict` and stored
events are never deleted; a fork records its parent and stores its seed; a resumed session
appends; a crash loses nothing checkpointed and ``agent_loop.resume`` closes the open turn;
listings are newest first, filtered and limited. The async checks need pytest-asyncio.
:func:`event_data` and :func:`event_logs` are the hypothesis strategies the checks draw from.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Union

import attrs
import pytest
from attrs import frozen
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dsh import AgentOptions, Harness, Tool, hookimpl
from dsh.session._codec import EventCodec
from dsh.session._session import Session, SessionBusy, SessionConflict
from dsh.testing import ScriptedAdapter, strategies, text_response, tool_call_response
from dsh.values._agent import Agent
from dsh.values._chunks import FinishReason, LlmFailure, StreamChunk, TokenUsage
from dsh.values._content import Block, MessageSource, Text
from dsh.values._events import (
    RawEventData,
    SessionEvent,
    TurnCompleted,
    TurnEnd,
    TurnInterrupted,
    UserMessage,
)
from dsh.values._rare_events import SeedEnd
from dsh.values._request import ToolSchema
from dsh.values._value import Value

__all__ = [
    "KIT_EVENT",
    "UNKNOWN_EVENT",
    "KitEvent",
    "KitEvents",
    "SessionStoreContract",
    "crash",
    "event_data",
    "event_logs",
]

KIT_EVENT = "kit/event"
#: An event type nobody registers: stores must keep its raw data.
UNKNOWN_EVENT = "kit/unregistered"


@frozen(repr=False, eq=False)
class KitEvent(Value):
    """Data of ``kit/event``, the plugin-registered event type of the checks."""

    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    mood: Literal["calm", "busy"] = "calm"


class KitEvents:
    """Registers ``kit/event``, as a third-party plugin registers its own event types."""

    @hookimpl
    def dsh_register_event_types(self, register: Any) -> None:
        register(KIT_EVENT, KitEvent)


# -- strategies ------------------------------------------------------------------------------

_texts = st.text(max_size=12)
_json_values = st.none() | st.booleans() | st.integers() | _texts
_KNOWN: dict[Any, st.SearchStrategy[Any]] = {
    Block: strategies.blocks,
    StreamChunk: strategies.stream_chunks,
    FinishReason: strategies.finish_reasons,
    MessageSource: strategies.message_sources,
    TokenUsage: strategies.token_usages,
    LlmFailure: strategies.failures,
}


def _values_of(tp: Any) -> st.SearchStrategy[Any]:
    """Values of the annotated type ``tp`` as the converter handles them."""
    known = _KNOWN.get(tp)
    if known is not None:
        return known
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return st.one_of(*(_values_of(arg) for arg in args))
    if origin is tuple:
        return st.lists(_values_of(args[0]), max_size=3).map(tuple)
    if origin is typing.Literal:
        return st.sampled_from(args)
    if attrs.has(tp):
        return event_data(tp)
    scalars: dict[Any, st.SearchStrategy[Any]] = {
        type(None): st.none(),
        bool: st.booleans(),
        int: st.integers(-(2**40), 2**40),
        float: st.floats(allow_nan=False, allow_infinity=False),
        str: _texts,
    }
    return scalars.get(tp, _json_values)


def event_data(data_cls: type[Any]) -> st.SearchStrategy[Any]:
    """Instances of the attrs class ``data_cls``, every field drawn from its annotation."""
    hints = typing.get_type_hints(data_cls)
    fields = {f.name: _values_of(hints[f.name]) for f in attrs.fields(data_cls) if f.init}
    return st.builds(data_cls, **fields)


def _raw_data() -> st.SearchStrategy[RawEventData]:
    fields = st.dictionaries(st.text(min_size=1, max_size=8), _json_values, max_size=3)
    return fields.map(RawEventData)


def event_logs(
    event_types: Mapping[str, type[Any]], min_size: int = 0, max_size: int = 12
) -> st.SearchStrategy[list[tuple[str, Any]]]:
    """``(type, data)`` pairs of the registered ``event_types``, plus unknown ones with raw
    data (a :class:`~dsh.values._events.RawEventData`)."""
    registered = [
        st.tuples(st.just(name), event_data(cls)) for name, cls in sorted(event_types.items())
    ]
    unknown = st.tuples(st.just(UNKNOWN_EVENT), _raw_data())
    return st.lists(st.one_of(*registered, unknown), min_size=min_size, max_size=max_size)


_times = st.floats(0, 4e9, allow_nan=False)
_ACTIONS = ("resume", "append", "checkpoint", "close")
#: Every move of the two-writer check once: resumes (one refused, one of a held session), appends
#: by a holder and by a non-holder, a checkpoint, closes, and a resume after the holder closed.
_EVERY_MOVE = [
    (0, "resume"), (1, "resume"), (0, "append"), (1, "append"), (0, "checkpoint"),
    (0, "resume"), (0, "append"), (0, "close"), (1, "resume"), (1, "close"),
]  # fmt: skip
# Every subclass runs the same property tests on its own store: "different executors" is the
# point of the kit, and a failing example replayed from the database is valid for any store.
_property = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
)


def _seeded(pairs: Sequence[tuple[str, Any]], times: Sequence[float]) -> list[SessionEvent]:
    return [
        SessionEvent(t, seq, time, d)
        for seq, ((t, d), time) in enumerate(zip(pairs, times, strict=True))
    ]


def _every_type() -> st.SearchStrategy[list[tuple[str, Any]]]:
    """One event of every core type, of ``kit/event`` and of an unknown type."""
    codec = EventCodec()
    codec.register(KIT_EVENT, KitEvent)
    draws = [st.tuples(st.just(n), event_data(cls)) for n, cls in sorted(codec.types.items())]
    return st.tuples(*draws, st.tuples(st.just(UNKNOWN_EVENT), _raw_data())).map(list)


# -- crashing --------------------------------------------------------------------------------


async def crash(harness: Harness) -> None:
    """Stop ``harness`` as a killed process would: its agents' tasks are cancelled and nothing
    is flushed; the stores are told ``dsh_harness_stop`` only to release files and connections
    (a store must not write what was never checkpointed then)."""
    names = {f"dsh:{agent.id}" for agent in harness.agents.list()}
    tasks = [task for task in asyncio.all_tasks() if task.get_name() in names]
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    harness.started = False
    await harness.hooks.harness_stop(harness)


# -- the contract ----------------------------------------------------------------------------


class SessionStoreContract(abc.ABC):
    """The checks. Subclass as ``Test<YourStore>`` and implement :meth:`make_store`."""

    @abc.abstractmethod
    def make_store(self, directory: Path) -> object:
        """A store plugin that keeps its sessions under ``directory``."""

    def tear(self, directory: Path, session_id: str) -> bool:
        """Leave the stored tail of ``session_id`` as a crash in the middle of a write would;
        return ``False`` (the default) if this store's writes cannot be torn."""
        return False

    # -- helpers -----------------------------------------------------------------------------
    async def start(self, directory: Path, *plugins: object) -> Harness:
        """A started harness on a fresh store instance over ``directory``."""
        harness = Harness(
            load_entrypoints=False, plugins=[self.make_store(directory), KitEvents(), *plugins]
        )
        await harness.start()
        return harness

    async def stored(self, directory: Path, session_id: str) -> list[SessionEvent] | None:
        """What a restarted process loads for ``session_id``."""
        harness = await self.start(directory)
        try:
            return await harness.sessions.load(session_id)
        finally:
            await harness.close()

    async def store_log(
        self, directory: Path, session_id: str, seed: Sequence[SessionEvent], rest: Sequence[Any]
    ) -> list[SessionEvent]:
        """Store a new session seeded with ``seed`` and ``rest`` appended; its events."""
        harness = await self.start(directory)
        session = harness.sessions.create(session_id, seed)
        for type_, data in rest:
            _append(session, type_, data)
        await harness.close()
        return list(session.events)

    # -- round trips ---------------------------------------------------------------------------
    @settings(_property, max_examples=10)
    @given(pairs=_every_type(), data=st.data())
    def test_every_event_type_round_trips(
        self,
        tmp_path_factory: pytest.TempPathFactory,
        pairs: list[tuple[str, Any]],
        data: st.DataObject,
    ) -> None:
        times = data.draw(st.lists(_times, min_size=len(pairs), max_size=len(pairs)))
        directory = tmp_path_factory.mktemp("every-type")

        async def check() -> None:
            events = await self.store_log(directory, "every-type", _seeded(pairs, times), pairs)
            assert await self.stored(directory, "every-type") == events

        asyncio.run(check())

    @settings(_property, max_examples=25)
    @given(data=st.data())
    def test_random_logs_round_trip(
        self, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
    ) -> None:
        codec = EventCodec()
        codec.register(KIT_EVENT, KitEvent)
        # A session with no events at all need not be stored: the first part is never empty.
        seed = data.draw(event_logs(codec.types), label="seed")
        rest = data.draw(event_logs(codec.types, min_size=1), label="appended")
        resumed = data.draw(event_logs(codec.types), label="appended after resume")
        times = data.draw(st.lists(_times, min_size=len(seed), max_size=len(seed)))
        directory = tmp_path_factory.mktemp("random")

        async def check() -> None:
            events = await self.store_log(directory, "random", _seeded(seed, times), rest)
            assert await self.stored(directory, "random") == events
            harness = await self.start(directory)
            session = harness.sessions.create("random", events, persisted=len(events))
            for type_, item in resumed:
                _append(session, type_, item)
            await harness.close()
            assert await self.stored(directory, "random") == list(session.events)

        asyncio.run(check())

    @pytest.mark.asyncio
    async def test_unknown_sessions_load_as_none(self, tmp_path: Path) -> None:
        assert await self.stored(tmp_path, "never-stored") is None

    @pytest.mark.asyncio
    async def test_a_new_session_replaces_a_stored_one_with_its_id(self, tmp_path: Path) -> None:
        first = [(UserMessage.type, _user("old"))] * 3
        await self.store_log(tmp_path, "reused", [], first)
        events = await self.store_log(tmp_path, "reused", [], [(UserMessage.type, _user("new"))])
        assert await self.stored(tmp_path, "reused") == events

    # -- torn tails ------------------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_a_torn_tail_is_ignored_and_cut_before_the_next_append(
        self, tmp_path: Path
    ) -> None:
        events = await self.store_log(tmp_path, "torn", [], [(UserMessage.type, _user("a"))] * 2)
        if not self.tear(tmp_path, "torn"):
            pytest.skip("this store's writes cannot be torn")
        assert await self.stored(tmp_path, "torn") == events
        harness = await self.start(tmp_path)
        session = harness.sessions.create("torn", events, persisted=len(events))
        session.append(_user("after the crash"))
        await harness.close()
        assert await self.stored(tmp_path, "torn") == list(session.events)

    # -- concurrency -----------------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_concurrent_sessions_and_stores_stay_apart(self, tmp_path: Path) -> None:
        one, two = await self.start(tmp_path), await self.start(tmp_path)
        agents = [
            _agent(harness, name, [text_response(f"{name} {i}") for i in range(3)])
            for harness, names in ((one, ("a1", "b1")), (two, ("a2", "b2")))
            for name in names
        ]
        for round_ in range(3):
            for agent in agents:
                agent.send(f"round {round_}")
            await asyncio.gather(*(agent.wait_idle() for agent in agents))
        live = {agent.session.id: list(agent.session.events) for agent in agents}
        await one.close()
        await two.close()
        for session_id, events in live.items():
            assert await self.stored(tmp_path, session_id) == events

    # -- one writer per session -----------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_a_session_has_one_writer_until_it_is_closed(self, tmp_path: Path) -> None:
        one, two = await self.start(tmp_path), await self.start(tmp_path)
        agent = _agent(one, "a", [text_response("one"), text_response("two")])
        agent.send("first")
        await agent.wait_idle()
        two.llm.register_adapter(["m"], ScriptedAdapter([text_response("three")]))
        with pytest.raises(SessionBusy, match=f"process {os.getpid()} ") as busy:
            await two.agent_loop.resume("a-session", AgentOptions(model="m"))
        assert busy.value.holder is not None and busy.value.holder.pid == os.getpid()
        # A new session with the live one's id cannot replace it either.
        fresh = two.sessions.create("a-session")
        fresh.append(_user("from the second writer"))
        with pytest.raises(SessionBusy):
            await two.sessions.claim(fresh)
        assert two.sessions.get("a-session") is None  # refused sessions are forgotten
        agent.send("second")  # the holder goes on, unharmed
        await agent.wait_idle()
        events = list(agent.session.events)
        await agent.dispose()  # closing the session releases it
        resumed = await two.agent_loop.resume("a-session", AgentOptions(model="m"))
        resumed.send("third")
        await resumed.wait_idle()
        after = list(resumed.session.events)
        await one.close()
        await two.close()
        assert after[: len(events)] == events
        assert after[len(events)].type == SeedEnd.type
        assert await self.stored(tmp_path, "a-session") == after

    @pytest.mark.asyncio
    async def test_a_writer_never_overwrites_what_another_stored_since_it_loaded(
        self, tmp_path: Path
    ) -> None:
        await self.store_log(tmp_path, "shared", [], [(UserMessage.type, _user("a"))])
        late = await self.start(tmp_path)
        loaded = await late.sessions.load("shared")
        assert loaded is not None
        other = await self.start(tmp_path)
        first = other.sessions.create("shared", loaded, persisted=len(loaded))
        first.append(_user("b"))
        await other.close()
        second = late.sessions.create("shared", loaded, persisted=len(loaded))
        with pytest.raises(SessionConflict) as conflict:
            await late.sessions.claim(second)
        assert (conflict.value.stored, conflict.value.expected) == (2, 1)
        again = late.sessions.create("shared", loaded, persisted=len(loaded))
        again.append(_user("c"))
        with pytest.raises(ExceptionGroup) as failed:
            await again.checkpoint()  # the first write claims too, and fails the same way
        assert isinstance(getattr(failed.value.exceptions[0], "error", None), SessionConflict)
        await late.sessions.close(again)
        await late.close()
        assert await self.stored(tmp_path, "shared") == list(first.events)

    @settings(_property, max_examples=25)
    @example(steps=_EVERY_MOVE)
    @given(steps=st.lists(st.tuples(st.sampled_from((0, 1)), st.sampled_from(_ACTIONS))))
    def test_two_writers_never_interleave(
        self, tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, str]]
    ) -> None:
        """Two harnesses resume, append to, checkpoint and close one session in any order: at
        most one holds it at a time, and the store always holds exactly what the holder
        committed last (nothing lost, nothing of the other)."""
        directory = tmp_path_factory.mktemp("writers")

        async def check() -> None:
            committed = await self.store_log(directory, "w", [], [(UserMessage.type, _user("0"))])
            harnesses = [await self.start(directory), await self.start(directory)]
            live: list[Session | None] = [None, None]
            for who, action in steps:
                session = live[who]
                if action == "resume" and session is None:
                    live[who] = await self._resume_unless_held(harnesses[who], live[1 - who])
                elif action == "append" and session is not None:
                    session.append(_user(f"by {who}"))
                elif action != "resume" and session is not None:
                    if action == "checkpoint":
                        await session.checkpoint()
                    else:
                        await harnesses[who].sessions.close(session)
                        live[who] = None
                    committed = list(session.events)
                assert await self.stored(directory, "w") == committed
            for harness in harnesses:
                await harness.close()

        asyncio.run(check())

    async def _resume_unless_held(self, harness: Harness, other: Session | None) -> Session | None:
        loaded = await harness.sessions.load("w")
        assert loaded is not None
        session = harness.sessions.create("w", loaded, persisted=len(loaded))
        try:
            await harness.sessions.claim(session)
        except SessionBusy:
            assert other is not None, "refused although nobody held the session"
            return None
        assert other is None, "two writers hold one session"
        return session

    # -- fork, resume ----------------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_a_fork_records_its_parent_and_stores_its_seed(self, tmp_path: Path) -> None:
        harness = await self.start(tmp_path)
        agent = _agent(harness, "parent", [text_response("one"), text_response("two")])
        for message in ("first", "second"):
            agent.send(message)
            await agent.wait_idle()
        first_turn_end = next(e.seq for e in agent.session.events if isinstance(e.data, TurnEnd))
        child = harness.sessions.fork(agent.session, at_seq=first_turn_end, session_id="child")
        child.append(_user("the child goes on"))
        await harness.close()
        assert await self.stored(tmp_path, "child") == list(child.events)
        assert len(child.events) == first_turn_end + 2
        [summary] = await self._listed(tmp_path, "child")
        assert summary.parent == "parent-session"
        assert summary.events == len(child.events)

    @pytest.mark.asyncio
    async def test_a_resumed_session_appends_to_its_stored_log(self, tmp_path: Path) -> None:
        harness = await self.start(tmp_path)
        agent = _agent(harness, "a", [text_response("one")])
        agent.send("first")
        await agent.wait_idle()
        before = list(agent.session.events)
        await harness.close()
        harness = await self.start(tmp_path)
        harness.llm.register_adapter(["m"], ScriptedAdapter([text_response("two")]))
        agent = await harness.agent_loop.resume("a-session", AgentOptions(model="m"))
        agent.send("second")
        await agent.wait_idle()
        after = list(agent.session.events)
        await harness.close()
        assert after[: len(before)] == before
        assert after[len(before)].type == SeedEnd.type
        assert await self.stored(tmp_path, "a-session") == after

    # -- crash recovery --------------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_a_crash_loses_nothing_checkpointed_and_resume_closes_the_turn(
        self, tmp_path: Path
    ) -> None:
        inside = asyncio.Event()

        async def stuck(args: Any, execution: Any) -> str:
            inside.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        harness = await self.start(tmp_path)
        harness.tools.register(Tool(ToolSchema("stuck", "blocks"), stuck))
        agent = _agent(harness, "a", [tool_call_response("c1", "stuck", {})])
        agent.send("first")
        await inside.wait()
        agent.send("second")  # queued while busy: logged so that the crash cannot lose it
        await agent.session.checkpoint()
        checkpointed = list(agent.session.events)
        await crash(harness)
        live = list(agent.session.events)

        stored = await self.stored(tmp_path, "a-session")
        assert stored is not None
        assert stored[: len(checkpointed)] == checkpointed
        assert stored == live[: len(stored)]

        harness = await self.start(tmp_path)
        adapter = ScriptedAdapter([text_response("answered")])
        harness.llm.register_adapter(["m"], adapter)
        resumed = await harness.agent_loop.resume("a-session", AgentOptions(model="m"))
        await resumed.wait_idle()
        events = list(resumed.session.events)
        await harness.close()
        turn_ends = [e.data.reason for e in events if isinstance(e.data, TurnEnd)]
        assert turn_ends[0] == TurnInterrupted()
        assert isinstance(turn_ends[1], TurnCompleted)
        sent = [m for m in adapter.requests[0].messages if m.role == "user"]
        assert sent[0].content == (Text("first"),) and sent[-1].content == (Text("second"),)
        assert await self.stored(tmp_path, "a-session") == events

    # -- listing ---------------------------------------------------------------------------------
    async def _listed(
        self, directory: Path, query: str | None = None, limit: int = 50
    ) -> list[Any]:
        harness = await self.start(directory)
        try:
            return await harness.sessions.stored(query, limit)
        finally:
            await harness.close()

    @pytest.mark.asyncio
    async def test_listings_are_newest_first_filtered_and_limited(self, tmp_path: Path) -> None:
        for session_id, title in [("alpha", "Hello there"), ("beta", "find me"), ("gamma", "")]:
            content = [(UserMessage.type, _user(title))] if title else []
            await self.store_log(tmp_path, session_id, [], [*content, (KIT_EVENT, KitEvent("x"))])
            await asyncio.sleep(0.02)  # some file systems stamp times coarsely
        listed = await self._listed(tmp_path)
        assert [(s.id, s.title, s.events, s.parent) for s in listed] == [
            ("gamma", "", 1, None),
            ("beta", "find me", 2, None),
            ("alpha", "Hello there", 2, None),
        ]
        assert [s.id for s in await self._listed(tmp_path, limit=2)] == ["gamma", "beta"]
        assert [s.id for s in await self._listed(tmp_path, "find")] == ["beta"]
        assert [s.id for s in await self._listed(tmp_path, "alph")] == ["alpha"]
        assert await self._listed(tmp_path, "nothing matches") == []


def _append(session: Session, type_: str, data: Any) -> None:
    """Append a drawn ``(type, data)`` pair: the raw data of an unknown type as it is."""
    if isinstance(data, RawEventData):
        session.append_raw(type_, data.fields)
    else:
        session.append(data)


def _user(text: str) -> UserMessage:
    return UserMessage((Text(text),))


def _agent(harness: Harness, name: str, script: list[Any]) -> Agent:
    model = f"kit-{name}"
    harness.llm.register_adapter([model], ScriptedAdapter(script))
    return harness.agent_loop.create(name, AgentOptions(model=model), session_id=f"{name}-session")
