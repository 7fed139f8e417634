"""persistence_postgres: configuration, the server missing or going away, the schema and its
migrations, leases and fencing tokens, damage found on load, replay of a stored session."""

from __future__ import annotations

import asyncio
import os
import pickle
import re
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from structlog.testing import capture_logs

from dsh import AgentOptions, Harness, HookError
from dsh.app._configdoc import masked_config
from dsh.session._session import Session, SessionBusy, SessionConflict
from dsh.session._store import LeaseInfo
from dsh.session._verify import verify
from dsh.testing import ScriptedAdapter, text_response
from dsh.values._content import Text
from dsh.values._events import SessionEvent, UserMessage
from dsh_plugins.persistence_postgres import (
    SCHEMA_VERSION,
    LeaseLost,
    PostgresConfig,
    PostgresStore,
    PostgresStoreError,
)
from dsh_plugins.persistence_postgres.config import default_owner, shown
from dsh_plugins.persistence_postgres.schema import migrate, quoted
from tests.plugins.persistence_postgres.pg import (
    DSN,
    connect,
    make_store,
    needs_postgres,
    query,
    schema_for,
)
from tests.plugins.persistence_postgres.proxy import Proxy

pytestmark = needs_postgres


def user(text: str) -> UserMessage:
    return UserMessage((Text(text),))


def events(*texts: str) -> list[SessionEvent]:
    return [SessionEvent("user/message", n, 1.0, user(t)) for n, t in enumerate(texts)]


def texts(log: Sequence[SessionEvent] | None) -> list[str]:
    return [e.data.content[0].text for e in log or []]  # type: ignore[union-attr]


def harness(store: PostgresStore, **config: Any) -> Harness:
    return Harness(load_entrypoints=False, plugins=[store], config=config)


async def stored(tmp_path: Path, session_id: str) -> list[SessionEvent] | None:
    async with harness(make_store(tmp_path)) as h:
        return await h.sessions.load(session_id)


async def claim(h: Harness, session_id: str) -> Session:
    loaded = await h.sessions.load(session_id) or []
    session = h.sessions.create(session_id, loaded, persisted=len(loaded))
    await h.sessions.claim(session)
    return session


def cause(group: pytest.ExceptionInfo[ExceptionGroup[Any]]) -> BaseException:
    return getattr(group.value.exceptions[0], "error", group.value.exceptions[0])


async def failure(call: Awaitable[Any]) -> PostgresStoreError:
    """The store's error that ``call`` (a hook the harness calls) failed with."""
    with pytest.raises(HookError) as failed:
        await call
    assert isinstance(failed.value.error, PostgresStoreError)
    return failed.value.error


# -- configuration -----------------------------------------------------------------------------


def test_the_config_has_safe_defaults_and_checks_the_schema_name() -> None:
    config = PostgresConfig()
    assert (config.enabled, config.dsn, config.schema, config.lease_seconds) == (
        False,
        None,
        "dsh",
        30.0,
    )
    with pytest.raises(ValueError, match="schema must be a lower-case SQL identifier"):
        PostgresConfig(schema='x"; DROP TABLE sessions; --')
    assert "secret" not in repr(PostgresConfig(dsn="postgresql://u:secret@h/db"))


async def test_the_dsn_is_masked_in_config_dumps_and_messages() -> None:
    dsn = "postgresql://dsh:hunter2@db.example:5432/dsh"
    async with harness(PostgresStore(), persistence_postgres={"dsn": dsn}) as h:
        assert "hunter2" not in str(masked_config(h.config))
    assert shown(dsn) == "postgresql://dsh:***@db.example:5432/dsh"
    assert shown("host=db password='hunter 2' user=dsh") == "host=db password=*** user=dsh"
    assert shown("host=db password=hunter2") == "host=db password=***"


async def test_the_store_is_off_unless_enabled_or_given_a_dsn() -> None:
    store = PostgresStore()
    async with harness(store) as h:
        session = h.sessions.create("s")
        session.append(user("a"))
        await session.flush()
        assert not store.enabled
        assert await h.sessions.load("s") is None
        assert await h.sessions.stored() == []
        assert await store.lease_holder("s") is None


