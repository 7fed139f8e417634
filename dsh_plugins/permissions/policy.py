"""The permission policy as a pure function: a tool call in, ``allow`` / ``deny`` / ``ask`` out.

Rules are checked first, in order, and the first that matches decides. Without a matching
rule, the mode decides by what the tool declares it does (its ``effect``):

================  ======  =========  =======  =====
mode              read    write      execute  other
================  ======  =========  =======  =====
plan              allow   deny       deny     deny
read-only         allow   deny       deny     ask
workspace-write   allow   allow (1)  ask      allow (2)
full              allow   allow      allow    allow
================  ======  =========  =======  =====

In ``plan`` mode no rule can let anything but a read run: the model is planning, and its plan
is approved (``/approve``, or ``agent.set_permission_mode``) before anything changes.

(1) a write whose ``path`` argument lies outside the workspace asks.
(2) an undeclared tool was registered on purpose by the host or an installed plugin, and the
default mode is for working: embedding apps' own tools run unprompted. ``read-only`` asks.

A rule's ``tool`` is a glob on the tool name; its ``match`` is a glob on the call's *subject*:
the first string argument among ``command``, ``path``, ``pattern`` and ``url`` (so the command
of ``shell``, the path of ``write_file``, the pattern of ``glob``). Globs use ``*``, ``?`` and
``[...]``, and ``*`` matches anything, spaces and slashes included.

Commands (tools whose effect is ``execute``) are matched as words, warily (see
:mod:`dsh_plugins.permissions.commands`): an ``allow`` rule only allows a simple command (no
``;``, ``&``, ``|``, redirection, subshell or substitution) that it matches word for word as
written, without a wrapper, path or assignment in front and without an option that runs other
programs or writes files (``git -c``, ``find -exec``, ``sed -i``...); a ``deny`` or ``ask``
rule matches if any simple command inside, looked through wrappers and paths, matches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

from attrs import field, frozen
from attrs.validators import optional

from dsh.plugin import Effect, ToolError, Value, at_least, confine

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
    "summary",
]

Mode = Literal["plan", "read-only", "workspace-write", "full"]
Action = Literal["allow", "deny", "ask"]
Approval = Literal["ask", "deny", "defer"]

#: The arguments that name what a call acts on, in the order they are looked for.
SUBJECT_ARGUMENTS = ("command", "path", "pattern", "url")

_MODES: dict[str, dict[str, Action]] = {
    "plan": {"read": "allow", "write": "deny", "execute": "deny", "other": "deny"},
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
#: What an MCP tool (``mcp__<server>__<tool>``) of effect ``execute`` does: its server did not
#: mark it read-only or non-destructive, which is not to say that it runs commands.
_MCP_EXECUTES = "may change anything (its MCP server does not mark it read-only or non-destructive)"


@frozen(repr=False, eq=False)
class Rule(Value):
    """One rule, e.g. ``{tool = "shell", match = "git status", action = "allow"}``: calls of a tool
    whose name matches the glob ``tool``, and whose subject (its ``command``, ``path``,
    ``pattern`` or ``url`` argument) matches the glob ``match``, get ``action``. For commands,
    ``match`` is matched word by word (a last word ``*`` stands for any rest): an ``allow``
    rule allows only a simple command as written, without options that run programs or write
    files; a ``deny`` or ``ask`` rule matches any command inside, through wrappers and paths."""

    action: Action
    tool: str = "*"
    match: str = "*"

    def __str__(self) -> str:
        return f'{{tool = "{self.tool}", match = "{self.match}", action = "{self.action}"}}'


@frozen(repr=False, eq=False)
class PermissionsConfig(Value):
    """Section ``permissions``. ``rules`` are checked in order and the first that matches a
    call decides; without one, ``mode`` decides by what the tool declares it does: in
    ``plan`` and ``read-only`` reads run, writes and commands are denied (``plan`` denies
    undeclared tools too, whatever the rules say); in ``workspace-write`` reads and
    writes inside the workspace run, commands ask; in ``full`` everything runs. Tools that
    declare no effect run, except in ``read-only``, where they ask. Without this plugin the core
    reads ``mode`` alone and denies writes and commands unless it is ``full``.

    ``approval`` says what a call that asks becomes: ``ask`` asks the host (``dsh chat``
    asks you; a headless run has nobody to ask and denies), ``deny`` denies without asking,
    ``defer`` asks the host and, when nobody answers, parks the turn until ``agent.decide``
    or ``dsh approvals allow|deny`` decides (in any process that resumes the session).
    ``approval_timeout_s``: a parked call still undecided after this many seconds is denied
    (code ``APPROVAL_TIMEOUT``); unset, it waits for ever."""

    mode: Mode = "workspace-write"
    rules: tuple[Rule, ...] = ()
    approval: Approval = "ask"
    approval_timeout_s: float | None = field(default=None, validator=optional(at_least(0)))


@frozen(repr=False, eq=False)
class Decision(Value):
    """What to do with a call, who decided (``rule``, ``mode``, ``approver``, or ``nobody``
    when no host could ask) and why."""

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
    config: PermissionsConfig,
    tool: str,
    effect: Effect,
    args: Any,
    workspace: Path | Callable[[], Path],
    *,
    inherited_from: str | None = None,
) -> Decision:
    """The decision for calling ``tool`` (which declares ``effect``) with ``args``.
    ``workspace`` is the directory writes are judged against, or a function giving it, called
    only for a decision that needs it (resolving a directory's symbolic links costs a system
    call per component). ``inherited_from`` names the agent above a sub-agent whose mode
    ``config.mode`` is (see ``effective_mode``): the reason says so."""
    if config.mode == "plan" and effect != "read":
        who = "the agent is" if inherited_from is None else f"agent {inherited_from!r} above it is"
        return Decision("deny", "plan", f"{tool} {_does(tool, effect)} and {who} planning")
    subject = subject_of(args)
    refusals: list[str] = []
    for number, rule in enumerate(config.rules, 1):
        if not fnmatchcase(tool, rule.tool):
            continue
        refusal = _refusal(rule, effect, subject)
        if refusal is None:
            return Decision(rule.action, "rule", f"rule {number} of [permissions], {rule}, applies")
        if refusal:
            refusals.append(f"rule {number} does not allow it: {refusal}")
    decision = _by_mode(config, tool, effect, args, workspace, inherited_from)
    if refusals:
        reason = f"{decision.reason} ({'; '.join(refusals)})"
        return Decision(decision.action, decision.by, reason)
    return decision


def _by_mode(
    config: PermissionsConfig,
    tool: str,
    effect: Effect,
    args: Any,
    workspace: Path | Callable[[], Path],
    inherited_from: str | None,
) -> Decision:
    action = _MODES[config.mode][effect]
    reason = f'{tool} {_does(tool, effect)} and the permissions mode is "{config.mode}"'
    if inherited_from is not None:
        reason += f" (the mode of agent {inherited_from!r}, which its sub-agents cannot exceed)"
    if action == "allow" and effect == "write" and config.mode == "workspace-write":
        outside = _outside_workspace(args, workspace() if callable(workspace) else workspace)
        if outside is not None:
            return Decision("ask", "mode", f"{tool} would write outside the workspace: {outside}")
    return Decision(action, "mode", reason)


def _does(tool: str, effect: Effect) -> str:
    if effect == "execute" and tool.startswith("mcp__"):
        return _MCP_EXECUTES
    return _DOES[effect]


def denial(decision: Decision, tool: str) -> str:
    """What a denied call tells the model: why, and what the user could change."""
    if decision.by in ("approver", "nobody", "setting"):
        why = {
            "approver": "the user declined it",
            "nobody": "nobody could be asked (a non-interactive run)",
            "setting": 'approval = "deny" refuses every call that needs approval',
        }[decision.by]
        return (
            f"{tool} needs approval ({decision.reason}) and was not approved: {why}. Do not "
            "retry this call unless the user asks for it; the user can allow it with a "
            "[permissions] rule or mode."
        )
    if decision.by == "plan":
        return (
            f"not run: {decision.reason} (plan mode: only read-only tools run). Do not retry "
            "it now: put this step in your plan, which the user approves before it is carried "
            "out."
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


def _refusal(rule: Rule, effect: Effect, subject: str) -> str | None:
    """``None`` if ``rule`` (whose tool glob matched) applies to the call; else why not: an
    empty string when its ``match`` does not match, a reason when it matches an allow rule's
    words but the call uses a form the rule cannot vouch for."""
    if rule.match == "*":
        return None
    if effect != "execute":
        return None if fnmatchcase(subject, rule.match) else ""
    # Imported by the first command a rule judges: a harness whose rules never judge a command
    # line never loads the command parser.
    from dsh_plugins.permissions import commands

    pattern = commands.words(rule.match) or rule.match.split()
    if rule.action != "allow":
        parts = [subject.strip(), *(part.strip() for part in commands.split_compound(subject))]
        found = any(fnmatchcase(part, rule.match) for part in parts if part) or any(
            commands.matches_words(pattern, argv) for argv in commands.simple_commands(subject)
        )
        return None if found else ""
    argv = commands.words(subject)
    if commands.compound(subject) or not argv or not commands.matches_words(pattern, argv):
        return ""
    return commands.allow_refusal(pattern, argv)


def _outside_workspace(args: Any, workspace: Path) -> str | None:
    path = args.get("path") if isinstance(args, Mapping) else None
    if not isinstance(path, str):
        return None
    try:
        confine(path, workspace)
    except ToolError:
        return path
    return None


def summary(config: PermissionsConfig, tool: str, effect: Effect) -> str:
    """What the policy does with calls of ``tool`` before seeing their arguments (for ``dsh
    tools``): the first rule for every call of it, else the mode; rules that look at the
    arguments are named, since they may decide some calls."""
    if config.mode == "plan" and effect != "read":
        return "deny (plan mode)"
    conditional: list[str] = []
    for number, rule in enumerate(config.rules, 1):
        if not fnmatchcase(tool, rule.tool):
            continue
        if rule.match == "*":
            return _and_rules(f"{rule.action} (rule {number})", conditional)
        conditional.append(str(number))
    action = _MODES[config.mode][effect]
    verdict = f"{action} ({config.mode} mode)"
    if action == "allow" and effect == "write" and config.mode == "workspace-write":
        verdict = f"allow in the workspace, ask outside ({config.mode} mode)"
    return _and_rules(verdict, conditional)


def _and_rules(verdict: str, numbers: list[str]) -> str:
    if not numbers:
        return verdict
    rules = "rule" if len(numbers) == 1 else "rules"
    return f"{verdict}; {rules} {', '.join(numbers)} may decide some calls"
