from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dsh import Harness
from tests.helpers import install_fake_dists


@pytest.fixture(autouse=True)
def _isolated_data_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing a test runs may write sessions into the user's real data directory."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async with Harness(load_entrypoints=False) as h:
        yield h


@pytest.fixture
def dists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two fake distributions with ``dsh`` entry points: good, module, broken and a duplicate."""
    return install_fake_dists(tmp_path, monkeypatch)
