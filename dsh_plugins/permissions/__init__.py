"""``permissions``: the policy that allows, denies or asks before a tool call runs.

A ``dsh_tools_execute`` middleware (``tryfirst``, so it wraps every other middleware): it
classifies each call by the tool's declared ``effect`` and the rules and mode of config section
``permissions`` (see :mod:`dsh_plugins.permissions.policy`). ``ask`` goes to
``harness.hooks.tools_approve(execution, reason)``, which a host answers; nobody answering means
no. Every decision is appended to the agent's session: ``approval/asked`` when a host is asked,
``approval/decided`` always. A denied call does not run: its result is a ``DENIED`` error that
tells the model why and what the user could change. See ``docs/plugins/permissions.md``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar

import structlog
from attrs import evolve, frozen

from dsh.agent import PERMISSION_MODES
from dsh.errors import DshError
from dsh.events import PermissionModeChange
from dsh.markers import hookimpl
from dsh.request import LlmRequest
from dsh.tools import Effect, ToolExecution, ToolOutcome
from dsh.value import Value
from dsh_plugins.permissions.policy import (
    Decision,
    PermissionsConfig,
    Rule,
    decide,
    denial,
    summary,
)

if TYPE_CHECKING:
    from dsh.agent import Agent
    from dsh.harness import Harness

__all__ = [
    "ASKED",
    "DECIDED",
    "ApprovalAsked",
    "ApprovalDecided",
    "PermissionsConfig",
    "PermissionsPlugin",
    "Rule",
]

SECTION = "permissions"
#: What the model is told in plan mode.
PLAN_NOTE = (
    "You are in plan mode: only read-only tools run. Investigate as much as you need, then "
    "answer with a concrete, step-by-step plan. Change nothing yet: the user reviews the plan "
    "and approves it before it is carried out."
)
ASKED = "approval/asked"
DECIDED = "approval/decided"

log = structlog.get_logger("dsh.permissions")


@frozen(repr=False)
class ApprovalAsked(Value):
    """Data of ``approval/asked``: the host is asked whether call ``call_id`` (of tool
    ``name``, with ``arguments``) may run, and why it is asked."""

    type: ClassVar[str] = ASKED
    call_id: str
    name: str
    arguments: str
    reason: str


@frozen(repr=False)
class ApprovalDecided(Value):
    """Data of ``approval/decided``: whether call ``call_id`` (of tool ``name``) may run,
    decided ``by`` a ``rule``, the ``mode`` or the ``approver`` (the host that was asked),
    and why."""

    type: ClassVar[str] = DECIDED
    call_id: str
    name: str
    allowed: bool
    by: str
    reason: str


class PermissionsPlugin:
    """The built-in permission policy."""

    def __init__(self) -> None:
        self._harness: Harness | None = None

    @hookimpl
    def dsh_register_config(
        self, register: Callable[[str, type[Any]], Any], harness: Harness
    ) -> None:
        self._harness = harness
        register(SECTION, PermissionsConfig)
        # This middleware is the policy: the registry stops denying what it would deny alone.
        harness.tools.install_policy(SECTION)

    @hookimpl
    def dsh_register_event_types(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(ApprovalAsked.type, ApprovalAsked)
        register(ApprovalDecided.type, ApprovalDecided)

    @hookimpl(tryfirst=True)
    async def dsh_tools_execute(
        self, execution: ToolExecution, call_next: Callable[[ToolExecution], Awaitable[ToolOutcome]]
    ) -> ToolOutcome:
        harness = self._require_harness()
        tool = harness.tools.get(execution.name)
        if tool is None:  # nothing would run: the registry answers UNKNOWN_TOOL
            return await call_next(execution)
        config = mode_of(harness.config.section(SECTION, PermissionsConfig), execution.agent)
        decision = decide(
            config, tool.name, tool.effect, _arguments(execution), execution.workspace
        )
        if decision.action == "ask":
            decision = await self._ask(harness, execution, decision)
        allowed = decision.action == "allow"
        _append(
            execution,
            ApprovalDecided(execution.call_id, tool.name, allowed, decision.by, decision.reason),
        )
        if not allowed:
            log.info("tool call denied", tool=tool.name, by=decision.by, reason=decision.reason)
            return ToolOutcome.error("DENIED", denial(decision, tool.name))
        return await call_next(execution)

    @hookimpl
    def dsh_agent_request(
        self, agent: Agent, turn: int, step: int, request: LlmRequest
    ) -> LlmRequest | None:
        """In plan mode the model is told that it plans, and how its plan is carried out."""
        config = self._require_harness().config.section(SECTION, PermissionsConfig)
        if mode_of(config, agent).mode != "plan":
            return None
        system = f"{request.system}\n\n{PLAN_NOTE}" if request.system else PLAN_NOTE
        return evolve(request, system=system)

    async def _ask(self, harness: Harness, execution: ToolExecution, asking: Decision) -> Decision:
        data = ApprovalAsked(execution.call_id, execution.name, execution.arguments, asking.reason)
        _append(execution, data)
        approved = await harness.hooks.tools_approve(execution, asking.reason)
        return Decision("allow" if approved else "deny", "approver", asking.reason)

    def describe_tool(self, name: str, effect: Effect) -> str:
        """What this policy does with calls of tool ``name`` (``dsh tools`` shows it)."""
        config = self._require_harness().config.section(SECTION, PermissionsConfig)
        return summary(config, name, effect)

    def _require_harness(self) -> Harness:
        if self._harness is None:
            raise DshError("the permissions plugin is not registered with a harness")
        return self._harness


def mode_of(config: PermissionsConfig, agent: Agent | None) -> PermissionsConfig:
    """``config`` in the agent's current mode: the last ``permissions/mode`` of its session
    (``agent.set_permission_mode``, ``/plan``, ``/approve``), else the configured one."""
    if agent is None:
        return config
    # Per tool call: the latest mode change, without building the chunk events on the way.
    last = next(agent.session.events.select(PermissionModeChange, reverse=True), None)
    if last is None:
        return config
    change = last.data
    assert isinstance(change, PermissionModeChange)  # what select() gives
    if change.mode not in PERMISSION_MODES:  # a log written by a build that knows more modes
        raise DshError(
            f"the session is in permission mode {change.mode!r}, which this build does not "
            f"know: set one of {PERMISSION_MODES} with agent.set_permission_mode"
        )
    return evolve(config, mode=change.mode)


def _arguments(execution: ToolExecution) -> Any:
    # Arguments that are not JSON have no subject; the registry refuses them after the policy.
    try:
        return execution.parsed_arguments()
    except ValueError:
        return {}


def _append(execution: ToolExecution, data: ApprovalAsked | ApprovalDecided) -> None:
    if execution.agent is not None:
        execution.agent.session.append(data)
