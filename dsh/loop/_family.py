"""Sub-agents: the ``parent=`` seam of ``harness.agent_loop.create``.

A child agent runs in its own session, whose first event, ``subagent/parent``, records where it
was made: the parent's agent and session ids, the parent's turn and step at that moment, and the
tool call that made it (if one did). The parent's log records ``subagent/start`` when the child
is made and ``subagent/end`` (its session id, how its last turn ended, what it used) when the
child is disposed. The family follows its parent: an aborted or disposed parent turn aborts
its children's turns, a disposed parent disposes them; children nest at most
``agent_loop.max_depth`` deep. A process that crashed while a child ran leaves a
``subagent/start`` without its end: :func:`unfinished_children` closes it ``interrupted`` when
the parent is resumed (the child's own session is kept and can be resumed by itself).

A plugin may refuse children: :meth:`Family.add_guard` (the ``budgets`` plugin refuses one while
an ancestor's budget has nothing left).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from dsh.hooks._markers import hookimpl
from dsh.loop._handle import AgentHandle
from dsh.values._chunks import TokenUsage
from dsh.values._config import AgentLoopConfig
from dsh.values._errors import DshError
from dsh.values._events import (
    SUBAGENT_END,
    SUBAGENT_PARENT,
    SUBAGENT_START,
    AssistantMessage,
    SessionEvent,
    StepStart,
    TurnAborted,
    TurnDisposed,
    TurnEnd,
    TurnEndReason,
    TurnInterrupted,
    TurnStart,
)

if TYPE_CHECKING:
    from dsh.app._harness import Harness
    from dsh.session._session import Session
    from dsh.values._agent import Agent, AgentStatus
    from dsh.values._rare_events import SubagentEnd

__all__ = [
    "Family",
    "SpawnGuard",
    "family_lines",
    "unfinished_children",
]

A = TypeVar("A", bound="Agent")

#: Says why ``parent`` may not have a child now, or ``None``: see :meth:`Family.add_guard`.
SpawnGuard = Callable[["Agent"], "str | None"]

#: The plugin name the harness registers :class:`Family` under.
PLUGIN_NAME = "dsh:family"
PARENT, START, END = SUBAGENT_PARENT, SUBAGENT_START, SUBAGENT_END
#: ``SubagentEnd.outcome`` of a child whose process stopped while it ran.
INTERRUPTED = TurnInterrupted.type


def _position(events: Sequence[SessionEvent]) -> tuple[int, int]:
    """The parent's current turn and step (0 when none has started)."""
    turn = next((e.data.turn for e in reversed(events) if isinstance(e.data, TurnStart)), 0)
    step = next((e.data.step for e in reversed(events) if isinstance(e.data, StepStart)), 0)
    return turn, step


def _outcome(events: Sequence[SessionEvent]) -> str:
    end = next((e.data for e in reversed(events) if isinstance(e.data, TurnEnd)), None)
    return "none" if end is None else end.reason.type


def _spent(events: Sequence[SessionEvent]) -> tuple[TokenUsage | None, str | None]:
    messages = [e.data for e in events if isinstance(e.data, AssistantMessage) and e.data.usage]
    if not messages:
        return None, None
    usage = sum((m.usage or TokenUsage() for m in messages), TokenUsage())
    return usage, messages[-1].model


def unfinished_children(events: Sequence[SessionEvent]) -> list[tuple[str, SubagentEnd]]:
    """``subagent/end`` (``interrupted``) for each ``subagent/start`` in ``events`` without
    its end: the children a crash left running."""
    from dsh.values._rare_events import SubagentEnd, SubagentStart

    ended = {e.data.session_id for e in events if isinstance(e.data, SubagentEnd)}
    return [
        (END, SubagentEnd(e.data.agent_id, e.data.session_id, INTERRUPTED, call_id=e.data.call_id))
        for e in events
        if isinstance(e.data, SubagentStart) and e.data.session_id not in ended
    ]


