"""Configuration: sections registered by plugins, every error listed, TOML files."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest
from attrs import frozen

from dsh import ConfigError, Harness, hookimpl
from dsh.tools._registry import ToolsConfig
from dsh.values._config import AgentLoopConfig, Config, load_toml
from dsh_plugins.tools_fs import FsConfig


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
        # ``permissions``: the core's fail-closed stand-in, as no policy plugin is loaded.
        assert h.config.sections() == ["agent_loop", "limits", "permissions", "tools"]
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
    known = "agent_loop, limits, permissions, tools"
    assert f"[typo_section]: unknown section (known sections: {known})" in text


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
    with pytest.raises(ConfigError) as info:
        config.load()
    assert info.value.errors == [
        "[agent_loop] expected a table of AgentLoopConfig settings, got int 5"
    ]


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
    # Found by fuzz/config.py: bytes that are not UTF-8 raised a bare UnicodeDecodeError.
    path.write_bytes(b"\xc5\xc0\n\n")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_toml(path)


# -- values are checked against their types before cattrs converts them -----------------------


@frozen
class Shapes:
    enabled: bool = True
    models: tuple[str, ...] = ()
    pair: tuple[int, str] = (0, "")
    names: Sequence[str] = ()
    ratio: float = 1.0
    limit: int | None = None
    mode: Literal["a", "b"] = "a"


@frozen
class Either:
    """A union cattrs needs a hook for; its values are still checked before."""

    value: int | str = 0


def errors_of(raw: Any, cls: type[Any] = Shapes, section: str = "s") -> list[str]:
    config = Config({section: raw})
    config.register(section, cls)
    with pytest.raises(ConfigError) as info:
        config.load()
    return info.value.errors


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ({"enabled": "false"}, "[s] enabled: expected true or false, got str 'false'"),
        ({"enabled": 0}, "[s] enabled: expected true or false, got int 0"),
        ({"models": "deepseek-chat"}, "[s] models: expected a list, got str 'deepseek-chat'"),
        ({"models": ["a", 1]}, "[s] models[1]: expected a string, got int 1"),
        ({"names": "abc"}, "[s] names: expected a list, got str 'abc'"),
        ({"pair": [1]}, "[s] pair: expected a list of 2 items, got list [1]"),
        ({"pair": ["1", "x"]}, "[s] pair[0]: expected an integer, got str '1'"),
        ({"ratio": True}, "[s] ratio: expected a number, got bool True"),
        ({"limit": 2.5}, "[s] limit: expected an integer, got float 2.5"),
        ("enabled", "[s] expected a table of Shapes settings, got str 'enabled'"),
        ([1, 2], "[s] expected a table of Shapes settings, got list [1, 2]"),
        ({"models": ["x" * 80]}, None),
        ({"enabled": True, "typo": 1, "other": 2}, "[s] extra fields found (other, typo)"),
    ],
)
def test_values_of_the_wrong_type_are_errors_not_conversions(raw: Any, error: str | None) -> None:
    if error is None:  # a valid value: it is kept as it is
        config = Config({"s": raw})
        config.register("s", Shapes)
        config.load()
        assert config.section("s", Shapes).models == ("x" * 80,)
        return
    assert errors_of(raw) == [error]


def test_valid_values_are_structured() -> None:
    raw = {
        "enabled": False,
        "models": ["a", "b"],
        "pair": [1, "x"],
        "names": ["n"],
        "ratio": 2,
        "limit": None,
        "mode": "b",
    }
    config = Config({"s": raw})
    config.register("s", Shapes)
    config.load()
    shapes = config.section("s", Shapes)
    assert list(shapes.names) == ["n"]  # a list or a tuple, as the cattrs version makes it
    assert attrs.evolve(shapes, names=()) == Shapes(False, ("a", "b"), (1, "x"), (), 2, None, "b")


def test_what_has_no_shape_check_is_left_to_cattrs() -> None:
    [error] = errors_of({"mode": "c"})
    assert error.startswith("[s] ") and error.endswith(" @ $.mode")


def test_a_value_that_fits_no_member_of_a_union_says_what_would() -> None:
    expected = "[s] value: expected an integer or a string, got float 1.5"
    assert errors_of({"value": 1.5}, Either) == [expected]


def test_nested_tables_name_the_path_and_long_values_are_shortened() -> None:
    raw = {"agents": [{"id": "a", "model": 5}, "b", {"id": "c", "model": "m" * 100}]}
    assert errors_of(raw, AgentLoopConfig, "agent_loop") == [
        "[agent_loop] agents[0].model: expected a string, got int 5",
        "[agent_loop] agents[1]: expected a table of AgentConfig settings, got str 'b'",
    ]
    assert errors_of({"agents": [{"id": "x" * 70, "nope": 1}]}, AgentLoopConfig, "a") == [
        "[a] agents[0]: extra fields found (nope)"
    ]
    long = errors_of({"agents": "y" * 100}, AgentLoopConfig, "a")[0]
    assert long == f"[a] agents: expected a list, got str '{'y' * 56}..."


@pytest.mark.parametrize(
    ("section", "cls", "raw", "error"),
    [
        (
            "agent_loop",
            AgentLoopConfig,
            {"max_parallel_tools": 0},
            "max_parallel_tools must be at least 1, got 0",
        ),
        (
            "agent_loop",
            AgentLoopConfig,
            {"max_parallel_tools": -1},
            "max_parallel_tools must be at least 1, got -1",
        ),
        (
            "tools",
            ToolsConfig,
            {"default_timeout_s": 0},
            "default_timeout_s must be greater than 0, got 0.0",
        ),
        (
            "tools",
            ToolsConfig,
            {"default_timeout_s": -5.0},
            "default_timeout_s must be greater than 0, got -5.0",
        ),
        (
            "tools",
            ToolsConfig,
            {"default_timeout_s": math.nan},
            "default_timeout_s must be greater than 0, got nan",
        ),
        ("tools_fs", FsConfig, {"max_matches": 0}, "max_matches must be at least 1, got 0"),
        ("tools_fs", FsConfig, {"max_line_chars": -3}, "max_line_chars must be at least 1, got -3"),
    ],
)
def test_numbers_out_of_range_are_errors(
    section: str, cls: type[Any], raw: Any, error: str
) -> None:
    assert errors_of(raw, cls, section) == [f"[{section}] {error}"]


def test_numbers_in_range_are_fine() -> None:
    config = Config(
        {"agent_loop": {"max_parallel_tools": 1}, "tools": {"default_timeout_s": math.inf}}
    )
    config.register("agent_loop", AgentLoopConfig)
    config.register("tools", ToolsConfig)
    config.load()
    assert config.section("agent_loop", AgentLoopConfig).max_parallel_tools == 1
    assert config.section("tools", ToolsConfig).default_timeout_s == math.inf


async def test_a_range_error_fails_the_harness_at_start() -> None:
    with pytest.raises(ConfigError, match=r"\[agent_loop\] max_parallel_tools must be at least 1"):
        Harness(load_entrypoints=False, config={"agent_loop": {"max_parallel_tools": 0}}).load()


def test_a_section_cattrs_cannot_structure_is_a_config_error() -> None:
    [error] = errors_of({"value": 1}, Either)
    assert error.startswith("[s]") and "int | str" in error


@frozen
class Tables:
    limits: dict[str, int] = attrs.Factory(dict)


def test_tables_of_named_values_check_each_value() -> None:
    assert errors_of({"limits": "x"}, Tables) == ["[s] limits: expected a table, got str 'x'"]
    assert errors_of({"limits": {"a": "1", "b": 2}}, Tables) == [
        "[s] limits.a: expected an integer, got str '1'"
    ]
    config = Config({"s": {"limits": {"a": 1}}})
    config.register("s", Tables)
    config.load()
    assert config.section("s", Tables).limits == {"a": 1}


async def test_the_config_knows_who_registered_each_section(tmp_path: Path) -> None:
    from dsh_plugins.persistence_jsonl import JsonlStore

    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as h:
        assert h.config.owner("agent_loop") == "dsh"
        store = next(n for n in h.plugins.names() if isinstance(h.plugins.get(n), JsonlStore))
        assert h.config.owner("persistence_jsonl") == store
        with pytest.raises(ConfigError, match=r"'nope' is not registered \(known: agent_loop,"):
            h.config.owner("nope")
    with pytest.raises(ConfigError, match=r"'any' is not registered \(known: none\)"):
        Config().owner("any")


async def test_sessions_are_persistent_when_a_store_plugin_keeps_them(tmp_path: Path) -> None:
    from dsh_plugins.persistence_jsonl import JsonlStore

    async with Harness(load_entrypoints=False) as bare:
        assert not bare.sessions.persistent
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as stored:
        assert stored.sessions.persistent
