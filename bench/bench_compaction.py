"""What compaction costs a long conversation: how often it runs, and how much of the input the
provider's prompt cache still serves.

Run ``python bench/bench_compaction.py [TURNS]``. A conversation of ``TURNS`` turns (100 by
default; each turn a tool call whose result is ~500 tokens, then an answer) runs through dsh's
DeepSeek adapter over HTTP against the bundled mock server, which reports cache hits by prefix
as DeepSeek does (``MockServer(prefix_cache=True)``: the part of a prompt an earlier prompt
started with, in 64-token units). It runs twice with the same context window: compacting only
just under the threshold (``low_water = 1.0``, the behaviour before the low-water mark) and
down to the default low-water mark (60% of the window). For each it prints the compactions
(and how many were summaries), the model calls, and the share of input tokens served from the
cache, summary calls included. Counts, not timings: the figures are the same on every machine.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from attrs import frozen

from dsh import AgentOptions, Harness, Tool
from dsh.testing.mock import deepseek_config
from dsh.testing.mockserver import MockServer
from dsh.values._events import AssistantMessage, TurnCompleted, TurnEnd
from dsh.values._rare_events import HistorySummary
from dsh.values._request import ToolSchema
from dsh_plugins.compaction import CompactionPlugin
from dsh_plugins.llm_deepseek import DeepSeekPlugin

TURNS = 100
MODEL = "deepseek-v4-pro"
WINDOW = {"context_window": 16_000, "reserve_tokens": 2_000, "keep_recent_tokens": 2_500}
RESULT = "".join(f"line {i}: some output a tool printed\n" for i in range(60))  # ~500 tokens


@frozen
class Figures:
    """What one run of the conversation cost."""

    turns: int
    compactions: int
    summaries: int
    calls: int
    input_tokens: int
    cached_tokens: int

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0


async def fetch(args: Any, execution: Any) -> str:
    return RESULT


async def conversation(turns: int, low_water: float) -> Figures:
    """Run ``turns`` turns with compaction aiming at ``low_water``; count what happened."""
    async with MockServer(prefix_cache=True) as server:
        config = {**deepseek_config(server), "compaction": {**WINDOW, "low_water": low_water}}
        plugins: list[Any] = [DeepSeekPlugin, CompactionPlugin]
        async with Harness(load_entrypoints=False, plugins=plugins, config=config) as h:
            h.tools.register(Tool(ToolSchema("fetch", "fetch a page of output"), fetch))
            agent = h.agent_loop.create("bench", AgentOptions(model=MODEL))
            for turn in range(turns):
                agent.send(f"turn {turn}: look at the next page of output")
                await agent.wait_idle()
            events = agent.session.events
        usages = [
            e.data.usage
            for e in events
            if isinstance(e.data, AssistantMessage | HistorySummary) and e.data.usage is not None
        ]
        ends = [e.data.reason for e in events if isinstance(e.data, TurnEnd)]
        if ends != [TurnCompleted()] * turns:
            raise SystemExit(f"a turn did not complete: {sorted({r.type for r in ends})}")
        return Figures(
            turns=turns,
            compactions=sum(1 for e in events if e.type == "compaction/start"),
            summaries=sum(1 for e in events if e.type == "compaction/summary"),
            calls=len(server.requests),
            input_tokens=sum(u.input_tokens + u.cache_read_tokens for u in usages),
            cached_tokens=sum(u.cache_read_tokens for u in usages),
        )


def report(label: str, figures: Figures) -> None:
    print(
        f"  {label:34} {figures.compactions:3} compactions ({figures.summaries} summaries)  "
        f"{figures.calls:4} model calls  {figures.input_tokens:>10,} input tokens  "
        f"{figures.cached_share:6.1%} cached"
    )


async def main(turns: int) -> None:
    before = await conversation(turns, 1.0)
    after = await conversation(turns, 0.6)
    window = WINDOW["context_window"]
    print(f"{turns}-turn conversation, {window:,}-token window, against the mock server:")
    report("just under the threshold (1.0):", before)
    report("down to the low-water mark (0.6):", after)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else TURNS))
