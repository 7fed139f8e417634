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
          assembly = system_prompt.assemble()
          request  = waterfall dsh_agent_request
          stream llm.stream(request) → 'assistant/chunk' (+ dsh_agent_stream_chunk)
          message  = waterfall dsh_agent_step_result
          'assistant/message' (with usage)
          each tool call: 'tool/call' → tools.execute() → 'tool/result'
          drain steering → 'steering/message'
          'step/end'
          cont = waterfall dsh_agent_turn_continuation
          if not cont: break
        await session checkpoint (fails: 'error', reason error SESSION_NOT_SAVED)
        'turn/end' {reason}
        await session flush
      re-enqueue leftover steering as queued
      idle unless more queued

A failed step (the model call failed and was not retried, or a plugin raised) still gets its
``step/end``; then an ``error`` event, and the turn ends ``error`` or ``aborted``. Abort cancels
the running step's task; dispose does the same and ends the loop.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

import structlog
from attrs import evolve, frozen

from dsh import recovery
from dsh.agent import AgentOptions, AgentStatus, Continuation
from dsh.assembler import AssembledMessage, BlockAssembler
from dsh.assembly import PromptAssembly, render
from dsh.chunks import (
    Finish,
    FinishAborted,
    FinishError,
    FinishMaxTokens,
    FinishStop,
    LlmFailure,
    StreamChunk,
)
from dsh.config import AgentLoopConfig
from dsh.content import (
    Block,
    Image,
    MessageSource,
    Reasoning,
    Text,
    ToolCall,
    ToolResult,
    UserSource,
)
from dsh.dispatch import ToolDispatch, call_ids, with_unique_call_ids
from dsh.errors import DshError, HookError, LlmError
from dsh.events import (
    AssistantChunk,
    AssistantMessage,
    ContextMessage,
    ErrorEvent,
    QueuedMessage,
    SeedEnd,
    SteeringMessage,
    StepBoundary,
    TurnAborted,
    TurnCompleted,
    TurnDisposed,
    TurnEnd,
    TurnEndReason,
    TurnError,
    TurnMaxTokens,
    TurnStart,
    UserMessage,
    WithdrawnMessage,
)
from dsh.inbox import Inbox, InboxMessage
from dsh.request import LlmRequest

if TYPE_CHECKING:
    from dsh.harness import Harness
    from dsh.session import Session

__all__ = [
    "SESSION_NOT_SAVED",
    "AgentLoop",
    "LoopAgent",
    "agent_id_of",
    "as_blocks",
    "new_session_id",
]

log = structlog.get_logger("dsh.loop")


def as_blocks(content: str | Block | Sequence[Block]) -> tuple[Block, ...]:
    """What ``send``/``steer``/``inject`` accept, as content blocks."""
    if isinstance(content, str):
        return (Text(content),)
    if isinstance(content, Text | Reasoning | ToolCall | ToolResult | Image):
        return (content,)
    return tuple(content)


_GENERATED = re.compile(r"-(\d{8}-\d{6}-[0-9a-f]{4}|session)$")


