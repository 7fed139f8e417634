"""``persistence_postgres``: sessions in a PostgreSQL database that many processes and
machines share, with one writer per session across all of them.

The same contract as the other stores (see :class:`dsh.plugin.AsyncBufferedStore`): events
are buffered in ``dsh_session_event``; each checkpoint and each flush writes the buffer in one
transaction (one batched insert) that commits durably before the hook returns. One writer per
session: a lease row per session (owner label, fencing token, expiry). The token is taken
anew at every acquisition and checked inside every write transaction, so a writer whose lease
was taken over is refused (:class:`LeaseLost`) and never merged; the lease is renewed by every
write and by a heartbeat while the session is idle, and a dead holder's session can be taken
over once its lease expired (at once by a store with the same ``owner`` label: the holder
restarted). Off by default: ``[persistence_postgres] enabled = true`` with the DSN in
``DSH_POSTGRES_DSN``. Needs the ``postgres`` extra (asyncpg). See
``docs/plugins/persistence_postgres.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import attrs

from dsh.plugin import (
    AsyncBufferedStore,
    Batch,
    DshError,
    EventCodec,
    LeaseInfo,
    Session,
    SessionBusy,
    SessionConflict,
    SessionEvent,
    SessionSummary,
    Writer,
    dumps,
    get_logger,
    hookimpl,
    title_of,
)
from dsh_plugins.persistence_postgres.config import (
    DSN_ENV,
    INSTALL,
    SECTION,
    PostgresConfig,
    PostgresStoreError,
    asyncpg_missing,
    default_owner,
    shown,
)
from dsh_plugins.persistence_postgres.schema import (
    SCHEMA_VERSION,
    Connection,
    Pool,
    Record,
    migrate,
    quoted,
)

if TYPE_CHECKING:
    from dsh.plugin import Harness

__all__ = [
    "DSN_ENV",
    "INSTALL",
    "SCHEMA_VERSION",
    "SECTION",
    "LeaseLost",
    "PostgresConfig",
    "PostgresStore",
    "PostgresStoreError",
]

T = TypeVar("T")
log = get_logger("dsh_plugins.persistence_postgres")


class _Asyncpg(Protocol):
    """The asyncpg module, as far as the store uses it."""

    PostgresError: type[Exception]
    InterfaceError: type[Exception]

    def create_pool(self, dsn: str, **options: Any) -> Awaitable[Pool]: ...


def _asyncpg() -> _Asyncpg:
    return cast(_Asyncpg, importlib.import_module("asyncpg"))


def _why(exc: BaseException) -> str:
    """What went wrong, also for errors without a message (a timeout)."""
    return str(exc) or type(exc).__name__


class LeaseLost(SessionConflict):
    """A write carried a fencing token that is no longer the session's: another writer took
    the session over (this one's lease had expired). Nothing of the write was stored."""

    def __init__(self, session_id: str, token: int, holder: str | None, stored: int) -> None:
        by = "nobody (it was released)" if holder is None else repr(holder)
        DshError.__init__(
            self,
            f"session {session_id!r}: this writer's lease (token {token}) was taken over by "
            f"{by}; a write with a stale token is refused, never merged, so nothing was "
            "written: resume the session again to continue from what is stored",
        )
        self.session_id = session_id
        self.stored = stored
        self.expected = stored
        self.where = ""
        self.token = token
        self.holder = holder

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.session_id, self.token, self.holder, self.stored)


_LEASE = """
SELECT owner, token, pid, host, extract(epoch FROM since)::float8 AS since,
       expires_at > now() AS live
FROM {s}.leases WHERE session_id = $1 FOR UPDATE
"""
_TAKE = """
UPDATE {s}.leases SET owner = $2, token = nextval('{s}.lease_tokens'), pid = $3, host = $4,
    since = now(), expires_at = now() + make_interval(secs => $5)
WHERE session_id = $1 RETURNING token
"""
_RENEW = """
UPDATE {s}.leases SET expires_at = now() + make_interval(secs => $3)
WHERE session_id = $1 AND token = $2
RETURNING coalesce((SELECT events FROM {s}.sessions WHERE id = $1), 0) AS stored
"""
_RENEW_ALL = """
UPDATE {s}.leases AS l SET expires_at = now() + make_interval(secs => $3)
FROM unnest($1::text[], $2::bigint[]) AS h(session_id, token)
WHERE l.session_id = h.session_id AND l.token = h.token RETURNING l.session_id
"""
#: The batch's events and the session row, in one statement (one round trip).
_INSERT = """
WITH inserted AS (
    INSERT INTO {s}.events (session_id, seq, time, type, data)
    SELECT $1, * FROM unnest($2::integer[], $3::float8[], $4::text[], $5::text[])
)
INSERT INTO {s}.sessions AS t (id, created, updated, cwd, parent, title, events)
VALUES ($1, $6, extract(epoch FROM clock_timestamp())::float8, $7, $8, $9, $10)
ON CONFLICT (id) DO UPDATE SET
    updated = excluded.updated,
    events = excluded.events,
    title = CASE WHEN t.title = '' THEN excluded.title ELSE t.title END
"""
_LIST = """
SELECT id, created, updated, events, title, parent FROM {s}.sessions
WHERE $1::text IS NULL OR strpos(id, $1::text) > 0 OR strpos(title, $1::text) > 0
ORDER BY updated DESC LIMIT $2
"""