async def test_enabled_in_config_it_reads_the_dsn_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_POSTGRES_DSN", DSN)
    section = {"enabled": True, "schema": schema_for(tmp_path), "owner": "web-1"}
    store = PostgresStore()
    async with harness(store, persistence_postgres=section) as h:
        session = h.sessions.create("s")
        session.append(user("a"))
        await h.sessions.claim(session)
        holder = await store.lease_holder("s")
        assert holder is not None and holder.owner == "web-1"
    assert texts(await stored(tmp_path, "s")) == ["a"]


def test_the_store_errors_survive_pickling_with_their_fields() -> None:
    for error in (LeaseLost("s", 3, "web-2", 5), PostgresStoreError("down", "UNAVAILABLE")):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
        assert copy.__dict__ == error.__dict__


def test_the_default_owner_names_this_host_and_process_and_is_unique() -> None:
    owner = default_owner()
    assert owner.startswith(f"{socket.gethostname()}:{os.getpid()}:")
    assert default_owner() != owner


async def test_without_a_dsn_the_store_says_where_to_put_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DSH_POSTGRES_DSN", raising=False)
    with capture_logs() as logs:
        async with harness(PostgresStore(), persistence_postgres={"enabled": True}) as h:
            error = await failure(h.sessions.load("s"))
            assert re.search("set the DSH_POSTGRES_DSN", str(error))
    assert error.code == "NO_DSN"
    assert [(e["event"], e["code"]) for e in logs] == [("session store not ready", "NO_DSN")]


async def test_without_asyncpg_enabling_it_is_a_missing_dependency_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "asyncpg", None)  # as if it were not installed
    async with harness(PostgresStore(DSN)) as h:
        error = await failure(h.sessions.stored())
        assert re.search(r"dsh-harness\[postgres\]", str(error))
    assert error.code == "MISSING_DEPENDENCY"


# -- the server missing, refusing, going away ---------------------------------------------------


@pytest.mark.parametrize(
    ("dsn", "why"),
    [
        ("postgresql://dsh:hunter2@127.0.0.1:1/dsh", "Connect call failed"),
        ("not a dsn", "invalid DSN"),
        ("postgresql://dsh:hunter2@127.0.0.1:port/dsh", "invalid literal"),
    ],
)
async def test_a_server_that_cannot_be_reached_is_a_clear_error(dsn: str, why: str) -> None:
    store = PostgresStore(dsn)
    with capture_logs():
        async with harness(store) as h:
            session = h.sessions.create("s")
            session.append(user("a"))
            error = await failure(h.sessions.load("s"))
            assert re.search(why, str(error))
            assert error.code == "UNAVAILABLE"
            assert "hunter2" not in str(error) and "DSH_POSTGRES_DSN" in str(error)
            with pytest.raises(ExceptionGroup):
                await session.checkpoint()
            assert texts(session.events) == ["a"] and store.written(session) == 0
            await h.sessions.close(session)  # the failed flush is logged


async def test_a_wrong_password_is_a_clear_error() -> None:
    parts = urlsplit(DSN)
    netloc = f"{parts.username}:wrong-{parts.password}@{parts.hostname}:{parts.port or 5432}"
    with capture_logs():
        async with harness(PostgresStore(urlunsplit(parts._replace(netloc=netloc)))) as h:
            error = await failure(h.sessions.stored())
    assert error.code == "UNAVAILABLE" and "password authentication failed" in str(error)


async def test_a_server_going_away_fails_the_write_and_loses_nothing(tmp_path: Path) -> None:
    proxy = Proxy(DSN)
    await proxy.up()
    store = PostgresStore(proxy.dsn, schema=schema_for(tmp_path))
    with capture_logs() as logs:
        async with harness(store) as h:
            session = h.sessions.create("s")
            session.append(user("a"))
            await session.checkpoint()
            await proxy.down()
            session.append(user("b"))
            with pytest.raises(ExceptionGroup) as failed:
                await session.checkpoint()
            error = cause(failed)
            assert isinstance(error, PostgresStoreError) and error.code == "WRITE"
            assert "cannot write session 's'" in str(error) and "stays buffered" in str(error)
            await proxy.up()
            session.append(user("c"))
            await session.flush()
            assert texts(await h.sessions.load("s")) == ["a", "b", "c"]
            await proxy.down()
        # the close could not release the lease: it is logged, and expires
        assert any(e["event"] == "cannot release a session lease" for e in logs)
    assert texts(await stored(tmp_path, "s")) == ["a", "b", "c"]


