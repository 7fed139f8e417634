"""The public face of a loop agent: its state, its inbox, and what a host or plugin calls.

:class:`AgentHandle` implements :class:`~dsh.values._agent.Agent` up to the lifecycle itself:
``send``/``steer``/``inject`` only queue (logging ``inbox/queued`` when the agent is busy, so a
message survives a crash), ``abort`` and ``dispose`` only cancel the running step. The driver
(:class:`dsh.loop._loop.LoopAgent`) subclasses it and starts the task that runs the turns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, Any

from attrs import evolve

from dsh._log import bind_context
from dsh.loop._approvals import Approvals
from dsh.loop._inbox import Inbox, InboxMessage, Signal
from dsh.session._session import new_session_id
from dsh.values._agent import PERMISSION_MODES, AgentOptions, AgentStatus, Content, PermissionMode
from dsh.values._content import MessageSource, UserSource, as_blocks
from dsh.values._errors import DshError

if TYPE_CHECKING:
    from dsh.app._harness import Harness
    from dsh.session._rewind import RewindReport
    from dsh.session._session import Session
    from dsh.values._approval import PendingApproval

__all__ = ["AgentHandle"]


class AgentHandle:
    """An agent's state and public methods (see :class:`~dsh.values._agent.Agent`); registered with
    the harness's agents while it lives. The driver sets ``_task`` and runs the turns."""

    _task: asyncio.Task[None]
    _approvals: Approvals

    def __init__(
        self, harness: Harness, agent_id: str, options: AgentOptions, session: Session
    ) -> None:
        self.id = agent_id
        self.options = options
        self.session = session
        self.status: AgentStatus = "idle"
        self.inbox = Inbox()
        self.harness = harness
        self._hooks = harness.hooks
        self._idle = Signal()  # no deque of waiters per agent
        self._idle.set()
        self._pending_context: list[InboxMessage] = []
        self._abort_reason: str | None = None
        self._disposing = False
        self._in_turn = False
        #: The agent's task while it runs a step (abort and dispose cancel it there), and how
        #: many cancellations they asked of it: see ``LoopAgent._run_step``.
        self._step_task: asyncio.Task[None] | None = None
        self._step_cancels = 0
        self._background: set[asyncio.Task[None]] = set()
        #: The sub-agents a tool call of the running step waits for that wait for decisions
        #: themselves; while there is one, this agent is ``waiting`` too (``_child_parked``).
        self._parked_children: set[str] = set()
        self._waiting_for_children = False
        self._unregister = harness.agents.register(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id!r} {self.status}>"

    @property
    def disposing(self) -> bool:
        return self._disposing

    @property
    def idle(self) -> bool:
        return self._idle.is_set()

    @property
    def abort_reason(self) -> str | None:
        return self._abort_reason

    def send(self, content: Content, source: MessageSource = UserSource()) -> None:
        self._queue(InboxMessage(as_blocks(content), source), steering=False)

    def steer(self, content: Content, source: MessageSource = UserSource()) -> None:
        self._queue(InboxMessage(as_blocks(content), source), steering=self._in_turn)

    def inject(self, content: Content, source: MessageSource = UserSource()) -> None:
        self._check_alive()
        message = InboxMessage(as_blocks(content), source)
        if self._in_turn:
            self._pending_context.append(message)
        else:
            from dsh.values._rare_events import ContextMessage

            self.session.append(ContextMessage(message.content, message.source))

    def requeue(self, messages: Iterable[InboxMessage]) -> None:
        """Queue messages a resume restored (:func:`dsh.loop._recovery.pending_messages`): they keep
        their ``inbox/queued`` event, and start a turn as if they had just been sent."""
        for message in messages:
            self._queue(message, steering=False)

    def withdraw_steering(self) -> list[InboxMessage]:
        """Each withdrawn message is logged ``inbox/withdrawn``, so a resume skips it."""
        taken = self.inbox.drain_steering()
        for seq in [m.queued_seq for m in taken if m.queued_seq is not None]:
            from dsh.values._rare_events import WithdrawnMessage

            self.session.append(WithdrawnMessage(seq))
        return taken

    def abort(self, reason: str = "aborted") -> None:
        if self._in_turn and self._abort_reason is None:
            self._abort_reason = reason
            if self.status == "waiting":  # busy again until the aborted turn has ended
                self._idle.clear()
            self._cancel_step()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def rewind(
        self, turn: int, *, in_place: bool = False, force: bool = False
    ) -> RewindReport:
        """Put every file the built-in file tools changed since turn ``turn`` began back as it
        was before it, and continue in a fork of the session whose history ends before that
        turn (the current session is closed, left whole in its store); ``in_place``: continue
        in this session, which logs the rewind and tells the model. A file changed since by
        anything else is kept and reported as a conflict unless ``force``. Only while idle."""
        if not self.idle or self._disposing:
            raise DshError(f"agent {self.id!r} is {self.status}: rewind it once it is idle")
        # Imported by the first rewind: a run that rewinds nothing never needs the module.
        from dsh.session._rewind import rewind, shell_tools

        sessions = self.harness.sessions
        session, report = await rewind(
            sessions,
            self.session,
            turn,
            in_place=in_place,
            force=force,
            shell_tools=shell_tools(self.harness.tools),
            fork_id=None if in_place else new_session_id(self.id),
        )
        if session is not self.session:
            old = self.session
            self._continue_in(session)
            await sessions.close(old)
        return report

    def _continue_in(self, session: Session) -> None:
        """From now on the agent's conversation is ``session`` (a rewind's fork)."""
        self.session = session
        bind_context(session=session.id)

    def set_permission_mode(self, mode: PermissionMode) -> None:
        """Logged ``permissions/mode``: the permission policy judges later calls in ``mode``."""
        if mode not in PERMISSION_MODES:
            raise DshError(f"unknown permission mode {mode!r}: use one of {PERMISSION_MODES}")
        from dsh.values._rare_events import PermissionModeChange

        self.session.append(PermissionModeChange(mode))

    def pending_approvals(self) -> list[PendingApproval]:
        """The tool calls of this agent and of its live sub-agents parked for a decision."""
        found = self._approvals.pending()
        for child in self.harness.family.children_of(self):
            found += child.pending_approvals()
        return found

    async def decide(self, call_id: str, allow: bool, reason: str | None = None) -> None:
        """Decide parked call ``call_id`` (of this agent or a live sub-agent): logged
        ``approval/decided`` and checkpointed, then the waiting turn goes on. Raises
        :class:`~dsh.values._approval.AlreadyDecided` when it was decided already, and
        ``DshError`` when no such call waits."""
        for child in self.harness.family.children_of(self):
            if any(p.call_id == call_id for p in child.pending_approvals()):
                await child.decide(call_id, allow, reason)
                if not child.pending_approvals():  # busy from now on, as after its own decide
                    await self._child_parked(child.id, False)
                return
        await self._approvals.decide(call_id, allow, reason)

    async def result(self) -> Any:
        """The typed value of the last completed turn (see :mod:`dsh.loop._output`)."""
        from dsh.loop._output import result_of  # typed results import the tool machinery

        return result_of(self)

    async def dispose(self) -> None:
        if not self._disposing:
            self._disposing = True
            self.inbox.close()
            self._cancel_step()
        await asyncio.shield(self._task)

    async def _set_status(self, status: AgentStatus) -> None:
        self.status = status
        if status == "waiting" or (status != "running" and not self.inbox.has_queued):
            self._idle.set()
        await self._hooks.agent_status(self, status)

    async def _child_parked(self, child_id: str, parked: bool) -> None:
        """Sub-agent ``child_id``, which a tool call of this agent's step waits for, parked a
        call for a decision (``parked``) or went on. The step cannot go on before the child
        does: while a child is parked, a running agent is ``waiting`` too (a headless run
        stops there, and ``pending_approvals`` lists the child's calls); once none is, it runs
        again."""
        if parked:
            self._parked_children.add(child_id)
            if self.status == "running":
                self._waiting_for_children = True
                await self._set_status("waiting")
            return
        self._parked_children.discard(child_id)
        if self._waiting_for_children and not self._parked_children:
            self._waiting_for_children = False
            if self.status == "waiting" and not self._disposing:  # a dispose ends the turn
                self._idle.clear()
                await self._set_status("running")

    def _cancel_step(self) -> None:
        """Cancel the step running now, if one is. Asked from within the step itself (a chunk
        observer aborting), the cancellation waits for the step's next wait: a task that
        cancels itself and then finishes the step without waiting would carry the
        cancellation past it, into the agent's own bookkeeping."""
        task = self._step_task
        if task is None:
            return
        if task is asyncio.current_task():
            asyncio.get_running_loop().call_soon(self._cancel_step)
            return
        self._step_cancels += 1
        task.cancel()

    def _check_alive(self) -> None:
        if self._disposing:
            raise DshError(f"agent {self.id!r} is disposed")

    def _queue(self, message: InboxMessage, steering: bool) -> None:
        self._check_alive()
        if self._in_turn and message.queued_seq is None:
            # Busy: the message may wait a while, so it is logged and survives a crash.
            from dsh.values._rare_events import QueuedMessage

            data = QueuedMessage(message.content, message.source, steering)
            message = evolve(message, queued_seq=self.session.append(data).seq)
            self._spawn(self.session.checkpoint())
        if steering:
            self.inbox.steer(message)
        else:
            self.inbox.enqueue(message)
            self._idle.clear()
        self._spawn(self._hooks.agent_queued(self, message, steering))

    def _deliver_context(self) -> None:
        """Log the context injected during the turn (it reaches the next request)."""
        for message in self._pending_context:  # a class imported only when there is one
            from dsh.values._rare_events import ContextMessage

            self.session.append(ContextMessage(message.content, message.source))
        self._pending_context.clear()

    def _deliver_steering(self, turn: int) -> bool:
        """Log pending context and steering; True if steering was delivered."""
        self._deliver_context()
        steering = self.inbox.drain_steering()
        for message in steering:
            from dsh.values._rare_events import SteeringMessage

            data = SteeringMessage(turn, message.content, message.source, message.queued_seq)
            self.session.append(data)
        return bool(steering)

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
