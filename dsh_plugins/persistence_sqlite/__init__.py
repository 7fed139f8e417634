"""``persistence_sqlite``: every session in one SQLite database (WAL mode), for users with
thousands of sessions — listing and searching read one indexed table, never the events.

The same contract as ``persistence_jsonl``: events are buffered in ``dsh_session_event``; each
checkpoint and each flush writes the buffer in one transaction; ``fsync`` chooses when a commit
is also synced to disk (SQLite's ``synchronous`` pragma). Off by default: enable it with
``[persistence_sqlite] enabled = true`` (and usually ``[persistence_jsonl] enabled = false``).
See ``docs/plugins/persistence_sqlite.md``.
"""

from __future__ import annotations

import json
import json.encoder
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from attrs import frozen

from dsh.content import text_of
from dsh.converter import EventCodec, dumps
from dsh.errors import DshError
from dsh.events import SessionEvent, UserMessage
from dsh.markers import hookimpl
from dsh.session import Session, SessionSummary

if TYPE_CHECKING:
    from dsh.harness import Harness

__all__ = ["SCHEMA_VERSION", "SECTION", "Fsync", "SqliteConfig", "SqliteStore", "default_path"]

SECTION = "persistence_sqlite"
SCHEMA_VERSION = 1
Fsync = Literal["turn", "checkpoint", "never"]

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
_TITLE_CHARS = 120


@frozen
class SqliteConfig:
    """Section ``persistence_sqlite``. ``path`` defaults to ``$XDG_DATA_HOME/dsh/sessions.db``.
    ``fsync``: commits are synced at ``turn`` end (checkpoints commit without a sync, which a
    killed process survives), at every ``checkpoint``, or ``never``."""

    enabled: bool = False
    path: str = ""
    fsync: Fsync = "turn"


def default_path() -> Path:
    """``$XDG_DATA_HOME/dsh/sessions.db``, read now."""
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join("~", ".local", "share")
    return Path(data_home).expanduser() / "dsh" / "sessions.db"


def _title(events: Sequence[SessionEvent]) -> str:
    for event in events:
        if isinstance(event.data, UserMessage):
            return text_of(event.data.content).strip().split("\n", 1)[0][:_TITLE_CHARS]
    return ""


class _Pending:
    """The events of one live session not yet committed, and what the database holds of it."""

    __slots__ = ("events", "fresh", "session", "stored")

    def __init__(self, session: Session) -> None:
        self.session = session
        self.events: list[SessionEvent] = list(session.events[session.persisted :])
        self.stored = session.persisted
        #: Not written yet: a new session replaces a stored one with its id; a resumed one is
        #: checked to be there.
        self.fresh = True


class SqliteStore:
    """The SQLite session store. ``path`` and ``fsync``, when given, win over the config; a
    store given a ``path`` is enabled whatever the config says (a host that places it wants
    it)."""

    def __init__(self, path: str | Path | None = None, *, fsync: Fsync | None = None) -> None:
        self._explicit_path = None if path is None else Path(path)
        self._explicit_fsync = fsync
        self.path: Path | None = None
        self.fsync: Fsync = "turn"
        self._db: sqlite3.Connection | None = None
        self._synchronous = ""
        self._codec = EventCodec()
        self._pending: dict[str, _Pending] = {}

    # -- lifetime --------------------------------------------------------------------------
    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, SqliteConfig)

    @hookimpl
    def dsh_harness_start(self, harness: Harness) -> None:
        config = harness.config.section(SECTION, SqliteConfig)
        self._codec = harness.events
        self.fsync = self._explicit_fsync or config.fsync
        if not (config.enabled or self._explicit_path):
            return
        configured = Path(os.path.expandvars(config.path)).expanduser() if config.path else None
        self.path = self._explicit_path or configured or default_path()

    def _connection(self) -> sqlite3.Connection:
        """The database, opened on first use (so that a broken one fails the call that needs
        it, loudly, rather than the harness start, where failures are only logged)."""
        if self._db is None:
            assert self.path is not None
            self._db = self._connect(self.path)
        return self._db

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
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
            db.executescript(SCHEMA)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise DshError(f"cannot open session database {path}: {exc}") from exc
        return db

    @hookimpl
    def dsh_harness_stop(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        self._pending.clear()

    # -- writing ---------------------------------------------------------------------------
    @hookimpl
    def dsh_session_created(self, session: Session) -> None:
        if self.path is not None:
            self._pending[session.id] = _Pending(session)

    @hookimpl
    def dsh_session_event(self, session: Session, event: SessionEvent) -> None:
        pending = self._pending.get(session.id)
        if pending is not None:
            pending.events.append(event)
        elif self.path is not None:  # closed, and now used again: it is rewritten whole
            self.dsh_session_created(session)

    @hookimpl
    def dsh_session_closed(self, session: Session) -> None:
        self._pending.pop(session.id, None)

    @hookimpl
    def dsh_session_checkpoint(self, session: Session) -> None:
        self._commit(session, sync=self.fsync == "checkpoint")

    @hookimpl
    def dsh_session_flush(self, session: Session) -> None:
        self._commit(session, sync=self.fsync != "never")

    def _commit(self, session: Session, sync: bool) -> None:
        """Write the session's pending events in one transaction."""
        pending = self._pending.get(session.id)
        if pending is None or not pending.events:
            return
        db = self._connection()
        self._set_synchronous(db, "FULL" if sync else "OFF" if self.fsync == "never" else "NORMAL")
        try:
            db.execute("BEGIN IMMEDIATE")
            self._write(db, pending)
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise DshError(f"cannot write session {session.id!r} to {self.path}: {exc}") from exc
        pending.stored += len(pending.events)
        pending.events.clear()
        pending.fresh = False

    def _write(self, db: sqlite3.Connection, pending: _Pending) -> None:
        session = pending.session
        if pending.fresh and not self._resumable(db, pending):
            db.execute("DELETE FROM events WHERE session_id = ?", (session.id,))
            db.execute("DELETE FROM sessions WHERE id = ?", (session.id,))
            pending.events = list(session.events)
            pending.stored = 0
        encode = self._codec.encode
        db.executemany(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
            [(session.id, e.seq, e.time, e.type, dumps(encode(e)["data"])) for e in pending.events],
        )
        row = (
            session.id,
            session.created,
            time.time(),
            session.cwd,
            session.parent,
            _title(pending.events),
            pending.stored + len(pending.events),
        )
        db.execute(_UPSERT, row)

    @staticmethod
    def _resumable(db: sqlite3.Connection, pending: _Pending) -> bool:
        """Whether this database holds the stored part of a resumed session."""
        if not pending.session.persisted:
            return False
        query = "SELECT events FROM sessions WHERE id = ?"
        row = db.execute(query, (pending.session.id,)).fetchone()
        return row is not None and row[0] == pending.session.persisted

    def _set_synchronous(self, db: sqlite3.Connection, level: str) -> None:
        if level != self._synchronous:
            db.execute(f"PRAGMA synchronous = {level}")
            self._synchronous = level

    # -- reading ---------------------------------------------------------------------------
    @hookimpl
    def dsh_session_load(self, session_id: str) -> list[SessionEvent] | None:
        if self.path is None:
            return None
        db = self._connection()
        if db.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
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
            events.append(
                decode({"type": type_, "seq": seq, "time": time_, "data": json.loads(data)})
            )
        return events

    @hookimpl
    def dsh_session_list(self, query: str | None, limit: int) -> list[SessionSummary] | None:
        if self.path is None:
            return None
        rows = self._connection().execute(_LIST, {"query": query, "limit": limit})
        return [SessionSummary(*row) for row in rows]
