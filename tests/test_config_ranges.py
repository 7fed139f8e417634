"""Every numeric setting of the built-in plugins refuses a value that would hang, crash or
misbehave, when the harness starts: the error names the section and the key."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from dsh import Harness
from dsh.values._errors import ConfigError

#: (section, the section's table, the key the error must name). Timeouts are > 0, counts and
#: caps at least 1 (or 0 where 0 means "none" or "no bound"), ratios in (0, 1] or [0, 1],
#: prices at least 0, budget limits positive.
BAD: list[tuple[str, dict[str, Any], str]] = [
    ("llm_deepseek", {"connect_timeout_s": 0}, "connect_timeout_s"),
    ("llm_deepseek", {"idle_timeout_s": -1.0}, "idle_timeout_s"),
    ("llm_deepseek", {"first_data_timeout_s": math.nan}, "first_data_timeout_s"),
    ("llm_deepseek", {"max_event_bytes": 0}, "max_event_bytes"),
    ("llm_deepseek", {"max_connections": -1}, "max_connections"),
    ("llm_openai_sdk", {"connect_timeout_s": 0}, "connect_timeout_s"),
    ("llm_openai_sdk", {"idle_timeout_s": 0}, "idle_timeout_s"),
    ("llm_openai_sdk", {"first_data_timeout_s": -5}, "first_data_timeout_s"),
    ("llm_providers", {"ollama": {"idle_timeout_s": 0}}, "idle_timeout_s"),
    ("llm_providers", {"ollama": {"models": {"q": {"context_window": 0}}}}, "context_window"),
    (
        "llm_providers",
        {"ollama": {"models": {"q": {"price": {"input": -1, "output": 1}}}}},
        "input",
    ),
    ("llm_anthropic", {"max_connections": -1}, "max_connections"),
    ("tools_shell", {"timeout_s": 0}, "timeout_s"),
    ("tools_shell", {"max_timeout_s": -1}, "max_timeout_s"),
    ("tools_shell", {"kill_grace_s": -0.5}, "kill_grace_s"),
    ("tools_shell", {"max_output_bytes": 0}, "max_output_bytes"),
    ("terminal_ui", {"history_size": -1}, "history_size"),
    ("retry", {"base_delay_s": -1}, "base_delay_s"),
    ("retry", {"max_delay_s": -1}, "max_delay_s"),
    ("retry", {"max_attempts": 0}, "max_attempts"),
    ("retry", {"jitter": -0.1}, "jitter"),
    ("retry", {"jitter": 1.5}, "jitter"),
    ("retry", {"max_retry_after_s": -1}, "max_retry_after_s"),
    ("compaction", {"context_window": 0}, "context_window"),
    ("compaction", {"context_windows": {"m": 0}}, "context_windows"),
    ("compaction", {"default_context_window": 0}, "default_context_window"),
    ("compaction", {"reserve_tokens": -1}, "reserve_tokens"),
    ("compaction", {"low_water": 0}, "low_water"),
    ("compaction", {"low_water": 1.01}, "low_water"),
    ("compaction", {"keep_recent_tokens": -1}, "keep_recent_tokens"),
    ("compaction", {"prune_min_chars": -1}, "prune_min_chars"),
    ("compaction", {"summary_max_tokens": 0}, "summary_max_tokens"),
    ("budgets", {"max_steps_per_turn": 0}, "max_steps_per_turn"),
    ("budgets", {"max_tokens_per_turn": 0}, "max_tokens_per_turn"),
    ("budgets", {"max_tokens_per_session": -3}, "max_tokens_per_session"),
    ("budgets", {"max_cost_per_turn": 0}, "max_cost_per_turn"),
    ("budgets", {"max_cost_per_session": -1.0}, "max_cost_per_session"),
    ("budgets", {"prices": {"m": {"input": 1, "output": -1}}}, "output"),
    ("budgets", {"prices": {"m": {"input": 1, "output": 1, "cache_read": -1}}}, "cache_read"),
    ("budgets", {"prices": {"m": {"input": 1, "output": 1, "cache_write": -1}}}, "cache_write"),
    ("persistence_sqlite", {"lease_seconds": 0}, "lease_seconds"),
]


@pytest.mark.parametrize(("section", "table", "key"), BAD, ids=[f"{s}.{k}" for s, _, k in BAD])
def test_an_out_of_range_number_fails_the_harness_at_start(
    section: str, table: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        Harness(config={section: table}).load()
    [error] = caught.value.errors
    assert error.startswith(f"[{section}]")
    assert re.search(rf"\b{key} must be (at least|at most|greater than) ", error), error


def test_the_defaults_and_the_edges_of_each_range_pass() -> None:
    edges = {
        "llm_deepseek": {"max_connections": 0, "idle_timeout_s": math.inf},
        "tools_shell": {"kill_grace_s": 0},
        "terminal_ui": {"history_size": 0},
        "retry": {"base_delay_s": 0, "max_delay_s": 0, "jitter": 1, "max_retry_after_s": 0},
        "compaction": {"low_water": 1, "reserve_tokens": 0, "context_windows": {"m": 1}},
        "budgets": {"max_steps_per_turn": 1, "prices": {"m": {"input": 0, "output": 0}}},
    }
    Harness().load()
    Harness(config=edges).load()
