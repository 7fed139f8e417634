"""``llm_deepseek``: DeepSeek chat completions over hand-rolled aiohttp + SSE (no SDK).

Serves every configured model as ``deepseek/<model>`` and, as the default provider, by its bare
name. Configured by section ``llm_deepseek`` (:class:`DeepSeekConfig`); see
``docs/plugins/llm_deepseek.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsh.harness import Harness
from dsh.markers import hookimpl
from dsh_plugins.llm_deepseek.adapter import PROVIDER, DeepSeekAdapter
from dsh_plugins.llm_deepseek.config import DeepSeekConfig
from dsh_plugins.llm_deepseek.translate import ChunkTranslator

__all__ = ["PROVIDER", "ChunkTranslator", "DeepSeekAdapter", "DeepSeekConfig", "DeepSeekPlugin"]

SECTION = "llm_deepseek"


class DeepSeekPlugin:
    """Registers the config section and one adapter per harness."""

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, DeepSeekConfig)

    @hookimpl
    def dsh_register_llm_adapters(self, register: Callable[..., Any], harness: Harness) -> None:
        adapter = DeepSeekAdapter(harness.config.section(SECTION, DeepSeekConfig))
        register(adapter.model_ids(), adapter)
