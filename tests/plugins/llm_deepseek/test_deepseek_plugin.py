"""The plugin: its config section, the model ids it registers, its lifetime in a harness."""

from __future__ import annotations

import pytest

from dsh import ConfigError, Harness
from dsh_plugins.llm_deepseek import DeepSeekAdapter, DeepSeekConfig, DeepSeekPlugin


async def test_defaults_serve_today_s_models_and_flash_s_legacy_names() -> None:
    async with Harness(load_entrypoints=False, plugins=[DeepSeekPlugin]) as harness:
        config = harness.config.section("llm_deepseek", DeepSeekConfig)
        assert config.base_url == "https://api.deepseek.com"
        assert config.models == ("deepseek-flash", "deepseek-v4-pro")
        assert harness.llm.models() == [
            "deepseek-flash",
            "deepseek-v4-flash",
            "deepseek-v4-flash-vision-exp",
            "deepseek-v4-pro",
            "deepseek/deepseek-flash",
            "deepseek/deepseek-v4-flash",
            "deepseek/deepseek-v4-flash-vision-exp",
            "deepseek/deepseek-v4-pro",
        ]


async def test_configured_models_and_base_url_are_used() -> None:
    config = {"llm_deepseek": {"base_url": "http://127.0.0.1:9/", "models": ["deepseek-flash"]}}
    async with Harness(load_entrypoints=False, plugins=[DeepSeekPlugin], config=config) as h:
        adapter = h.llm.adapter_for("deepseek/deepseek-flash")
        assert isinstance(adapter, DeepSeekAdapter)
        assert adapter.base_url == "http://127.0.0.1:9"
        assert repr(adapter) == "<DeepSeekAdapter http://127.0.0.1:9>"
        assert h.llm.models() == [
            "deepseek-flash",
            "deepseek-v4-flash",
            "deepseek-v4-flash-vision-exp",
            "deepseek/deepseek-flash",
            "deepseek/deepseek-v4-flash",
            "deepseek/deepseek-v4-flash-vision-exp",
        ]


async def test_a_misspelt_option_fails_at_start() -> None:
    config = {"llm_deepseek": {"base_ulr": "http://x"}}
    with pytest.raises(ConfigError, match="base_ulr"):
        async with Harness(load_entrypoints=False, plugins=[DeepSeekPlugin], config=config):
            pass


async def test_the_adapter_is_closed_when_the_harness_stops() -> None:
    async with Harness(load_entrypoints=False, plugins=[DeepSeekPlugin]) as harness:
        adapter = harness.llm.adapter_for("deepseek-v4-pro")
        assert isinstance(adapter, DeepSeekAdapter)
        session = adapter._client()
    assert session.closed


def test_the_api_key_is_not_in_the_config_repr() -> None:
    assert "sk-secret" not in repr(DeepSeekConfig(api_key="sk-secret"))


def test_the_plugin_is_registered_as_an_entry_point() -> None:
    from importlib.metadata import entry_points

    (found,) = entry_points(group="dsh", name="llm_deepseek")
    assert found.load() is DeepSeekPlugin
