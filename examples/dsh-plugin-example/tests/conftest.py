from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Harnesses with entry points load dsh's persistence plugin: keep its sessions here."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
