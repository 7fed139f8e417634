"""Host plugins that ``dsh run`` and ``dsh chat`` register for as long as they run, each about
the one agent they drive (set with ``watch``): other agents of the harness are left alone."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from dsh.plugin import (
    Agent,
    EventCodec,
    Session,
    SessionEvent,
    StreamChunk,
    SubagentParent,
    ToolCallEvent,
    ToolExecution,
    TurnEndReason,
    UsageMeter,
    hookimpl,
)
from dsh_plugins.terminal_ui.render import Lines, Renderer, one_line

__all__ = ["OUTPUT_CLOSED", "AgentView", "ApprovalPolicy", "Decide", "JsonFeed", "OutputGuard"]

#: Answers an approval: ``True``/``False``, or ``None`` when nobody could be asked.
Decide = Callable[[ToolExecution, str], Awaitable[bool | None]]
#: Why ``dsh run`` aborts a turn when the reader of its output went away.
OUTPUT_CLOSED = "the output was closed"


class _Watcher:
    agent: Agent | None = None

    def watch(self, agent: Agent) -> None:
        self.agent = agent

    def _mine(self, agent: Agent | None) -> bool:
        return agent is not None and agent is self.agent

    def _my_session(self, session: Session) -> bool:
        return self.agent is not None and session is self.agent.session


class AgentView(_Watcher):
    """Renders the agent's stream and events; after each turn, says why it stopped early and
    (``show_usage``) prints the usage line, then calls ``after_turn`` (still inside the turn's
    end: steering left over is in the inbox yet)."""

    def __init__(
        self,
        renderer: Renderer,
        meter: UsageMeter,
        *,
        show_usage: bool,
        after_turn: Callable[[Agent, TurnEndReason], None] | None = None,
    ) -> None:
        self.renderer = renderer
        self.meter = meter
        self.show_usage = show_usage
        self.after_turn = after_turn

    @hookimpl
    def dsh_agent_stream_chunk(self, agent: Agent, chunk: StreamChunk) -> None:
        if self._mine(agent):
            self.renderer.chunk(chunk)

    @hookimpl
    def dsh_session_event(self, session: Session, event: SessionEvent) -> None:
        if self._my_session(session):
            self.renderer.event(event)
            self.meter.observe(event)
        elif isinstance(event.data, ToolCallEvent) and self._my_child(session):
            # A sub-agent's progress, nested under the task call that made it.
            call = f"{event.data.name} {one_line(event.data.arguments, 60)}"
            self.renderer.note(self.renderer.notes.style.dim(f"  ↳ {call}"))

    def _my_child(self, session: Session) -> bool:
        link = session.events[0].data  # the event just appended, at least
        return (
            isinstance(link, SubagentParent)
            and self.agent is not None
            and link.session_id == self.agent.session.id
        )

    @hookimpl
    def dsh_agent_turn_start(self, agent: Agent) -> None:
        if self._mine(agent):
            self.meter.start()

    @hookimpl
    def dsh_agent_turn_end(self, agent: Agent, reason: TurnEndReason) -> None:
        if not self._mine(agent):
            return
        self.renderer.turn_end(reason)
        line = self.meter.line()
        if self.show_usage and line is not None:
            self.renderer.note(self.renderer.notes.style.dim(f"── {line}"))
        if self.after_turn is not None:
            self.after_turn(agent, reason)


class JsonFeed(_Watcher):
    """Writes each event of the agent's session as a JSON line (``harness.events.encode``), as
    it is appended."""

    def __init__(self, out: Lines, codec: EventCodec) -> None:
        self.out = out
        self.codec = codec

    @hookimpl
    def dsh_session_event(self, session: Session, event: SessionEvent) -> None:
        if self._my_session(session):
            self.out.write(json.dumps(self.codec.encode(event), ensure_ascii=False) + "\n")


class ApprovalPolicy(_Watcher):
    """Answers ``dsh_tools_approve`` for the agent's tool calls with ``decide``."""

    def __init__(self, decide: Decide) -> None:
        self.decide = decide

    @hookimpl
    async def dsh_tools_approve(self, execution: ToolExecution, reason: str) -> bool | None:
        if not self._mine(execution.agent):
            return None
        return await self.decide(execution, reason)


class OutputGuard(_Watcher):
    """Aborts the agent's running turn when the reader of ``out`` goes away (``on_closed``),
    and every turn that starts after that (a resumed session's queued messages, or a reader
    gone before the first turn began, when an abort finds no turn to stop)."""

    def __init__(self, out: Lines) -> None:
        self.out = out
        out.on_closed = self._abort

    def _abort(self) -> None:
        if self.agent is not None:
            self.agent.abort(OUTPUT_CLOSED)

    @hookimpl
    def dsh_agent_turn_start(self, agent: Agent) -> None:
        if self._mine(agent) and self.out.closed:
            agent.abort(OUTPUT_CLOSED)
