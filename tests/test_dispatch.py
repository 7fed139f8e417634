"""Tool dispatch: concurrency-safe batches, barriers, model order, a result for every call."""

from __future__ import annotations

import asyncio
from typing import Any

from dsh import AgentOptions, Harness, Tool
from dsh.content import text_of
from dsh.events import TurnAborted
from dsh.request import ToolSchema
from dsh.testing import ScriptedAdapter, text_response, tool_calls_response
from tests.helpers import kinds, of_type


class Probe:
    """Tools that record when they start and finish and wait for a release."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.running = 0
        self.peak = 0
        self.release: dict[str, asyncio.Event] = {}

    def tool(self, name: str, safe: bool) -> Tool:
        self.release[name] = asyncio.Event()

        async def run(args: Any, execution: Any) -> str:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.log.append(f"start {name}")
            try:
                await self.release[name].wait()
            finally:
                self.running -= 1
            self.log.append(f"end {name}")
            return f"{name} done"

        return Tool(ToolSchema(name, name), run, concurrency_safe=safe)


def agent_with(h: Harness, names: list[str]) -> Any:
    calls: list[tuple[str, str, dict[str, Any]]] = [(f"c-{n}", n, {}) for n in names]
    script = [tool_calls_response(calls), text_response("ok")]
    h.llm.register_adapter(["m"], ScriptedAdapter(script))
    return h.agent_loop.create("a", AgentOptions(model="m"))


async def wait_for(condition: Any) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never became true")


async def test_safe_tools_run_together_and_results_keep_the_models_order(
    harness: Harness,
) -> None:
    probe = Probe()
    for name in ("a", "b", "c"):
        harness.tools.register(probe.tool(name, safe=True))
    agent = agent_with(harness, ["a", "b", "c"])
    agent.send("go")
    await wait_for(lambda: probe.running == 3)  # all three at once: the time of the slowest
    for name in ("c", "b", "a"):  # finish in reverse order
        probe.release[name].set()
        await asyncio.sleep(0)
    await agent.wait_idle()
    assert probe.log[3:] == ["end c", "end b", "end a"]
    results = [e.data.call_id for e in of_type(agent.session.events, "tool/result")]
    assert results == ["c-a", "c-b", "c-c"]
    assert kinds(agent.session.events)[5:11] == ["tool/call"] * 3 + ["tool/result"] * 3


async def test_an_unsafe_tool_is_a_barrier(harness: Harness) -> None:
    probe = Probe()
    harness.tools.register(probe.tool("a", safe=True))
    harness.tools.register(probe.tool("w", safe=False))
    harness.tools.register(probe.tool("c", safe=True))
    for event in probe.release.values():
        event.set()
    agent = agent_with(harness, ["a", "w", "c"])
    agent.send("go")
    await agent.wait_idle()
    assert probe.log == ["start a", "end a", "start w", "end w", "start c", "end c"]
    assert probe.peak == 1


async def test_concurrency_is_bounded_by_config() -> None:
    config = {"agent_loop": {"max_parallel_tools": 2}}
    async with Harness(load_entrypoints=False, config=config) as h:
        probe = Probe()
        for name in ("a", "b", "c"):
            h.tools.register(probe.tool(name, safe=True))
        agent = agent_with(h, ["a", "b", "c"])
        agent.send("go")
        await wait_for(lambda: probe.running == 2)
        for event in probe.release.values():
            event.set()
        await agent.wait_idle()
        assert probe.peak == 2


async def test_abort_gives_every_call_a_result(harness: Harness) -> None:
    probe = Probe()
    harness.tools.register(probe.tool("fast", safe=True))
    harness.tools.register(probe.tool("slow", safe=True))
    harness.tools.register(probe.tool("later", safe=False))
    probe.release["fast"].set()
    agent = agent_with(harness, ["fast", "slow", "later", "unknown"])
    agent.send("go")
    await wait_for(lambda: "end fast" in probe.log and probe.running == 1)
    agent.abort("enough")
    await agent.wait_idle()
    results = {e.data.call_id: e.data for e in of_type(agent.session.events, "tool/result")}
    assert list(results) == ["c-fast", "c-slow", "c-later", "c-unknown"]
    assert (results["c-fast"].is_error, results["c-fast"].code) == (False, None)
    assert results["c-slow"].code == "ABORTED"
    assert results["c-later"].code == "ABORTED_BEFORE_DISPATCH"
    assert "never started (aborted: enough)" in text_of(results["c-later"].content)
    assert [e.data.call_id for e in of_type(agent.session.events, "tool/call")] == [
        "c-fast",
        "c-slow",
    ]
    assert of_type(agent.session.events, "turn/end")[0].data.reason == TurnAborted("enough")


async def test_dispose_while_a_batch_runs() -> None:
    async with Harness(load_entrypoints=False) as h:
        probe = Probe()
        h.tools.register(probe.tool("a", safe=True))
        h.tools.register(probe.tool("b", safe=True))
        agent = agent_with(h, ["a", "b"])
        agent.send("go")
        await wait_for(lambda: probe.running == 2)
        await agent.dispose()
        results = of_type(agent.session.events, "tool/result")
        assert [r.data.code for r in results] == ["ABORTED", "ABORTED"]
        assert "the agent was disposed" in results[0].data.content[0].text
