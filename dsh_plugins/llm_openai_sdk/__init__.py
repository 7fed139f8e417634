"""``llm_openai_sdk``: DeepSeek chat completions through the official ``openai`` SDK.

The independent twin of ``llm_deepseek``: same endpoint, same config shape (section
``llm_openai_sdk``, :class:`OpenAISdkConfig`), same StreamChunks, completely different internals
— and the in-band error path. Serves every configured model as ``deepseek-sdk/<model>``, so
switching adapters is changing one model id. The SDK is the optional extra
``pip install 'dsh-harness[openai]'``; this plugin loads without it, and its adapter is built the
first time one of its models is used. See ``docs/plugins/llm_openai_sdk.md``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dsh.plugin import DeferredAdapter, Harness, hookimpl, imported
from dsh_plugins.llm_openai_sdk.config import (
    INSTALL,
    PROVIDER,
    OpenAISdkConfig,
    served_model_ids,
)

if TYPE_CHECKING:
    from dsh_plugins.llm_openai_sdk.adapter import OpenAISdkAdapter

__all__ = ["INSTALL", "PROVIDER", "OpenAISdkAdapter", "OpenAISdkConfig", "OpenAISdkPlugin"]

SECTION = "llm_openai_sdk"
_HOMES = {"OpenAISdkAdapter": "dsh_plugins.llm_openai_sdk.adapter"}


def __getattr__(name: str) -> Any:
    return imported(__name__, name, _HOMES)


def _build(config: OpenAISdkConfig) -> OpenAISdkAdapter:
    from dsh_plugins.llm_openai_sdk.adapter import OpenAISdkAdapter

    return OpenAISdkAdapter(config)


class OpenAISdkPlugin:
    """Registers the config section and one adapter per harness, built on first use."""

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, OpenAISdkConfig)

    @hookimpl
    def dsh_register_llm_adapters(self, register: Callable[..., Any], harness: Harness) -> None:
        config = harness.config.section(SECTION, OpenAISdkConfig)
        register(
            served_model_ids(config.models), DeferredAdapter(functools.partial(_build, config))
        )
