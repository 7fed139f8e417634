"""persistence_sqlite: configuration, schema, synchronous levels, failures and damage."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh import AgentOptions, Harness, HookError
from dsh.session._session import SessionConflict
from dsh.testing import ScriptedAdapter, text_response
from dsh.values._content import Text
from dsh.values._events import SessionEvent, UserMessage
from dsh_plugins.persistence_sqlite import SCHEMA_VERSION, SqliteStore, default_path


def user(text: str) -> UserMessage:
    return UserMessage((Text(text),))


async def store_one(store: SqliteStore, session_id: str = "s", **kwargs: Any) -> None:
    async with Harness(load_entrypoints=False, plugins=[store], **kwargs) as h:
        session = h.sessions.create(session_id)
        session.append(user("hello"))


#: A fresh process starts and closes a harness with every installed plugin, the SQLite store
#: off as by default; then it lists the stored sessions with the store on.
UNUSED = """
import asyncio, sys
from dsh import Harness

async def main(config):
    async with Harness(config=config) as h:
        await h.sessions.stored()
    print("sqlite3" in sys.modules)

asyncio.run(main(None))
asyncio.run(main({"persistence_sqlite": {"enabled": True, "path": sys.argv[1]}}))
"""


@pytest.mark.usefixtures("cli_workdir")  # its own directory; every plugin enabled
def test_a_harness_that_does_not_use_the_store_never_imports_sqlite3(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", UNUSED, str(tmp_path / "s.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == ["False", "True"]


async def test_off_by_default_and_placed_by_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteStore()
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        session = h.sessions.create("s")
        session.append(user("x"))
        await session.checkpoint()
        assert await h.sessions.load("s") is None
        assert await h.sessions.stored() == []
    assert store.path is None
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_path() == tmp_path / "data" / "dsh" / "sessions.db"
    await store_one(SqliteStore(), config={"persistence_sqlite": {"enabled": True}})
    assert (tmp_path / "data" / "dsh" / "sessions.db").is_file()
    monkeypatch.setenv("ELSEWHERE", str(tmp_path))
    config = {"persistence_sqlite": {"enabled": True, "path": "$ELSEWHERE/my.db"}}
    await store_one(SqliteStore(), config=config)
    db = sqlite3.connect(tmp_path / "my.db")
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    assert db.execute("SELECT id, title, events FROM sessions").fetchall() == [("s", "hello", 1)]


@pytest.mark.parametrize(
    ("mode", "levels"),
    [("turn", ["NORMAL", "FULL"]), ("checkpoint", ["FULL"]), ("never", ["OFF"])],
)
async def test_fsync_chooses_the_synchronous_level_of_each_commit(
    tmp_path: Path, mode: Any, levels: list[str]
) -> None:
    store = SqliteStore(tmp_path / "s.db", fsync=mode)
    seen: list[str] = []
    original = store._set_synchronous

    def record(db: sqlite3.Connection, level: str) -> None:
        if level not in seen:
            seen.append(level)
        original(db, level)

    store._set_synchronous = record  # type: ignore[method-assign]
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        h.llm.register_adapter(["m"], ScriptedAdapter([text_response("a")]))
        agent = h.agent_loop.create("a", AgentOptions(model="m"), session_id="a-session")
        agent.send("go")
        await agent.wait_idle()
    assert seen == levels


async def test_a_newer_schema_or_an_unusable_path_fails_the_call_that_needs_it(
    tmp_path: Path,
) -> None:
    db = sqlite3.connect(tmp_path / "new.db")
    db.execute("PRAGMA user_version = 99")
    db.close()
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(tmp_path / "new.db")]) as h:
        with pytest.raises(HookError, match="schema 99 is newer than this dsh reads"):
            await h.sessions.stored()
    (tmp_path / "dir.db").mkdir()
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(tmp_path / "dir.db")]) as h:
        with pytest.raises(HookError, match="cannot open session database"):
            await h.sessions.load("s")


async def test_a_failed_commit_rolls_back_and_keeps_the_events(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    h = Harness(load_entrypoints=False, plugins=[store])
    await h.start()
    session = h.sessions.create("s")
    session.append(user("one"))
    await session.flush()
    other = sqlite3.connect(path, isolation_level=None)
    # Someone else wrote seq 1: the next insert conflicts inside the transaction.
    other.execute("INSERT INTO events VALUES ('s', 1, 0, 'user/message', '{}')")
    session.append(user("two"))
    with pytest.raises(ExceptionGroup) as info:
        await session.checkpoint()
    assert "cannot write session 's'" in str(info.value.exceptions[0])
    other.execute("DELETE FROM events WHERE seq = 1")
    # Someone else holds the write lock: the transaction cannot even begin.
    other.execute("BEGIN IMMEDIATE")
    assert store._db is not None
    store._db.execute("PRAGMA busy_timeout = 0")
    with pytest.raises(ExceptionGroup, match="dsh_session_checkpoint"):
        await session.checkpoint()
    other.execute("ROLLBACK")
    await h.close()  # the kept events are written at last
    assert await stored_events(path, "s") == list(session.events)


async def stored_events(path: Path, session_id: str) -> Any:
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        return await h.sessions.load(session_id)


async def test_a_missing_event_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        session = h.sessions.create("s")
        for text in ("a", "b", "c"):
            session.append(user(text))
    sqlite3.connect(path, isolation_level=None).execute("DELETE FROM events WHERE seq = 1")
    with pytest.raises(HookError, match="session 's' misses the event with seq 1"):
        await stored_events(path, "s")


async def test_a_resumed_session_whose_count_differs_is_a_conflict_that_deletes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        session = h.sessions.create("s")
        session.append(user("a"))
    stored = list(session.events)
    events = [*stored, SessionEvent("user/message", 1, 1.0, user("loaded elsewhere"))]
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        resumed = h.sessions.create("s", events, persisted=2)
        with pytest.raises(SessionConflict, match="the store holds 1 event"):
            await h.sessions.claim(resumed)
    assert await stored_events(path, "s") == stored


async def test_a_resumed_session_from_another_store_is_written_whole(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    seed = [SessionEvent("user/message", 0, 1.0, user("from elsewhere"))]
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        session = h.sessions.create("s", seed, persisted=1)
        await h.sessions.claim(session)  # nothing to write yet: only the lease
        session.append(user("more"))
    assert await stored_events(path, "s") == list(session.events)


async def test_a_closed_session_used_again_is_written_whole(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        session = h.sessions.create("s")
        session.append(UserMessage((Text("one"),)))
        await h.sessions.close(session)
        session.append(UserMessage((Text("two"),)))
        await session.flush()
        assert store.dsh_session_load("s") == list(session.events)
