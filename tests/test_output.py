"""Typed results: ``AgentOptions(output_type=...)``, ``agent.result()`` and output retries."""

from __future__ import annotations

import dataclasses
from typing import Any, NotRequired, TypedDict

import attrs
import pytest

from dsh import AgentOptions, Continuation, Harness, OutputError, Stop, hookimpl
from dsh.llm._service import ModelInfo
from dsh.loop._output import FINAL_RESULT
from dsh.loop._output_spec import output_spec
from dsh.testing import (
    ScriptedAdapter,
    ScriptEntry,
    hang,
    text_response,
    tool_call_response,
    tool_calls_response,
)
from dsh.values._events import TurnCompleted
from dsh.values._rare_events import OutputFailed, OutputResult, OutputRetry
from dsh.values._request import LlmRequest
from tests.helpers import of_type, scripted_agent


@attrs.frozen
class City:
    """A city and its population."""

    name: str
    population: int = attrs.field(validator=attrs.validators.gt(0))


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


@dataclasses.dataclass
class Segment:
    """Two points."""

    start: Point
    end: Point
    label: str = ""


# The functional form: with postponed annotations, ``NotRequired`` in a class body is not seen.
Person = TypedDict("Person", {"name": str, "age": NotRequired[int]})  # noqa: UP013


def final(call_id: str, args: dict[str, Any]) -> ScriptEntry:
    return tool_call_response(call_id, FINAL_RESULT, args)


def data_of(agent: Any, type_: str) -> list[Any]:
    return [e.data for e in of_type(agent.session.events, type_)]


async def test_valid_on_first_try(harness: Harness) -> None:
    agent, adapter = scripted_agent(
        harness, [final("c1", {"name": "Oslo", "population": 700000})], output_type=City
    )
    agent.send("the capital of Norway?")
    await agent.wait_idle()
    assert await agent.result() == City("Oslo", 700000)
    assert data_of(agent, "output/result") == [
        OutputResult(1, {"name": "Oslo", "population": 700000})
    ]
    assert data_of(agent, "output/retry") == []
    request = adapter.requests[0]
    (tool,) = [t for t in request.tools if t.name == FINAL_RESULT]
    assert tool.parameters == output_spec(City).schema
    assert "call the final_result tool" in (request.system or "")
    assert len(adapter.requests) == 1  # the accepted call ends the turn
    assert isinstance(data_of(agent, "turn/end")[-1].reason, TurnCompleted)


async def test_valid_after_one_retry(harness: Harness) -> None:
    agent, _adapter = scripted_agent(
        harness,
        [
            final("c1", {"name": "Oslo", "population": -1}),
            final("c2", {"name": "Oslo", "population": 700000}),
        ],
        output_type=City,
    )
    agent.send("go")
    await agent.wait_idle()
    assert await agent.result() == City("Oslo", 700000)
    (retry,) = data_of(agent, "output/retry")
    assert retry.attempt == 1 and "must be > 0" in retry.error
    (bad,) = [r for r in data_of(agent, "tool/result") if r.is_error]
    assert bad.code == "INVALID_RESULT" and "call final_result again" in bad.content[0].text


async def test_failing_after_output_retries(harness: Harness) -> None:
    bad = {"name": "Oslo"}  # population is required
    agent, adapter = scripted_agent(
        harness, [final(f"c{n}", bad) for n in range(3)], output_type=City
    )
    agent.send("go")
    await agent.wait_idle()
    # The last attempt is not retried: it is logged as the failure alone.
    assert [r.attempt for r in data_of(agent, "output/retry")] == [1, 2]
    (failed,) = data_of(agent, "output/failed")
    assert failed == OutputFailed(1, 3, failed.error) and "population" in failed.error
    with pytest.raises(OutputError, match=r"gave no valid City after 3 attempts.*population"):
        await agent.result()
    assert len(adapter.requests) == 3


