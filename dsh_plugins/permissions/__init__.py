"""``permissions``: the policy that allows, denies or asks before a tool call runs.

A ``dsh_tools_execute`` middleware (``tryfirst``, so it wraps every other middleware): it
classifies each call by the tool's declared ``effect`` and the rules and mode of config section
``permissions`` (see :mod:`dsh_plugins.permissions.policy`). ``ask`` goes to
``harness.hooks.tools_approve(execution, reason)``, which a host answers; nobody answering means
no — unless ``approval = "defer"``, which parks the call until ``agent.decide`` (in this process
or any that resumes the session) decides it; ``approval = "deny"`` refuses without asking.
Every decision is appended to the agent's session: ``approval/asked`` when a host is asked,
``approval/decided`` always (for a parked call, when it is decided). A denied call does not
run: its result is a ``DENIED`` error that tells the model why and what the user could change.

A sub-agent (``agent_loop.create(..., parent=...)``, the ``task`` tool) is judged in the
strictest of its own mode and the current modes of the agents above it (:func:`effective_mode`),
so it never runs in a laxer mode than its parent. The plugin keeps each session's latest logged
mode as events are appended (``dsh_session_created``, ``dsh_session_event``), so that finding a
mode does not read the whole log at every call: see :mod:`dsh_plugins.permissions._modes`. See
``docs/plugins/permissions.md``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias, cast

from attrs import evolve, frozen

from dsh.plugin import (
    PERMISSION_MODE,
    PERMISSION_MODES,
    DshError,
    Effect,
    LlmRequest,
    ToolExecution,
    ToolOutcome,
    Value,
    for_events,
    get_logger,
    hookimpl,
)
from dsh_plugins.permissions._decisions import Decisions
from dsh_plugins.permissions._modes import ModeTracker, scan_mode
from dsh_plugins.permissions.policy import (
    Decision,
    Mode,
    PermissionsConfig,
    Rule,
    denial,
    summary,
)

if TYPE_CHECKING:
    from dsh.plugin import (
        Agent,
        ApprovalDecided,
        Family,
        Harness,
        PermissionModeChange,
        Session,
        SessionEvent,
    )

__all__ = [
    "ASKED",
    "ApprovalAsked",
    "LoggedMode",
    "PermissionsConfig",
    "PermissionsPlugin",
    "Rule",
    "effective_mode",
    "own_mode",
]

SECTION = "permissions"
#: What the model is told in plan mode.
PLAN_NOTE = (
    "You are in plan mode: only read-only tools run. Investigate as much as you need, then "
    "answer with a concrete, step-by-step plan. Change nothing yet: the user reviews the plan "
    "and approves it before it is carried out."
)
ASKED = "approval/asked"
#: Modes from the strictest: ``PERMISSION_MODES`` lists them in that order.
_STRICTNESS: dict[str, int] = {mode: rank for rank, mode in enumerate(PERMISSION_MODES)}
#: Where :func:`effective_mode` reads the mode a session logged last (``None``: none).
LoggedMode: TypeAlias = "Callable[[Session], str | None]"

log = get_logger("dsh.permissions")


@frozen(repr=False, eq=False)
class ApprovalAsked(Value):
    """Data of ``approval/asked``: the host is asked whether call ``call_id`` (of tool
    ``name``, with ``arguments``) may run, and why it is asked."""

    type: ClassVar[str] = ASKED
    call_id: str
    name: str
    arguments: str
    reason: str


class PermissionsPlugin:
    """The built-in permission policy."""

    def __init__(self) -> None:
        self._harness: Harness | None = None
        self._modes = ModeTracker()
        self._decisions = Decisions()

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

    @hookimpl(tryfirst=True)
    async def dsh_tools_execute(
        self, execution: ToolExecution, call_next: Callable[[ToolExecution], Awaitable[ToolOutcome]]
    ) -> ToolOutcome:
        harness = self._require_harness()
        tool = harness.tools.get(execution.name)
        if tool is None or execution.approved:
            # Nothing would run (the registry answers UNKNOWN_TOOL), or the call was parked
            # and then allowed: its decision is logged already.
            return await call_next(execution)
        configured = harness.config.section(SECTION, PermissionsConfig)
        mode, source = effective_mode(configured, execution.agent, harness.family, self._modes.mode)
        decision = self._decisions.decide(
            configured,
            mode,
            tool.name,
            tool.effect,
            lambda: _arguments(execution),
            lambda: execution.workspace,
            source,
        )
        if decision.action == "ask":
            asking = decision
            decision = await self._ask(harness, execution, asking, configured.approval)
            if decision.by == "nobody" and configured.approval == "defer" and execution.agent:
                from dsh.plugin import ApprovalNeeded  # imported with the parked calls

                timeout_s = configured.approval_timeout_s
                return ToolOutcome.deferred(ApprovalNeeded(asking.by, asking.reason, timeout_s))
        allowed = decision.action == "allow"
        from dsh.plugin import ApprovalDecided  # defined when first needed

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
        harness = self._require_harness()
        config = harness.config.section(SECTION, PermissionsConfig)
        if effective_mode(config, agent, harness.family, self._modes.mode)[0] != "plan":
            return None
        system = f"{request.system}\n\n{PLAN_NOTE}" if request.system else PLAN_NOTE
        return evolve(request, system=system)

    @hookimpl
    def dsh_session_created(self, session: Session) -> None:
        self._modes.created(session)

    @hookimpl
    @for_events(PERMISSION_MODE)
    def dsh_session_event(self, session: Session, event: SessionEvent) -> None:
        change = cast("PermissionModeChange", event.data)  # what for_events lets through
        self._modes.appended(session, event.seq, change.mode)

    @hookimpl
    def dsh_session_closed(self, session: Session) -> None:
        self._modes.closed(session)

    async def _ask(
        self, harness: Harness, execution: ToolExecution, asking: Decision, approval: str
    ) -> Decision:
        """Ask a host (unless ``approval`` is ``deny``); nobody answering is ``nobody``'s no."""
        if approval == "deny":
            return Decision("deny", "setting", asking.reason)
        data = ApprovalAsked(execution.call_id, execution.name, execution.arguments, asking.reason)
        _append(execution, data)
        approved = await harness.hooks.tools_approve(execution, asking.reason)
        if approved is None:
            return Decision("deny", "nobody", asking.reason)
        return Decision("allow" if approved else "deny", "approver", asking.reason)

    def describe_tool(self, name: str, effect: Effect) -> str:
        """What this policy does with calls of tool ``name`` (``dsh tools`` shows it)."""
        config = self._require_harness().config.section(SECTION, PermissionsConfig)
        return summary(config, name, effect)

    def _require_harness(self) -> Harness:
        if self._harness is None:
            raise DshError("the permissions plugin is not registered with a harness")
        return self._harness


