"""Typed results: ``AgentOptions(output_type=T)`` makes a turn's answer a validated ``T``.

``T`` is an attrs class, a dataclass, a ``TypedDict`` or a JSON Schema dict. How the model is
made to answer in shape is chosen per request from what the model can do:

* ``tool`` mode (the default): the request offers a ``final_result`` tool whose parameters are
  the type's schema. It works beside other tools and in thinking mode.
* ``json`` mode: when the model's adapter says it has a JSON output mode
  (:attr:`ModelInfo.json_mode <dsh.llm._service.ModelInfo.json_mode>`), the request offers no other
  tool and thinking is not on, the request asks for a JSON object (``response_format``) and the
  system prompt carries the schema.

An answer that does not validate is sent back to the model with the problem (the failed
``final_result`` call's error, or a steering message), at most ``AgentOptions.output_retries``
times; each attempt sent back is logged ``output/retry``, the accepted value ``output/result``
and the last failed attempt ``output/failed`` alone. :func:`result_of` (``await
agent.result()``) reads the last completed turn's value back from the session log, so it
survives a resume.

The machinery is :class:`OutputPlugin`, which every harness registers: hooks the loop already
calls (request, tool middleware, continuation), nothing in the loop itself.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import evolve

from dsh.hooks._markers import Stop, hookimpl
from dsh.tools._registry import ToolExecution, ToolOutcome
from dsh.values._agent import Continuation
from dsh.values._content import PluginSource, Text, ToolCall, text_of
from dsh.values._errors import DshError
from dsh.values._events import AssistantMessage, SessionEvent, TurnCompleted, TurnEnd, TurnStart
from dsh.values._request import JsonObject, LlmRequest, ToolSchema

if TYPE_CHECKING:
    from dsh.app._harness import Harness
    from dsh.loop._output_spec import Mode, TurnState
    from dsh.values._agent import Agent

__all__ = [
    "FINAL_RESULT",
    "OutputError",
    "OutputPlugin",
    "import_type",
    "load_schema",
    "result_of",
]

#: The name of the tool the model answers through in ``tool`` mode.
FINAL_RESULT = "final_result"
#: The plugin name the harness registers :class:`OutputPlugin` under.
PLUGIN_NAME = "dsh:output"
_SOURCE = PluginSource("output")


class OutputError(DshError):
    """The typed result is not available: the answer never validated, the turn did not
    complete, or no turn ran. The message says which, with the validation problem."""


def import_type(path: str, near: Path | None = None) -> Any:
    """The output type an agent profile names by import path, ``package.module:Name``, looked
    for first in ``near`` (the config file's directory: a project's own modules beside its
    ``dsh.toml``), then on ``sys.path``; raises :class:`DshError` saying what is wrong."""
    module_name, _, name = path.partition(":")
    added = near is not None and str(near) not in sys.path
    if added:
        sys.path.insert(0, str(near))
    try:
        found = getattr(importlib.import_module(module_name), name) if name else None
    except (ImportError, AttributeError) as exc:
        where = f" (looked in {near} and on sys.path)" if near is not None else ""
        raise DshError(f"cannot import the output type {path!r}{where}: {exc}") from exc
    finally:
        if added:
            sys.path.remove(str(near))
    if found is None:
        raise DshError(f"the output type {path!r} is not 'package.module:Name'")
    return found


def load_schema(text: str) -> JsonObject:
    """A JSON Schema given inline (``{...}``) or as the path of a JSON file (``dsh run
    --schema``); raises :class:`DshError` saying what is wrong."""
    source = "--schema"
    if not text.lstrip().startswith("{"):
        source = text
        try:
            text = Path(text).read_text(encoding="utf-8")
        except OSError as exc:
            raise DshError(f"cannot read the schema file {source!r}: {exc.strerror}") from exc
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise DshError(f"the schema in {source} is not valid JSON: {exc}") from exc
    if not isinstance(schema, dict):
        raise DshError(f"the schema in {source} must be a JSON object, got {type(schema).__name__}")
    return schema


def result_of(agent: Agent) -> Any:
    """The typed value of ``agent``'s last completed turn (see :class:`OutputPlugin`)."""
    from dsh.values._rare_events import OutputFailed, OutputResult

    output_type = agent.options.output_type
    if output_type is None:
        raise OutputError(f"agent {agent.id!r} has no output_type: set AgentOptions(output_type)")
    events = agent.session.events
    end = next((e.data for e in reversed(events) if isinstance(e.data, TurnEnd)), None)
    if end is None:
        raise OutputError(f"agent {agent.id!r} has not finished a turn yet")
    turn = end.turn
    from dsh.loop._output_spec import output_spec

    for event in reversed(_turn_events(events, turn)):  # the latest word counts
        if isinstance(event.data, OutputResult):
            spec = output_spec(output_type)
            return spec.convert(spec.unwrap(event.data.value))
        if isinstance(event.data, OutputFailed):
            raise OutputError(
                f"turn {turn} gave no valid {output_spec(output_type).name} after "
                f"{event.data.attempts} attempts: {event.data.error}"
            )
    if not isinstance(end.reason, TurnCompleted):
        raise OutputError(f"turn {turn} ended {end.reason.type}, without a result")
    raise OutputError(f"turn {turn} completed without a result")


def _turn_events(events: Sequence[SessionEvent], turn: int) -> list[SessionEvent]:
    start = max(
        (i for i, e in enumerate(events) if isinstance(e.data, TurnStart) and e.data.turn == turn),
        default=0,
    )
    return list(events[start:])