async def test_a_hung_server_fails_the_write_after_the_command_timeout(tmp_path: Path) -> None:
    proxy = Proxy(DSN)
    await proxy.up()
    store = PostgresStore(proxy.dsn, schema=schema_for(tmp_path))
    section = {"command_timeout": 0.5}
    with capture_logs():
        async with harness(store, persistence_postgres=section) as h:
            session = h.sessions.create("s")
            session.append(user("a"))
            proxy.frozen = True
            started = time.monotonic()
            with pytest.raises(ExceptionGroup) as failed:
                await session.checkpoint()
            assert time.monotonic() - started < 5
            error = cause(failed)
            assert isinstance(error, PostgresStoreError) and "TimeoutError" in str(error)
            proxy.frozen = False
            await session.flush()
            await proxy.down()
    assert texts(await stored(tmp_path, "s")) == ["a"]


async def test_the_heartbeat_logs_a_failed_renewal_and_goes_on(tmp_path: Path) -> None:
    proxy = Proxy(DSN)
    await proxy.up()
    store = PostgresStore(proxy.dsn, schema=schema_for(tmp_path), heartbeat_seconds=0.05)
    with capture_logs() as logs:
        async with harness(store) as h:
            session = h.sessions.create("s")
            session.append(user("a"))
            await h.sessions.claim(session)
            await proxy.down()
            await asyncio.sleep(0.3)
            await proxy.up()
            back = time.time()
            assert await renewed_after(store, back)
    assert any(e["event"] == "cannot renew session leases" for e in logs)


async def renewed_after(store: PostgresStore, moment: float) -> bool:
    """Whether the heartbeat renews the lease of ``s`` after ``moment`` (waits up to 10 s)."""
    for _ in range(100):
        holder = await store.lease_holder("s")
        if holder is not None and holder.expires_at >= moment + store.config.lease_seconds:
            return True
        await asyncio.sleep(0.1)
    return False


# -- the schema ---------------------------------------------------------------------------------


async def test_a_version_1_schema_is_migrated_and_keeps_its_sessions(tmp_path: Path) -> None:
    schema = schema_for(tmp_path)
    db = await connect()
    try:
        assert await migrate(db, schema, upto=1) == 0
        s = quoted(schema)
        await db.execute(f"INSERT INTO {s}.sessions VALUES ('old', 1, 2, '/', NULL, 'hello', 1)")
        await db.execute(
            f"INSERT INTO {s}.events VALUES ('old', 0, 1.0, 'user/message', $1)",
            '{"content": [{"type": "text", "text": "hello"}]}',
        )
    finally:
        await db.close()
    async with harness(make_store(tmp_path)) as h:
        session = await claim(h, "old")
        session.append(user("after the upgrade"))
    assert texts(await stored(tmp_path, "old")) == ["hello", "after the upgrade"]
    rows = await query(f"SELECT version FROM {quoted(schema)}.migrations ORDER BY version")
    assert [r[0] for r in rows] == [1, 2] == list(range(1, SCHEMA_VERSION + 1))


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    schema = schema_for(tmp_path)
    await stored(tmp_path, "s")  # creates it
    await query(f"INSERT INTO {quoted(schema)}.migrations (version, name) VALUES (99, 'future')")
    with capture_logs():
        async with harness(make_store(tmp_path)) as h:
            error = await failure(h.sessions.load("s"))
            assert re.search("version 99, newer than", str(error))
    assert error.code == "SCHEMA"


async def test_a_schema_dsh_did_not_make_is_refused(tmp_path: Path) -> None:
    schema = quoted(schema_for(tmp_path))
    await query(f"CREATE SCHEMA {schema}")
    await query(f"CREATE TABLE {schema}.sessions (something integer)")
    with capture_logs():
        async with harness(make_store(tmp_path)) as h:
            error = await failure(h.sessions.load("s"))
            assert re.search("must be empty or made by dsh", str(error))
    assert error.code == "SCHEMA" and "already exists" in str(error)


