"""The base of stores reached through asyncio (:class:`dsh.session._store.AsyncBufferedStore`): the
conformance kit on an in-memory one whose every medium call yields to the loop, and what the
base adds over :class:`~dsh.session._store.BufferedStore` — writes of one session one after the
other, events appended during a write kept for the next, nothing lost by a failed write."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from dsh import Harness
from dsh.session._session import Session, SessionBusy, SessionConflict, SessionSummary, Writer
from dsh.session._store import AsyncBufferedStore, Batch
from dsh.testing import MemoryStore
from dsh.testing.stores import SessionStoreContract
from dsh.values._content import Text
from dsh.values._events import SessionEvent, UserMessage


class AsyncMemoryStore(AsyncBufferedStore):
    """:class:`MemoryStore`'s medium behind awaits that yield to the loop; ``gate``, when
    set, holds every write until it is opened (``held`` is set once one waits there), and
    ``fail`` makes the next write fail."""

    def __init__(self, inner: MemoryStore | None = None) -> None:
        super().__init__()
        self.inner = inner or MemoryStore()
        self.gate: asyncio.Event | None = None
        self.held = asyncio.Event()
        self.fail: Exception | None = None
        self.released: list[str] = []
        self.closed = 0

    async def _medium(self) -> None:
        await asyncio.sleep(0)
        if self.gate is not None:
            self.held.set()
            await self.gate.wait()
        if self.fail is not None:
            fail, self.fail = self.fail, None
            raise fail

    async def acquire(self, session: Session) -> int:
        await asyncio.sleep(0)
        return self.inner.acquire(session)

    async def replace(self, batch: Batch) -> None:
        await self._medium()
        self.inner.replace(batch)

    async def append(self, batch: Batch) -> None:
        await self._medium()
        self.inner.append(batch)

    async def release(self, session_id: str) -> None:
        await asyncio.sleep(0)
        self.released.append(session_id)
        self.inner.release(session_id)

    async def load(self, session_id: str) -> list[SessionEvent] | None:
        await asyncio.sleep(0)
        return self.inner.load(session_id)

    async def list_sessions(self, query: str | None, limit: int) -> list[SessionSummary]:
        await asyncio.sleep(0)
        return self.inner.list_sessions(query, limit)

    async def close(self) -> None:
        self.closed += 1


class TestAsyncMemoryStore(SessionStoreContract):
    """A "restart" is a new store over the same stored sessions (its disk)."""

    disks: dict[Path, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {}

    def make_store(self, directory: Path) -> object:
        inner = MemoryStore()
        inner.stored, inner.parents, inner.writers = self.disks.setdefault(directory, ({}, {}, {}))
        return AsyncMemoryStore(inner)


def user(text: str) -> UserMessage:
    return UserMessage((Text(text),))


async def awaited(call: Awaitable[None] | None) -> None:
    """A hook's result awaited, if it is an awaitable (a task needs a coroutine)."""
    if call is not None:
        await call


def texts(events: list[SessionEvent] | None) -> list[str]:
    return [e.data.content[0].text for e in events or []]  # type: ignore[union-attr]


async def test_events_appended_during_a_write_wait_for_the_next_one() -> None:
    store = AsyncMemoryStore()
    async with Harness(load_entrypoints=False, plugins=[store]) as harness:
        session = harness.sessions.create("s")
        session.append(user("a"))
        store.gate = asyncio.Event()
        writing = asyncio.create_task(session.checkpoint())
        await store.held.wait()
        session.append(user("b"))  # while "a" is being written
        store.gate.set()
        await writing
        assert texts(store.inner.stored["s"]) == ["a"]
        assert store.written(session) == 1  # "b" waits
        await session.checkpoint()
        assert texts(store.inner.stored["s"]) == ["a", "b"]
        assert store.written(session) == 2


async def test_a_session_used_again_after_its_close_is_taken_up_again() -> None:
    store = AsyncMemoryStore()
    async with Harness(load_entrypoints=False, plugins=[store]) as harness:
        session = harness.sessions.create("s")
        session.append(user("a"))
        await harness.sessions.close(session)
        assert store.dsh_session_checkpoint(session) is None  # nothing new since its close
        session.append(user("b"))
        await session.checkpoint()
        assert texts(store.inner.stored["s"]) == ["a", "b"] and store.written(session) == 2


