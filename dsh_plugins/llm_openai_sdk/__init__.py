"""``llm_openai_sdk``: DeepSeek chat completions through the official ``openai`` SDK.

The independent twin of ``llm_deepseek``: same endpoint, same config shape (section
``llm_openai_sdk``, :class:`OpenAISdkConfig`), same StreamChunks, completely different internals
— and the in-band error path. Serves every configured model as ``deepseek-sdk/<model>``, so
switching adapters is changing one model id. The SDK is the optional extra
``pip install 'dsh-harness[openai]'``; this plugin loads without it. See
``docs/plugins/llm_openai_sdk.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsh.harness import Harness
from dsh.markers import hookimpl
from dsh_plugins.llm_openai_sdk.adapter import INSTALL, PROVIDER, OpenAISdkAdapter
from dsh_plugins.llm_openai_sdk.config import OpenAISdkConfig

__all__ = ["INSTALL", "PROVIDER", "OpenAISdkAdapter", "OpenAISdkConfig", "OpenAISdkPlugin"]

SECTION = "llm_openai_sdk"


class OpenAISdkPlugin:
    """Registers the config section and one adapter per harness."""

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, OpenAISdkConfig)

    @hookimpl
    def dsh_register_llm_adapters(self, register: Callable[..., Any], harness: Harness) -> None:
        adapter = OpenAISdkAdapter(harness.config.section(SECTION, OpenAISdkConfig))
        register(adapter.model_ids(), adapter)
