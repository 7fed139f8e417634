"""Values that agents and the hooks around them exchange: options, continuation, retry."""

from __future__ import annotations

from typing import Literal

from attrs import frozen

from dsh.request import ReasoningEffort, ResponseFormat

__all__ = ["AgentOptions", "AgentStatus", "Continuation", "Retry"]

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
