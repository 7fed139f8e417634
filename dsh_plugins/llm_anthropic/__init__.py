"""``llm_anthropic``: the Anthropic Messages API over hand-rolled aiohttp + SSE (no SDK).

Serves ``anthropic/<model>`` (Anthropic, ``ANTHROPIC_API_KEY``) and ``deepseek-anthropic/<model>``
(DeepSeek's Anthropic-format endpoint, ``DEEPSEEK_API_KEY``): the same DeepSeek models as
``llm_deepseek``, through a completely different wire protocol. Configured by section
``llm_anthropic`` (:class:`AnthropicConfig`); see ``docs/plugins/llm_anthropic.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsh.harness import Harness
from dsh.markers import hookimpl
from dsh_plugins.llm_anthropic.adapter import ANTHROPIC, DEEPSEEK, MessagesAdapter, Provider
from dsh_plugins.llm_anthropic.config import AnthropicConfig
from dsh_plugins.llm_anthropic.events import EventTranslator

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


def adapters(config: AnthropicConfig) -> list[MessagesAdapter]:
    """One adapter per provider that serves any model."""
    built = [
        MessagesAdapter(
            ANTHROPIC,
            config,
            config.anthropic_base_url,
            config.anthropic_models,
            config.anthropic_api_key,
        ),
        MessagesAdapter(
            DEEPSEEK,
            config,
            config.deepseek_base_url,
            config.deepseek_models,
            config.deepseek_api_key,
        ),
    ]
    return [adapter for adapter in built if adapter.models]


class AnthropicPlugin:
    """Registers the config section and the two providers' adapters per harness."""

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, AnthropicConfig)

    @hookimpl
    def dsh_register_llm_adapters(self, register: Callable[..., Any], harness: Harness) -> None:
        for adapter in adapters(harness.config.section(SECTION, AnthropicConfig)):
            register(adapter.model_ids(), adapter)
