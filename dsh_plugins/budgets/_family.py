"""What the budgets plugin makes only once a family has one or a limit is reached: the link
from a sub-agent's session to its parent's (:class:`Link`) and a reached limit
(:class:`Reached`). Imported then: a turn of an agent without sub-agents, within its limits,
never builds them."""

from __future__ import annotations

from attrs import frozen

from dsh.plugin import Value

__all__ = ["Link", "Reached"]


@frozen(repr=False, eq=False)
class Link(Value):
    """Where a sub-agent's session was made: its parent's session and agent."""

    session_id: str
    agent_id: str


@frozen(repr=False, eq=False)
class Reached(Value):
    """A limit reached by a session: the asking agent's own (``agent_id`` ``None``) or that of
    the agent ``agent_id`` above it, whose session is ``session_id``."""

    limit: str
    value: float
    maximum: float
    agent_id: str | None = None
    session_id: str | None = None

    def reason(self, agent_id: str | None = None) -> str:
        """What the turn's end (or a refused sub-agent) says; ``agent_id`` names the agent of
        an own limit."""
        owner = self.agent_id or agent_id
        of = "" if owner is None else f" of agent {owner!r}"
        return f"budget: {self.limit}{of} reached ({self.value:g} of {self.maximum:g})"
