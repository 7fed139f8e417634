"""persistence_sqlite keeps the session-store contract (its transactions cannot be torn)."""

from __future__ import annotations

from pathlib import Path

from dsh.testing.stores import SessionStoreContract
from dsh_plugins.persistence_sqlite import SqliteStore


class TestSqliteStore(SessionStoreContract):
    def make_store(self, directory: Path) -> object:
        return SqliteStore(directory / "sessions.db")
