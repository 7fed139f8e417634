"""Rewind with the PostgreSQL store: the checkpoints travel with the log it holds."""

from __future__ import annotations

from pathlib import Path

from tests.plugins.persistence_postgres.pg import make_store, needs_postgres
from tests.test_rewind import rewind_scenario

pytestmark = needs_postgres


async def test_rewind_to_turn_2_restores_every_file_and_forks_before_it(tmp_path: Path) -> None:
    await rewind_scenario(tmp_path, make_store)
