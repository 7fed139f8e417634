"""The agents registry: every live agent of a harness, by id."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import TYPE_CHECKING

from dsh.values._errors import DshError

if TYPE_CHECKING:
    from dsh.values._agent import Agent

__all__ = ["AgentRegistry"]


class AgentRegistry:
    def __init__(self) -> None:
        self._agents: dict[str, Agent] = {}

    def register(self, agent: Agent) -> Callable[[], None]:
        if agent.id in self._agents:
            raise DshError(f"an agent with id {agent.id!r} already exists")
        self._agents[agent.id] = agent

        def dispose() -> None:
            if self._agents.get(agent.id) is agent:
                del self._agents[agent.id]

        return dispose

    def get(self, agent_id: str) -> Agent | None:
        return self._agents.get(agent_id)

    def list(self) -> builtins.list[Agent]:
        return list(self._agents.values())
