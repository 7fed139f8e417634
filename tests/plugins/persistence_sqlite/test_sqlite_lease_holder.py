"""persistence_sqlite answers who holds a session (``lease_holder``) from its ``writers`` row."""

from __future__ import annotations

import time
from pathlib import Path

from dsh import Harness
from dsh.session._store import LeaseInfo
from dsh_plugins.persistence_sqlite import SqliteStore
from tests.plugins.persistence_sqlite.test_sqlite_writers import dead_pid, events, put_lease


async def test_the_holder_of_an_open_session_is_named_until_it_is_closed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store, reader = SqliteStore(path), SqliteStore(path)
    settings = {"persistence_sqlite": {"lease_seconds": 60}}
    async with (
        Harness(load_entrypoints=False, plugins=[store], config=settings) as one,
        Harness(load_entrypoints=False, plugins=[reader], config=settings),
    ):
        assert await reader.lease_holder("s") is None
        session = one.sessions.create("s", events("a"))
        before = time.time()
        await one.sessions.claim(session)
        holder = await reader.lease_holder("s")
        assert isinstance(holder, LeaseInfo)
        assert holder.owner == store._owner and holder.token is None
        assert before + 60 <= holder.expires_at <= time.time() + 60
        await one.sessions.close(session)
        assert await reader.lease_holder("s") is None


async def test_a_gone_holder_holds_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    reader = SqliteStore(path)
    async with Harness(load_entrypoints=False, plugins=[reader]):
        await reader.lease_holder("s")  # creates the database
        put_lease(path, "dead", pid=dead_pid())
        put_lease(path, "remote", host="elsewhere", renewed=time.time() - 7200)
        put_lease(path, "live", host="elsewhere", renewed=time.time())
        assert await reader.lease_holder("dead") is None
        assert await reader.lease_holder("remote") is None
        live = await reader.lease_holder("live")
        assert live is not None and live.owner == "other"


async def test_a_disabled_store_names_no_holder() -> None:
    store = SqliteStore()
    async with Harness(load_entrypoints=False, plugins=[store]):
        assert await store.lease_holder("s") is None


async def test_a_store_without_owner_labels_lists_no_sessions_by_owner(tmp_path: Path) -> None:
    # SQLite names a holder by process, not by a label a restarted host could ask with.
    store = SqliteStore(tmp_path / "s.db")
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        await h.sessions.claim(h.sessions.create("s", events("a")))
        assert await store.sessions_held_by(store._owner) == []