class PostgresStore(AsyncBufferedStore):
    """The PostgreSQL session store. Arguments given win over the config section; a store
    given a ``dsn`` is enabled whatever the config says (a host that places it wants it)."""

    fsync = "checkpoint"  # every commit is durable (PostgreSQL's synchronous_commit)

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str | None = None,
        owner: str | None = None,
        lease_seconds: float | None = None,
        heartbeat_seconds: float | None = None,
    ) -> None:
        super().__init__()
        given: dict[str, Any] = {
            "schema": schema,
            "owner": owner,
            "lease_seconds": lease_seconds,
            "heartbeat_seconds": heartbeat_seconds,
        }
        self._explicit_dsn = dsn
        self._explicit = {k: v for k, v in given.items() if v is not None}
        self.config = attrs.evolve(PostgresConfig(), **self._explicit)
        #: The database, once the store is enabled (``None``: the store stores nothing).
        self.dsn: str | None = None
        #: This store's label in the leases it holds.
        self.owner = self.config.owner or default_owner()
        self._pool: Pool | None = None
        self._connecting = asyncio.Lock()
        self._tokens: dict[str, int] = {}
        self._heartbeat: asyncio.Task[None] | None = None
        self._codec = EventCodec()

    @property
    def enabled(self) -> bool:
        return self.dsn is not None

    @property
    def _s(self) -> str:
        return quoted(self.config.schema)

    @property
    def where(self) -> str:
        """The database and schema, password hidden (for messages)."""
        return f"{shown(self.dsn or '')} (schema {self.config.schema})"

    # -- lifetime --------------------------------------------------------------------------
    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, PostgresConfig)

    @hookimpl
    async def dsh_harness_start(self, harness: Harness) -> None:
        config = harness.config.section(SECTION, PostgresConfig)
        self.config = attrs.evolve(config, **self._explicit)
        self.owner = self.config.owner or self.owner
        self._codec = harness.events
        if not (self.config.enabled or self._explicit_dsn):
            return
        self.dsn = self._explicit_dsn or self.config.dsn or os.environ.get(DSN_ENV) or ""
        if self.config.heartbeat_seconds >= self.config.lease_seconds:
            log.warning(
                "the heartbeat is slower than the lease: idle sessions lose their leases; "
                f"set [{SECTION}] heartbeat_seconds well below lease_seconds",
                heartbeat_seconds=self.config.heartbeat_seconds,
                lease_seconds=self.config.lease_seconds,
            )
        try:
            await self._ready()
        except PostgresStoreError as exc:  # the calls that need the database raise it again
            log.error("session store not ready", code=exc.code, error=exc.message)

    async def _ready(self) -> Pool:
        """The connection pool, opened (and the schema migrated) on first use."""
        async with self._connecting:
            if self._pool is None:
                self._pool = await self._open()
            return self._pool

    async def _open(self) -> Pool:
        missing = asyncpg_missing()
        if missing is not None:
            raise missing
        if not self.dsn:
            raise PostgresStoreError(
                f"[{SECTION}] is enabled but no database is given: set the {DSN_ENV} "
                f"environment variable (or dsn in [{SECTION}]) to a DSN such as "
                "postgresql://user:password@host:5432/database",
                "NO_DSN",
            )
        try:
            pool = await _asyncpg().create_pool(
                self.dsn,
                min_size=1,
                max_size=self.config.pool_size,
                timeout=self.config.connect_timeout,
                command_timeout=self.config.command_timeout,
            )
        except self._database_errors(ValueError) as exc:
            raise PostgresStoreError(
                f"cannot connect to PostgreSQL at {shown(self.dsn)}: {_why(exc)}; "
                f"check {DSN_ENV} (or dsn in [{SECTION}]) and that the server runs",
                "UNAVAILABLE",
            ) from exc
        try:
            async with pool.acquire() as db:
                await migrate(db, self.config.schema)
        except self._database_errors() as exc:
            await pool.close()
            raise PostgresStoreError(
                f"cannot prepare schema {self.config.schema!r} at {shown(self.dsn)}: "
                f"{_why(exc)}; it must be empty or made by dsh",
                "SCHEMA",
            ) from exc
        except BaseException:
            await pool.close()
            raise
        return pool

    def _database_errors(self, *more: type[BaseException]) -> tuple[type[BaseException], ...]:
        """What asyncpg raises when the server cannot be reached or refuses a statement."""
        asyncpg = _asyncpg()
        return (*more, OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)

    async def _run(
        self,
        what: str,
        work: Callable[[Connection], Awaitable[T]],
        **transaction: Any,
    ) -> T:
        """Run ``work`` in one transaction; a database failure rolls it all back and is an
        error saying ``what`` failed."""
        pool = await self._ready()
        try:
            async with pool.acquire() as db, db.transaction(**transaction):
                return await work(db)
        except self._database_errors() as exc:
            raise PostgresStoreError(
                f"cannot {what} in {self.where}: {_why(exc)}; nothing of it "
                "was stored (what was not stored stays buffered for the next write)",
                "WRITE",
            ) from exc

    async def close(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    # -- leases ----------------------------------------------------------------------------
    async def acquire(self, session: Session) -> int:
        """Take the lease (a new token) in a transaction that also reads what is stored."""
        token, stored = await self._run(
            f"claim session {session.id!r}", lambda db: self._acquire(db, session)
        )
        self._tokens[session.id] = token
        if self._heartbeat is None:
            self._heartbeat = asyncio.create_task(self._beat(), name="dsh-postgres-heartbeat")
        return stored

    async def _acquire(self, db: Connection, session: Session) -> tuple[int, int]:
        s = self._s
        await db.execute(
            f"INSERT INTO {s}.leases VALUES ($1, '', 0, 0, '', now(), '-infinity') "
            "ON CONFLICT (session_id) DO NOTHING",
            session.id,
        )
        held = await db.fetchrow(_LEASE.format(s=s), session.id)
        assert held is not None  # inserted above, locked since
        if held["live"] and held["owner"] != self.owner:
            writer = Writer(held["pid"], held["host"], held["since"])
            raise SessionBusy(session.id, writer, f" (owner {held['owner']!r}, in {self.where})")
        token: int = await db.fetchval(
            _TAKE.format(s=s),
            session.id,
            self.owner,
            os.getpid(),
            socket.gethostname(),
            self.config.lease_seconds,
        )
        return token, await self._stored(db, session)

    async def _stored(self, db: Connection, session: Session) -> int:
        """What a session continues: a new session, or one loaded from another store, is
        written whole; a resumed one must find what it was loaded with."""
        stored: int | None = await db.fetchval(
            f"SELECT events FROM {self._s}.sessions WHERE id = $1", session.id
        )
        if not session.persisted or stored is None:
            return 0
        if stored != session.persisted:
            raise SessionConflict(session.id, stored, session.persisted, f" (in {self.where})")
        return stored

    async def release(self, session_id: str) -> None:
        """Drop this store's lease on ``session_id`` (a failure is logged: the lease then
        expires after ``lease_seconds``)."""
        token = self._tokens.pop(session_id)
        try:
            await self._run(
                f"release session {session_id!r}",
                lambda db: db.execute(
                    f"DELETE FROM {self._s}.leases WHERE session_id = $1 AND token = $2",
                    session_id,
                    token,
                ),
            )
        except PostgresStoreError as exc:
            log.warning("cannot release a session lease", session=session_id, error=exc.message)

    async def renew(self) -> set[str]:
        """Renew every lease this store holds (the heartbeat calls it); returns the sessions
        whose lease was found taken over (their next write fails with :class:`LeaseLost`)."""
        if not self._tokens:
            return set()
        ids, tokens = list(self._tokens), list(self._tokens.values())
        rows = await self._run(
            "renew session leases",
            lambda db: db.fetch(
                _RENEW_ALL.format(s=self._s), ids, tokens, self.config.lease_seconds
            ),
        )
        lost = set(ids) - {row[0] for row in rows}
        if lost:
            log.warning("session leases taken over", sessions=sorted(lost), where=self.where)
        return lost

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_seconds)
            try:
                await self.renew()
            except PostgresStoreError as exc:
                log.warning("cannot renew session leases", error=exc.message)

    async def lease_holder(self, session_id: str) -> LeaseInfo | None:
        if not self.enabled:
            return None
        row = await self._run(
            f"read the lease of session {session_id!r}",
            lambda db: db.fetchrow(
                f"SELECT owner, token, extract(epoch FROM expires_at)::float8 AS expires_at "
                f"FROM {self._s}.leases WHERE session_id = $1 AND expires_at > now()",
                session_id,
            ),
        )
        return None if row is None else LeaseInfo(row["owner"], row["token"], row["expires_at"])

    async def sessions_held_by(self, owner: str) -> list[str]:
        if not self.enabled:
            return []
        rows = await self._run(
            f"read the leases of {owner!r}",
            lambda db: db.fetch(
                f"SELECT session_id FROM {self._s}.leases WHERE owner = $1 ORDER BY session_id",
                owner,
            ),
        )
        return [row["session_id"] for row in rows]

    # -- writing ---------------------------------------------------------------------------
    async def replace(self, batch: Batch) -> None:
        await self._run(f"write session {batch.session.id!r}", lambda db: self._write(db, batch))

    async def append(self, batch: Batch) -> None:
        await self._run(f"write session {batch.session.id!r}", lambda db: self._write(db, batch))

    async def _write(self, db: Connection, batch: Batch) -> None:
        session, s = batch.session, self._s
        stored = await self._fence(db, session.id)
        if not batch.stored:  # written whole: a new session replaces a stored one with its id
            await db.execute(f"DELETE FROM {s}.events WHERE session_id = $1", session.id)
            await db.execute(f"DELETE FROM {s}.sessions WHERE id = $1", session.id)
        elif stored != batch.stored:
            raise SessionConflict(session.id, stored, batch.stored, f" (in {self.where})")
        encode = self._codec.encode
        events = batch.events
        await db.execute(
            _INSERT.format(s=s),
            session.id,
            [e.seq for e in events],
            [e.time for e in events],
            [e.type for e in events],
            [dumps(encode(e)["data"]) for e in events],
            session.created,
            session.cwd,
            session.parent,
            title_of(events).replace("\x00", ""),  # text columns hold no NUL
            batch.stored + len(events),
        )

    async def _fence(self, db: Connection, session_id: str) -> int:
        """Renew this store's lease in the write's transaction and say how many events are
        stored, or raise :class:`LeaseLost` when its token is no longer the session's."""
        token = self._tokens[session_id]
        renewed = await db.fetchrow(
            _RENEW.format(s=self._s), session_id, token, self.config.lease_seconds
        )
        if renewed is None:
            held = await db.fetchrow(
                f"SELECT owner, coalesce((SELECT events FROM {self._s}.sessions WHERE id = $1), "
                f"0) AS stored FROM (SELECT 1) AS one LEFT JOIN {self._s}.leases "
                "ON session_id = $1",
                session_id,
            )
            assert held is not None  # one row, whatever the tables hold
            raise LeaseLost(session_id, token, held["owner"], held["stored"])
        stored: int = renewed["stored"]
        return stored

    # -- reading ---------------------------------------------------------------------------
    async def load(self, session_id: str) -> list[SessionEvent] | None:
        return await self._run(
            f"read session {session_id!r}",
            lambda db: self._load(db, session_id),
            isolation="repeatable_read",
            readonly=True,
        )

    async def _load(self, db: Connection, session_id: str) -> list[SessionEvent] | None:
        """The events, checked against the count the session's row holds: damage that lost
        rows is an error that names the session, never a shorter log."""
        s = self._s
        count: int | None = await db.fetchval(
            f"SELECT events FROM {s}.sessions WHERE id = $1", session_id
        )
        if count is None:
            orphan = f"SELECT 1 FROM {s}.events WHERE session_id = $1 LIMIT 1"
            if await db.fetchval(orphan, session_id) is not None:
                raise self._damaged(session_id, "has events but no session row")
            return None
        rows = await db.fetch(
            f"SELECT seq, time, type, data FROM {s}.events WHERE session_id = $1 ORDER BY seq",
            session_id,
        )
        events: list[SessionEvent] = []
        for row in rows:
            events.append(self._decode(session_id, len(events), row))
        if len(events) != count:
            raise self._damaged(
                session_id, f"holds {len(events)} event(s) but {count} were written"
            )
        return events

    def _decode(self, session_id: str, expected: int, row: Record) -> SessionEvent:
        seq = row["seq"]
        if seq != expected:
            raise self._damaged(session_id, f"misses the event with seq {expected}")
        try:
            raw = {
                "type": row["type"],
                "seq": seq,
                "time": row["time"],
                "data": json.loads(row["data"]),
            }
            return self._codec.decode(raw)
        except Exception as exc:
            raise self._damaged(
                session_id, f"has an unreadable event with seq {seq}: {exc}"
            ) from exc

    def _damaged(self, session_id: str, what: str) -> PostgresStoreError:
        return PostgresStoreError(
            f"session {session_id!r} in {self.where} {what}: the stored log is damaged; "
            "restore the database from a backup",
            "DAMAGED",
        )

    async def list_sessions(self, query: str | None, limit: int) -> list[SessionSummary]:
        rows = await self._run(
            "list sessions",
            lambda db: db.fetch(_LIST.format(s=self._s), query, limit),
            readonly=True,
        )
        return [SessionSummary(*(row[i] for i in range(6))) for row in rows]
