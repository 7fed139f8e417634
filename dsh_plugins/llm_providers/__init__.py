"""``llm_providers``: any OpenAI-compatible chat-completions endpoint, over aiohttp and
:mod:`dsh.llm._sse` (no SDK).

Built-in profiles for OpenAI, OpenRouter, Ollama, vLLM and llama.cpp's server; any other
endpoint under ``custom``. Each named provider serves any model as ``<provider>/<model>``:
those its table lists with the capabilities it gives them, any other with conservative
defaults (:data:`~dsh_plugins.llm_providers.profiles.DEFAULT_CAPS`). Configured by section
``llm_providers`` (:class:`LlmProvidersConfig`); see ``docs/plugins/llm_providers.md`` and
``docs/providers.md``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dsh.plugin import ANY_MODEL, DeferredAdapter, Harness, cached_models, hookimpl, imported
from dsh_plugins.llm_providers.config import (
    BUILT_IN,
    LlmProvidersConfig,
    ModelSettings,
    ProviderSettings,
)

if TYPE_CHECKING:
    from dsh_plugins.llm_providers.adapter import ProviderAdapter
    from dsh_plugins.llm_providers.profiles import PROFILES, Provider, resolve
    from dsh_plugins.llm_providers.stream import Translator

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
# The profiles (their table and the classes that resolve a provider) load when a provider is
# configured: a harness whose config names none never needs them.
_HOMES = {
    "PROFILES": "dsh_plugins.llm_providers.profiles",
    "Provider": "dsh_plugins.llm_providers.profiles",
    "ProviderAdapter": "dsh_plugins.llm_providers.adapter",
    "Translator": "dsh_plugins.llm_providers.stream",
    "resolve": "dsh_plugins.llm_providers.profiles",
}


def __getattr__(name: str) -> Any:
    return imported(__name__, name, _HOMES)


def _build(provider: Provider) -> ProviderAdapter:
    from dsh_plugins.llm_providers.adapter import ProviderAdapter

    return ProviderAdapter(provider)


class LlmProvidersPlugin:
    """Registers the section and one adapter per provider the config names, for the models
    its table and its cached listing (``dsh models --refresh``) name and every other id under
    its prefix, each built on first use (a provider's settings are checked at start)."""

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, LlmProvidersConfig)

    @hookimpl
    def dsh_register_llm_adapters(self, register: Callable[..., Any], harness: Harness) -> None:
        config = harness.config.section(SECTION, LlmProvidersConfig)
        named = config.named()
        if not named:
            return
        from dsh_plugins.llm_providers.profiles import resolve

        for name, settings in named.items():
            provider = resolve(name, settings, cached_models(name))
            ids = [*provider.model_ids(), f"{name}/{ANY_MODEL}"]
            register(ids, DeferredAdapter(functools.partial(_build, provider)))