async def test_output_retries_is_configurable(harness: Harness) -> None:
    agent, _ = scripted_agent(
        harness, [final("c1", {"name": 1})], output_type=City, output_retries=0
    )
    agent.send("go")
    await agent.wait_idle()
    with pytest.raises(OutputError, match="after 1 attempts"):
        await agent.result()


async def test_text_instead_of_the_tool_is_sent_back(harness: Harness) -> None:
    agent, _adapter = scripted_agent(
        harness,
        [text_response("Oslo, about 700k"), final("c1", {"name": "Oslo", "population": 7})],
        output_type=City,
    )
    agent.send("go")
    await agent.wait_idle()
    assert await agent.result() == City("Oslo", 7)
    (steering,) = data_of(agent, "steering/message")
    assert "final_result" in steering.content[0].text
    assert steering.source.type == "plugin"


async def test_other_tools_run_beside_the_result(harness: Harness) -> None:
    agent, _adapter = scripted_agent(
        harness,
        [tool_calls_response([("c1", "lookup", {}), ("c2", FINAL_RESULT, {"x": 1})])],
        output_type=Point,
    )
    agent.send("go")
    await agent.wait_idle()
    assert await agent.result() == Point(1)
    results = {r.call_id: r for r in data_of(agent, "tool/result")}
    assert results["c1"].code == "UNKNOWN_TOOL" and not results["c2"].is_error


async def test_arguments_that_are_not_json(harness: Harness) -> None:
    from dsh.values._chunks import (
        BlockEnd,
        BlockStart,
        Finish,
        FinishToolCalls,
        StreamChunk,
        ToolCallDelta,
    )
    from dsh.values._content import ToolCall

    broken: list[StreamChunk] = [
        BlockStart(0, "tool-call"),
        ToolCallDelta(0, "c1", "{nope", name=FINAL_RESULT),
        BlockEnd(0, ToolCall("c1", FINAL_RESULT, "{nope")),
        Finish(FinishToolCalls()),
    ]
    agent, _ = scripted_agent(harness, [broken, final("c2", {"x": 2})], output_type=Point)
    agent.send("go")
    await agent.wait_idle()
    assert await agent.result() == Point(2)
    assert "not valid JSON" in data_of(agent, "output/retry")[0].error


class JsonModel(ScriptedAdapter):
    def model_info(self, model: str) -> ModelInfo:
        return ModelInfo(json_mode=True)


def json_agent(harness: Harness, script: list[ScriptEntry], **options: Any) -> Any:
    adapter = JsonModel(script)
    harness.llm.register_adapter(["json-model"], adapter)
    agent = harness.agent_loop.create("j", AgentOptions(model="json-model", **options))
    return agent, adapter


async def test_json_mode_when_the_model_has_it(harness: Harness) -> None:
    agent, adapter = json_agent(
        harness, [text_response('{"name": "Ann", "age": 3}')], output_type=Person
    )
    agent.send("go")
    await agent.wait_idle()
    assert await agent.result() == {"name": "Ann", "age": 3}
    request = adapter.requests[0]
    assert request.response_format == "json_object" and request.tools == ()
    assert '"required": ["name"]' in (request.system or "")


async def test_json_mode_retries_then_fails(harness: Harness) -> None:
    agent, _adapter = json_agent(
        harness,
        [text_response("not json"), text_response('{"x": "a"}'), text_response("{}")],
        output_type=Point,
    )
    agent.send("go")
    await agent.wait_idle()
    errors = [r.error for r in data_of(agent, "output/retry")]
    assert "not valid JSON" in errors[0]
    assert "x: expected integer" in errors[1]
    assert len(errors) == 2 and "x" in data_of(agent, "output/failed")[0].error
    assert len(data_of(agent, "steering/message")) == 2
    with pytest.raises(OutputError):
        await agent.result()


