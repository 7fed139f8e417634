"""The conformance kit on a custom provider pointed at the (DeepSeek-wire) mock server: the
translation, the failures and the deadlines meet the StreamChunk contract like the DeepSeek
adapters do. Cases that exercise DeepSeek-only parameters are left out (below, with why)."""

from __future__ import annotations

import pytest

from dsh.testing.conformance import CASES, ConformanceCase, Endpoint, adapter_target, run_case
from dsh_plugins.llm_providers import ProviderAdapter, ProviderSettings, resolve
from dsh_plugins.llm_providers.config import ModelSettings


def _adapter(endpoint: Endpoint) -> ProviderAdapter:
    settings = ProviderSettings(
        base_url=endpoint.base_url,
        models={"deepseek-v4-flash": ModelSettings()},
        reasoning_field="reasoning_content",
        send_reasoning=True,
        idle_timeout_s=endpoint.idle_timeout_s,
        first_data_timeout_s=endpoint.first_data_timeout_s or 600.0,
    )
    return ProviderAdapter(resolve("mockds", settings), api_key=endpoint.api_key)


TARGET = adapter_target("mockds/deepseek-v4-flash", _adapter)

#: Strict tools are a DeepSeek beta: the request must go to its ``/beta`` base URL with every
#: object schema closed, which only the DeepSeek adapters know to do; a generic endpoint gets
#: the schemas as the tools give them.
DEEPSEEK_ONLY = ("strict-tools",)


@pytest.mark.parametrize("case", [c for c in CASES if c.name not in DEEPSEEK_ONLY], ids=str)
async def test_conformance(case: ConformanceCase) -> None:
    await run_case(TARGET, case)