async def test_stores_starting_together_migrate_once(tmp_path: Path) -> None:
    stores = [make_store(tmp_path) for _ in range(4)]
    harnesses = [harness(store) for store in stores]
    await asyncio.gather(*(h.start() for h in harnesses))
    for h in harnesses:
        await h.close()
    rows = await query(f"SELECT count(*) FROM {quoted(schema_for(tmp_path))}.migrations")
    assert rows[0][0] == SCHEMA_VERSION


# -- leases and fencing tokens --------------------------------------------------------------------


async def test_a_lease_names_its_holder_and_grows_its_token_at_each_acquisition(
    tmp_path: Path,
) -> None:
    store = make_store(tmp_path, owner="host-a", lease_seconds=60)
    async with harness(store) as h:
        session = h.sessions.create("s")
        session.append(user("a"))
        before = time.time()
        await h.sessions.claim(session)
        first = await store.lease_holder("s")
        assert isinstance(first, LeaseInfo) and first.owner == "host-a"
        assert first.token is not None and before + 59 < first.expires_at < time.time() + 61
        await h.sessions.close(session)
        assert await store.lease_holder("s") is None
        again = await claim(h, "s")
        second = await store.lease_holder("s")
        assert second is not None and second.token is not None and second.token > first.token
        await h.sessions.close(again)


async def test_a_live_holder_is_refused_with_its_name(tmp_path: Path) -> None:
    one, two = make_store(tmp_path, owner="host-a"), make_store(tmp_path, owner="host-b")
    async with harness(one) as a, harness(two) as b:
        session = a.sessions.create("s")
        session.append(user("a"))
        await a.sessions.claim(session)
        with pytest.raises(SessionBusy, match="owner 'host-a'") as busy:
            await claim(b, "s")
        assert busy.value.holder is not None and busy.value.holder.pid == os.getpid()


async def test_a_stale_token_is_refused_and_never_merged(tmp_path: Path) -> None:
    """The holder stalls past its lease (no heartbeat), another takes the session over and
    writes; the first one's next write is refused, and what is stored is the second's."""
    slow = make_store(tmp_path, owner="slow", lease_seconds=0.3, heartbeat_seconds=3600)
    fast = make_store(tmp_path, owner="fast", lease_seconds=60)
    async with harness(slow) as a, harness(fast) as b:
        first = a.sessions.create("s")
        first.append(user("a"))
        await a.sessions.claim(first)
        await asyncio.sleep(0.5)  # the lease expires
        second = await claim(b, "s")
        second.append(user("by fast"))
        await second.checkpoint()
        first.append(user("by slow"))
        with pytest.raises(ExceptionGroup) as failed:
            await first.checkpoint()
        error = cause(failed)
        assert isinstance(error, LeaseLost) and isinstance(error, SessionConflict)
        assert "taken over by 'fast'" in str(error) and "never merged" in str(error)
        assert (error.holder, error.stored) == ("fast", 2)
        assert texts(await b.sessions.load("s")) == ["a", "by fast"]
        await b.sessions.close(second)  # releases: nobody holds it now
        with pytest.raises(ExceptionGroup) as again:
            await first.flush()
        assert "taken over by nobody (it was released)" in str(cause(again))
        assert texts(await b.sessions.load("s")) == ["a", "by fast"]
        await a.sessions.close(first)


async def test_an_expired_lease_of_a_dead_holder_is_taken_over(tmp_path: Path) -> None:
    dead = make_store(tmp_path, owner="dead", lease_seconds=3)
    async with harness(dead) as a:
        session = a.sessions.create("s")
        session.append(user("a"))
        await a.sessions.claim(session)
        held = await dead.lease_holder("s")
        await dead.close()  # the process "dies": no heartbeat, no release
        a.started = False
    assert held is not None
    heir = make_store(tmp_path, owner="heir")
    async with harness(heir) as b:
        with pytest.raises(SessionBusy):
            await claim(b, "s")
        await asyncio.sleep(held.expires_at - time.time() + 0.1)
        taken = await claim(b, "s")
        holder = await heir.lease_holder("s")
        assert holder is not None and holder.owner == "heir"
        assert texts(taken.events) == ["a"]


