"""``llm_providers``: any OpenAI-compatible chat-completions endpoint, over aiohttp and
:mod:`dsh.sse` (no SDK).

Built-in profiles for OpenAI, OpenRouter, Ollama, vLLM and llama.cpp's server; any other
endpoint under ``custom``. Each named provider serves its models as ``<provider>/<model>``,
with the capabilities the config gives them. Configured by section ``llm_providers``
(:class:`LlmProvidersConfig`); see ``docs/plugins/llm_providers.md`` and ``docs/providers.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsh.harness import Harness
from dsh.markers import hookimpl
from dsh_plugins.llm_providers.adapter import ProviderAdapter
from dsh_plugins.llm_providers.config import (
    BUILT_IN,
    LlmProvidersConfig,
    ModelSettings,
    ProviderSettings,
)
from dsh_plugins.llm_providers.profiles import PROFILES, Provider, resolve
from dsh_plugins.llm_providers.translate import Translator

__all__ = [
    "BUILT_IN",
    "PROFILES",
    "LlmProvidersConfig",
    "LlmProvidersPlugin",
    "ModelSettings",
    "Provider",
    "ProviderAdapter",
    "ProviderSettings",
    "Translator",
    "resolve",
]

SECTION = "llm_providers"


class LlmProvidersPlugin:
    """Registers the section and one adapter per provider the config names."""

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, LlmProvidersConfig)

    @hookimpl
    def dsh_register_llm_adapters(self, register: Callable[..., Any], harness: Harness) -> None:
        config = harness.config.section(SECTION, LlmProvidersConfig)
        for name, settings in config.named().items():
            adapter = ProviderAdapter(resolve(name, settings))
            register(adapter.model_ids(), adapter)
