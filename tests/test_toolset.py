"""``AgentOptions(tools=...)``: an agent is offered, and may call, only its own tools."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given
from hypothesis import strategies as st

from dsh import Harness, Tool
from dsh.loop._output import FINAL_RESULT
from dsh.testing import text_response, tool_call_response, tool_calls_response
from dsh.testing.strategies import llm_requests, tool_schemas
from dsh.values._content import text_of
from dsh.values._events import ToolResultEvent
from dsh.values._request import LlmRequest, ToolSchema
from tests.helpers import data_of, scripted_agent


def named(name: str) -> Tool:
    async def run(args: Any, execution: Any) -> str:
        return f"{name} ran"

    return Tool(ToolSchema(name, f"the {name} tool"), run)


async def test_only_the_allowed_tools_are_offered_and_run(harness: Harness) -> None:
    for name in ("read", "write"):
        harness.tools.register(named(name))
    agent, adapter = scripted_agent(
        harness,
        [tool_calls_response([("c1", "read", {}), ("c2", "write", {})]), text_response("ok")],
        tools=("read",),
    )
    agent.send("go")
    await agent.wait_idle()
    assert [t.name for t in adapter.requests[0].tools] == ["read"]
    results = {e.call_id: e for e in data_of(agent.session.events, ToolResultEvent)}
    assert text_of(results["c1"].content) == "read ran"
    assert results["c2"].code == "NOT_ALLOWED"
    assert "may not call 'write'; its tools are: read" in text_of(results["c2"].content)


async def test_a_typed_agent_with_no_tools_may_still_answer(harness: Harness) -> None:
    harness.tools.register(named("read"))
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    agent, adapter = scripted_agent(
        harness, [tool_call_response("c1", FINAL_RESULT, {"x": 1})], tools=(), output_type=schema
    )
    agent.send("go")
    await agent.wait_idle()
    assert [t.name for t in adapter.requests[0].tools] == [FINAL_RESULT]
    assert await agent.result() == {"x": 1}


async def test_no_tools_at_all(harness: Harness) -> None:
    harness.tools.register(named("read"))
    agent, adapter = scripted_agent(
        harness, [tool_call_response("c1", "read", {}), text_response("ok")], tools=()
    )
    agent.send("go")
    await agent.wait_idle()
    assert adapter.requests[0].tools == ()
    (result,) = data_of(agent.session.events, ToolResultEvent)
    assert "its tools are: none" in text_of(result.content)


def test_with_tools_keeps_every_other_field_of_the_request() -> None:
    # What the tool set relies on: with_tools is evolve(tools=...), a field added later included.
    values: dict[str, Any] = {field.name: object() for field in attrs.fields(LlmRequest)}
    request = LlmRequest(**values)
    offered = (ToolSchema("read", "the read tool"),)
    changed = request.with_tools(offered)
    assert changed.tools is offered
    assert all(getattr(changed, name) is value for name, value in values.items() if name != "tools")


@given(llm_requests, st.sampled_from([None, "text", "json_object"]), st.lists(tool_schemas))
def test_with_tools_is_evolve(request: LlmRequest, response_format: Any, tools: list[Any]) -> None:
    request = attrs.evolve(request, response_format=response_format)
    assert request.with_tools(tuple(tools)) == attrs.evolve(request, tools=tuple(tools))
