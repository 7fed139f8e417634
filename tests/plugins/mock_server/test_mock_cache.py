"""The mock's prompt cache: hits for the part of a prompt an earlier prompt started with."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from hypothesis import given
from hypothesis import strategies as st

from dsh.llm._sse import parse_sse
from dsh.testing.mockserver import MockServer, Scenario, reply
from dsh.testing.mockserver.cache import (
    CACHE_UNIT_TOKENS,
    PrefixCache,
    _common_prefix,
    with_cache_hits,
)

from .conftest import chat


def usage_of(frames: str) -> dict[str, Any]:
    payloads = [json.loads(e.data) for e in parse_sse(frames.encode()) if e.data != "[DONE]"]
    usage: dict[str, Any] = [p["usage"] for p in payloads if p.get("usage")][-1]
    return usage


@given(st.text("ab", max_size=40), st.text("ab", max_size=40), st.text("ab", max_size=40))
def test_the_common_prefix_is_the_longest_shared_start(head: str, a: str, b: str) -> None:
    n = _common_prefix(head + a, head + b)
    assert (head + a)[:n] == (head + b)[:n]
    assert n >= len(head)
    assert n == len(a + head) or n == len(b + head) or (head + a)[n] != (head + b)[n]


def test_hits_count_whole_cache_units_of_the_longest_shared_prefix() -> None:
    cache = PrefixCache()
    long = [{"role": "user", "content": "x" * 4000}]
    assert cache.hit_tokens({"messages": long}) == 0  # nothing seen yet
    longer = [*long, {"role": "assistant", "content": "y" * 400}]
    hits = cache.hit_tokens({"messages": longer})
    shared = len(json.dumps(long)) - 2  # all but the closing "}]"
    assert hits == shared // 4 // CACHE_UNIT_TOKENS * CACHE_UNIT_TOKENS and hits > 0
    assert cache.hit_tokens({"messages": [{"role": "user", "content": "z"}]}) == 0
    assert cache.hit_tokens({}) == 0


def test_only_the_usage_frame_is_rewritten_and_hits_never_exceed_the_prompt() -> None:
    scenario = reply(text="hello there", prompt_tokens=100)
    assert with_cache_hits(scenario, 0) is scenario
    rewritten = with_cache_hits(scenario, 64)
    changed = [a for a, b in zip(scenario.frames, rewritten.frames, strict=True) if a != b]
    assert len(changed) == 1
    usage = usage_of("".join(rewritten.frames))
    assert usage["prompt_cache_hit_tokens"] == 64 and usage["prompt_cache_miss_tokens"] == 36
    assert usage["prompt_tokens_details"] == {"cached_tokens": 64}
    capped = usage_of("".join(with_cache_hits(scenario, 640).frames))
    assert capped["prompt_cache_hit_tokens"] == 100 and capped["prompt_cache_miss_tokens"] == 0
    odd = Scenario(
        "odd", (': comment "prompt_tokens"\n\n', 'data: {"usage": null, "prompt_tokens": 1}\n\n')
    )
    assert with_cache_hits(odd, 64) == odd


async def test_the_server_reports_prefix_hits_when_asked() -> None:
    first = [{"role": "user", "content": "tell me " * 200}]
    second = [*first, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    for enabled in (True, False):
        async with MockServer(prefix_cache=enabled) as server, aiohttp.ClientSession() as client:
            usages = []
            for messages in (first, second):
                async with client.post(
                    server.url + "/chat/completions",
                    json=chat(messages, thinking={"type": "disabled"}),
                    headers={"Authorization": "Bearer k"},
                ) as response:
                    usages.append(usage_of((await response.read()).decode()))
        assert usages[0]["prompt_cache_hit_tokens"] == 0
        assert (usages[1]["prompt_cache_hit_tokens"] >= 384) is enabled