async def test_the_same_owner_takes_its_session_back_at_once_with_a_new_token(
    tmp_path: Path,
) -> None:
    """A host actor restarted under its name resumes its sessions without waiting for the
    lease of its previous life to expire; that previous life cannot write any more."""
    before = make_store(tmp_path, owner="actor-1", lease_seconds=3600)
    after = make_store(tmp_path, owner="actor-1", lease_seconds=3600)
    async with harness(before) as a, harness(after) as b:
        old = a.sessions.create("s")
        old.append(user("a"))
        await a.sessions.claim(old)
        token = (await before.lease_holder("s")).token  # type: ignore[union-attr]
        new = await claim(b, "s")
        assert (await after.lease_holder("s")).token > token  # type: ignore[operator,union-attr]
        old.append(user("from the previous life"))
        with pytest.raises(ExceptionGroup) as failed:
            await old.checkpoint()
        assert isinstance(cause(failed), LeaseLost)
        await a.sessions.close(old)
        new.append(user("b"))
    assert texts(await stored(tmp_path, "s")) == ["a", "b"]


async def test_the_heartbeat_keeps_an_idle_session_held(tmp_path: Path) -> None:
    holder = make_store(tmp_path, owner="a", lease_seconds=1.5, heartbeat_seconds=0.2)
    other = make_store(tmp_path, owner="b")
    async with harness(holder) as a, harness(other) as b:
        session = a.sessions.create("s")
        session.append(user("a"))
        await a.sessions.claim(session)
        claimed = time.time()
        await asyncio.sleep(2.0)  # idle for longer than the lease
        assert await renewed_after(holder, claimed + 1.0)
        with pytest.raises(SessionBusy):
            await claim(b, "s")


async def test_a_heartbeat_slower_than_the_lease_is_warned_about(tmp_path: Path) -> None:
    with capture_logs() as logs:
        async with harness(make_store(tmp_path, lease_seconds=5, heartbeat_seconds=5)):
            pass
    assert [e["event"][:35] for e in logs] == ["the heartbeat is slower than the le"]


async def test_a_renewal_reports_the_leases_taken_over(tmp_path: Path) -> None:
    store = make_store(tmp_path, heartbeat_seconds=3600)
    async with harness(store) as h:
        assert await store.renew() == set()  # holds nothing
        for name in ("kept", "lost"):
            session = h.sessions.create(name)
            session.append(user(name))
            await h.sessions.claim(session)
        await query(
            f"UPDATE {quoted(schema_for(tmp_path))}.leases SET token = token + 1000 "
            "WHERE session_id = 'lost'"
        )
        with capture_logs() as logs:
            assert await store.renew() == {"lost"}
        assert logs[0]["event"] == "session leases taken over"


# -- two processes --------------------------------------------------------------------------------


