"""The decisions that do not depend on a call's arguments, remembered.

:func:`~dsh_plugins.permissions.policy.decide` is the reference: what every answer of
:class:`Decisions` equals. It reads a call's arguments (parsed from their JSON) only for a
rule whose tool glob matches the tool and whose ``match`` is not ``*`` (the rule looks at the
call's subject), and for a write in ``workspace-write`` mode (is its ``path`` inside the
workspace?). Every other call of a tool is decided by the config, the mode, the tool's name and
its effect alone, and the policy runs before every tool call: :class:`Decisions` decides such a
call once and gives the same :class:`~dsh_plugins.permissions.policy.Decision` for the next,
without parsing its arguments or building its reason again.

* What is remembered is keyed by the tool's name, its effect and the mode, and holds for one
  config value: a new one (the configuration was loaded again) forgets everything.
* A sub-agent judged in the mode of an agent above it (``inherited_from``) is decided afresh
  at every call: its reason names that agent, and agents come and go without end.
* A call whose decision reads its arguments is decided afresh, its arguments parsed then.

``tests/plugins/permissions/test_decisions.py`` checks, with Hypothesis, that the two agree
for any configuration, mode, tools, effects and arguments, call after call.
"""

from __future__ import annotations

from collections.abc import Callable
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from attrs import evolve

from dsh.plugin import Effect
from dsh_plugins.permissions.policy import Decision, Mode, PermissionsConfig, decide

__all__ = ["Decisions", "reads_arguments"]


def reads_arguments(config: PermissionsConfig, mode: Mode, tool: str, effect: Effect) -> bool:
    """Whether :func:`decide` (with ``config`` in ``mode``) looks at the arguments of a call of
    ``tool``, whose effect is ``effect``: its decision may then differ from call to call."""
    if mode == "plan" and effect != "read":
        return False  # denied before any rule is read
    for rule in config.rules:
        if fnmatchcase(tool, rule.tool):
            # The first rule for the tool decides every call (``*``), or reads the subject.
            return rule.match != "*"
    return effect == "write" and mode == "workspace-write"


class Decisions:
    """:func:`decide` for the policy's calls, each decision that does not depend on the call's
    arguments made once per config value, tool, effect and mode."""

    def __init__(self) -> None:
        self._config: PermissionsConfig | None = None
        #: (tool, effect, mode) -> the decision, or ``None``: it reads the arguments.
        self._known: dict[tuple[str, str, str], Decision | None] = {}

    def decide(
        self,
        config: PermissionsConfig,
        mode: Mode,
        tool: str,
        effect: Effect,
        arguments: Callable[[], Any],
        workspace: Callable[[], Path],
        inherited_from: str | None = None,
    ) -> Decision:
        """What ``decide(config in mode, tool, effect, arguments(), workspace, inherited_from=
        inherited_from)`` gives, ``arguments`` called only when the decision reads them."""
        if config is not self._config:
            self._config, self._known = config, {}
        if inherited_from is None:
            key = (tool, effect, mode)
            try:
                known = self._known[key]
            except KeyError:
                independent = not reads_arguments(config, mode, tool, effect)
                known = (
                    _decide(config, mode, tool, effect, {}, workspace, None)
                    if independent
                    else None
                )
                self._known[key] = known
            if known is not None:
                return known
        return _decide(config, mode, tool, effect, arguments(), workspace, inherited_from)


def _decide(
    config: PermissionsConfig,
    mode: Mode,
    tool: str,
    effect: Effect,
    args: Any,
    workspace: Callable[[], Path],
    inherited_from: str | None,
) -> Decision:
    judged = config if mode == config.mode else evolve(config, mode=mode)
    return decide(judged, tool, effect, args, workspace, inherited_from=inherited_from)
