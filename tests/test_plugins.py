"""Entry-point discovery: sorted, deduplicated, broken plugins reported, disabling, strict."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from dsh import Harness, PluginLoadError
from dsh.plugins import disabled_from_env


def entry_names(h: Harness) -> list[str]:
    return [n for n in h.plugins.names() if n in {"alpha", "zeta", "broken"}]


async def test_entry_points_are_loaded_sorted_and_deduplicated(dists: Path) -> None:
    with capture_logs() as logs:
        h = Harness()
        h.load()
    assert entry_names(h) == ["alpha", "zeta"]
    info = h.plugins.info["zeta"]
    assert (info.distribution, info.version) == ("fake_dist", "1.0")
    # A class entry point is instantiated once per harness.
    assert type(h.plugins.get("zeta")).__name__ == "Plugin"
    [failure] = h.plugins.failures
    assert failure.name == "broken" and failure.distribution == "fake_dist"
    assert "missing dependency xyz" in failure.error
    assert any(log["plugin"] == "broken" for log in logs)


async def test_strict_mode_makes_a_broken_plugin_fatal(dists: Path) -> None:
    with pytest.raises(PluginLoadError, match="'broken' from fake_dist failed to load"):
        Harness(strict=True).load()


async def test_plugins_can_be_disabled(dists: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "broken, zeta,")
    assert disabled_from_env() == {"broken", "zeta"}
    h = Harness()
    h.load()
    assert entry_names(h) == ["alpha"] and h.plugins.failures == []
    h2 = Harness(disabled=["alpha"], load_entrypoints=False, plugins=[])
    assert h2.plugins.register(object(), name="alpha") == "alpha"
    assert h2.plugins.get("alpha") is None


def test_two_instances_of_one_class_get_distinct_names() -> None:
    class Observer:
        def dsh_agent_status(self) -> None:
            pass

    h = Harness(load_entrypoints=False, plugins=[Observer(), Observer(), Observer()])
    h.load()
    assert h.plugins.names() == ["Observer", "Observer#2", "Observer#3"]
