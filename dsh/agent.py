"""What plugins and hosts see of an agent: the :class:`Agent` protocol, and the values agents
and the hooks around them exchange (options, continuation, retry).

Plugins and hosts type against :class:`Agent`, never against the loop's concrete class: the loop
driver (``dsh.loop``) is one implementation of it, and sub-agents, remote agents or a test double
may be others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from attrs import frozen

from dsh.content import Block, MessageSource, UserSource
from dsh.request import ReasoningEffort, ResponseFormat

if TYPE_CHECKING:
    from dsh.session import Session

__all__ = ["Agent", "AgentOptions", "AgentStatus", "Content", "Continuation", "Retry"]

#: What ``send``, ``steer`` and ``inject`` accept: text, one block or a sequence of blocks.
Content = str | Block | Sequence[Block]

AgentStatus = Literal["idle", "running", "disposed"]


@frozen
class AgentOptions:
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


@frozen
class Continuation:
    """Whether the turn runs another step, and why (the reason is logged by whoever decides)."""

    proceed: bool
    reason: str = ""


@frozen
class Retry:
    """Returned by ``dsh_agent_request_error``: run the failed step again after ``delay_s``."""

    delay_s: float = 0.0


@runtime_checkable
class Agent(Protocol):
    """An agent as a plugin or a host may use it.

    ``status`` is ``"idle"`` (waiting for a message), ``"running"`` (a turn runs) or
    ``"disposed"``; ``idle`` is true when nothing is queued and no turn runs (what
    :meth:`wait_idle` waits for). ``abort_reason`` is set while a turn is being aborted.
    """

    @property
    def id(self) -> str: ...

    @property
    def options(self) -> AgentOptions: ...

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

    def abort(self, reason: str = "aborted") -> None:
        """Cancel the running step; the turn ends ``aborted``. No-op when idle."""

    async def wait_idle(self) -> None:
        """Return once nothing is queued and no turn runs (or the agent is disposed)."""

    async def dispose(self) -> None:
        """Stop the agent: a running turn ends ``disposed``; its loop exits."""
