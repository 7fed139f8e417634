"""``persistence_sqlite``: every session in one SQLite database (WAL mode), for users with
thousands of sessions — listing and searching read one indexed table, never the events.

The same contract as ``persistence_jsonl``: events are buffered in ``dsh_session_event``; each
checkpoint and each flush writes the buffer in one transaction; ``fsync`` chooses when a commit
is also synced to disk (SQLite's ``synchronous`` pragma). One writer per session: a lease row in
table ``writers``, taken and renewed in the transactions that write (see :class:`Lease`). Off by
default: enable it with ``[persistence_sqlite] enabled = true`` (and usually
``[persistence_jsonl] enabled = false``). See ``docs/plugins/persistence_sqlite.md``.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import field, frozen

from dsh.plugin import (
    Batch,
    BufferedStore,
    DshError,
    EventCodec,
    Fsync,
    LeaseInfo,
    Session,
    SessionBusy,
    SessionConflict,
    SessionEvent,
    SessionSummary,
    Value,
    dumps,
    get_logger,
    greater_than,
    hookimpl,
    imported,
    title_of,
)

if TYPE_CHECKING:
    import sqlite3

    from dsh.plugin import Harness
    from dsh_plugins.persistence_sqlite.leases import Lease, process_alive

__all__ = [
    "SCHEMA_VERSION",
    "SECTION",
    "Fsync",
    "Lease",
    "SqliteConfig",
    "SqliteStore",
    "default_path",
    "process_alive",
]

SECTION = "persistence_sqlite"
#: 2 added table ``writers`` (the leases); a version-1 database is upgraded on open.
SCHEMA_VERSION = 2
T = TypeVar("T")
log = get_logger("dsh_plugins.persistence_sqlite")
# The leases load when a store is enabled: a harness whose SQLite store is off never needs them.
_HOMES = {
    "Lease": "dsh_plugins.persistence_sqlite.leases",
    "process_alive": "dsh_plugins.persistence_sqlite.leases",
}


def __getattr__(name: str) -> Any:
    return imported(__name__, name, _HOMES)


SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id      TEXT PRIMARY KEY,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    cwd     TEXT NOT NULL,
    parent  TEXT,
    title   TEXT NOT NULL DEFAULT '',
    events  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sessions_by_updated ON sessions (updated);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    time       REAL NOT NULL,
    type       TEXT NOT NULL,
    data       TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS writers (
    session_id TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    started    INTEGER,
    host       TEXT NOT NULL,
    since      REAL NOT NULL,
    renewed    REAL NOT NULL
);
"""

_UPSERT = """
INSERT INTO sessions (id, created, updated, cwd, parent, title, events)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    updated = excluded.updated,
    events = excluded.events,
    title = CASE WHEN sessions.title = '' THEN excluded.title ELSE sessions.title END
"""
_LIST = """
SELECT id, created, updated, events, title, parent FROM sessions
WHERE :query IS NULL OR instr(id, :query) > 0 OR instr(title, :query) > 0
ORDER BY updated DESC LIMIT :limit
"""
_DAMAGED = "check it with PRAGMA integrity_check; restore it from a backup"


@frozen(repr=False, eq=False)
class SqliteConfig(Value):
    """Section ``persistence_sqlite``. ``path`` defaults to ``$XDG_DATA_HOME/dsh/sessions.db``.
    ``fsync``: commits are synced at ``turn`` end (checkpoints commit without a sync, which a
    killed process survives), at every ``checkpoint``, or ``never``. ``quick_check`` runs
    ``PRAGMA quick_check`` when the database is opened (its cost grows with the database).
    ``lease_seconds``: how long a lease held from another host lasts without a commit."""

    enabled: bool = False
    path: str = ""
    fsync: Fsync = "turn"
    quick_check: bool = False
    lease_seconds: float = field(default=3600.0, validator=greater_than(0))


def default_path() -> Path:
    """``$XDG_DATA_HOME/dsh/sessions.db``, read now."""
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join("~", ".local", "share")
    return Path(data_home).expanduser() / "dsh" / "sessions.db"


def _quick_check(db: sqlite3.Connection, path: Path) -> None:
    """``PRAGMA quick_check``, or an error naming the damage."""
    problems = [row[0] for row in db.execute("PRAGMA quick_check")]
    if problems != ["ok"]:
        db.close()
        raise DshError(
            f"{path}: the session database is damaged (PRAGMA quick_check: "
            f"{'; '.join(problems[:3])}); restore it from a backup, or rescue what is left with "
            "the sqlite3 shell's .recover"
        )