async def test_json_mode_is_not_used_with_other_tools_or_thinking(harness: Harness) -> None:
    agent, adapter = json_agent(harness, [final("c1", {"x": 1})], output_type=Point, thinking=True)
    agent.send("go")
    await agent.wait_idle()
    assert adapter.requests[0].response_format is None
    assert await agent.result() == Point(1)


async def test_a_schema_dict_that_is_not_an_object_is_wrapped(harness: Harness) -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    agent, _adapter = scripted_agent(
        harness,
        [final("c1", {"result": ["x"]}), final("c2", {"result": [1, 2]})],
        output_type=schema,
    )
    agent.send("go")
    await agent.wait_idle()
    assert await agent.result() == [1, 2]
    assert "result[0]: expected integer" in data_of(agent, "output/retry")[0].error


async def test_result_errors(harness: Harness) -> None:
    plain, _ = scripted_agent(harness, [text_response("hi")], agent_id="plain")
    with pytest.raises(OutputError, match="has no output_type"):
        await plain.result()
    typed, _ = scripted_agent(harness, [hang()], agent_id="typed", output_type=Point)
    with pytest.raises(OutputError, match="has not finished a turn"):
        await typed.result()
    typed.send("go")
    await harness.llm.adapter_for("scripted-typed").started.wait()  # type: ignore[attr-defined]
    typed.abort("stop")
    await typed.wait_idle()
    with pytest.raises(OutputError, match="turn 1 ended aborted"):
        await typed.result()


class Stopper:
    @hookimpl
    def dsh_agent_turn_continuation(self, decision: Continuation) -> Stop[Continuation]:
        return Stop(Continuation(False, "host says stop"))


async def test_a_turn_stopped_by_a_plugin_has_no_result() -> None:
    async with Harness([Stopper()], load_entrypoints=False) as harness:
        agent, _ = scripted_agent(harness, [text_response("no")], output_type=Point)
        agent.send("go")
        await agent.wait_idle()
        with pytest.raises(OutputError, match="completed without a result"):
            await agent.result()


def test_schemas_of_the_supported_types() -> None:
    segment = output_spec(Segment).schema
    assert segment["description"] == "Two points."
    assert segment["required"] == ["start", "end"]
    assert segment["properties"]["start"]["required"] == ["x"]
    assert "description" not in output_spec(Point).schema  # the generated __doc__ is not one
    person = output_spec(Person)
    assert person.schema["properties"]["age"] == {"type": "integer"}
    assert person.convert({"name": "A"}) == {"name": "A"}
    assert output_spec(City).schema["description"] == "A city and its population."
    titled = output_spec({"title": "Answer", "type": "object"})
    assert titled.name == "Answer" and not titled.wrapped
    with pytest.raises(TypeError, match="give an attrs class, a dataclass, a TypedDict"):
        output_spec(int)


def test_events_round_trip(harness: Harness) -> None:
    from dsh.values._events import SessionEvent

    pairs: list[tuple[str, OutputRetry | OutputResult | OutputFailed]] = [
        ("output/retry", OutputRetry(1, 1, "bad")),
        ("output/result", OutputResult(1, {"a": [1]})),
        ("output/failed", OutputFailed(1, 3, "bad")),
    ]
    for name, data in pairs:
        event = SessionEvent(name, 0, 0.0, data)
        assert harness.events.decode(harness.events.encode(event)) == event


async def test_requests_of_agents_without_output_type_are_unchanged(harness: Harness) -> None:
    agent, adapter = scripted_agent(harness, [text_response("hi")])
    agent.send("go")
    await agent.wait_idle()
    request: LlmRequest = adapter.requests[0]
    assert request.tools == () and request.system is None


def test_output_types_by_import_path() -> None:
    from dsh import DshError
    from dsh.loop._output import import_type

    assert import_type("tests.test_output:City") is City
    with pytest.raises(DshError, match=r"is not 'package\.module:Name'"):
        import_type("tests.test_output")
    with pytest.raises(DshError, match=r"cannot import the output type 'tests\.test_output:Nope'"):
        import_type("tests.test_output:Nope")
