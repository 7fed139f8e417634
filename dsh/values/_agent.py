"""What plugins and hosts see of an agent: the :class:`Agent` protocol, and the values agents
and the hooks around them exchange (options, continuation, retry).

Plugins and hosts type against :class:`Agent`, never against the loop's concrete class: the loop
driver (``dsh.loop._loop``) is one implementation of it, and sub-agents, remote agents or a test
double may be others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from attrs import frozen

from dsh.values._chunks import LlmFailure
from dsh.values._content import Block, MessageSource, UserSource
from dsh.values._events import RetryEvent
from dsh.values._request import ReasoningEffort, ResponseFormat
from dsh.values._value import Value

if TYPE_CHECKING:
    from dsh.loop._inbox import InboxMessage
    from dsh.session._rewind import RewindReport
    from dsh.session._session import Session
    from dsh.values._approval import PendingApproval

__all__ = [
    "PERMISSION_MODES",
    "Agent",
    "AgentOptions",
    "AgentStatus",
    "Content",
    "Continuation",
    "PermissionMode",
    "Retry",
]

#: What ``send``, ``steer`` and ``inject`` accept: text, one block or a sequence of blocks.
Content = str | Block | Sequence[Block]

AgentStatus = Literal["idle", "running", "waiting", "disposed"]

#: How a permission policy judges an agent's tool calls (see the ``permissions`` plugin):
#: ``plan`` runs only read-only tools while the model plans.
PermissionMode = Literal["plan", "read-only", "workspace-write", "full"]
PERMISSION_MODES: tuple[PermissionMode, ...] = ("plan", "read-only", "workspace-write", "full")


@frozen(repr=False, eq=False)
class AgentOptions(Value):
    """How an agent calls its model. ``system_prompt`` is appended after the assembled sections;
    ``workspace`` is the directory tools are confined to (``None``: the current directory)."""

    model: str = ""
    system_prompt: str = ""
    temperature: float | None = None
    max_tokens: int | None = None
    reasoning_effort: ReasoningEffort | None = None
    thinking: bool | None = None
    response_format: ResponseFormat | None = None
    workspace: str | None = None
    #: The type of the turn's answer (an attrs class, a dataclass, a ``TypedDict`` or a JSON
    #: Schema dict): see :mod:`dsh.loop._output` and :meth:`Agent.result`.
    output_type: Any = None
    #: How often an answer that does not validate is sent back before the turn gives up.
    output_retries: int = 2
    #: The names of the tools this agent may call (``None``: every registered tool); the
    #: others are not offered to its model, and calls of them are refused.
    tools: tuple[str, ...] | None = None


@frozen(repr=False, eq=False)
class Continuation(Value):
    """Whether the turn runs another step, and why (the reason is logged by whoever decides)."""

    proceed: bool
    reason: str = ""


@frozen(repr=False, eq=False)
class Retry(Value):
    """Returned by ``dsh_agent_request_error``: run the failed step again after ``delay_s``.

    The policy decides, the loop records: it logs an ``llm/retry`` event
    (:class:`~dsh.values._events.RetryEvent`) before waiting, numbered ``attempt`` (default: the
    model calls of the step so far) of ``max_attempts``. ``record=False`` is for a policy that
    logs the retry as an event of its own (``fallback`` logs a model switch)."""

    delay_s: float = 0.0
    attempt: int | None = None
    max_attempts: int | None = None
    record: bool = True

    def event(self, turn: int, step: int, attempt: int, failure: LlmFailure) -> RetryEvent:
        """The ``llm/retry`` event of this retry after failed attempt ``attempt`` of the step
        (the policy's own count, ``self.attempt``, wins)."""
        counted = attempt if self.attempt is None else self.attempt
        return RetryEvent(
            turn,
            step,
            counted,
            failure.code,
            failure.message,
            self.delay_s,
            failure.status,
            self.max_attempts,
        )


@runtime_checkable
class Agent(Protocol):
    """An agent as a plugin or a host may use it.

    ``status`` is ``"idle"`` (waiting for a message), ``"running"`` (a turn runs),
    ``"waiting"`` (a turn waits for decisions on parked tool calls, its own or those of a
    sub-agent one of its tool calls waits for) or ``"disposed"``; ``idle``
    is true when nothing is queued and no turn runs, or the turn waits for decisions (what
    :meth:`wait_idle` waits for). ``abort_reason`` is set while a turn is being aborted.
    """

    @property
    def id(self) -> str: ...

    #: Assignable: the next model request uses the new options (a ``/model`` command, say).
    options: AgentOptions

    @property
    def session(self) -> Session: ...

    @property
    def status(self) -> AgentStatus: ...

    @property
    def idle(self) -> bool: ...

    @property
    def disposing(self) -> bool: ...

    @property
    def abort_reason(self) -> str | None: ...

    def send(self, content: Content, source: MessageSource = UserSource()) -> None:
        """Queue a message; it starts a turn when the agent is idle, else the next one."""

    def steer(self, content: Content, source: MessageSource = UserSource()) -> None:
        """Deliver a message between the steps of the running turn (like ``send`` when idle)."""

    def inject(self, content: Content, source: MessageSource = UserSource()) -> None:
        """Add context for the next model request without starting a turn."""

    def withdraw_steering(self) -> list[InboxMessage]:
        """Take back the steering that has not reached the model yet (after a user's abort, say,
        so that it does not start a turn on its own); a resume does not restore it either."""

    def abort(self, reason: str = "aborted") -> None:
        """Cancel the running step; the turn ends ``aborted``. No-op when idle."""

    def set_permission_mode(self, mode: PermissionMode) -> None:
        """Switch how the permission policy judges this agent's later tool calls (``plan`` to
        ``workspace-write`` once a plan is approved, say); logged ``permissions/mode``."""

    def pending_approvals(self) -> list[PendingApproval]:
        """The tool calls of this agent and its live sub-agents parked for a decision."""

    async def decide(self, call_id: str, allow: bool, reason: str | None = None) -> None:
        """Decide parked call ``call_id``; the waiting turn goes on (a denied call's result
        tells the model ``reason``)."""

    async def result(self) -> Any:
        """The typed value of the last completed turn (``AgentOptions.output_type``); raises
        :class:`~dsh.loop._output.OutputError` with the validation problem when there is none."""

    async def rewind(
        self, turn: int, *, in_place: bool = False, force: bool = False
    ) -> RewindReport:
        """Put the files the built-in file tools changed since turn ``turn`` began back as they
        were before it and continue in a fork whose history ends before that turn (or, with
        ``in_place``, in this session, which logs the rewind); files changed since by anything
        else are kept as conflicts unless ``force``. Only while idle."""

    async def wait_idle(self) -> None:
        """Return once nothing is queued and no turn runs (or the agent is disposed)."""

    async def dispose(self) -> None:
        """Stop the agent: a running turn ends ``disposed``; its loop exits."""
