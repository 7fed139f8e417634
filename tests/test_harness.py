"""The Harness lifetime, and the pytest fixtures dsh.testing ships."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from dsh import Command, ConfigError, DshError, Harness, hookimpl
from dsh.values._chunks import TokenUsage
from dsh.values._content import Image, Text, text_of


async def test_lifetime_hooks_and_idempotent_load_and_close() -> None:
    seen: list[str] = []

    class Life:
        @hookimpl
        def dsh_harness_start(self, harness: Harness) -> None:
            seen.append("start")

        @hookimpl
        async def dsh_harness_stop(self, harness: Harness) -> None:
            seen.append("stop")

    h = Harness(load_entrypoints=False, plugins=[Life])
    await h.close()  # not started: nothing to do
    h.load()
    h.load()
    await h.start()
    with pytest.raises(DshError, match="already started"):
        await h.start()
    await h.close()
    await h.close()
    assert seen == ["start", "stop"]


def test_commands_are_unique() -> None:
    class Cmds:
        @hookimpl
        def dsh_register_commands(self, register: Any) -> None:
            dispose = register(Command("x", "x", lambda args: 0))
            dispose()
            register(Command("x", "x", lambda args: 0))
            register(Command("x", "again", lambda args: 0))

    with pytest.raises(DshError, match="'x' is registered twice"):
        Harness(load_entrypoints=False, plugins=[Cmds()]).load()


def test_value_helpers() -> None:
    total = TokenUsage(1, 2, 3, 4, 5) + TokenUsage(10, 20, 30, 40, 50)
    assert total == TokenUsage(11, 22, 33, 44, 55)
    assert text_of((Text("a"), Image("u"), Text("b"))) == "ab"


async def test_dsh_harness_fixture(dsh_harness: Harness) -> None:
    assert dsh_harness.started and dsh_harness.plugins.names() == []


async def test_dsh_harness_factory(
    dsh_harness_factory: Callable[..., Awaitable[Harness]],
) -> None:
    h = await dsh_harness_factory(config={"agent_loop": {"agents": [{"id": "a"}]}})
    assert h.agents.get("a") is not None


async def test_agent_registry_disposer_is_idempotent(harness: Harness) -> None:
    agent = harness.agent_loop.create("a")
    await agent.dispose()
    assert harness.agents.get("a") is None
    agent._unregister()


async def test_plugin_services_are_harness_attributes(harness: Harness) -> None:
    service = object()
    dispose = harness.add_service("things", service)
    assert harness.things is service
    with pytest.raises(DshError, match="already taken"):
        harness.add_service("things", object())
    with pytest.raises(DshError, match="already taken"):
        harness.add_service("llm", object())
    with pytest.raises(AttributeError, match=r"no attribute 'nope' \(plugin services: things\)"):
        _ = harness.nope
    dispose()
    with pytest.raises(AttributeError, match=r"no attribute 'things'$"):
        _ = harness.things


@pytest.mark.parametrize(
    ("config", "got"),
    [([("a", 1)], "list [('a', 1)]"), ([], "list []"), (42, "int 42"), (b"x", "bytes b'x'")],
)
def test_a_config_that_is_not_a_mapping_or_a_path_says_what_was_expected(
    config: Any, got: str
) -> None:
    with pytest.raises(ConfigError) as info:
        Harness(load_entrypoints=False, config=config)
    assert info.value.errors == [
        "Harness(config=...) takes a mapping of section names to tables, or the path of a "
        f"TOML file (str or Path); got {got}"
    ]


async def test_mappings_and_paths_are_configs(tmp_path: Path) -> None:
    from types import MappingProxyType

    (tmp_path / "dsh.toml").write_text("[agent_loop]\n")
    configs: list[Any] = [None, {}, MappingProxyType({"agent_loop": {}}), tmp_path / "dsh.toml"]
    for config in configs:
        async with Harness(load_entrypoints=False, config=config) as h:
            assert h.started
    async with Harness(load_entrypoints=False, config=str(tmp_path / "dsh.toml")) as h:
        assert h.config.raw == {"agent_loop": {}}
