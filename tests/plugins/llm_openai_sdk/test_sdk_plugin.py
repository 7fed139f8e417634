"""The plugin: its config section, the model ids it registers, its lifetime in a harness, and
living side by side with llm_deepseek."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from dsh import ConfigError, Harness
from dsh_plugins.llm_deepseek import DeepSeekPlugin
from dsh_plugins.llm_openai_sdk import OpenAISdkAdapter, OpenAISdkConfig, OpenAISdkPlugin


async def test_defaults_serve_today_s_models_and_their_aliases_under_the_sdk_prefix() -> None:
    async with Harness(load_entrypoints=False, plugins=[OpenAISdkPlugin()]) as harness:
        config = harness.config.section("llm_openai_sdk", OpenAISdkConfig)
        assert config == OpenAISdkConfig()
        assert config.base_url == "https://api.deepseek.com"
        assert harness.llm.models() == [
            "deepseek-sdk/deepseek-flash",
            "deepseek-sdk/deepseek-v4-flash",
            "deepseek-sdk/deepseek-v4-flash-vision-exp",
            "deepseek-sdk/deepseek-v4-pro",
        ]
        flash = harness.llm.model_info("deepseek-sdk/deepseek-flash")
        assert flash is not None and flash == harness.llm.model_info(
            "deepseek-sdk/deepseek-v4-flash"
        )
        assert flash.pricing is not None
        assert harness.llm.model_info("deepseek-sdk/deepseek-v4-pro") is not None


async def test_configured_models_and_base_url_are_used() -> None:
    config = {"llm_openai_sdk": {"base_url": "http://127.0.0.1:9/", "models": ["deepseek-x"]}}
    plugins = [OpenAISdkPlugin()]
    async with Harness(load_entrypoints=False, plugins=plugins, config=config) as harness:
        adapter = harness.llm.adapter_for("deepseek-sdk/deepseek-x")
        assert isinstance(adapter, OpenAISdkAdapter)
        assert adapter.base_url == "http://127.0.0.1:9"
        assert repr(adapter) == "<OpenAISdkAdapter http://127.0.0.1:9>"


async def test_it_shares_a_harness_with_the_hand_rolled_adapter() -> None:
    plugins = [DeepSeekPlugin(), OpenAISdkPlugin()]
    async with Harness(load_entrypoints=False, plugins=plugins) as harness:
        hand_rolled = harness.llm.adapter_for("deepseek-v4-pro")
        assert harness.llm.adapter_for("deepseek/deepseek-v4-pro") is hand_rolled
        assert isinstance(harness.llm.adapter_for("deepseek-sdk/deepseek-v4-pro"), OpenAISdkAdapter)


async def test_a_misspelt_option_fails_at_start() -> None:
    config = {"llm_openai_sdk": {"idle_timout_s": 3}}
    with pytest.raises(ConfigError, match="idle_timout_s"):
        async with Harness(load_entrypoints=False, plugins=[OpenAISdkPlugin()], config=config):
            pass


def test_the_api_key_is_not_in_the_config_repr() -> None:
    assert "sk-secret" not in repr(OpenAISdkConfig(api_key="sk-secret"))


def test_the_plugin_is_registered_as_an_entry_point() -> None:
    (found,) = entry_points(group="dsh", name="llm_openai_sdk")
    assert found.load() is OpenAISdkPlugin
