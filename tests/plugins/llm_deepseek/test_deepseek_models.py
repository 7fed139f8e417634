"""The model table (names, aliases, limits, prices by the hour), JSON output mode, and what a
user with a key sees: ``dsh run`` on deepseek-flash with the turn's cost, no price config."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dsh import AgentOptions, Harness
from dsh.llm._deepseek import (
    ALIASES,
    MODELS,
    PEAK_HOURS,
    RETIRED,
    model_info,
    served_ids,
    wire_name,
)
from dsh.llm._service import ModelInfo
from dsh.testing.mock import deepseek_config
from dsh.testing.mockserver import MockServer
from dsh.testing.mockserver.scenario import reply
from dsh.testing.mockserver.wire import usage_json
from dsh.values._chunks import TokenUsage
from dsh.values._content import Message, Text
from dsh.values._events import AssistantMessage, TurnCompleted, TurnEnd, TurnEndReason, TurnError
from dsh.values._request import LlmRequest
from dsh.values._tokens import Price, PriceSchedule
from dsh_plugins.compaction import CompactionPlugin
from dsh_plugins.llm_deepseek import DeepSeekAdapter, DeepSeekConfig, DeepSeekPlugin
from dsh_plugins.llm_deepseek.request import request_body
from tests.helpers import data_of

MILLION = TokenUsage(1_000_000, 1_000_000, cache_read_tokens=1_000_000)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()


# -- the table ----------------------------------------------------------------------------------


def test_today_s_models_with_the_pricing_page_s_numbers() -> None:
    assert list(MODELS) == ["deepseek-flash", "deepseek-v4-pro"]
    flash, pro = MODELS["deepseek-flash"], MODELS["deepseek-v4-pro"]
    # Peak prices (cache hit, cache miss, output); a cache write is billed as a miss.
    assert flash.peak == Price(input=0.30, output=1.20, cache_read=0.006, cache_write=0.30)
    assert pro.peak == Price(input=1.32, output=3.96, cache_read=0.044, cache_write=1.32)
    assert flash.off_peak == Price(input=0.15, output=0.60, cache_read=0.003, cache_write=0.15)
    assert pro.off_peak == Price(input=0.66, output=1.98, cache_read=0.022, cache_write=0.66)
    assert (flash.image_input, pro.image_input) == (True, False)
    for model in (flash, pro):
        assert (model.context_window, model.max_output_tokens) == (1_000_000, 384_000)
        assert model.thinking_default


def test_legacy_names_reach_flash_and_retired_names_are_not_served() -> None:
    assert ALIASES == {
        "deepseek-v4-flash": "deepseek-flash",
        "deepseek-v4-flash-vision-exp": "deepseek-flash",
    }
    assert wire_name("deepseek-v4-flash") == "deepseek-flash"
    assert wire_name("deepseek-v4-pro") == "deepseek-v4-pro"
    assert wire_name("my-local-model") == "my-local-model"
    assert RETIRED == ("deepseek-chat", "deepseek-reasoner")
    assert all(model_info(name) is None for name in RETIRED)


def test_model_info_for_names_aliases_and_prefixed_ids() -> None:
    info = model_info("deepseek/deepseek-v4-flash")
    assert info == model_info("deepseek-flash") == model_info("deepseek-sdk/deepseek-flash")
    assert info is not None
    assert (info.context_window, info.max_output_tokens) == (1_000_000, 384_000)
    assert (info.image_input, info.thinking_default) == (True, True)
    assert info.pricing == PriceSchedule(
        MODELS["deepseek-flash"].peak, MODELS["deepseek-flash"].off_peak, PEAK_HOURS
    )
    assert model_info("unknown") is None


def test_served_ids_add_the_aliases_of_configured_models_once() -> None:
    assert served_ids(["deepseek-v4-pro"], "p") == ["deepseek-v4-pro", "p/deepseek-v4-pro"]
    assert served_ids(["deepseek-flash", "deepseek-v4-flash", "deepseek-flash"], "p") == [
        "deepseek-flash",
        "deepseek-v4-flash",
        "deepseek-v4-flash-vision-exp",
        "p/deepseek-flash",
        "p/deepseek-v4-flash",
        "p/deepseek-v4-flash-vision-exp",
    ]


@pytest.mark.parametrize(
    ("when", "peak"),
    [
        # Monday 2026-11-30, UTC: peak 01:00-04:00 and 06:00-10:00 (Beijing 09-12, 14-18).
        (utc(2026, 11, 30, 0, 59, 59), False),
        (utc(2026, 11, 30, 1), True),
        (utc(2026, 11, 30, 3, 59, 59), True),
        (utc(2026, 11, 30, 4), False),  # Beijing lunch
        (utc(2026, 11, 30, 5, 59, 59), False),
        (utc(2026, 11, 30, 6), True),
        (utc(2026, 11, 30, 9, 59, 59), True),
        (utc(2026, 11, 30, 10), False),
        (utc(2026, 12, 4, 9, 30), True),  # Friday 17:30 in Beijing
        (utc(2026, 12, 5, 2), False),  # Saturday 10:00 in Beijing
        (utc(2026, 12, 6, 7), False),  # Sunday 15:00 in Beijing
        (utc(2026, 11, 29, 17), False),  # Sunday in UTC, Monday 01:00 in Beijing
    ],
)
def test_peak_hours_follow_beijing_time(when: float, peak: bool) -> None:
    info = model_info("deepseek-flash")
    assert info is not None and info.pricing is not None
    expected = 1.506 if peak else 0.753  # 0.006 + 0.30 + 1.20, or half of it
    assert info.pricing.price_at(when).cost(MILLION) == pytest.approx(expected)


async def test_the_adapter_publishes_the_table_to_the_core() -> None:
    config = {"llm_deepseek": {"models": ["deepseek-flash", "my-model"]}}
    async with Harness(load_entrypoints=False, plugins=[DeepSeekPlugin], config=config) as h:
        assert h.llm.model_info("deepseek/deepseek-v4-flash") == model_info("deepseek-flash")
        assert h.llm.model_info("my-model") is None
        pricing = h.llm.pricing("deepseek-flash")
        assert pricing is not None
        assert pricing.price_at(utc(2026, 11, 30, 2)).cost(MILLION) == pytest.approx(1.506)
    pro = DeepSeekAdapter(DeepSeekConfig()).model_info("deepseek-v4-pro")
    assert pro is not None and pro.pricing is not None
    assert pro == ModelInfo(1_000_000, 384_000, False, True, pro.pricing)
    assert pro.pricing.price_at(utc(2026, 12, 5)).cost(MILLION) == pytest.approx(2.662)


async def test_compaction_reads_the_context_window_from_the_table() -> None:
    compaction = CompactionPlugin()
    async with Harness(load_entrypoints=False, plugins=[DeepSeekPlugin, compaction]):
        assert compaction.context_window("deepseek-flash") == 1_000_000
        assert compaction.context_window("deepseek/deepseek-v4-flash") == 1_000_000
        assert compaction.context_window("deepseek-v4-pro") == 1_000_000


# -- JSON output mode ---------------------------------------------------------------------------


def ask(response_format: str | None, prompt: str = "Answer in JSON.") -> LlmRequest:
    return LlmRequest(
        "deepseek-flash",
        (Message("user", (Text(prompt),)),),
        response_format=response_format,  # type: ignore[arg-type]
    )


def test_response_format_is_sent_only_when_set() -> None:
    assert request_body(ask("json_object"), "deepseek-flash")["response_format"] == {
        "type": "json_object"
    }
    assert request_body(ask("text"), "deepseek-flash")["response_format"] == {"type": "text"}
    assert "response_format" not in request_body(ask(None), "deepseek-flash")


async def json_agent_turn(
    mock_server: MockServer, system_prompt: str, response_format: str | None
) -> tuple[list[TurnEndReason], str]:
    """One turn of an agent with JSON output mode: the turn's end and the answer's text."""
    async with Harness(
        load_entrypoints=False, plugins=[DeepSeekPlugin], config=deepseek_config(mock_server)
    ) as harness:
        options = AgentOptions(
            model="deepseek-flash",
            system_prompt=system_prompt,
            response_format=response_format,  # type: ignore[arg-type]
        )
        agent = harness.agent_loop.create("a", options)
        agent.send("What is the capital of France?")
        await agent.wait_idle()
        events = agent.session.events
        ends = [event.reason for event in data_of(events, TurnEnd)]
        messages = data_of(events, AssistantMessage)
        text = "".join(
            block.text
            for message in messages
            for block in message.content
            if isinstance(block, Text)
        )
        return ends, text


async def test_an_agent_in_json_mode_gets_a_json_object(mock_server: MockServer) -> None:
    ends, text = await json_agent_turn(mock_server, "Reply as a JSON object.", "json_object")
    assert ends == [TurnCompleted()]
    answer = json.loads(text)
    assert isinstance(answer, dict) and "capital of France" in answer["answer"]
    assert mock_server.requests[0].body["response_format"] == {"type": "json_object"}


async def test_json_mode_without_the_word_json_is_refused_as_the_api_does(
    mock_server: MockServer,
) -> None:
    ends, _ = await json_agent_turn(mock_server, "Be brief.", "json_object")
    (end,) = ends
    assert isinstance(end, TurnError) and end.failure.code == "INVALID_REQUEST"
    assert "must contain the word 'json'" in end.failure.message


async def test_text_mode_answers_text(mock_server: MockServer) -> None:
    ends, text = await json_agent_turn(mock_server, "Be brief.", "text")
    assert ends == [TurnCompleted()] and text.startswith("You said:")


# -- legacy names on the wire -------------------------------------------------------------------


async def test_a_legacy_name_is_sent_as_today_s_name(
    adapter: DeepSeekAdapter, mock_server: MockServer
) -> None:
    request = LlmRequest("deepseek/deepseek-v4-flash", (Message("user", (Text("hi"),)),))
    async for _ in adapter.stream(request):
        pass
    assert mock_server.requests[0].body["model"] == "deepseek-flash"


# -- what a user with a key sees ----------------------------------------------------------------


@pytest.fixture
def dsh_run(mock_server: MockServer, tmp_path: Path) -> list[str]:
    """The argv of ``dsh`` run as a real process, with the mock server as the base URL (and
    nothing else configured)."""
    config = tmp_path / "dsh.toml"
    config.write_text(f'[llm_deepseek]\nbase_url = "{mock_server.url}"\n')
    return [sys.executable, "-m", "dsh", "--config", str(config)]


async def test_dsh_run_defaults_to_deepseek_flash_and_prints_the_cost(
    dsh_run: list[str], mock_server: MockServer, tmp_path: Path
) -> None:
    # A text answer (whatever tools the installed plugins offer) with a usage that costs a
    # distinct amount: 160,000 input tokens of which 100,000 cached, 40,000 output tokens.
    usage = usage_json(160_000, 40_000, hits=100_000)
    mock_server.queue(reply(model="deepseek-flash", text="Hello!", usage=usage))
    env = dict(os.environ, DEEPSEEK_API_KEY="sk-test", XDG_CONFIG_HOME=str(tmp_path))
    env["XDG_DATA_HOME"] = str(tmp_path)
    env.pop("NO_COLOR", None)
    before = time.time()
    child = await asyncio.create_subprocess_exec(
        *dsh_run, "run", "--usage", "hi",
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env, cwd=tmp_path,
    )  # fmt: skip
    out, err = await asyncio.wait_for(child.communicate(), 60)
    after = time.time()
    assert child.returncode == 0, err.decode()
    assert mock_server.requests[0].body["model"] == "deepseek-flash"
    assert mock_server.requests[0].headers["Authorization"] == "Bearer sk-test"
    assert out.decode() == "Hello!\n"
    # Off-peak: (60,000 x 0.15 + 100,000 x 0.003 + 40,000 x 0.60) per million = $0.0333;
    # peak is twice that. The call was priced at the hour it was made.
    expected = {when: 0.0666 if PEAK_HOURS.contains(when) else 0.0333 for when in (before, after)}
    shown = re.search(r"· \$(\d+\.\d+) ·", err.decode())
    assert shown is not None, err.decode()
    assert shown.group(1) in {f"{cost:.4f}" for cost in expected.values()}