def effective_mode(
    config: PermissionsConfig,
    agent: Agent | None,
    family: Family,
    logged: LoggedMode = scan_mode,
) -> tuple[Mode, str | None]:
    """The mode the agent's tool calls are judged in, and the id of the agent above it that
    mode comes from (``None``: its own). An agent's own mode is the last ``permissions/mode``
    of its session (``agent.set_permission_mode``, ``/plan``, ``/approve``, a profile's
    ``permission_mode``), else the configured one. A sub-agent (one ``family``, the harness's,
    knows a parent of) runs under the strictest of its own mode and those of every agent above
    it as they are now: a parent switched to ``read-only`` holds its running children to it.
    ``logged`` finds a session's last logged mode: by default it reads the log back from its
    end; the plugin passes its own, which keeps it as events are appended."""
    if agent is None:
        return config.mode, None
    mode, source = own_mode(config, agent, logged), None
    above = family.parent_of(agent)
    while above is not None:
        theirs = own_mode(config, above, logged)
        if _STRICTNESS[theirs] < _STRICTNESS[mode]:
            mode, source = theirs, above.id
        above = family.parent_of(above)
    return mode, source


def own_mode(config: PermissionsConfig, agent: Agent, logged: LoggedMode = scan_mode) -> Mode:
    """The agent's own mode: the last ``permissions/mode`` of its session (as ``logged`` finds
    it), else ``config``'s."""
    mode = logged(agent.session)
    if mode is None:
        return config.mode
    if mode not in PERMISSION_MODES:  # a log written by a build that knows more modes
        raise DshError(
            f"the session of agent {agent.id!r} is in permission mode {mode!r}, which "
            f"this build does not know: set one of {PERMISSION_MODES} with "
            "agent.set_permission_mode"
        )
    return mode


def _arguments(execution: ToolExecution) -> Any:
    # Arguments that are not JSON have no subject; the registry refuses them after the policy.
    try:
        return execution.parsed_arguments()
    except ValueError:
        return {}


def _append(execution: ToolExecution, data: ApprovalAsked | ApprovalDecided) -> None:
    if execution.agent is not None:
        execution.agent.session.append(data)
