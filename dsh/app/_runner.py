"""One-call runs: ``await dsh.run(prompt, model=...)`` and ``dsh.run_sync(...)`` for scripts.

A run is one turn of a fresh agent (or of a stored session, given ``session_id``); the result
says what the model answered, the typed value when ``output_type`` is given, what the turn used
and cost, the session it was logged in, and how the turn ended. Without a ``harness`` the run
makes one with the entry-point plugins (the same as ``dsh run``) and closes it afterwards; a
``harness`` that is not started yet is started for the run and closed after it the same way.
The harness a run makes finds its configuration as ``dsh`` does (``config=``, else
``$DSH_CONFIG``, else ``./dsh.toml``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from attrs import frozen

from dsh.app._harness import Harness
from dsh.loop._output import OutputError
from dsh.tools._define import tool as make_tool
from dsh.tools._registry import Tool
from dsh.values._agent import Agent, AgentOptions
from dsh.values._chunks import TokenUsage
from dsh.values._config import find_config
from dsh.values._content import text_of
from dsh.values._errors import DshError
from dsh.values._events import AssistantMessage, TurnCompleted, TurnEnd, TurnEndReason
from dsh.values._rare_events import SubagentEnd
from dsh.values._tokens import PriceBook
from dsh.values._value import Value

__all__ = ["RunResult", "run", "run_sync"]

#: What ``tools=`` accepts: :class:`Tool` values (``@dsh.tool``) or plain functions.
ToolLike = Tool | Callable[..., Any]


@frozen(repr=False, eq=False)
class RunResult(Value):
    """What one run produced.

    ``text`` is the last answer's text; ``output`` the validated value of ``output_type`` (else
    ``None``); ``usage`` the tokens the turn used (its sub-agents' included); ``cost`` its price
    when every model's price is known (``None`` otherwise); ``reason`` how the turn ended
    (``reason.type`` is ``completed``, ``error``, ``aborted``, ...); ``error`` says why there is
    no ``output`` when one was asked
    for, or why the turn failed.
    """

    text: str
    output: Any
    usage: TokenUsage
    cost: float | None
    session_id: str
    reason: TurnEndReason
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the turn completed (and produced its ``output``, if one was asked for)."""
        return isinstance(self.reason, TurnCompleted) and self.error is None


async def run(
    prompt: str,
    *,
    model: str,
    tools: Iterable[ToolLike] = (),
    system_prompt: str | None = None,
    output_type: Any = None,
    harness: Harness | None = None,
    session_id: str | None = None,
    config: Mapping[str, Any] | str | Path | None = None,
) -> RunResult:
    """Run one turn of an agent on ``prompt`` and return its :class:`RunResult`.

    ``tools`` are offered for this run only (plain functions become tools as ``@dsh.tool``
    makes them). ``session_id`` continues that stored session, or starts one with that id.
    Without a ``harness``, the one the run makes reads ``config`` (a mapping or a TOML file)
    or, when none is given, the file ``dsh`` itself would: ``$DSH_CONFIG``, else
    ``./dsh.toml`` when present (:func:`dsh.values._config.find_config`).
    """
    made = [t if isinstance(t, Tool) else make_tool(t) for t in tools]
    options = AgentOptions(model=model, system_prompt=system_prompt or "", output_type=output_type)
    if harness is not None and harness.started:
        return await _run_in(harness, prompt, options, made, session_id)
    if harness is None:
        harness = Harness(config=config if isinstance(config, Mapping) else find_config(config))
    async with harness as started:  # the run starts it, so it closes it
        return await _run_in(started, prompt, options, made, session_id)


def run_sync(
    prompt: str,
    *,
    model: str,
    tools: Iterable[ToolLike] = (),
    system_prompt: str | None = None,
    output_type: Any = None,
    harness: Harness | None = None,
    session_id: str | None = None,
    config: Mapping[str, Any] | str | Path | None = None,
) -> RunResult:
    """:func:`run` for code without an event loop (a script); refuses inside a running one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise DshError(
            "dsh.run_sync() cannot be called while an event loop is running (in async code or "
            "a notebook cell): use 'await dsh.run(...)' instead"
        )
    return asyncio.run(
        run(
            prompt,
            model=model,
            tools=tools,
            system_prompt=system_prompt,
            output_type=output_type,
            harness=harness,
            session_id=session_id,
            config=config,
        )
    )


async def _run_in(
    harness: Harness,
    prompt: str,
    options: AgentOptions,
    tools: Sequence[Tool],
    session_id: str | None,
) -> RunResult:
    disposers = [harness.tools.register(t, "run") for t in tools]
    try:
        agent = await _agent(harness, options, session_id)
        try:
            since = len(agent.session)
            agent.send(prompt)
            await agent.wait_idle()
            return await _result(harness, agent, since)
        finally:
            await agent.dispose()
    finally:
        for dispose in disposers:
            dispose()


async def _agent(harness: Harness, options: AgentOptions, session_id: str | None) -> Agent:
    agent_id = _free_id(harness)
    if session_id is not None and await harness.sessions.load(session_id) is not None:
        return await harness.agent_loop.resume(session_id, options, agent_id)
    return harness.agent_loop.create(agent_id, options, session_id=session_id)


def _free_id(harness: Harness) -> str:
    """``run``, or ``run-2``, ``run-3``... when runs share a harness."""
    names = itertools.chain(["run"], (f"run-{n}" for n in itertools.count(2)))
    return next(name for name in names if harness.agents.get(name) is None)


async def _result(harness: Harness, agent: Agent, since: int) -> RunResult:
    events = agent.session.events[since:]  # read by data class: its chunks are not built
    end = next(events.select(TurnEnd, reverse=True)).data
    assert isinstance(end, TurnEnd)  # what select() gives
    # What the run used: its own model calls and its sub-agents' (each ``subagent/end``).
    spent: list[tuple[float, AssistantMessage | SubagentEnd]] = []
    for event in events.select(AssistantMessage, SubagentEnd):
        assert isinstance(event.data, AssistantMessage | SubagentEnd)  # what select() gives
        spent.append((event.time, event.data))
    messages = [data for _, data in spent if isinstance(data, AssistantMessage)]
    output, error = None, _failure(end)
    if agent.options.output_type is not None:
        try:
            output = await agent.result()
        except OutputError as exc:
            error = error or str(exc)
    return RunResult(
        text=text_of(messages[-1].content).strip() if messages else "",
        output=output,
        usage=sum((data.usage or TokenUsage() for _, data in spent), TokenUsage()),
        cost=_cost(harness, spent),
        session_id=agent.session.id,
        reason=end.reason,
        error=error,
    )


def _failure(end: TurnEnd) -> str | None:
    failure = getattr(end.reason, "failure", None)
    return None if failure is None else f"{failure.code}: {failure.message}"


def _cost(
    harness: Harness, spent: Sequence[tuple[float, AssistantMessage | SubagentEnd]]
) -> float | None:
    """What ``spent`` (each a time and the data that used tokens then) cost, if every price
    is known."""
    book = PriceBook({}, harness.llm.pricing)
    costs = [book.cost(data.model, data.usage, t) if data.usage else 0.0 for t, data in spent]
    known = [c for c in costs if c is not None]
    return sum(known) if spent and len(known) == len(costs) else None
