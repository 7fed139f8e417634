from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog

from dsh import Harness
from tests.helpers import foreign_plugins, hide_plugins, install_fake_dists


@pytest.fixture(autouse=True)
def _isolated_data_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing a test runs may write sessions into the user's real data directory, nor read
    or write the user's stored keys and model aliases."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))


#: Third-party dsh plugins installed beside dsh when the test session started.
FOREIGN_PLUGINS = foreign_plugins()


@pytest.fixture(autouse=True)
def _builtin_plugins_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see dsh's own plugins and those they install, never a third-party plugin that
    happens to be installed in the environment (one that adds a tool or a prompt hint would
    change what the mock model does)."""
    hide_plugins(monkeypatch, FOREIGN_PLUGINS)


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    """Each test starts with structlog unconfigured: a test whose harness configured it with
    the test's captured stderr (``capsys``, closed after the test) must not leave later tests
    logging into a closed file."""
    yield
    structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _debug_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Debug mode: every tool outcome is also checked by a round trip through the codec."""
    monkeypatch.setenv("DSH_DEBUG", "1")


@pytest.fixture
def cli_workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """For tests that run the CLI in this process: the current directory is the test's own
    (where the CLI looks for ``dsh.toml``), and no built-in plugin is disabled, whatever the
    environment's ``DSH_DISABLE_PLUGINS`` says. The CLI's logging set-up is undone after every
    test (:func:`_fresh_logging`)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "")
    return tmp_path


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async with Harness(load_entrypoints=False) as h:
        yield h


@pytest.fixture
def dists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two fake distributions with ``dsh`` entry points: good, module, broken and a duplicate."""
    return install_fake_dists(tmp_path, monkeypatch)
