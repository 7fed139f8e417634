"""persistence_postgres keeps the session-store contract (its transactions cannot be torn)."""

from __future__ import annotations

from pathlib import Path

from dsh.testing.stores import SessionStoreContract
from tests.plugins.persistence_postgres.pg import make_store, needs_postgres

pytestmark = needs_postgres


class TestPostgresStore(SessionStoreContract):
    def make_store(self, directory: Path) -> object:
        return make_store(directory)