class Family:
    """Who is whose child; logs the family's events and carries abort and dispose down."""

    def __init__(self, harness: Harness) -> None:
        self._harness = harness
        self._parents: dict[int, Agent] = {}  # id(child) -> parent
        self._children: dict[int, list[Agent]] = {}  # id(parent) -> live children
        self._depths: dict[int, int] = {}
        self._guards: list[SpawnGuard] = []
        #: id(child) -> its parent, for a child a tool call of the parent waits for.
        self._waited_by: dict[int, AgentHandle] = {}

    def parent_of(self, agent: Agent) -> Agent | None:
        return self._parents.get(id(agent))

    def children_of(self, agent: Agent) -> list[Agent]:
        return list(self._children.get(id(agent), ()))

    def depth_of(self, agent: Agent) -> int:
        """0 for an agent without a parent, 1 for its children, and so on."""
        return self._depths.get(id(agent), 0)

    def add_guard(self, guard: SpawnGuard) -> Callable[[], None]:
        """Refuse a child whenever ``guard(parent)`` says why (a budget with nothing left,
        say): :meth:`spawn` raises :class:`DshError` with the reason. Returns a disposer."""
        self._guards.append(guard)
        return lambda: self._guards.remove(guard)

    def spawn(
        self,
        parent: Agent,
        agent_id: str,
        session_id: str,
        call_id: str | None,
        start: Callable[[Session], A],
    ) -> A:
        """Start ``parent``'s child ``agent_id`` with ``start(session)`` on a new session
        ``session_id``; refuses nesting deeper than ``agent_loop.max_depth``, and whatever a
        guard refuses (:meth:`add_guard`)."""
        depth = self.depth_of(parent) + 1
        limit = self._harness.config.section("agent_loop", AgentLoopConfig).max_depth
        if depth > limit:
            raise DshError(
                f"agent {agent_id!r} would be nested {depth} deep under {parent.id!r}; "
                f"sub-agents nest at most {limit} deep (agent_loop.max_depth): do the work "
                "in this agent instead of delegating it"
            )
        if parent.disposing:
            raise DshError(f"agent {parent.id!r} is disposed and cannot have children")
        for guard in self._guards:
            reason = guard(parent)
            if reason is not None:
                raise DshError(f"agent {agent_id!r} cannot start under {parent.id!r}: {reason}")
        from dsh.values._rare_events import SubagentParent, SubagentStart

        session = self._harness.sessions.create(session_id, parent=parent.session.id)
        turn, step = _position(parent.session.events)
        session.append(SubagentParent(parent.id, parent.session.id, turn, step, call_id))
        child = start(session)
        self._parents[id(child)] = parent
        self._children.setdefault(id(parent), []).append(child)
        self._depths[id(child)] = depth
        if call_id is not None and isinstance(parent, AgentHandle):
            self._waited_by[id(child)] = parent
        start_event = SubagentStart(child.id, session.id, turn, step, call_id)
        parent.session.append(start_event)
        return child

    @hookimpl
    def dsh_agent_turn_end(self, agent: Agent, turn: int, reason: TurnEndReason) -> None:
        """A parent's turn that was aborted (or disposed) aborts its children's turns."""
        if isinstance(reason, TurnAborted | TurnDisposed):
            for child in self.children_of(agent):
                child.abort(f"the parent agent {agent.id!r} was aborted")

    @hookimpl
    async def dsh_agent_status(self, agent: Agent, status: AgentStatus) -> None:
        """A child a tool call waits for that parks a call for a decision holds its parent
        ``waiting`` until it goes on (:meth:`~dsh.loop._handle.AgentHandle._child_parked`). On
        dispose (before the session closes): dispose the children first, then log this agent's
        end in its parent's session."""
        waiter = self._waited_by.get(id(agent))
        if waiter is not None:
            await waiter._child_parked(agent.id, status == "waiting")
        if status != "disposed":
            return
        self._waited_by.pop(id(agent), None)
        for child in self.children_of(agent):
            await child.dispose()
        parent = self._parents.pop(id(agent), None)
        self._depths.pop(id(agent), None)
        self._children.pop(id(agent), None)
        if parent is None:
            return
        self._children[id(parent)].remove(agent)
        from dsh.values._rare_events import SubagentEnd, SubagentParent

        events = agent.session.events
        usage, model = _spent(events)
        link = events[0].data
        assert isinstance(link, SubagentParent)  # a child's log starts with where it was made
        end = SubagentEnd(agent.id, agent.session.id, _outcome(events), usage, model, link.call_id)
        parent.session.append(end)


def family_lines(events: Sequence[SessionEvent]) -> list[str]:
    """What ``dsh sessions show`` says of a session's family: its parent (where it was made)
    and its children (their sessions and how each ended, ``running`` if not yet)."""
    from dsh.values._rare_events import SubagentEnd, SubagentParent, SubagentStart

    lines: list[str] = []
    if events and isinstance(events[0].data, SubagentParent):
        link = events[0].data
        call = f", call {link.call_id}" if link.call_id else ""
        lines.append(
            f"parent: {link.session_id} (agent {link.agent_id}, turn {link.turn}, "
            f"step {link.step}{call})"
        )
    ended = {e.data.session_id: e.data.outcome for e in events if isinstance(e.data, SubagentEnd)}
    for event in events:
        if isinstance(event.data, SubagentStart):
            child = event.data
            outcome = ended.get(child.session_id, "running")
            lines.append(f"child:  {child.session_id} (agent {child.agent_id}, {outcome})")
    return lines