class OutputPlugin:
    """Asks for, checks and records typed results; every harness registers one."""

    def __init__(self, harness: Harness) -> None:
        self._harness = harness
        self._turns: dict[str, TurnState] = {}

    @hookimpl
    def dsh_agent_turn_start(self, agent: Agent, turn: int) -> None:
        if agent.options.output_type is not None:
            from dsh.loop._output_spec import TurnState

            self._turns[agent.session.id] = TurnState(turn)

    @hookimpl
    def dsh_agent_disposed(self, agent: Agent) -> None:
        self._turns.pop(agent.session.id, None)

    @hookimpl
    def dsh_agent_request(
        self, agent: Agent, turn: int, step: int, request: LlmRequest
    ) -> LlmRequest | None:
        state = self._turns.get(agent.session.id)
        if state is None:
            return None
        from dsh.loop._output_spec import output_spec

        spec = output_spec(agent.options.output_type)
        state.mode = self._mode(request)
        schema = json.dumps(spec.schema, ensure_ascii=False)
        if state.mode == "json":
            note = (
                "Answer with one JSON object, and nothing else, matching this "
                f"JSON Schema: {schema}"
            )
            return evolve(
                request, system=_joined(request.system, note), response_format="json_object"
            )
        note = (
            f"When you have the answer, call the {FINAL_RESULT} tool with it (a {spec.name}); "
            "that call is your answer."
        )
        tool = ToolSchema(FINAL_RESULT, f"Give the final answer: a {spec.name}.", spec.schema)
        return evolve(request, system=_joined(request.system, note), tools=(*request.tools, tool))

    def _mode(self, request: LlmRequest) -> Mode:
        info = self._harness.llm.model_info(request.model)
        json_mode = info is not None and bool(info.json_mode)
        return "json" if json_mode and not request.tools and not request.thinking else "tool"

    @hookimpl
    async def dsh_tools_execute(
        self, execution: ToolExecution, call_next: Callable[[ToolExecution], Awaitable[ToolOutcome]]
    ) -> ToolOutcome:
        agent = execution.agent
        state = None if agent is None else self._turns.get(agent.session.id)
        if agent is None or state is None or execution.name != FINAL_RESULT:
            return await call_next(execution)
        if self._judge(agent, state, execution.parsed_arguments):
            return ToolOutcome((Text("Result accepted."),))
        return ToolOutcome.error("INVALID_RESULT", state.last_error)

    @hookimpl
    def dsh_agent_turn_continuation(
        self, agent: Agent, turn: int, decision: Continuation
    ) -> Continuation | Stop[Continuation] | None:
        state = self._turns.get(agent.session.id)
        if state is None:
            return None
        if state.done:
            return Stop(Continuation(False, ""))
        if decision.proceed:
            return None
        text = _last_answer(agent.session.events)
        if state.mode == "json":
            accepted = self._judge(agent, state, lambda: json.loads(text))
        else:
            self._reject(agent, state, [f"answer with a call of the {FINAL_RESULT} tool, not text"])
            accepted = False
        if accepted or state.done:
            return None
        # Not a Stop: budgets, called after this, may still end a turn that keeps failing.
        return Continuation(True, "the answer is sent back to be corrected")

    def _judge(self, agent: Agent, state: TurnState, parse: Callable[[], Any]) -> bool:
        """Accept the parsed answer if it validates, else reject it; True when accepted."""
        try:
            value = parse()
        except ValueError as exc:
            problems = [f"the answer is not valid JSON: {exc}"]
        else:
            from dsh.loop._output_spec import output_spec

            problems = output_spec(agent.options.output_type).problems(value)
            if not problems:
                self._accept(agent, state, value)
                return True
        self._reject(agent, state, problems)
        return False

    def _accept(self, agent: Agent, state: TurnState, value: Any) -> None:
        from dsh.values._rare_events import OutputResult

        agent.session.append(OutputResult(state.turn, value))
        state.done = True

    def _reject(self, agent: Agent, state: TurnState, problems: list[str]) -> None:
        """Log the attempt; steer the problem back, or give up after ``output_retries``."""
        from dsh.values._rare_events import OutputFailed, OutputRetry

        state.attempts += 1
        error = "; ".join(problems)
        if state.attempts > agent.options.output_retries:
            agent.session.append(OutputFailed(state.turn, state.attempts, error))
            state.done = True
            state.last_error = f"the answer is invalid ({error}); no attempts are left"
            return
        agent.session.append(OutputRetry(state.turn, state.attempts, error))
        how = f"call {FINAL_RESULT} again" if state.mode == "tool" else "answer again"
        state.last_error = f"Your answer is invalid: {error}. Please {how} with a corrected answer."
        if state.mode == "json" or _no_call(agent.session.events):
            agent.steer(state.last_error, _SOURCE)


def _joined(system: str | None, note: str) -> str:
    return f"{system}\n\n{note}" if system else note


def _last_message(events: Sequence[SessionEvent]) -> Any:
    return next(e.data for e in reversed(events) if isinstance(e.data, AssistantMessage))


def _last_answer(events: Sequence[SessionEvent]) -> str:
    return text_of(_last_message(events).content).strip()


def _no_call(events: Sequence[SessionEvent]) -> bool:
    return not any(isinstance(b, ToolCall) for b in _last_message(events).content)