async def test_a_failed_write_loses_nothing() -> None:
    store = AsyncMemoryStore()
    async with Harness(load_entrypoints=False, plugins=[store]) as harness:
        session = harness.sessions.create("s")
        session.append(user("a"))
        await session.checkpoint()
        session.append(user("b"))
        store.fail = OSError("the server went away")
        with pytest.raises(ExceptionGroup, match="dsh_session_checkpoint"):
            await session.checkpoint()
        assert store.written(session) == 1  # "b" waits for the next write
        session.append(user("c"))
        await session.flush()
        assert texts(store.inner.stored["s"]) == ["a", "b", "c"]


async def test_writes_of_one_session_run_one_after_the_other_and_stop_at_its_close() -> None:
    store = AsyncMemoryStore()
    async with Harness(load_entrypoints=False, plugins=[store]) as harness:
        session = harness.sessions.create("s")
        session.append(user("a"))
        await session.checkpoint()
        session.append(user("b"))
        store.gate = asyncio.Event()
        first = asyncio.create_task(awaited(store.dsh_session_checkpoint(session)))
        await store.held.wait()
        closing = asyncio.create_task(store.dsh_session_closed(session))
        await asyncio.sleep(0.01)
        session.append(user("c"))
        late = asyncio.create_task(awaited(store.dsh_session_flush(session)))
        await asyncio.sleep(0.01)
        assert store.released == []  # the close waits for the write in flight
        store.gate.set()
        await asyncio.gather(first, closing, late)
        assert store.released == ["s"]
        assert texts(store.inner.stored["s"]) == ["a", "b"]  # the late write found it closed
        assert "s" not in store.live and not store._locks


async def test_the_harness_stop_releases_every_held_session_and_closes_the_store() -> None:
    store = AsyncMemoryStore()
    harness = Harness(load_entrypoints=False, plugins=[store])
    await harness.start()
    for name in ("one", "two"):
        session = harness.sessions.create(name)
        session.append(user(name))
        await session.checkpoint()
    await harness.close()
    assert sorted(store.released) == ["one", "two"]
    assert store.closed == 1 and store.live == set() and store.inner.writers == {}


class Disabled(AsyncMemoryStore):
    @property
    def enabled(self) -> bool:
        return False


async def test_a_disabled_store_stores_and_answers_nothing() -> None:
    store = Disabled()
    async with Harness(load_entrypoints=False, plugins=[store]) as harness:
        session = harness.sessions.create("s")
        session.append(user("a"))
        await session.flush()
        assert store.inner.stored == {}
        assert await harness.sessions.load("s") is None
        assert await harness.sessions.stored() == []


async def test_stores_name_no_lease_holder_by_default() -> None:
    assert await MemoryStore().lease_holder("s") is None
    assert await AsyncMemoryStore().lease_holder("s") is None


async def test_a_session_the_store_does_not_hold_is_written_whole_and_an_empty_one_not_at_all() -> (
    None
):
    store = AsyncMemoryStore()
    seed = [SessionEvent("user/message", n, 1.0, user(t)) for n, t in enumerate("ab")]
    async with Harness(load_entrypoints=False, plugins=[store]) as harness:
        loaded = harness.sessions.create("elsewhere", seed, persisted=2)  # from another store
        loaded.append(user("c"))
        await harness.sessions.claim(loaded)
        assert texts(store.inner.stored["elsewhere"]) == ["a", "b", "c"]
        empty = harness.sessions.create("empty")
        await harness.sessions.claim(empty)
        assert "empty" not in store.inner.stored and "empty" in store.inner.writers


def test_the_store_errors_survive_pickling_with_their_fields() -> None:
    """A cluster moves them between processes; their messages and fields come through."""
    busy = SessionBusy("s", Writer(7, "box", 0.0), " (lease in the db)")
    conflict = SessionConflict("s", 3, 2, " (in the db)")
    for error in (busy, conflict):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
        assert copy.__dict__ == error.__dict__


class OffMemoryStore(MemoryStore):
    @property
    def enabled(self) -> bool:
        return False


@pytest.mark.parametrize("make", [OffMemoryStore, Disabled])
async def test_a_store_configured_off_keeps_nothing_even_when_its_hooks_are_called(
    make: type[MemoryStore | AsyncMemoryStore],
) -> None:
    """The hook runtime leaves such a store out of the session hooks; a host that calls them
    itself still gets a store that ignores the session."""
    store = make()
    assert store.session_hooks_active is False
    session = Session("off")
    store.dsh_session_created(session)
    session.append(UserMessage((Text("hi"),)))
    assert store.live == set()
    assert store.dsh_session_checkpoint(session) is None
    assert store.dsh_session_flush(session) is None
