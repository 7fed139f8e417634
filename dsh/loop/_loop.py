"""The loop driver: ``AgentLoop`` creates agents; each ``LoopAgent`` runs the seed lifecycle.

The driver only calls hooks and appends session events (quoted below); everything else is a
plugin. One agent's lifetime::

    forever:
      wait for queued messages (idle)
      TURN (error-contained):
        drain queued → 'user/message' … → 'turn/start'
        STEP loop:
          drain steering → 'steering/message'
          'step/start'
          run the step (dsh.loop._step): request, stream, tool calls — abort can cancel it
          'step/end'
          cont = waterfall dsh_agent_turn_continuation
          if not cont: break
        await session checkpoint (fails: 'error', reason error SESSION_NOT_SAVED)
        'turn/end' {reason}
        await session flush
      re-enqueue leftover steering as queued
      idle unless more queued

A failed step (the model call failed and was not retried, or a plugin raised) still gets its
``step/end``; then an ``error`` event, and the turn ends ``error`` or ``aborted``
(:mod:`dsh.loop._failures` names the failure). Abort cancels the running step; dispose does the same
and ends the loop. A resume (:func:`dsh.loop._recovery.reopen`) closes what a crash left
open before the agent starts.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING

from dsh._log import bind_context, get_logger
from dsh.loop import _failures as failures
from dsh.loop._approvals import Approvals, TurnParked
from dsh.loop._dispatch import call_ids
from dsh.loop._handle import AgentHandle
from dsh.loop._profiles import options_for
from dsh.loop._step import Step, StepOutcome
from dsh.session._session import agent_id_of, new_session_id
from dsh.values._agent import Agent, AgentOptions, Continuation
from dsh.values._config import AgentLoopConfig
from dsh.values._errors import DshError
from dsh.values._events import (
    ErrorEvent,
    StepEnd,
    StepStart,
    TurnAborted,
    TurnCompleted,
    TurnDisposed,
    TurnEnd,
    TurnEndReason,
    TurnError,
    TurnMaxTokens,
    TurnStart,
    UserMessage,
)

if TYPE_CHECKING:
    from dsh.app._harness import Harness
    from dsh.loop._recovery import ParkedStep
    from dsh.session._session import Session
    from dsh.values._chunks import LlmFailure

__all__ = ["AgentLoop", "LoopAgent"]

log = get_logger("dsh.loop")


class Parked:
    """What a step, and then its turn, returns when the agent was disposed while the step
    waited for decisions (:class:`~dsh.loop._approvals.TurnParked`): nothing more is logged,
    the turn stays open for whichever process resumes the session."""


PARKED = Parked()


class LoopAgent(AgentHandle):
    """One agent (an :class:`~dsh.values._agent.Agent`) and the task that drives it: the public
    methods are :class:`~dsh.loop._handle.AgentHandle`'s, the lifecycle is here. Create agents with
    ``harness.agent_loop.create``; the task starts at once."""

    def __init__(
        self, harness: Harness, agent_id: str, options: AgentOptions, session: Session
    ) -> None:
        super().__init__(harness, agent_id, options, session)
        self._turn = session.last_turn
        self._call_ids: set[str] | None = None
        self._approvals = self._approvals_of(session)
        self._parked_step: ParkedStep | None = None
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dsh:{agent_id}")

    def _approvals_of(self, session: Session) -> Approvals:
        approvals = Approvals(self.id, session, self._set_status)
        approvals.on_busy = self._idle.clear
        approvals.on_waiting = self._idle.set
        return approvals

    def _continue_in(self, session: Session) -> None:
        super()._continue_in(session)
        self._turn = session.last_turn
        self._call_ids = None
        self._approvals = self._approvals_of(session)  # a rewind's fork parks its own calls

    def continue_parked(self, parked: ParkedStep) -> None:
        """Go on with the step a resume found parked (before the driver first runs): the agent
        is busy until that step waits for its decisions, or the turn ends."""
        self._parked_step = parked
        self.status = "waiting"  # what the driver announces once it waits again
        self._idle.clear()

    async def _run(self) -> None:
        bind_context(agent=self.id, session=self.session.id)
        await self._hooks.agent_created(self)
        try:
            if self._parked_step is not None:
                await self._set_status("running")
                await self._run_turn(self._parked_step)
                self._parked_step = None
                await self._after_turn()
            while True:
                await self.inbox.wait_for_queued()
                if self.inbox.closed:
                    break
                await self._set_status("running")
                await self._run_turn()
                await self._after_turn()
        except GeneratorExit:
            # Closed, not cancelled: the task was dropped with its event loop (a host that
            # never closed its harness). Nothing can be awaited any more; the session keeps
            # what its store wrote, and a resume closes the open turn.
            self._disposing = True
            raise
        except BaseException:
            await self._finish()
            raise
        await self._finish()

    async def _after_turn(self) -> None:
        for message in self.inbox.drain_steering():
            self.inbox.enqueue(message)
        if not self.inbox.has_queued and not self._disposing:
            await self._set_status("idle")

    async def _finish(self) -> None:
        self._disposing = True
        self.inbox.close()
        self._unregister()
        await asyncio.gather(*self._background)
        await self._set_status("disposed")
        await self.harness.sessions.close(self.session)
        self._idle.set()
        await self._hooks.agent_disposed(self)

    async def _run_turn(self, parked: ParkedStep | None = None) -> None:
        """Run a turn; with ``parked``, go on with the parked step of the turn a resume found
        open (its messages and start are logged already)."""
        self._in_turn = True
        self._abort_reason = None
        if parked is None:
            self._turn += 1
            turn = self._turn
            bind_context(turn=turn)
            queued = self.inbox.drain_queued()
            for message in queued:
                data = UserMessage(message.content, message.source, message.queued_seq)
                self.session.append(data)
            self.session.append(TurnStart(turn, queued[0].source))
            await self._hooks.agent_turn_start(self, turn)
        else:
            turn = parked.turn
            bind_context(turn=turn)
        try:
            reason = await self._run_steps(turn, parked)
        except Exception as exc:  # backstop: a plugin failed outside a step
            reason = await self._log_error(turn, 0, exc, failures.plugin_failure(exc))
        self._in_turn = False
        if isinstance(reason, Parked):  # disposed while waiting: the turn stays open
            await self._flush_parked()
            return
        self._deliver_context()
        reason = await self._saved(turn, reason)
        self.session.append(TurnEnd(turn, reason))
        await self._hooks.agent_turn_end(self, turn, reason)
        try:
            await self.session.flush()
        except Exception as exc:
            if failures.unsaved(reason):  # logged already, with the turn's end
                log.warning("session still not saved", error=str(exc))
            else:  # too late for the turn's reason: an error after its end says it
                await self._log_error(turn, 0, exc, failures.unsaved_failure(exc))

    async def _flush_parked(self) -> None:
        try:
            await self.session.flush()
        except Exception as exc:  # the requests were checkpointed before the step waited
            log.warning("parked session not flushed", error=str(exc))

    async def _saved(self, turn: int, reason: TurnEndReason) -> TurnEndReason:
        """``reason`` once the turn's events are written; if they cannot be (disk full), an
        error: a turn whose log was not saved is not a success. The events stay buffered, and
        the next checkpoint or flush writes them."""
        try:
            await self.session.checkpoint()
        except Exception as exc:
            return await self._log_error(turn, 0, exc, failures.unsaved_failure(exc))
        return reason

    async def _run_steps(self, turn: int, parked: ParkedStep | None) -> TurnEndReason | Parked:
        step = 0 if parked is None else parked.step - 1
        while True:
            if self._stop_asked():
                return self._stopped()
            step += 1
            outcome = await self._run_step(turn, step, parked)
            parked = None
            if not isinstance(outcome, StepOutcome):
                return outcome
            if outcome.max_tokens:
                return TurnMaxTokens()
            decision = await self._hooks.agent_turn_continuation(
                self,
                turn,
                Continuation(outcome.proceed, "tool calls or steering" if outcome.proceed else ""),
            )
            if not decision.proceed and not self.inbox.has_steering:
                return TurnCompleted(decision.reason or None)

    async def _run_step(
        self, turn: int, step: int, parked: ParkedStep | None
    ) -> StepOutcome | TurnEndReason | Parked:
        """Run one step, which abort and dispose can cancel alone (:meth:`_step_outcome`);
        with ``parked``, the rest of the step a resume found waiting."""
        if parked is None:
            self._deliver_steering(turn)
            self.session.log(StepStart(turn, step))
            await self._hooks.agent_step_start(self, turn, step)
        result: StepOutcome | TurnEndReason | Parked
        error: tuple[BaseException, LlmFailure] | None = None
        try:
            result = await self._step_outcome(turn, step, parked)
            if isinstance(result, Parked):
                return result
        except failures.StepFailed as exc:
            error = (exc, exc.failure)
            result = failures.failure_reason(exc.failure)
        except Exception as exc:
            error = (exc, failures.plugin_failure(exc))
            result = TurnError(error[1])
        self.session.log(StepEnd(turn, step))
        await self._hooks.agent_step_end(self, turn, step)
        if error is not None:
            await self._log_error(turn, step, *error)
        return result

    async def _step_outcome(
        self, turn: int, step: int, parked: ParkedStep | None
    ) -> StepOutcome | TurnEndReason | Parked:
        """The step's outcome, or the reason abort or dispose stopped it.

        The step runs in the agent's own task (a task per step cost a task and two turns of
        the event loop, per step). Abort and dispose cancel that task only while it runs the
        step, and count their cancellations: those are taken back here (``uncancel``), so a
        cancellation of the agent from anywhere else still ends it.
        """
        if self._stop_asked():
            return self._stopped()
        task = asyncio.current_task()
        assert task is not None, "an agent runs in its own task"
        self._step_task = task
        try:
            running = self._step(turn, step)
            if parked is None:
                outcome = await running.run()
            else:
                outcome = await running.resume_parked(list(parked.calls))
            # Stopped while it ran, and it finished before the cancellation reached it (a chunk
            # observer that aborted: see AgentHandle._cancel_step): stopped all the same.
            return self._stopped() if self._stop_asked() else outcome
        except TurnParked:
            return PARKED
        except asyncio.CancelledError:
            if self._take_back_cancels(task):
                raise
            return self._stopped()
        finally:
            self._step_task = None
            self._take_back_cancels(task)  # a step that swallowed one still returned

    def _take_back_cancels(self, task: asyncio.Task[None]) -> bool:
        """Take back abort's and dispose's cancellations of ``task``; whether a cancellation
        from elsewhere is still pending."""
        for _ in range(self._step_cancels):
            task.uncancel()
        self._step_cancels = 0
        return task.cancelling() > 0

    def _stop_asked(self) -> bool:
        return self._disposing or self._abort_reason is not None

    def _stopped(self) -> TurnEndReason:
        return TurnDisposed() if self._disposing else TurnAborted(self._abort_reason)

    def _step(self, turn: int, step: int) -> Step:
        if self._call_ids is None:  # read from the log once; the loop is its only writer
            self._call_ids = call_ids(self.session.events)
        steering = functools.partial(self._deliver_steering, turn)
        return Step(
            self.harness,
            self,
            turn,
            step,
            call_ids=self._call_ids,
            steering=steering,
            approvals=self._approvals,
        )

    async def _log_error(
        self, turn: int, step: int, exc: BaseException, failure: LlmFailure
    ) -> TurnEndReason:
        self.session.log(ErrorEvent(turn, step, failure.message, failure.code))
        log.warning("turn failed", step=step, code=failure.code, error=failure.message)
        await self._hooks.agent_error(self, turn, step, exc)
        return failures.failure_reason(failure)


class AgentLoop:
    """The one concrete loop: creates agents and starts their drivers."""

    def __init__(self, harness: Harness) -> None:
        self._harness = harness

    def create(
        self,
        agent_id: str,
        options: AgentOptions | None = None,
        session: Session | None = None,
        *,
        session_id: str | None = None,
        parent: Agent | None = None,
        call_id: str | None = None,
    ) -> LoopAgent:
        """Create an agent and start its loop.

        Unless ``session`` is given, the agent gets a fresh session: ``session_id``, or a new
        unique id ``<agent_id>-<yyyymmdd-hhmmss>-<4 hex>`` — never the id of an earlier session,
        so a new agent can never overwrite a stored conversation (``resume`` continues one).
        With ``parent`` the agent is its sub-agent (made by tool call ``call_id``, if one did):
        see :mod:`dsh.loop._family`.
        """
        if self._harness.agents.get(agent_id) is not None:
            raise DshError(f"an agent with id {agent_id!r} already exists")
        fresh_id = session_id or new_session_id(agent_id)

        def start(session: Session) -> LoopAgent:
            return LoopAgent(self._harness, agent_id, options or AgentOptions(), session)

        if parent is not None:
            return self._harness.family.spawn(parent, agent_id, fresh_id, call_id, start)
        return start(session if session is not None else self._harness.sessions.create(fresh_id))

    async def resume(
        self, session_id: str, options: AgentOptions | None = None, agent_id: str | None = None
    ) -> LoopAgent:
        """Continue a stored session: reopen it (:func:`dsh.loop._recovery.reopen`: ``SessionBusy``
        if another process writes it, a turn a crash left open is closed), start an agent on it
        and re-queue the messages that were queued but never ran. The agent id defaults to the
        one the session id was made for (:func:`dsh.session._session.agent_id_of`)."""
        # Imported by the first resume: a run that starts fresh sessions never needs it.
        from dsh.loop import _recovery as recovery

        session = await recovery.reopen(self._harness.sessions, session_id)
        agent = self.create(agent_id or agent_id_of(session_id), options, session)
        parked = recovery.parked_step(session.events)
        if parked is not None:
            agent.continue_parked(parked)
        agent.requeue(recovery.pending_messages(session.events))
        return agent

    def create_configured(self) -> list[LoopAgent]:
        """Create the agents listed in config section ``agent_loop`` (each in its profile's
        ``permission_mode``, when it sets one). A profile whose options cannot be made (an
        output type that does not import) is logged as an error and not created: the harness
        and the other agents start, and whatever asks for that profile (``dsh run --agent``,
        ``task(agent=...)``) gets the error itself."""
        config = self._harness.config.section("agent_loop", AgentLoopConfig)
        agents: list[LoopAgent] = []
        for profile in config.agents:
            try:
                options = options_for(profile, near=self._harness.config_dir)
            except DshError as exc:
                log.warning("agent profile not created", agent_id=profile.id, error=str(exc))
                continue
            agent = self.create(profile.id, options)
            if profile.permission_mode is not None:
                agent.set_permission_mode(profile.permission_mode)
            agents.append(agent)
        return agents