def new_session_id(agent_id: str) -> str:
    """A fresh session id for ``agent_id``: ``<agent_id>-<yyyymmdd-hhmmss>-<4 hex>`` (UTC)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"{agent_id}-{stamp}-{secrets.token_hex(2)}"


def agent_id_of(session_id: str) -> str:
    """The agent id a :func:`new_session_id` (or a ``<agent>-session`` id) was made for, else
    the session id itself."""
    return _GENERATED.sub("", session_id)


class StepFailed(Exception):
    """The step's model call failed for good; carries the failure to log."""

    def __init__(self, failure: LlmFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


@frozen
class _StepOutcome:
    proceed: bool
    max_tokens: bool


def _is_empty(blocks: tuple[Block, ...]) -> bool:
    return all(isinstance(b, Text | Reasoning) and not b.text for b in blocks)


def _failure_of(result: AssembledMessage) -> LlmFailure | None:
    finish = result.finish
    if isinstance(finish, FinishError | FinishAborted):
        return finish.failure
    if isinstance(finish, FinishStop) and _is_empty(result.message.content):
        return LlmFailure("the model returned an empty completion", "EMPTY_RESPONSE")
    return None


def _adapter_error(exc: Exception) -> LlmError:
    """An adapter raised something other than ``LlmError``."""
    return LlmError.of("ADAPTER_ERROR", f"{type(exc).__name__}: {exc}")


def _failed_finish(failure: LlmFailure) -> Finish:
    """The finish chunk that ends a failed stream on the in-band path."""
    return Finish(FinishAborted(failure) if failure.code == "ABORTED" else FinishError(failure))


def _failure_reason(failure: LlmFailure) -> TurnEndReason:
    if failure.code == "ABORTED":
        return TurnAborted(failure.message)
    return TurnError(failure)


def _plugin_failure(exc: BaseException) -> LlmFailure:
    """A failure that names the plugin(s) and hook when a plugin is to blame."""
    causes = exc.exceptions if isinstance(exc, BaseExceptionGroup) else (exc,)
    if all(isinstance(cause, HookError) for cause in causes):
        return LlmFailure("; ".join(map(str, causes)), "PLUGIN_ERROR")
    return LlmFailure(f"{type(exc).__name__}: {exc}", "INTERNAL_ERROR")


#: The failure code of a turn whose events could not be written to the session store.
SESSION_NOT_SAVED = "SESSION_NOT_SAVED"


def _unsaved_failure(exc: BaseException) -> LlmFailure:
    cause = _plugin_failure(exc).message
    return LlmFailure(f"the session could not be saved: {cause}", SESSION_NOT_SAVED)


def _unsaved(reason: TurnEndReason) -> bool:
    return isinstance(reason, TurnError) and reason.failure.code == SESSION_NOT_SAVED


class LoopAgent:
    """One agent: its options, its session, its inbox and the task that drives it.

    Create agents with ``harness.agent_loop.create``; the driver task starts at once.
    """

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
        config = harness.config.section("agent_loop", AgentLoopConfig)
        self._max_parallel_tools = config.max_parallel_tools
        self._turn = max((e.data.turn for e in session.events if e.type == "turn/start"), default=0)
        self._idle = asyncio.Event()
        self._idle.set()
        self._pending_context: list[InboxMessage] = []
        self._call_ids: set[str] | None = None
        self._abort_reason: str | None = None
        self._disposing = False
        self._in_turn = False
        self._step_task: asyncio.Task[_StepOutcome] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._unregister = harness.agents.register(self)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dsh:{agent_id}")

    def __repr__(self) -> str:
        return f"<LoopAgent {self.id!r} {self.status}>"

    # -- public API ------------------------------------------------------------------------
    @property
    def disposing(self) -> bool:
        """True once ``dispose`` was called (or the driver stopped)."""
        return self._disposing

    @property
    def idle(self) -> bool:
        """True when nothing is queued and no turn runs (what ``wait_idle`` waits for)."""
        return self._idle.is_set()

    @property
    def abort_reason(self) -> str | None:
        """Why the running turn is being aborted, if it is."""
        return self._abort_reason

    def send(
        self, content: str | Block | Sequence[Block], source: MessageSource = UserSource()
    ) -> None:
        """Queue a message; it starts a turn when the agent is idle, else the next one."""
        self._queue(InboxMessage(as_blocks(content), source), steering=False)

    def steer(
        self, content: str | Block | Sequence[Block], source: MessageSource = UserSource()
    ) -> None:
        """Deliver a message between steps of the running turn (like ``send`` when idle)."""
        self._queue(InboxMessage(as_blocks(content), source), steering=self._in_turn)

    def inject(
        self, content: str | Block | Sequence[Block], source: MessageSource = UserSource()
    ) -> None:
        """Add context for the next model request without starting a turn."""
        self._check_alive()
        message = InboxMessage(as_blocks(content), source)
        if self._in_turn:
            self._pending_context.append(message)
        else:
            self.session.append("context/message", ContextMessage(message.content, message.source))

    def withdraw_steering(self) -> list[InboxMessage]:
        """Take back the steering that has not reached the model yet (after a user's abort,
        say, so that it does not start a turn on its own). Each is logged ``inbox/withdrawn``,
        so a resume does not restore it either."""
        taken = self.inbox.drain_steering()
        for seq in [m.queued_seq for m in taken if m.queued_seq is not None]:
            self.session.append("inbox/withdrawn", WithdrawnMessage(seq))
        return taken

    def abort(self, reason: str = "aborted") -> None:
        """Cancel the running step; the turn ends ``aborted``. No-op when idle."""
        if self._in_turn and self._abort_reason is None:
            self._abort_reason = reason
            if self._step_task is not None:
                self._step_task.cancel()

    async def wait_idle(self) -> None:
        """Return once nothing is queued and no turn runs (or the agent is disposed)."""
        await self._idle.wait()

    async def dispose(self) -> None:
        """Stop the agent: a running turn ends ``disposed``; the loop exits."""
        if not self._disposing:
            self._disposing = True
            self.inbox.close()
            if self._step_task is not None:
                self._step_task.cancel()
        await asyncio.shield(self._task)

    # -- the loop --------------------------------------------------------------------------
    def _check_alive(self) -> None:
        if self._disposing:
            raise DshError(f"agent {self.id!r} is disposed")

    def _queue(self, message: InboxMessage, steering: bool) -> None:
        self._check_alive()
        if self._in_turn and message.queued_seq is None:
            # Busy: the message may wait a while, so it is logged and survives a crash.
            data = QueuedMessage(message.content, message.source, steering)
            message = evolve(message, queued_seq=self.session.append("inbox/queued", data).seq)
            self._spawn(self.session.checkpoint())
        if steering:
            self.inbox.steer(message)
        else:
            self.inbox.enqueue(message)
            self._idle.clear()
        self._spawn(self._hooks.agent_queued(self, message, steering))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _set_status(self, status: AgentStatus) -> None:
        self.status = status
        if status != "running" and not self.inbox.has_queued:
            self._idle.set()
        await self._hooks.agent_status(self, status)

    async def _run(self) -> None:
        structlog.contextvars.bind_contextvars(agent=self.id, session=self.session.id)
        await self._hooks.agent_created(self)
        try:
            while True:
                await self.inbox.wait_for_queued()
                if self.inbox.closed:
                    break
                await self._set_status("running")
                await self._run_turn()
                for message in self.inbox.drain_steering():
                    self.inbox.enqueue(message)
                if not self.inbox.has_queued and not self._disposing:
                    await self._set_status("idle")
        finally:
            await self._finish()

    async def _finish(self) -> None:
        self._disposing = True
        self.inbox.close()
        self._unregister()
        await asyncio.gather(*self._background)
        await self._set_status("disposed")
        await self.harness.sessions.close(self.session)
        self._idle.set()
        await self._hooks.agent_disposed(self)

    async def _run_turn(self) -> None:
        self._turn += 1
        turn = self._turn
        self._in_turn = True
        self._abort_reason = None
        structlog.contextvars.bind_contextvars(turn=turn)
        queued = self.inbox.drain_queued()
        for message in queued:
            data = UserMessage(message.content, message.source, message.queued_seq)
            self.session.append("user/message", data)
        self.session.append("turn/start", TurnStart(turn, queued[0].source))
        await self._hooks.agent_turn_start(self, turn)
        try:
            reason = await self._run_steps(turn)
        except Exception as exc:  # backstop: a plugin failed outside a step
            reason = await self._log_error(turn, 0, exc, _plugin_failure(exc))
        self._deliver_context()
        self._in_turn = False
        reason = await self._saved(turn, reason)
        self.session.append("turn/end", TurnEnd(turn, reason))
        await self._hooks.agent_turn_end(self, turn, reason)
        try:
            await self.session.flush()
        except Exception as exc:
            if _unsaved(reason):  # logged already, with the turn's end
                log.warning("session still not saved", error=str(exc))
            else:  # too late for the turn's reason: an error after its end says it
                await self._log_error(turn, 0, exc, _unsaved_failure(exc))

    async def _saved(self, turn: int, reason: TurnEndReason) -> TurnEndReason:
        """``reason`` once the turn's events are written; if they cannot be (disk full), an
        error: a turn whose log was not saved is not a success. The events stay buffered, and
        the next checkpoint or flush writes them."""
        try:
            await self.session.checkpoint()
        except Exception as exc:
            return await self._log_error(turn, 0, exc, _unsaved_failure(exc))
        return reason

    def _used_call_ids(self) -> set[str]:
        """The session's tool-call ids, read from its log once, then kept up to date by
        :func:`with_unique_call_ids` (the loop is the only writer of calls)."""
        if self._call_ids is None:
            self._call_ids = call_ids(self.session.events)
        return self._call_ids

    async def _run_steps(self, turn: int) -> TurnEndReason:
        step = 0
        while True:
            if self._disposing:
                return TurnDisposed()
            if self._abort_reason is not None:
                return TurnAborted(self._abort_reason)
            step += 1
            outcome = await self._run_step(turn, step)
            if not isinstance(outcome, _StepOutcome):
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

    async def _run_step(self, turn: int, step: int) -> _StepOutcome | TurnEndReason:
        """Run one step in its own task, so that abort and dispose can cancel just the step."""
        self._deliver_steering(turn)
        self.session.append("step/start", StepBoundary(turn, step))
        await self._hooks.agent_step_start(self, turn, step)
        task = asyncio.get_running_loop().create_task(self._step(turn, step))
        self._step_task = task
        if self._disposing or self._abort_reason is not None:
            task.cancel()
        result: _StepOutcome | TurnEndReason
        error: tuple[BaseException, LlmFailure] | None = None
        try:
            result = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            result = TurnDisposed() if self._disposing else TurnAborted(self._abort_reason)
        except StepFailed as exc:
            error = (exc, exc.failure)
            result = _failure_reason(exc.failure)
        except Exception as exc:
            error = (exc, _plugin_failure(exc))
            result = TurnError(error[1])
        finally:
            self._step_task = None
        self.session.append("step/end", StepBoundary(turn, step))
        await self._hooks.agent_step_end(self, turn, step)
        if error is not None:
            await self._log_error(turn, step, *error)
        return result

    async def _log_error(
        self, turn: int, step: int, exc: BaseException, failure: LlmFailure
    ) -> TurnEndReason:
        self.session.append("error", ErrorEvent(turn, step, failure.message, failure.code))
        log.warning("turn failed", step=step, code=failure.code, error=failure.message)
        await self._hooks.agent_error(self, turn, step, exc)
        return _failure_reason(failure)

    def _deliver_context(self) -> None:
        for message in self._pending_context:
            self.session.append("context/message", ContextMessage(message.content, message.source))
        self._pending_context.clear()

    def _deliver_steering(self, turn: int) -> bool:
        """Log pending context and steering; True if steering was delivered."""
        self._deliver_context()
        steering = self.inbox.drain_steering()
        for message in steering:
            data = SteeringMessage(turn, message.content, message.source, message.queued_seq)
            self.session.append("steering/message", data)
        return bool(steering)

    # -- inside the step task ----------------------------------------------------------------
    async def _step(self, turn: int, step: int) -> _StepOutcome:
        result, model = await self._call_model(turn, step)
        message = await self._hooks.agent_step_result(self, turn, step, result.message)
        message = with_unique_call_ids(message, self._used_call_ids())
        data = AssistantMessage(turn, step, message.content, result.usage, model)
        self.session.append("assistant/message", data)
        calls = [block for block in message.content if isinstance(block, ToolCall)]
        await ToolDispatch(self, turn, step, self._max_parallel_tools).run(calls)
        steered = self._deliver_steering(turn)
        return _StepOutcome(bool(calls) or steered, isinstance(result.finish, FinishMaxTokens))

    async def _call_model(self, turn: int, step: int) -> tuple[AssembledMessage, str]:
        """Stream the request; ask ``dsh_agent_request_error`` after each failed attempt.
        Returns what the model said and the model id the final request named."""
        attempt = 0
        while True:
            attempt += 1
            request = await self._request(turn, step)
            await self.session.checkpoint()  # the request is about to be paid for
            try:
                result = await self._stream(turn, step, request)
            except LlmError as exc:
                failure = exc.failure
            else:
                found = _failure_of(result)
                if found is None:
                    return result, request.model
                failure = found
            retry = await self._hooks.agent_request_error(self, turn, step, failure, attempt)
            if retry is None:
                raise StepFailed(failure)
            await self.harness.sleep(retry.delay_s)

    async def _request(self, turn: int, step: int) -> LlmRequest:
        assembly = await self.harness.system_prompt.assemble()
        request = await self._hooks.agent_request(self, turn, step, self._build_request(assembly))
        if not request.model:
            raise StepFailed(
                LlmFailure(
                    f"agent {self.id!r} has no model: set AgentOptions(model=...) or pick one of "
                    f"{', '.join(self.harness.llm.models()) or 'no registered models'}",
                    "NO_MODEL",
                )
            )
        return request

    def _build_request(self, assembly: PromptAssembly) -> LlmRequest:
        options = self.options
        system = "\n\n".join(p for p in (render(assembly), options.system_prompt) if p)
        return LlmRequest(
            model=options.model,
            messages=self.session.derive_messages(),
            system=system or None,
            tools=assembly.tools,
            temperature=options.temperature,
            max_tokens=options.max_tokens,
            reasoning_effort=options.reasoning_effort,
            thinking=options.thinking,
            response_format=options.response_format,
            session_id=self.session.id,
        )

    async def _stream(self, turn: int, step: int, request: LlmRequest) -> AssembledMessage:
        stream = await self.harness.llm.stream(request)
        assembler = BlockAssembler()
        append = self.session.append
        observe = self._hooks.agent_stream_chunk

        def record(chunk: StreamChunk) -> None:
            append("assistant/chunk", AssistantChunk(turn, step, chunk))
            observe(self, turn, step, chunk)
            assembler.push(chunk)

        try:
            async for chunk in stream:
                record(chunk)
        except (HookError, asyncio.CancelledError):
            raise
        except Exception as exc:
            error = exc if isinstance(exc, LlmError) else _adapter_error(exc)
            if assembler.finish is None:
                # Log a raised failure as the finish chunk the in-band path sends, so that the
                # session and the chunk observers see one shape whichever way the adapter failed.
                record(_failed_finish(error.failure))
            if error is exc:
                raise
            raise error from exc
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
        return assembler.result()


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
    ) -> LoopAgent:
        """Create an agent and start its loop.

        Unless ``session`` is given, the agent gets a fresh session: ``session_id``, or a new
        unique id ``<agent_id>-<yyyymmdd-hhmmss>-<4 hex>`` — never the id of an earlier session,
        so a new agent can never overwrite a stored conversation (``resume`` continues one).
        """
        if self._harness.agents.get(agent_id) is not None:
            raise DshError(f"an agent with id {agent_id!r} already exists")
        if session is None:
            session = self._harness.sessions.create(session_id or new_session_id(agent_id))
        return LoopAgent(self._harness, agent_id, options or AgentOptions(), session)

    async def resume(
        self, session_id: str, options: AgentOptions | None = None, agent_id: str | None = None
    ) -> LoopAgent:
        """Continue a stored session: load it, take its writer lock (``SessionBusy`` if another
        process writes it), close a turn a crash left open, mark where the stored log ends
        (``session/end-seed``), restore messages that were queued but never ran, and start an
        agent on it (its id defaults to the one the session id was made for, see
        :func:`new_session_id`, else the session id itself)."""
        events = await self._harness.sessions.load(session_id)
        if events is None:
            raise DshError(
                f"no stored session {session_id!r}: is a persistence plugin enabled "
                "(dsh plugins), and is this the right data directory?"
            )
        session = self._harness.sessions.create(session_id, events, persisted=len(events))
        await self._harness.sessions.claim(session)  # another writer: fail now, append nothing
        session.append("session/end-seed", SeedEnd(len(events)))
        for type_, data in recovery.closing_events(events):
            session.append(type_, data)
        agent = self.create(agent_id or agent_id_of(session_id), options, session)
        for message in recovery.pending_messages(session.events):
            agent._queue(message, steering=False)
        return agent

    def create_configured(self) -> list[LoopAgent]:
        """Create the agents listed in config section ``agent_loop``."""
        config = self._harness.config.section("agent_loop", AgentLoopConfig)
        return [
            self.create(a.id, AgentOptions(model=a.model, system_prompt=a.system_prompt))
            for a in config.agents
        ]
