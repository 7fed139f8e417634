"""persistence_sqlite: the writer lease, counts checked on load, quick_check, real page damage,
and a private database file."""

from __future__ import annotations

import os
import random
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from dsh import DshError, Harness, HookError
from dsh.session._session import SessionBusy, SessionConflict
from dsh.values._content import Text
from dsh.values._events import SessionEvent, UserMessage
from dsh_plugins import persistence_sqlite
from dsh_plugins.persistence_sqlite import SCHEMA_VERSION, Lease, SqliteStore, process_alive
from dsh_plugins.persistence_sqlite import leases as leasing

HOST = socket.gethostname()


def user(text: str) -> UserMessage:
    return UserMessage((Text(text),))


def events(*texts: str) -> list[SessionEvent]:
    return [SessionEvent("user/message", n, 1.0, user(t)) for n, t in enumerate(texts)]


async def store(path: Path, session_id: str, *texts: str, **config: Any) -> list[SessionEvent]:
    settings = {"persistence_sqlite": config}
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)], config=settings) as h:
        session = h.sessions.create(session_id, events(*texts))
    return list(session.events)


async def stored(path: Path, session_id: str) -> Any:
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        return await h.sessions.load(session_id)


def leases(path: Path) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT session_id, pid, host FROM writers").fetchall()
    finally:
        db.close()


def put_lease(path: Path, session_id: str, **fields: Any) -> None:
    row = {"owner": "other", "pid": os.getpid(), "started": None, "host": HOST}
    row |= {"since": time.time(), "renewed": time.time(), **fields}
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(
        "INSERT OR REPLACE INTO writers VALUES (?, ?, ?, ?, ?, ?, ?)",
        (session_id, *row.values()),
    )
    db.close()


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the id names no process (until the system reuses it)
    return child.pid


# -- the file --------------------------------------------------------------------------------


async def test_the_database_is_created_private(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        h.sessions.create("s").append(user("secret"))
        await h.sessions.get("s").checkpoint()  # type: ignore[union-attr]
        assert stat.S_IMODE((tmp_path / "sessions.db-wal").stat().st_mode) == 0o600
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_a_version_1_database_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(persistence_sqlite.SCHEMA.split("CREATE TABLE IF NOT EXISTS writers")[0])
    db.execute("PRAGMA user_version = 1")
    db.close()
    await store(path, "s", "a")
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (2,)
    assert db.execute("SELECT count(*) FROM writers").fetchone() == (0,)  # released
    db.close()


# -- the lease -------------------------------------------------------------------------------


async def test_the_lease_is_held_while_the_session_is_open_and_names_its_holder(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    await store(path, "s", "a")
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as one:
        first = one.sessions.create("s", events("a"), persisted=1)
        await one.sessions.claim(first)
        assert leases(path) == [("s", os.getpid(), HOST)]
        async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as two:
            second = two.sessions.create("s", events("a"), persisted=1)
            with pytest.raises(SessionBusy, match=f"process {os.getpid()} on host") as busy:
                await two.sessions.claim(second)
            assert f"(lease in {path})" in str(busy.value)
            await one.sessions.close(first)
            assert leases(path) == []  # closing released it
            third = two.sessions.create("s", events("a"), persisted=1)
            await two.sessions.claim(third)
        assert leases(path) == []  # the harness stop released it


async def test_a_lease_whose_holder_died_on_this_host_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await store(path, "s", "a")
    put_lease(path, "s", pid=dead_pid())
    await store_more(path)
    own = leasing.started_self()
    put_lease(path, "s", started=None if own is None else own + 1)  # our id, an older process
    await store_more(path)


async def store_more(path: Path) -> None:
    loaded = await stored(path, "s")
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        session = h.sessions.create("s", loaded, persisted=len(loaded))
        session.append(user("more"))
    assert await stored(path, "s") == list(session.events)


async def test_a_lease_from_another_host_holds_until_it_expires(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await store(path, "s", "a")
    put_lease(path, "s", host="elsewhere", pid=1)
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        session = h.sessions.create("s", events("a"), persisted=1)
        with pytest.raises(SessionBusy, match="process 1 on host 'elsewhere'"):
            await h.sessions.claim(session)
    put_lease(path, "s", host="elsewhere", pid=1, renewed=time.time() - 120)
    config = {"persistence_sqlite": {"lease_seconds": 60}}
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)], config=config) as h:
        session = h.sessions.create("s", events("a"), persisted=1)
        await h.sessions.claim(session)


