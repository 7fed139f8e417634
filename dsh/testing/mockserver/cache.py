"""Prompt-cache accounting: the share of a request's prompt the provider served from its cache.

DeepSeek caches on disk by prefix: the part of a prompt that repeats the start of an earlier
prompt is a cache hit, counted in whole storage units of 64 tokens, and billed at a fraction of
a miss. The mock reproduces that so that a client's cache behaviour (what a compaction does to
the prefix, say) can be measured offline: :class:`PrefixCache` remembers the prompts it saw and
rewrites a scenario's usage with the hits the new prompt earns.

A prompt is the request's ``messages`` serialised as the scripted conversation counts them
(four characters a token).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from typing import Any

from attrs import evolve

from dsh.testing.mockserver.scenario import Scenario
from dsh.testing.mockserver.wire import data_frame

__all__ = ["CACHE_UNIT_TOKENS", "PrefixCache", "with_cache_hits"]

#: DeepSeek's cache storage unit: hits are counted in whole units.
CACHE_UNIT_TOKENS = 64
_CHARS_PER_TOKEN = 4


def _common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    low, high = 0, min(len(a), len(b))
    while low < high:  # bisect: slice comparisons run in C
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class PrefixCache:
    """The prompts seen so far (the most recent ``capacity``) and what a new one hits."""

    def __init__(self, capacity: int = 256) -> None:
        self._prompts: deque[str] = deque(maxlen=capacity)

    def hit_tokens(self, body: Mapping[str, Any]) -> int:
        """The tokens of ``body``'s prompt that an earlier prompt had as its start, in whole
        cache units; then remember the prompt."""
        prompt = json.dumps(body.get("messages") or [])
        shared = max((_common_prefix(prompt, seen) for seen in self._prompts), default=0)
        self._prompts.append(prompt)
        units = shared // _CHARS_PER_TOKEN // CACHE_UNIT_TOKENS
        return units * CACHE_UNIT_TOKENS


def with_cache_hits(scenario: Scenario, hits: int) -> Scenario:
    """``scenario`` with its usage reporting ``hits`` cached prompt tokens (at most all of
    them); frames without usage are left as they are."""
    if hits <= 0:
        return scenario
    return evolve(
        scenario, frames=tuple(_frame_with_hits(frame, hits) for frame in scenario.frames)
    )


def _frame_with_hits(frame: str, hits: int) -> str:
    if '"prompt_tokens"' not in frame or not frame.startswith("data: {"):
        return frame
    payload = json.loads(frame.removeprefix("data: "))
    usage = payload.get("usage")
    if not isinstance(usage, dict):
        return frame
    prompt = int(usage["prompt_tokens"])
    cached = min(hits, prompt)
    usage["prompt_tokens_details"] = {"cached_tokens": cached}
    usage["prompt_cache_hit_tokens"] = cached
    usage["prompt_cache_miss_tokens"] = prompt - cached
    return data_frame(payload)
