"""The session-store conformance kit, run on the in-memory reference store of dsh.testing, and
the base it and the built-in stores build on (:class:`dsh.session._store.BufferedStore`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

import dsh.session._session
from dsh import Harness
from dsh.session._codec import EventCodec, structure, unstructure
from dsh.session._session import SessionConflict
from dsh.session._store import TITLE_CHARS, Batch, BufferedStore, Fsync, title_of
from dsh.testing import MemoryStore
from dsh.testing.stores import KitEvent, SessionStoreContract, event_data, event_logs
from dsh.values._content import Text
from dsh.values._events import CORE_EVENT_TYPES, RawEventData, SessionEvent, TurnStart, UserMessage
from dsh_plugins.persistence_jsonl import JsonlStore
from dsh_plugins.persistence_sqlite import SqliteStore


class TestMemoryStore(SessionStoreContract):
    """A "restart" is a new MemoryStore over the same stored sessions (its disk)."""

    disks: dict[Path, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {}

    def make_store(self, directory: Path) -> object:
        store = MemoryStore()
        store.stored, store.parents, store.writers = self.disks.setdefault(directory, ({}, {}, {}))
        return store


def test_make_store_must_be_implemented(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="make_store"):
        SessionStoreContract()  # type: ignore[abstract]

    class Untearable(SessionStoreContract):
        def make_store(self, directory: Path) -> object:
            return MemoryStore()

    assert Untearable().tear(tmp_path, "x") is False


@given(event_logs(CORE_EVENT_TYPES))
def test_event_logs_hold_only_what_the_converter_round_trips(pairs: list[tuple[str, Any]]) -> None:
    codec = EventCodec()
    for type_, data in pairs:
        data_cls = codec.types.get(type_)
        if data_cls is None:
            assert isinstance(data, RawEventData) and isinstance(data.fields, dict)
        else:
            assert structure(unstructure(data), data_cls) == data


@given(event_data(KitEvent))
def test_event_data_builds_any_attrs_class(data: KitEvent) -> None:
    assert all(isinstance(tag, str) for tag in data.tags)


# -- the base every store builds on ----------------------------------------------------------


def test_the_three_stores_build_on_the_public_base() -> None:
    assert (
        dsh.session._session.BufferedStore is BufferedStore and dsh.session._session.Batch is Batch
    )
    for store in (MemoryStore(), JsonlStore(), SqliteStore()):
        assert isinstance(store, BufferedStore)


def test_a_store_must_implement_what_touches_its_medium() -> None:
    with pytest.raises(TypeError) as missing:
        BufferedStore()  # type: ignore[abstract]
    for method in ("acquire", "replace", "append", "release", "load", "list_sessions"):
        assert method in str(missing.value)


@pytest.mark.parametrize(
    ("fsync", "checkpoint", "flush"),
    [("turn", False, True), ("checkpoint", True, True), ("never", False, False)],
)
def test_fsync_says_which_writes_are_durable(fsync: Fsync, checkpoint: bool, flush: bool) -> None:
    store = MemoryStore()
    store.fsync = fsync
    assert (store.durable(flush=False), store.durable(flush=True)) == (checkpoint, flush)


def test_a_title_is_the_first_line_of_the_first_user_message_shortened() -> None:
    def event(seq: int, data: Any) -> SessionEvent:
        return SessionEvent("user/message" if seq else "turn/start", seq, 0.0, data)

    long = "x" * (TITLE_CHARS + 5)
    assert title_of([event(0, TurnStart(1)), event(1, _user(f"  {long}\nmore"))]) == long[:-5]
    assert title_of([event(0, TurnStart(1))]) == ""


async def test_a_log_changed_behind_the_writer_lock_is_a_conflict() -> None:
    store = MemoryStore()
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        session = h.sessions.create("s")
        session.append(_user("a"))
        await session.checkpoint()
        store.stored["s"].append(store.stored["s"][0])  # written by something that holds no lock
        session.append(_user("b"))
        with pytest.raises(ExceptionGroup) as failed:
            await session.checkpoint()
        conflict = getattr(failed.value.exceptions[0], "error", None)
        assert isinstance(conflict, SessionConflict)
        assert (conflict.stored, conflict.expected) == (2, 1)
        assert store.written(session) == 1  # "b" (seq 1) waits for a later attempt
        await h.sessions.close(session)
    assert store.writers == {}


def _user(text: str) -> UserMessage:
    return UserMessage((Text(text),))


async def test_a_session_used_again_after_its_close_is_taken_up_after_what_its_close_stored() -> (
    None
):
    store = MemoryStore()
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        session = h.sessions.create("s")
        session.append(_user("a"))
        await h.sessions.close(session)
        assert store.writers == {} and "s" not in store.live
        assert store.written(session) == 1  # a session it does not write: all of it
        await session.checkpoint()  # nothing new: not taken up, no lock taken
        assert store.writers == {} and "s" not in store.live
        session.append(_user("b"))
        await session.checkpoint()
        assert store.stored["s"] == list(session.events) and store.written(session) == 2
        assert store.writers["s"][0] is store
        await h.sessions.close(session)
    assert store.writers == {}