class SqliteStore(BufferedStore):
    """The SQLite session store. ``path`` and ``fsync``, when given, win over the config; a
    store given a ``path`` is enabled whatever the config says (a host that places it wants
    it)."""

    def __init__(self, path: str | Path | None = None, *, fsync: Fsync | None = None) -> None:
        super().__init__()
        self._explicit_path = None if path is None else Path(path)
        self._explicit_fsync = fsync
        self.path: Path | None = None
        self._db: sqlite3.Connection | None = None
        self._synchronous = ""
        self._codec = EventCodec()
        self._quick_check = False
        self._lease_seconds = 3600.0
        #: Tells this store's leases from those of other stores, in this process or another.
        self._owner = secrets.token_hex(8)
        #: This process's start time, which its leases carry (read once the store is enabled).
        self._started: int | None = None

    @property
    def enabled(self) -> bool:
        return self.path is not None

    # -- lifetime --------------------------------------------------------------------------
    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, SqliteConfig)

    @hookimpl
    def dsh_harness_start(self, harness: Harness) -> None:
        config = harness.config.section(SECTION, SqliteConfig)
        self._codec = harness.events
        self.fsync = self._explicit_fsync or config.fsync
        self._quick_check = config.quick_check
        self._lease_seconds = config.lease_seconds
        if not (config.enabled or self._explicit_path):
            return
        configured = Path(os.path.expandvars(config.path)).expanduser() if config.path else None
        self.path = self._explicit_path or configured or default_path()
        from dsh_plugins.persistence_sqlite.leases import started_self

        self._started = started_self()

    def _connection(self) -> sqlite3.Connection:
        """The database, opened on first use (so that a broken one fails the call that needs
        it, loudly, rather than the harness start, where failures are only logged)."""
        if self._db is None:
            assert self.path is not None
            self._db = self._connect(self.path, self._quick_check)
        return self._db

    @staticmethod
    def _connect(path: Path, quick_check: bool) -> sqlite3.Connection:
        import sqlite3  # here, not at import: a harness without this store never loads it

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Created private, like the JSONL files (SQLite gives its -wal and -shm the same mode).
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        except OSError as exc:
            raise DshError(f"cannot open session database {path}: {exc}") from exc
        try:
            db = sqlite3.connect(path, isolation_level=None)
            db.execute("PRAGMA busy_timeout = 5000")
            db.execute("PRAGMA journal_mode = WAL")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                db.close()
                raise DshError(
                    f"{path}: session database schema {version} is newer than this dsh reads "
                    f"({SCHEMA_VERSION}); upgrade dsh"
                )
            if quick_check:
                _quick_check(db, path)
            db.executescript(SCHEMA)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise DshError(f"cannot open session database {path}: {exc}") from exc
        return db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def release(self, session_id: str) -> None:
        """Drop this store's lease on ``session_id`` (a failure is logged: a lease left behind
        is taken over once this process has ended)."""
        import sqlite3

        try:
            self._connection().execute(
                "DELETE FROM writers WHERE session_id = ? AND owner = ?", (session_id, self._owner)
            )
        except sqlite3.Error as exc:
            log.warning("cannot release session leases", path=str(self.path), error=str(exc))

    async def lease_holder(self, session_id: str) -> LeaseInfo | None:
        """The live lease on ``session_id`` from table ``writers`` (SQLite has no fencing
        tokens: ``token`` is ``None``); ``None`` when there is none or its holder is gone."""
        if not self.enabled:
            return None
        columns = "owner, pid, started, host, since, renewed"
        row = (
            self._connection()
            .execute(f"SELECT {columns} FROM writers WHERE session_id = ?", (session_id,))
            .fetchone()
        )
        if row is None:
            return None
        from dsh_plugins.persistence_sqlite.leases import Lease

        lease = Lease(*row)
        if lease.stale(time.time(), self._lease_seconds):
            return None
        return LeaseInfo(lease.owner, None, lease.renewed + self._lease_seconds)

    # -- writing ---------------------------------------------------------------------------
    def acquire(self, session: Session) -> int:
        """Take the lease in a transaction of its own that also reads what is stored (synced
        as a checkpoint is: claims come with the first checkpoint)."""
        stored = self._stored
        return self._transaction(session, lambda db: stored(db, session), self.durable(False))

    def replace(self, batch: Batch) -> None:
        self._transaction(batch.session, lambda db: self._write(db, batch), batch.durable)

    def append(self, batch: Batch) -> None:
        self._transaction(batch.session, lambda db: self._write(db, batch), batch.durable)

    def _transaction(
        self, session: Session, work: Callable[[sqlite3.Connection], T], sync: bool
    ) -> T:
        """Run ``work`` in one transaction that first takes or renews this store's lease on
        ``session``; a failure rolls it all back."""
        import sqlite3

        db = self._connection()
        self._set_synchronous(db, "FULL" if sync else "OFF" if self.fsync == "never" else "NORMAL")
        try:
            db.execute("BEGIN IMMEDIATE")
            self._lease(db, session.id)
            result = work(db)
            db.execute("COMMIT")
        except (sqlite3.Error, DshError) as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            if isinstance(exc, DshError):
                raise
            raise DshError(f"cannot write session {session.id!r} to {self.path}: {exc}") from exc
        return result

    def _lease(self, db: sqlite3.Connection, session_id: str) -> None:
        """Take or renew this store's lease on ``session_id`` (inside the write transaction), or
        raise :class:`SessionBusy` naming the live holder."""
        from dsh_plugins.persistence_sqlite.leases import Lease

        now = time.time()
        row = db.execute(
            "SELECT owner, pid, started, host, since, renewed FROM writers WHERE session_id = ?",
            (session_id,),
        ).fetchone()
        held = None if row is None else Lease(*row)
        if held is not None and held.owner == self._owner:
            db.execute("UPDATE writers SET renewed = ? WHERE session_id = ?", (now, session_id))
            return
        if held is not None and not held.stale(now, self._lease_seconds):
            raise SessionBusy(session_id, held.writer(), f" (lease in {self.path})")
        db.execute(
            "INSERT OR REPLACE INTO writers VALUES (?, ?, ?, ?, ?, ?, ?)",
            (session_id, self._owner, os.getpid(), self._started, socket.gethostname(), now, now),
        )

    def _count(self, db: sqlite3.Connection, session_id: str) -> int | None:
        row = db.execute("SELECT events FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return None if row is None else int(row[0])

    def _stored(self, db: sqlite3.Connection, session: Session) -> int:
        """What a session continues: a new session, or one loaded from another store, is
        written whole; a resumed one must find what it was loaded with."""
        stored = self._count(db, session.id)
        if not session.persisted or stored is None:
            return 0
        if stored != session.persisted:
            raise SessionConflict(session.id, stored, session.persisted, f" (in {self.path})")
        return stored

    def _write(self, db: sqlite3.Connection, batch: Batch) -> None:
        session = batch.session
        if not batch.stored:  # written whole: a new session replaces a stored one with its id
            db.execute("DELETE FROM events WHERE session_id = ?", (session.id,))
            db.execute("DELETE FROM sessions WHERE id = ?", (session.id,))
        else:
            stored = self._count(db, session.id) or 0
            if stored != batch.stored:
                raise SessionConflict(session.id, stored, batch.stored, f" (in {self.path})")
        encode = self._codec.encode
        db.executemany(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
            [(session.id, e.seq, e.time, e.type, dumps(encode(e)["data"])) for e in batch.events],
        )
        row = (
            session.id,
            session.created,
            time.time(),
            session.cwd,
            session.parent,
            title_of(batch.events),
            batch.stored + len(batch.events),
        )
        db.execute(_UPSERT, row)

    def _set_synchronous(self, db: sqlite3.Connection, level: str) -> None:
        if level != self._synchronous:
            db.execute(f"PRAGMA synchronous = {level}")
            self._synchronous = level

    # -- reading ---------------------------------------------------------------------------
    def load(self, session_id: str) -> list[SessionEvent] | None:
        import sqlite3

        db = self._connection()
        try:
            return self._load(db, session_id)
        except sqlite3.Error as exc:
            raise DshError(
                f"{self.path}: cannot read session {session_id!r}: {exc} ({_DAMAGED})"
            ) from exc

    def _load(self, db: sqlite3.Connection, session_id: str) -> list[SessionEvent] | None:
        """The events, checked against the count the session's row holds: damage that lost
        rows is an error that names the session, never a shorter log."""
        row = db.execute("SELECT events FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            orphan = "SELECT 1 FROM events WHERE session_id = ? LIMIT 1"
            if db.execute(orphan, (session_id,)).fetchone() is not None:
                raise DshError(
                    f"{self.path}: session {session_id!r} has events but no session row: "
                    f"the database is damaged ({_DAMAGED})"
                )
            return None
        rows = db.execute(
            "SELECT seq, time, type, data FROM events WHERE session_id = ? ORDER BY seq",
            (session_id,),
        )
        events: list[SessionEvent] = []
        decode = self._codec.decode
        for seq, time_, type_, data in rows:
            if seq != len(events):
                raise DshError(
                    f"{self.path}: session {session_id!r} misses the event with seq {len(events)}"
                )
            try:
                raw = {"type": type_, "seq": seq, "time": time_, "data": json.loads(data)}
                events.append(decode(raw))
            except Exception as exc:
                raise DshError(
                    f"{self.path}: session {session_id!r}: the event with seq {seq} is "
                    f"unreadable: {exc}"
                ) from exc
        if len(events) != row[0]:
            raise DshError(
                f"{self.path}: session {session_id!r} holds {len(events)} event(s) but "
                f"{row[0]} were written: the database is damaged ({_DAMAGED})"
            )
        return events

    def list_sessions(self, query: str | None, limit: int) -> list[SessionSummary]:
        rows = self._connection().execute(_LIST, {"query": query, "limit": limit})
        return [SessionSummary(*row) for row in rows]
