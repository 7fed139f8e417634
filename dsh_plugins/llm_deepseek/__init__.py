"""``llm_deepseek``: DeepSeek chat completions over hand-rolled aiohttp + SSE (no SDK).

Serves every configured model as ``deepseek/<model>`` and, as the default provider, by its bare
name. Configured by section ``llm_deepseek`` (:class:`DeepSeekConfig`); see
``docs/plugins/llm_deepseek.md``. The adapter is built (and aiohttp imported) the first time one
of its models is used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dsh.plugin import DeferredAdapter, Harness, hookimpl, imported
from dsh.plugin import deepseek_served_ids as served_ids
from dsh_plugins.llm_deepseek.config import PROVIDER, DeepSeekConfig

if TYPE_CHECKING:
    from dsh_plugins.llm_deepseek.adapter import DeepSeekAdapter
    from dsh_plugins.llm_deepseek.stream import ChunkTranslator

__all__ = ["PROVIDER", "ChunkTranslator", "DeepSeekAdapter", "DeepSeekConfig", "DeepSeekPlugin"]

SECTION = "llm_deepseek"
_HOMES = {
    "ChunkTranslator": "dsh_plugins.llm_deepseek.stream",
    "DeepSeekAdapter": "dsh_plugins.llm_deepseek.adapter",
}


def __getattr__(name: str) -> Any:
    return imported(__name__, name, _HOMES)


def _build(config: DeepSeekConfig) -> DeepSeekAdapter:
    from dsh_plugins.llm_deepseek.adapter import DeepSeekAdapter

    return DeepSeekAdapter(config)


class DeepSeekPlugin:
    """Registers the config section and one adapter per harness, built on first use."""

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, DeepSeekConfig)

    @hookimpl
    def dsh_register_llm_adapters(self, register: Callable[..., Any], harness: Harness) -> None:
        config = harness.config.section(SECTION, DeepSeekConfig)
        register(
            served_ids(config.models, PROVIDER), DeferredAdapter(functools.partial(_build, config))
        )