async def test_a_holder_whose_lease_was_taken_over_cannot_write(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        session = h.sessions.create("s", events("a"))
        await session.checkpoint()
        put_lease(path, "s", host="elsewhere", pid=1)  # it was idle too long: taken over
        session.append(user("b"))
        with pytest.raises(ExceptionGroup) as failed:
            await session.checkpoint()
        assert isinstance(failed.value.exceptions[0], HookError)
        assert isinstance(failed.value.exceptions[0].error, SessionBusy)
        await h.sessions.close(session)  # the flush fails too, and is logged
    assert await stored(path, "s") == events("a")
    assert leases(path) == [("s", 1, "elsewhere")]  # not ours to release


async def test_rows_written_behind_the_lease_are_a_conflict_not_overwritten(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        session = h.sessions.create("s", events("a"))
        await session.checkpoint()
        outside = sqlite3.connect(path, isolation_level=None)  # a writer that ignores leases
        outside.execute("UPDATE sessions SET events = 2 WHERE id = 's'")
        session.append(user("b"))
        with pytest.raises(ExceptionGroup) as failed:
            await session.checkpoint()
        conflict = getattr(failed.value.exceptions[0], "error", None)
        assert isinstance(conflict, SessionConflict)
        assert (conflict.stored, conflict.expected) == (2, 1)
        outside.execute("UPDATE sessions SET events = 1 WHERE id = 's'")
        await session.checkpoint()  # the refused batch was kept, and is written now
    assert await stored(path, "s") == list(session.events)


async def test_a_lease_that_cannot_be_released_is_logged(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        session = h.sessions.create("s", events("a"))
        await session.flush()
        sqlite3.connect(path, isolation_level=None).execute("DROP TABLE writers")
        with capture_logs() as logs:
            await h.sessions.close(session)
    assert logs[-1]["event"] == "cannot release session leases"
    assert "no such table" in logs[-1]["error"]


def test_liveness_of_a_process() -> None:
    own = leasing.started_self()
    assert process_alive(os.getpid(), own) and process_alive(os.getpid(), None)
    assert not process_alive(dead_pid(), None)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while process_alive(child.pid, None):  # exited, not yet reaped: a zombie
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        child.wait()
    lease = Lease("x", dead_pid(), None, HOST, 0.0, 0.0)
    assert lease.stale(time.time(), 3600)


def test_liveness_without_proc_or_permission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(leasing, "PROC", tmp_path)  # a system without /proc
    assert process_alive(os.getpid(), 12345)
    assert leasing.started_self() is None

    def not_ours(pid: int, signal: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", not_ours)
    assert process_alive(4242, None)  # it exists: another user's


# -- damage ----------------------------------------------------------------------------------


async def test_lost_rows_are_an_error_naming_the_session(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await store(path, "s", "a", "b", "c")
    sqlite3.connect(path, isolation_level=None).execute("DELETE FROM events WHERE seq = 2")
    with pytest.raises(HookError, match=r"session 's' holds 2 event.* but 3 were written"):
        await stored(path, "s")


async def test_unreadable_rows_are_errors_naming_the_session(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await store(path, "s", "a", "b")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE events SET data = '{not json' WHERE seq = 1")
    with pytest.raises(HookError, match="session 's': the event with seq 1 is unreadable"):
        await stored(path, "s")
    db.close()


async def test_quick_check_on_open_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await store(path, "s", *"abcdefgh" * 50, quick_check=True)  # a clean database opens
    damage(path, page=3, data=b"\xff" * 4096)
    config = {"persistence_sqlite": {"quick_check": True}}
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)], config=config) as h:
        with pytest.raises(HookError, match=r"database is damaged \(PRAGMA quick_check"):
            await h.sessions.stored()


def damage(path: Path, page: int, data: bytes) -> None:
    size = sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]
    with path.open("r+b") as file:
        file.seek((page - 1) * size)
        file.write(data[:size])


def page_of(path: Path, page: int) -> bytes:
    with path.open("rb") as file:
        file.seek((page - 1) * 4096)
        return file.read(4096)


async def test_page_damage_never_gives_a_shorter_log(tmp_path: Path) -> None:
    """Random pages of a real database overwritten with garbage, with zeros, or with another
    page (a misdirected write: it reads as a valid page, and rows silently vanish from a
    query): every session loads whole or fails with an error naming it — never shorter."""
    original = tmp_path / "clean.db"
    sizes = random.Random(7)
    texts = {
        f"s{n}": [f"{n}-{i}-" + "x" * sizes.randrange(400) for i in range(n * 7)]
        for n in range(1, 9)
    }
    logs = {sid: await store(original, sid, *t) for sid, t in texts.items()}
    pages = original.stat().st_size // 4096
    rng = random.Random(13)
    outcomes = {"whole": 0, "error": 0}
    for trial in range(60):
        path = tmp_path / f"damaged-{trial}.db"
        shutil.copyfile(original, path)
        garbage = [
            bytes(rng.randrange(256) for _ in range(4096)),
            bytes(4096),
            page_of(original, rng.randrange(2, pages + 1)),
        ][trial % 3]
        damage(path, page=rng.randrange(2, pages + 1), data=garbage)
        store_ = SqliteStore(path)
        async with Harness(load_entrypoints=False, plugins=[store_]):
            for sid, log in logs.items():
                try:
                    loaded = store_.dsh_session_load(sid)
                except DshError as exc:
                    named = repr(sid) in str(exc) or "database" in str(exc)
                    outcomes["error" if named else "unnamed"] += 1
                else:
                    assert loaded == log, f"trial {trial}: session {sid} loaded differently"
                    outcomes["whole"] += 1
    assert outcomes["error"] > 0 and outcomes["whole"] > 0 and "unnamed" not in outcomes


async def test_a_file_that_is_not_a_database_fails_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"not a database, not at all" * 200)
    with pytest.raises(HookError, match=r"cannot open session database .*s.db: file is not a"):
        await stored(path, "s")


async def test_a_new_session_replaces_a_stored_one_only_once_it_has_events(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    kept = await store(path, "s", "a")
    async with Harness(load_entrypoints=False, plugins=[SqliteStore(path)]) as h:
        await h.sessions.claim(h.sessions.create("s"))  # the lease only
        assert leases(path) == [("s", os.getpid(), HOST)]
    assert await stored(path, "s") == kept
