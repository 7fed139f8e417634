"""The conformance kit on the three built-in ways to DeepSeek's models, compared case by case.

llm_deepseek and llm_openai_sdk speak the same wire: the same request bodies, chunks and session
logs, although llm_deepseek raises its failures and llm_openai_sdk ends its streams with them.
llm_anthropic's ``deepseek-anthropic/`` speaks the Messages API to the same mock scenarios: the
same chunks where the wires carry the same content, the same outcome everywhere
(``compare_wires``)."""

from __future__ import annotations

import pytest

from dsh.testing.conformance import (
    CASES,
    AdapterContract,
    AdapterTarget,
    ConformanceCase,
    Endpoint,
    compare_reports,
    compare_wires,
    plugin_target,
    run_case,
)
from dsh_plugins.llm_anthropic import AnthropicPlugin
from dsh_plugins.llm_deepseek import DeepSeekPlugin
from dsh_plugins.llm_openai_sdk import OpenAISdkPlugin

HAND_ROLLED = plugin_target("deepseek-flash", DeepSeekPlugin(), "llm_deepseek")
SDK = plugin_target(
    "deepseek-sdk/deepseek-flash", OpenAISdkPlugin(), "llm_openai_sdk", models=["deepseek-flash"]
)


def _anthropic_section(endpoint: Endpoint) -> dict[str, object]:
    section: dict[str, object] = {
        "deepseek_base_url": endpoint.base_url,
        "deepseek_api_key": endpoint.api_key,
        "anthropic_models": [],
        "idle_timeout_s": endpoint.idle_timeout_s,
    }
    if endpoint.first_data_timeout_s is not None:
        section["first_data_timeout_s"] = endpoint.first_data_timeout_s
    return {"llm_anthropic": section}


MESSAGES = AdapterTarget(
    "deepseek-anthropic/deepseek-flash",
    lambda endpoint: [AnthropicPlugin()],
    _anthropic_section,
    wire="anthropic",
)


class TestOpenAISdk(AdapterContract):
    """The kit as a third-party adapter runs it."""

    target = SDK


# The AUTH hint names each adapter's own config section, and a broken connection is described
# by each adapter's HTTP library: only there do the messages differ, after their headline.
DETAILS_DIFFER = ("auth", "disconnect")


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_three_implementations_conform_and_agree(case: ConformanceCase) -> None:
    hand_rolled = await run_case(HAND_ROLLED, case)
    sdk = await run_case(SDK, case)
    assert compare_reports(hand_rolled, sdk) == []
    exactly = compare_reports(hand_rolled, sdk, exact_messages=True)
    assert bool(exactly) == (case.name in DETAILS_DIFFER), exactly
    if "anthropic" in case.wires:
        messages = await run_case(MESSAGES, case)
        assert compare_wires(hand_rolled, messages) == []
        assert compare_wires(sdk, messages) == []
