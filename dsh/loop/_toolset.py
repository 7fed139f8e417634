"""Per-agent tool sets: ``AgentOptions(tools=(...))`` limits what one agent may call.

The registry is shared by every agent of a harness; a sub-agent or a configured agent profile
often needs fewer tools (a reviewer that must not write, a child that must not delegate again).
:class:`ToolSet` offers the agent's model only the allowed tools and refuses calls of the
others (``NOT_ALLOWED``), so a model that names a tool it was not offered learns why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from dsh.hooks._markers import hookimpl
from dsh.loop._output import FINAL_RESULT
from dsh.tools._registry import ToolExecution, ToolOutcome
from dsh.values._request import LlmRequest

if TYPE_CHECKING:
    from dsh.values._agent import Agent

__all__ = ["PLUGIN_NAME", "ToolSet"]

#: The plugin name the harness registers :class:`ToolSet` under.
PLUGIN_NAME = "dsh:toolset"


class ToolSet:
    """Filters each agent's tools by ``AgentOptions.tools``; every harness registers one."""

    @hookimpl
    def dsh_agent_request(
        self, agent: Agent, turn: int, step: int, request: LlmRequest
    ) -> LlmRequest | None:
        allowed = agent.options.tools
        if allowed is None:
            return None
        return request.with_tools(tuple(t for t in request.tools if t.name in allowed))

    @hookimpl
    async def dsh_tools_execute(
        self, execution: ToolExecution, call_next: Callable[[ToolExecution], Awaitable[ToolOutcome]]
    ) -> ToolOutcome:
        agent = execution.agent
        allowed = None if agent is None else agent.options.tools
        if allowed is None or execution.name in allowed or _answers(agent, execution.name):
            return await call_next(execution)
        offered = ", ".join(allowed) or "none"
        return ToolOutcome.error(
            "NOT_ALLOWED",
            f"this agent may not call {execution.name!r}; its tools are: {offered}",
        )


def _answers(agent: Agent | None, name: str) -> bool:
    """A typed result's ``final_result`` call, which the output machinery answers."""
    return agent is not None and name == FINAL_RESULT and agent.options.output_type is not None
