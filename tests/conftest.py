from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dsh import Harness
from tests.helpers import install_fake_dists


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async with Harness(load_entrypoints=False) as h:
        yield h


@pytest.fixture
def dists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two fake distributions with ``dsh`` entry points: good, module, broken and a duplicate."""
    return install_fake_dists(tmp_path, monkeypatch)
