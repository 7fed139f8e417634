"""Configuration: sections registered by plugins, every error listed, TOML files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from attrs import frozen

from dsh import ConfigError, Harness, hookimpl
from dsh.config import AgentLoopConfig, Config, load_toml


@frozen
class Limits:
    steps: int = 10
    name: str = "x"


class LimitsPlugin:
    @hookimpl
    def dsh_register_config(self, register: Any) -> None:
        register("limits", Limits)


async def test_a_plugin_section_is_structured_with_defaults() -> None:
    async with Harness(
        load_entrypoints=False, plugins=[LimitsPlugin()], config={"limits": {"steps": 3}}
    ) as h:
        assert h.config.section("limits", Limits) == Limits(steps=3)
        assert h.config.dump()["limits"] == {"steps": 3, "name": "x"}
        assert h.config.sections() == ["agent_loop", "limits", "tools"]
    async with Harness(load_entrypoints=False, plugins=[LimitsPlugin()]) as h:
        assert h.config.section("limits", Limits) == Limits()


async def test_every_error_is_listed() -> None:
    raw = {
        "limits": {"steps": "many", "nmae": 1},
        "agent_loop": {"agents": [{"model": "m"}]},
        "typo_section": {},
    }
    with pytest.raises(ConfigError) as info:
        Harness(load_entrypoints=False, plugins=[LimitsPlugin()], config=raw).load()
    errors = info.value.errors
    assert len(errors) == 4, errors
    text = str(info.value)
    assert "[limits]" in text and "nmae" in text and "steps" in text
    assert "[agent_loop] required field missing @ $.agents[0].id" in text
    assert "[typo_section]: unknown section (known sections: agent_loop, limits, tools)" in text


def test_a_section_holds_its_class() -> None:
    config = Config()
    config.register("agent_loop", AgentLoopConfig)
    config.register("agent_loop", AgentLoopConfig)  # same class again is fine
    with pytest.raises(ConfigError, match="claimed by 'dsh' and 'other'"):
        config.register("agent_loop", Limits, owner="other")
    with pytest.raises(ConfigError, match="holds AgentLoopConfig, not Limits"):
        config.section("agent_loop", Limits)


def test_non_mapping_section_is_an_error() -> None:
    config = Config({"agent_loop": 5})
    config.register("agent_loop", AgentLoopConfig)
    with pytest.raises(ConfigError, match=r"\[agent_loop\]"):
        config.load()


def test_toml_files(tmp_path: Path) -> None:
    path = tmp_path / "dsh.toml"
    path.write_text('[[agent_loop.agents]]\nid = "main"\nmodel = "m"\n')
    assert load_toml(path) == {"agent_loop": {"agents": [{"id": "main", "model": "m"}]}}
    h = Harness(load_entrypoints=False, config=path)
    h.load()
    assert h.config.section("agent_loop", AgentLoopConfig).agents[0].id == "main"
    with pytest.raises(ConfigError, match="cannot read"):
        load_toml(tmp_path / "missing.toml")
    path.write_text("not = [toml")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_toml(path)