class Writer:
    """A writer in another process (tests/plugins/persistence_postgres/writer_process.py)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, tmp_path: Path, owner: str, lease: float, heartbeat: float) -> Writer:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.plugins.persistence_postgres.writer_process",
            DSN,
            schema_for(tmp_path),
            owner,
            str(lease),
            str(heartbeat),
            "s",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=Path(__file__).parents[3],
        )
        return cls(process)

    async def do(self, command: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{command}\n".encode())
        await self.process.stdin.drain()
        return (await asyncio.wait_for(self.process.stdout.readline(), 30)).decode().strip()

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()


#: The two processes' lease: long enough for a loaded machine to renew it in time.
LEASE = 2.0


async def test_two_processes_one_writer_and_the_stalled_one_is_fenced_off(
    tmp_path: Path,
) -> None:
    """A second process cannot take a session a live process holds; it can once the holder
    stalled past its lease (stopped with SIGSTOP: no heartbeat), and the holder's writes
    after it wakes up are refused, never merged."""
    first = await Writer.start(tmp_path, "proc-1", lease=LEASE, heartbeat=0.2)
    second = await Writer.start(tmp_path, "proc-2", lease=LEASE, heartbeat=0.2)
    try:
        assert await first.do("claim") == "ok"
        assert await first.do("append one") == "ok"
        assert await first.do("checkpoint") == "ok"
        await asyncio.sleep(LEASE + 0.5)  # longer than the lease: the heartbeat keeps it
        busy = await second.do("claim")
        assert busy.startswith("busy") and f"process {first.process.pid} " in busy
        first.process.send_signal(signal.SIGSTOP)  # the holder stalls
        await asyncio.sleep(LEASE + 0.5)
        assert await second.do("claim") == "ok"
        assert await second.do("append two") == "ok"
        assert await second.do("checkpoint") == "ok"
        first.process.send_signal(signal.SIGCONT)
        assert await first.do("append stale") == "ok"
        refused = await first.do("checkpoint")
        assert refused.startswith("conflict") and "taken over by 'proc-2'" in refused
        assert await second.do("close") == "ok"
    finally:
        await first.stop()
        await second.stop()
    assert texts(await stored(tmp_path, "s")) == ["one", "two"]


# -- damage ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "found"),
    [
        ("DELETE FROM {s}.events WHERE seq = 1", "misses the event with seq 1"),
        ("DELETE FROM {s}.events WHERE seq = 2", "holds 2 event(s) but 3 were written"),
        ("DELETE FROM {s}.sessions", "has events but no session row"),
        ("UPDATE {s}.events SET data = 'not json' WHERE seq = 0", "unreadable event with seq 0"),
    ],
)
async def test_damage_is_an_error_naming_the_session_never_a_shorter_log(
    tmp_path: Path, damage: str, found: str
) -> None:
    async with harness(make_store(tmp_path)) as h:
        h.sessions.create("s", events("a", "b", "c"))
    await query(damage.format(s=quoted(schema_for(tmp_path))))
    async with harness(make_store(tmp_path)) as h:
        error = await failure(h.sessions.load("s"))
        assert found in str(error)
    assert error.code == "DAMAGED" and "session 's'" in str(error)


async def test_text_with_nul_characters_round_trips(tmp_path: Path) -> None:
    async with harness(make_store(tmp_path)) as h:
        h.sessions.create("s").append(user("a\x00b"))
    assert texts(await stored(tmp_path, "s")) == ["a\x00b"]
    async with harness(make_store(tmp_path)) as h:
        [summary] = await h.sessions.stored()
    assert summary.title == "ab"


async def test_a_stored_session_replays_and_verifies(tmp_path: Path) -> None:
    async with harness(make_store(tmp_path)) as h:
        h.llm.register_adapter(["m"], ScriptedAdapter([text_response("hi"), text_response("yo")]))
        agent = h.agent_loop.create("a", AgentOptions(model="m"), session_id="s")
        for message in ("one", "two"):
            agent.send(message)
            await agent.wait_idle()
    report = verify(await stored(tmp_path, "s") or [])
    assert report.verified == 2 and report.mismatches == ()


async def test_a_log_changed_behind_the_lease_is_a_conflict_not_overwritten(
    tmp_path: Path,
) -> None:
    async with harness(make_store(tmp_path)) as h:
        session = h.sessions.create("s")
        session.append(user("a"))
        await session.checkpoint()
        await query(f"UPDATE {quoted(schema_for(tmp_path))}.sessions SET events = 7")
        session.append(user("b"))
        with pytest.raises(ExceptionGroup) as failed:
            await session.checkpoint()
        error = cause(failed)
        assert isinstance(error, SessionConflict) and (error.stored, error.expected) == (7, 1)
        await h.sessions.close(session)


async def test_the_sessions_a_holder_left_are_listed_by_its_owner_label(tmp_path: Path) -> None:
    """What a host restarted under its old name resumes: every session whose lease still
    names it, expired or not; a released session is not among them."""
    dead = make_store(tmp_path, owner="actor-1", lease_seconds=3)
    async with harness(dead) as a:
        for sid in ("s2", "s1", "done"):
            session = a.sessions.create(sid)
            session.append(user(sid))
            await a.sessions.claim(session)
        await a.sessions.close(a.sessions.get("done"))  # type: ignore[arg-type]
        assert await dead.sessions_held_by("actor-1") == ["s1", "s2"]
        await dead.close()  # dies holding s1 and s2
        a.started = False
    other = make_store(tmp_path, owner="actor-2")
    async with harness(other):
        assert await other.sessions_held_by("actor-2") == []
        assert await other.sessions_held_by("actor-1") == ["s1", "s2"]
    assert await PostgresStore().sessions_held_by("actor-1") == []  # disabled: knows nothing
