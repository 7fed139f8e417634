"""The conformance kit on both built-in adapters, compared case by case: the same request
bodies, chunks and session logs, although llm_deepseek raises its failures and llm_openai_sdk
ends its streams with them."""

from __future__ import annotations

import pytest

from dsh.testing.conformance import (
    CASES,
    AdapterContract,
    ConformanceCase,
    compare_reports,
    plugin_target,
    run_case,
)
from dsh_plugins.llm_deepseek import DeepSeekPlugin
from dsh_plugins.llm_openai_sdk import OpenAISdkPlugin

HAND_ROLLED = plugin_target("deepseek-v4-flash", DeepSeekPlugin(), "llm_deepseek")
SDK = plugin_target("deepseek-sdk/deepseek-v4-flash", OpenAISdkPlugin(), "llm_openai_sdk")


class TestOpenAISdk(AdapterContract):
    """The kit as a third-party adapter runs it."""

    target = SDK


# The AUTH hint names each adapter's own config section, and a broken connection is described
# by each adapter's HTTP library: only there do the messages differ, after their headline.
DETAILS_DIFFER = ("auth", "disconnect")


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_both_adapters_conform_and_agree(case: ConformanceCase) -> None:
    hand_rolled = await run_case(HAND_ROLLED, case)
    sdk = await run_case(SDK, case)
    assert compare_reports(hand_rolled, sdk) == []
    exactly = compare_reports(hand_rolled, sdk, exact_messages=True)
    assert bool(exactly) == (case.name in DETAILS_DIFFER), exactly
