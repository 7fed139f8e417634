"""``llm_anthropic``: the Anthropic Messages API over hand-rolled aiohttp + SSE (no SDK).

Serves ``anthropic/<model>`` (Anthropic, ``ANTHROPIC_API_KEY``) and ``deepseek-anthropic/<model>``
(DeepSeek's Anthropic-format endpoint, ``DEEPSEEK_API_KEY``): the same DeepSeek models as
``llm_deepseek``, through a completely different wire protocol. Any model under a served
prefix works, listed or not. Configured by section
``llm_anthropic`` (:class:`AnthropicConfig`); see ``docs/plugins/llm_anthropic.md``. Each
provider's adapter is built (and aiohttp imported) the first time one of its models is used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dsh.plugin import (
    ANY_MODEL,
    DeferredAdapter,
    Harness,
    ModelInfo,
    cached_models,
    hookimpl,
    imported,
)
from dsh_plugins.llm_anthropic.config import ANTHROPIC, DEEPSEEK, AnthropicConfig, Provider

if TYPE_CHECKING:
    from dsh_plugins.llm_anthropic.adapter import MessagesAdapter
    from dsh_plugins.llm_anthropic.stream import EventTranslator

__all__ = [
    "ANTHROPIC",
    "DEEPSEEK",
    "AnthropicConfig",
    "AnthropicPlugin",
    "EventTranslator",
    "MessagesAdapter",
    "Provider",
    "adapters",
]

SECTION = "llm_anthropic"
_HOMES = {
    "EventTranslator": "dsh_plugins.llm_anthropic.stream",
    "MessagesAdapter": "dsh_plugins.llm_anthropic.adapter",
}


def __getattr__(name: str) -> Any:
    return imported(__name__, name, _HOMES)


def _served(config: AnthropicConfig) -> list[tuple[Provider, str, tuple[str, ...], str | None]]:
    """Each provider that serves any model: where, which models, with which configured key."""
    both = [
        (ANTHROPIC, config.anthropic_base_url, config.anthropic_models, config.anthropic_api_key),
        (DEEPSEEK, config.deepseek_base_url, config.deepseek_models, config.deepseek_api_key),
    ]
    return [served for served in both if served[2]]


def _build(
    provider: Provider,
    config: AnthropicConfig,
    base_url: str,
    models: tuple[str, ...],
    api_key: str | None,
    listed: dict[str, ModelInfo] | None = None,
) -> MessagesAdapter:
    from dsh_plugins.llm_anthropic.adapter import MessagesAdapter

    return MessagesAdapter(provider, config, base_url, models, api_key, listed)


def adapters(config: AnthropicConfig) -> list[MessagesAdapter]:
    """One adapter per provider that serves any model, built now."""
    return [
        _build(provider, config, base_url, models, api_key)
        for provider, base_url, models, api_key in _served(config)
    ]


class AnthropicPlugin:
    """Registers the config section and the two providers' adapters per harness, each built on
    first use. A provider that lists any model serves every id under its prefix
    (``anthropic/<model>``): a model it does not list is sent as named."""

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, AnthropicConfig)

    @hookimpl
    def dsh_register_llm_adapters(self, register: Callable[..., Any], harness: Harness) -> None:
        config = harness.config.section(SECTION, AnthropicConfig)
        for provider, base_url, models, api_key in _served(config):
            listed = cached_models(provider.prefix)
            register(
                [
                    *provider.ids(dict.fromkeys([*models, *listed])),
                    f"{provider.prefix}/{ANY_MODEL}",
                ],
                DeferredAdapter(
                    functools.partial(_build, provider, config, base_url, models, api_key, listed)
                ),
            )
