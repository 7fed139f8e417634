"""``subagents``: the ``task`` tool, with which a model delegates work to a fresh sub-agent.

``task(description, prompt, agent?)`` runs a child agent (``agent_loop.create(...,
parent=...)``, see :mod:`dsh.loop._family`) on ``prompt`` for one turn and returns its final answer
as the tool result. The child's profile is the configured agent ``agent`` (its model, system
prompt, tool allow-list and output type, from ``[[agent_loop.agents]]``) or, without one, the
parent's own options minus the ``task`` tool (so children do not delegate again unless a
profile lets them). The tool is ``concurrency_safe``: several ``task`` calls of one step run in
parallel. A child that fails makes the call an error result the parent's model can read; an
aborted parent aborts the child. A profile's ``permission_mode`` is logged in the child's
session; the permission policy then holds the child to the stricter of it and its parent's
current mode. A child that may not start (the depth limit, a budget with nothing left) is a
``SUBAGENT_REFUSED`` result saying why. See ``docs/subagents.md``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attrs import evolve

from dsh.plugin import (
    Agent,
    AgentLoopConfig,
    AgentOptions,
    AgentSource,
    AssistantMessage,
    DshError,
    OutputError,
    PermissionMode,
    Tool,
    ToolError,
    ToolExecution,
    ToolSchema,
    TurnCompleted,
    TurnEnd,
    find_profile,
    hookimpl,
    options_for,
    text_of,
    unstructure,
)

if TYPE_CHECKING:
    from dsh.plugin import AgentStatus, Harness

__all__ = ["TASK", "SubagentsPlugin"]

TASK = "task"

_SCHEMA = {
    "type": "object",
    "properties": {
        "description": {"type": "string", "description": "A few words saying what the task is."},
        "prompt": {
            "type": "string",
            "description": "The whole task for the sub-agent: it sees nothing of this "
            "conversation, so say everything it needs.",
        },
        "agent": {
            "type": "string",
            "description": "A configured agent profile to run the task (default: one like you).",
        },
    },
    "required": ["description", "prompt"],
    "additionalProperties": False,
}
_DESCRIPTION = (
    "Delegate a self-contained task to a sub-agent, which works on it with its own context and "
    "returns its final answer. Several task calls in one step run in parallel."
)


class SubagentsPlugin:
    """Offers the ``task`` tool."""

    def __init__(self) -> None:
        self._harness: Harness | None = None
        self._numbers = itertools.count(1)
        #: id(child) -> set whenever the status of a child a task call waits for changes.
        self._moved: dict[int, asyncio.Event] = {}

    @hookimpl
    def dsh_register_tools(
        self, register: Callable[[Tool], Callable[[], None]], harness: Harness
    ) -> None:
        self._harness = harness
        schema = ToolSchema(TASK, _DESCRIPTION, _SCHEMA)
        register(Tool(schema, self._task, timeout_s=math.inf, concurrency_safe=True))

    async def _task(self, args: dict[str, Any], execution: ToolExecution) -> str:
        harness, parent = self._harness, execution.agent
        if harness is None or parent is None:
            raise ToolError("the task tool runs only for an agent of a started harness")
        options, mode = self._profile(harness, parent, args.get("agent"))
        child_id = f"{parent.id}.task-{next(self._numbers)}"
        try:
            child = harness.agent_loop.create(
                child_id, options, parent=parent, call_id=execution.call_id
            )
        except DshError as exc:
            raise ToolError(str(exc), "SUBAGENT_REFUSED") from exc
        if mode is not None:  # the policy holds it to the stricter of this and its parent's
            child.set_permission_mode(mode)
        moved = self._moved[id(child)] = asyncio.Event()
        try:
            # On disk before the child runs: a crash then leaves a start for resume to close.
            await parent.session.checkpoint()
            child.send(args["prompt"], AgentSource(parent.id))
            await _turn_end(child, moved)
        except BaseException:
            # The parent's step was cancelled: its abort reaches the child. Its dispose does
            # not: the child's turn ends ``disposed``, and calls it parked stay parked.
            if not parent.disposing:
                child.abort(f"the parent agent {parent.id!r} was aborted")
                await child.wait_idle()
            raise
        finally:
            self._moved.pop(id(child), None)
            await child.dispose()
        return await _answer(child)

    @hookimpl
    def dsh_agent_status(self, agent: Agent, status: AgentStatus) -> None:
        moved = self._moved.get(id(agent))
        if moved is not None:
            moved.set()

    def _profile(
        self, harness: Harness, parent: Agent, name: str | None
    ) -> tuple[AgentOptions, PermissionMode | None]:
        """The child's options, and its profile's permission mode (``None``: no profile, or
        one without a mode)."""
        inherited = evolve(parent.options, output_type=None)
        if name is None:
            tools = parent.options.tools
            tools = tuple(harness.tools.names()) if tools is None else tools
            return evolve(inherited, tools=tuple(t for t in tools if t != TASK)), None
        agents = harness.config.section("agent_loop", AgentLoopConfig).agents
        try:
            profile = find_profile(agents, name)
            return options_for(profile, inherited, harness.config_dir), profile.permission_mode
        except DshError as exc:
            raise ToolError(
                f"{exc}; leave 'agent' out to run the task with an agent like you", "BAD_PROFILE"
            ) from exc


async def _turn_end(child: Agent, moved: asyncio.Event) -> None:
    """Wait until ``child``'s turn has ended. A child that parks calls for a decision is idle
    while it waits (and its parent ``waiting``): wait on, until it is decided (from the
    parent's ``decide``, the child's own, or a host) and the turn ends."""
    while True:
        moved.clear()
        await child.wait_idle()
        if child.status != "waiting":
            return
        await moved.wait()


async def _answer(child: Agent) -> str:
    """The child's final answer, or a ``ToolError`` saying how it ended."""
    events = child.session.events
    # The child was idle before this is called: its turn has ended.
    end = next(e.data for e in reversed(events) if isinstance(e.data, TurnEnd))
    if not isinstance(end.reason, TurnCompleted):
        failure = getattr(end.reason, "failure", None)
        detail = f": {failure.message}" if failure is not None else ""
        raise ToolError(
            f"the sub-agent {child.id!r} ended {end.reason.type}{detail}", "SUBAGENT_FAILED"
        )
    if child.options.output_type is not None:
        try:
            value = await child.result()
        except OutputError as exc:
            raise ToolError(str(exc), "SUBAGENT_FAILED") from exc
        return json.dumps(unstructure(value), ensure_ascii=False)
    message = next(e.data for e in reversed(events) if isinstance(e.data, AssistantMessage))
    return text_of(message.content).strip()
