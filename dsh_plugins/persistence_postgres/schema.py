"""The tables of ``persistence_postgres``, their versioned migrations, and the typed face of
the part of asyncpg the store uses (asyncpg ships no type information).

Every schema holds a ``migrations`` table with one row per applied version. Opening a store
applies the missing versions in one transaction under an advisory lock, so that processes
starting together migrate once; a schema newer than this dsh is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from dsh_plugins.persistence_postgres.config import PostgresStoreError

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Connection", "Pool", "Record", "migrate", "quoted"]


class Record(Protocol):
    def __getitem__(self, key: int | str, /) -> Any: ...


class Connection(Protocol):
    """An ``asyncpg.Connection``, as far as the store uses it."""

    async def execute(self, query: str, *args: Any) -> str: ...
    async def fetch(self, query: str, *args: Any) -> list[Record]: ...
    async def fetchrow(self, query: str, *args: Any) -> Record | None: ...
    async def fetchval(self, query: str, *args: Any) -> Any: ...
    def transaction(self) -> AbstractAsyncContextManager[Any]: ...


class Pool(Protocol):
    """An ``asyncpg.Pool``, as far as the store uses it."""

    def acquire(self) -> AbstractAsyncContextManager[Connection]: ...
    async def close(self) -> None: ...


def quoted(schema: str) -> str:
    """The schema name as an SQL identifier (validated by the config: no quotes inside)."""
    return f'"{schema}"'


#: ``(version, what it adds, statements)``; ``{s}`` is the quoted schema name.
MIGRATIONS: Sequence[tuple[int, str, str]] = (
    (
        1,
        "sessions and events",
        """
        CREATE TABLE {s}.sessions (
            id      text PRIMARY KEY,
            created double precision NOT NULL,
            updated double precision NOT NULL,
            cwd     text NOT NULL,
            parent  text,
            title   text NOT NULL DEFAULT '',
            events  integer NOT NULL DEFAULT 0
        );
        CREATE INDEX sessions_by_updated ON {s}.sessions (updated DESC);
        CREATE TABLE {s}.events (
            session_id text NOT NULL,
            seq        integer NOT NULL,
            time       double precision NOT NULL,
            type       text NOT NULL,
            data       text NOT NULL,
            PRIMARY KEY (session_id, seq)
        );
        """,
    ),
    (
        2,
        "writer leases with fencing tokens",
        """
        CREATE SEQUENCE {s}.lease_tokens;
        CREATE TABLE {s}.leases (
            session_id text PRIMARY KEY,
            owner      text NOT NULL,
            token      bigint NOT NULL,
            pid        integer NOT NULL,
            host       text NOT NULL,
            since      timestamptz NOT NULL,
            expires_at timestamptz NOT NULL
        );
        """,
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


async def migrate(db: Connection, schema: str, upto: int = SCHEMA_VERSION) -> int:
    """Create ``schema`` and apply the migrations it lacks, up to version ``upto``; returns
    the version it had before."""
    s = quoted(schema)
    async with db.transaction():
        await db.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"dsh.migrate:{schema}")
        await db.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        await db.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.migrations (version integer PRIMARY KEY, "
            "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current: int = await db.fetchval(f"SELECT coalesce(max(version), 0) FROM {s}.migrations")
        if current > SCHEMA_VERSION:
            raise PostgresStoreError(
                f"schema {schema!r} is at version {current}, newer than this dsh reads "
                f"({SCHEMA_VERSION}): upgrade dsh, or use another schema",
                "SCHEMA",
            )
        for version, name, statements in MIGRATIONS:
            if current < version <= upto:
                await db.execute(statements.format(s=s))
                await db.execute(
                    f"INSERT INTO {s}.migrations (version, name) VALUES ($1, $2)", version, name
                )
    return current
