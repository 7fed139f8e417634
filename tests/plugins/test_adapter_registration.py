"""The built-in adapter plugins register their model ids without building an adapter (nor
importing aiohttp); the adapter built at first use serves exactly those ids."""

from __future__ import annotations

from typing import Any

import pytest

from dsh import Harness
from dsh_plugins.llm_anthropic import AnthropicConfig, AnthropicPlugin, adapters
from dsh_plugins.llm_deepseek import DeepSeekPlugin
from dsh_plugins.llm_openai_sdk import OpenAISdkPlugin
from dsh_plugins.llm_providers import LlmProvidersPlugin

CASES: dict[str, tuple[type, dict[str, Any], set[str]]] = {
    "llm_deepseek": (DeepSeekPlugin, {}, {"DeepSeekAdapter"}),
    "llm_anthropic": (AnthropicPlugin, {}, {"MessagesAdapter"}),
    "llm_openai_sdk": (OpenAISdkPlugin, {}, {"OpenAISdkAdapter"}),
    "llm_providers": (
        LlmProvidersPlugin,
        {"ollama": {"models": {"llama3": {}}}, "vllm": {"models": {"qwen": {}}}},
        {"ProviderAdapter"},
    ),
}


@pytest.mark.parametrize("section", sorted(CASES))
async def test_ids_are_registered_unbuilt_and_the_built_adapters_serve_exactly_them(
    section: str,
) -> None:
    plugin, config, classes = CASES[section]
    async with Harness(
        load_entrypoints=False, plugins=[plugin()], config={section: config}
    ) as harness:
        ids = harness.llm.models()
        assert ids and harness.llm.adapters() == []
        built: dict[int, Any] = {
            id(a): a for a in (harness.llm.adapter_for(model) for model in ids)
        }
        assert {type(adapter).__name__ for adapter in built.values()} == classes
        served = sorted(m for adapter in built.values() for m in adapter.model_ids())
        assert served == ids  # each id once, by the adapter that says it serves it
        assert len(harness.llm.adapters()) == len(built)


async def test_the_anthropic_helper_builds_the_adapters_the_plugin_registers() -> None:
    config = AnthropicConfig(anthropic_models=())
    built = adapters(config)
    assert [adapter.provider.prefix for adapter in built] == ["deepseek-anthropic"]
    async with Harness(
        load_entrypoints=False,
        plugins=[AnthropicPlugin()],
        config={"llm_anthropic": {"anthropic_models": []}},
    ) as harness:
        assert harness.llm.models() == built[0].model_ids()
