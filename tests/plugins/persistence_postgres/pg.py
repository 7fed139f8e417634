"""What the persistence_postgres tests share: the test server's DSN (from
``DSH_TEST_POSTGRES_DSN``; the tests skip, saying so, where it is unset) and a schema of its own
for each test, dropped when the test session ends."""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import os
from pathlib import Path
from typing import Any

import pytest

from dsh_plugins.persistence_postgres import PostgresStore

DSN = os.environ.get("DSH_TEST_POSTGRES_DSN", "")
#: Skips a module where no test server is configured.
needs_postgres = pytest.mark.skipif(
    not DSN, reason="DSH_TEST_POSTGRES_DSN is not set: these tests need a PostgreSQL server"
)
#: Every schema the tests of this process create starts with it (dropped at the end).
PREFIX = f"t{os.getpid()}_"


def schema_for(directory: Path | str) -> str:
    """A schema of its own for each test directory (the conformance kit's "location")."""
    return PREFIX + hashlib.sha1(str(directory).encode()).hexdigest()[:16]


def make_store(directory: Path | str, **options: Any) -> PostgresStore:
    return PostgresStore(DSN, schema=schema_for(directory), **options)


async def connect() -> Any:
    """A connection of its own to the test server (asyncpg has no type information)."""
    asyncpg: Any = importlib.import_module("asyncpg")
    return await asyncpg.connect(DSN)


async def query(sql: str, *args: Any) -> list[Any]:
    """Run one statement on the test server in a connection of its own."""
    db = await connect()
    try:
        return list(await db.fetch(sql, *args))
    finally:
        await db.close()


def drop_test_schemas() -> None:
    async def drop() -> None:
        rows = await query(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", PREFIX
        )
        for row in rows:
            await query(f'DROP SCHEMA "{row[0]}" CASCADE')

    asyncio.run(drop())
