"""The permission policy as a pure function: a tool call in, ``allow`` / ``deny`` / ``ask`` out.

Rules are checked first, in order, and the first that matches decides. Without a matching
rule, the mode decides by what the tool declares it does (its ``effect``):

================  ======  =========  =======  =====
mode              read    write      execute  other
================  ======  =========  =======  =====
read-only         allow   deny       deny     ask
workspace-write   allow   allow (1)  ask      allow (2)
full              allow   allow      allow    allow
================  ======  =========  =======  =====

(1) a write whose ``path`` argument lies outside the workspace asks.
(2) an undeclared tool was registered on purpose by the host or an installed plugin, and the
default mode is for working: embedding apps' own tools run unprompted. ``read-only`` asks.

A rule's ``tool`` is a glob on the tool name; its ``match`` is a glob on the call's *subject*:
the first string argument among ``command``, ``path``, ``pattern`` and ``url`` (so the command
of ``shell``, the path of ``write_file``, the pattern of ``glob``). Globs use ``*``, ``?`` and
``[...]``, and ``*`` matches anything, spaces and slashes included.

Commands (tools whose effect is ``execute``) are matched warily: an ``allow`` rule only allows a
simple command (no ``;``, ``&``, ``|``, redirection, subshell or substitution) that it matches
as a whole, so ``git *`` never allows ``git log; rm -rf ~``; a ``deny`` or ``ask`` rule matches
if the whole command or any simple command inside it matches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

from attrs import frozen

from dsh.tools import Effect, ToolError, confine

__all__ = [
    "SUBJECT_ARGUMENTS",
    "Action",
    "Decision",
    "Mode",
    "PermissionsConfig",
    "Rule",
    "decide",
    "denial",
    "subject_of",
]

Mode = Literal["read-only", "workspace-write", "full"]
Action = Literal["allow", "deny", "ask"]

#: The arguments that name what a call acts on, in the order they are looked for.
SUBJECT_ARGUMENTS = ("command", "path", "pattern", "url")

_MODES: dict[str, dict[str, Action]] = {
    "read-only": {"read": "allow", "write": "deny", "execute": "deny", "other": "ask"},
    "workspace-write": {"read": "allow", "write": "allow", "execute": "ask", "other": "allow"},
    "full": {"read": "allow", "write": "allow", "execute": "allow", "other": "allow"},
}
_DOES = {
    "read": "only reads",
    "write": "changes files",
    "execute": "runs commands",
    "other": "does something dsh cannot classify",
}
_COMPOUND = re.compile(r"&&|\|\||\$\(|[;&|<>()`{}\n]")


@frozen
class Rule:
    """One rule, e.g. ``{tool = "shell", match = "git *", action = "allow"}``: calls of a tool
    whose name matches the glob ``tool``, and whose subject (its ``command``, ``path``,
    ``pattern`` or ``url`` argument) matches the glob ``match``, get ``action``. An ``allow``
    rule for a command allows only a simple command (no ``;``, ``&``, ``|``, redirection or
    substitution); a ``deny`` or ``ask`` rule also matches any command inside a compound one."""

    action: Action
    tool: str = "*"
    match: str = "*"

    def __str__(self) -> str:
        return f'{{tool = "{self.tool}", match = "{self.match}", action = "{self.action}"}}'


@frozen
class PermissionsConfig:
    """Section ``permissions``. ``rules`` are checked in order and the first that matches a
    call decides; without one, ``mode`` decides by what the tool declares it does: in
    ``read-only`` reads run, writes and commands are denied; in ``workspace-write`` reads and
    writes inside the workspace run, commands ask; in ``full`` everything runs. Tools that
    declare no effect ask in every mode but ``full``."""

    mode: Mode = "workspace-write"
    rules: tuple[Rule, ...] = ()


@frozen
class Decision:
    """What to do with a call, who decided (``rule``, ``mode`` or ``approver``) and why."""

    action: Action
    by: str
    reason: str


def subject_of(args: Any) -> str:
    """The string a rule's ``match`` is checked against (empty if the call has none)."""
    if isinstance(args, Mapping):
        for name in SUBJECT_ARGUMENTS:
            if isinstance(args.get(name), str):
                return str(args[name])
    return ""


def decide(
    config: PermissionsConfig, tool: str, effect: Effect, args: Any, workspace: Path
) -> Decision:
    """The decision for calling ``tool`` (which declares ``effect``) with ``args``."""
    subject = subject_of(args)
    for number, rule in enumerate(config.rules, 1):
        if _matches(rule, tool, effect, subject):
            return Decision(rule.action, "rule", f"rule {number} of [permissions], {rule}, applies")
    action = _MODES[config.mode][effect]
    reason = f'{tool} {_DOES[effect]} and the permissions mode is "{config.mode}"'
    if action == "allow" and effect == "write" and config.mode == "workspace-write":
        outside = _outside_workspace(args, workspace)
        if outside is not None:
            return Decision("ask", "mode", f"{tool} would write outside the workspace: {outside}")
    return Decision(action, "mode", reason)


def denial(decision: Decision, tool: str) -> str:
    """What a denied call tells the model: why, and what the user could change."""
    if decision.by == "approver":
        return (
            f"{tool} needs approval ({decision.reason}) and was not approved: the user declined, "
            "or nobody could be asked (a non-interactive run). Do not retry this call unless "
            "the user asks for it; the user can allow it with a [permissions] rule or mode."
        )
    if decision.by == "rule":
        return (
            f"permission denied: {decision.reason}. Do not retry this call; the user can "
            "change the rules in the [permissions] configuration."
        )
    return (
        f"permission denied: {decision.reason}, which does not allow it. Do not retry this "
        'call; the user can choose another [permissions] mode ("workspace-write" or "full") or '
        f'add a rule such as {{tool = "{tool}", action = "allow"}}.'
    )


def _matches(rule: Rule, tool: str, effect: Effect, subject: str) -> bool:
    if not fnmatchcase(tool, rule.tool):
        return False
    if rule.match == "*":
        return True
    if effect != "execute":
        return fnmatchcase(subject, rule.match)
    if rule.action == "allow":
        return not _COMPOUND.search(subject) and fnmatchcase(subject.strip(), rule.match)
    parts = [subject.strip(), *(part.strip() for part in _COMPOUND.split(subject))]
    return any(fnmatchcase(part, rule.match) for part in parts if part)


def _outside_workspace(args: Any, workspace: Path) -> str | None:
    path = args.get("path") if isinstance(args, Mapping) else None
    if not isinstance(path, str):
        return None
    try:
        confine(path, workspace)
    except ToolError:
        return path
    return None
