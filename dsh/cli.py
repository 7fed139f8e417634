"""The ``dsh`` command line. Core commands: ``plugins``, ``hooks``, ``config``, ``sessions``,
``approvals``;
plugins add more (``demo``, ``mock-server``, ...) through ``dsh_register_commands``."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import inspect
import itertools
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from typing import Any

from dsh._log import configure_logging
from dsh.app import _aliases as aliases
from dsh.app import _keys as keys
from dsh.app import _modelcache as modelcache
from dsh.app._configdoc import masked_config
from dsh.app._harness import Command, Harness
from dsh.app._userconfig import UserConfigError
from dsh.hooks._caller import HOOK_STYLES
from dsh.hooks._entrypoints import entry_points
from dsh.hooks._loading import ENTRY_POINT_GROUP
from dsh.llm._service import ANY_MODEL, ModelInfo
from dsh.loop import _recovery as recovery
from dsh.loop._family import family_lines
from dsh.session._rewind import changed_files, rewind, shell_tools, turn_diff
from dsh.session._session import (
    Session,
    SessionBusy,
    SessionConflict,
    agent_id_of,
    error_messages,
)
from dsh.session._text import brief, describe, outcome
from dsh.session._verify import verify
from dsh.values._agent import AgentOptions
from dsh.values._approval import AlreadyDecided, PendingApproval, pending_in
from dsh.values._config import find_config
from dsh.values._errors import DshError, HookError, LlmError
from dsh.values._events import (
    AssistantChunk,
    AssistantMessage,
    ErrorEvent,
    SessionEvent,
    TurnCompleted,
    TurnEnd,
    TurnStart,
)
from dsh.values._rare_events import ApprovalDecided

__all__ = ["main"]

#: The distribution dsh itself ships in: its plugins are "built-in".
_OWN_DISTRIBUTION = "dsh-harness"


def _plugins(harness: Harness, args: argparse.Namespace) -> int:
    for name in harness.plugins.names():
        info = harness.plugins.info.get(name)
        dist = f"{info.distribution} {info.version}" if info and info.distribution else "(host)"
        print(f"{name:24} {dist}")
        # A plugin may say more about itself (the mcp plugin lists its configured servers).
        details: Any = getattr(harness.plugins.get(name), "plugin_details", None)
        for line in details(harness) if details is not None else ():
            print(f"{'':24} {line}")
    installed = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for name in sorted(harness.plugins.disabled):
        known = "" if name in installed else ", but no installed plugin has this name"
        print(f"{name:24} disabled (DSH_DISABLE_PLUGINS){known}")
    for failure in harness.plugins.failures:
        print(f"{failure.name:24} {failure.distribution}  FAILED: {failure.error}")
    return 1 if harness.plugins.failures else 0


def _tools(harness: Harness, args: argparse.Namespace) -> int:
    """Every tool, who provides it, what it does and what the permission policy does with it.

    The harness is started first: plugins register some tools only then (an MCP server's tools
    exist once the server runs)."""
    return asyncio.run(_started_tools(harness))


async def _started_tools(harness: Harness) -> int:
    async with harness:
        return _list_tools(harness)


def _list_tools(harness: Harness) -> int:
    names = harness.tools.names()
    if not names:
        print("no tools: no loaded plugin registers any (see 'dsh plugins')")
        return 0
    rows: list[tuple[str, str, str, str]] = []
    for name in names:
        tool = harness.tools.get(name)
        assert tool is not None  # listed by the registry itself
        source = _tool_source(harness, harness.tools.owner(name) or "host")
        rows.append((name, source, tool.effect, _policy(harness, name, tool.effect)))
    # Columns as wide as their longest value (an MCP tool's name can be 64 characters).
    named = max([16, *(len(row[0]) for row in rows)])
    sourced = max([28, *(len(row[1]) for row in rows)])
    print(f"{'TOOL':{named}} {'SOURCE':{sourced}} {'EFFECT':8} PERMISSION")
    for name, source, effect, permission in rows:
        print(f"{name:{named}} {source:{sourced}} {effect:8} {permission}")
    return 0


def _tool_source(harness: Harness, owner: str) -> str:
    info = harness.plugins.info.get(owner)
    if info is None or info.distribution is None:
        return "host" if owner == "host" else f"plugin {owner} (host)"
    if info.distribution == _OWN_DISTRIBUTION:
        return f"built-in ({owner})"
    return f"plugin {owner} ({info.distribution})"


def _policy(harness: Harness, name: str, effect: str) -> str:
    """What the first loaded plugin with ``describe_tool`` (a permission policy) says."""
    for plugin_name in harness.plugins.names():
        describe: Any = getattr(harness.plugins.get(plugin_name), "describe_tool", None)
        if describe is not None:
            return str(describe(name, effect))
    if name in harness.tools.held_back():  # the core fails closed without a policy
        return 'deny (no permission policy is loaded; [permissions] mode = "full" runs it)'
    return "runs (no permission policy is loaded)"


def _hooks(harness: Harness, args: argparse.Namespace) -> int:
    for hook, style in HOOK_STYLES.items():
        impls = ", ".join(harness.plugins.implementers(hook)) or "-"
        print(f"{hook:32} {style:12} {impls}")
    return 0


def _config(harness: Harness, args: argparse.Namespace) -> int:
    if not args.dump:
        print("sections: " + ", ".join(harness.config.sections()))
        return 0
    # Secrets masked (see dsh.app._configdoc.masked_config), so a dump is safe to share.
    print(json.dumps(masked_config(harness.config), indent=2, default=str))
    return 0


# -- sessions --------------------------------------------------------------------------------


class _NoSession(DshError):
    """The session id names no stored session."""


async def _load(harness: Harness, session_id: str) -> list[SessionEvent]:
    events = await harness.sessions.load(session_id)
    if events is None:
        raise _NoSession(
            f"no stored session {session_id!r} (see 'dsh sessions list'; is a persistence "
            "plugin enabled, and is this the right data directory?)"
        )
    return events


def _print_events(events: Sequence[SessionEvent]) -> None:
    """The events one per line; a run of ``assistant/chunk`` events is one line."""
    position = 0
    while position < len(events):
        event = events[position]
        end = position + 1
        while (
            event.type == AssistantChunk.type
            and end < len(events)
            and events[end].type == event.type
        ):
            end += 1
        if end - position > 1:
            print(f"{event.seq:>6}  {event.type:<20} x{end - position}")
        else:
            print(f"{event.seq:>6}  {event.type:<20} {describe(event)}")
        position = end


async def _sessions_list(harness: Harness, args: argparse.Namespace) -> int:
    """Exit 1 when a session is damaged: listed beside the others, its problem on stderr."""
    found = await harness.sessions.stored(args.query, args.limit)
    if not found:
        print("no stored sessions" + (f" match {args.query!r}" if args.query else ""))
    else:
        print(f"{'SESSION':<32} {'UPDATED':16}  {'EVENTS':>6}  {'MODEL':18} {'LAST TURN':24} TITLE")
    damaged: list[str] = []
    for summary in found:
        # A store may list a damaged session with its problem (persistence_jsonl does); the
        # others' damage shows when the session is read.
        problem: str | None = getattr(summary, "problem", None)
        model = last = "-"
        if not problem:
            try:
                model, last = _last_turn(await harness.sessions.load(summary.id) or [])
            except DshError as exc:
                problem = _message(exc)
        title = brief(str(summary.title or ""), 60)
        if problem:
            last, title = "damaged", "(what is wrong: below)"
            damaged.append(f"dsh sessions list: {summary.id}: {problem}")
        print(
            f"{summary.id:<32} {_when(summary.updated):16}  {summary.events!s:>6}  "
            f"{brief(model, 18):18} {brief(last, 24):24} {title}"
        )
    for line in damaged:
        print(line, file=sys.stderr)
    return 1 if damaged else 0


def _when(stamp: Any) -> str:
    """``stamp`` (seconds since the epoch) as a listing shows it; ``?`` when it is not one (a
    store's damaged record)."""
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def _message(exc: DshError) -> str:
    """What ``exc`` says for the user: a store's own error as it wrote it, without the "plugin
    failed in hook" wrapping (that wording is for a plugin's bug, not for damaged data)."""
    if isinstance(exc, HookError) and isinstance(exc.error, DshError):
        return str(exc.error)
    return str(exc)


def _last_turn(events: Sequence[SessionEvent]) -> tuple[str, str]:
    """The model a session last called and how its last turn ended (``-`` when unknown)."""
    models = (getattr(e.data, "model", None) for e in reversed(events))
    model: str = next((m for m in models if m), "-")
    ends = (outcome(e.data.reason) for e in reversed(events) if isinstance(e.data, TurnEnd))
    return model, next(ends, "-")


async def _sessions_show(harness: Harness, args: argparse.Namespace) -> int:
    events = await _load(harness, args.id)
    turns = sum(isinstance(e.data, TurnStart) for e in events)
    print(f"session {args.id}: {len(events)} events, {turns} turns")
    for line in family_lines(events):
        print(line)
    for line in changed_files(events):
        print(line)
    _print_events(events)
    return 0


async def _sessions_rewind(harness: Harness, args: argparse.Namespace) -> int:
    if args.in_place:
        # Written: take its writer lock (and close a turn a crash left open), as resume does.
        await _load(harness, args.id)
        source = await recovery.reopen(harness.sessions, args.id)
    else:
        # Read, never written, as fork reads it.
        source = Session(args.id, await _load(harness, args.id))
    fork_id = None if args.in_place else await _fork_id(harness, args.id)
    target, report = await rewind(
        harness.sessions,
        source,
        args.to_turn,
        in_place=args.in_place,
        force=args.force,
        shell_tools=shell_tools(harness.tools),
        fork_id=fork_id,
    )
    await harness.sessions.close(target)
    for line in report.lines():
        print(line)
    if not args.in_place:
        print(f"continue with: dsh sessions resume {target.id}")
    return 1 if report.conflicts or report.lost else 0


async def _sessions_diff(harness: Harness, args: argparse.Namespace) -> int:
    for line in turn_diff(await _load(harness, args.id), args.turn):
        print(line)
    return 0


async def _sessions_resume(harness: Harness, args: argparse.Namespace) -> int:
    stored = await _load(harness, args.id)
    queued = recovery.pending_messages(stored)
    model = aliases.resolve(args.model or _last_model(stored) or _default_model(harness))
    what = f"{len(queued)} queued message(s)" if queued else "the prompt"
    if (queued or args.prompt) and not model:
        raise DshError(f"resuming {args.id!r} runs {what}: pass --model")
    if (queued or args.prompt) and not harness.llm.serves(model):
        known = ", ".join(harness.llm.models()) or "none"
        raise DshError(
            f"resuming {args.id!r} runs {what} with model {model!r}, which no adapter serves: "
            f"pass --model (known models: {known})"
        )
    agent = await harness.agent_loop.resume(args.id, AgentOptions(model=model))
    print(f"resumed {args.id}: {len(stored)} stored events; recovered:")
    _print_events(agent.session.events[len(stored) :])
    shown = len(agent.session)
    if args.prompt:
        agent.send(args.prompt)
    await agent.wait_idle()
    ran = agent.session.events[shown:]
    _print_events(ran)
    ends = [e.data.reason for e in ran if isinstance(e.data, TurnEnd)]
    # An error right after a turn's end: that turn's log could not be saved.
    pairs = itertools.pairwise(ran)
    unsaved = any(isinstance(a.data, TurnEnd) and isinstance(b.data, ErrorEvent) for a, b in pairs)
    return 0 if all(isinstance(end, TurnCompleted) for end in ends) and not unsaved else 1


def _last_model(events: Sequence[SessionEvent]) -> str | None:
    """The model that answered last in ``events``, if one did."""
    for event in reversed(events):
        if isinstance(event.data, AssistantMessage) and event.data.model:
            return event.data.model
    return None


def _default_model(harness: Harness) -> str:
    """The model ``dsh run`` and ``dsh chat`` default to (``[terminal_ui] model``), or ``""``
    when no loaded plugin has that section."""
    section = harness.config.dump().get("terminal_ui") or {}
    return str(section.get("model") or "")


async def _fork_id(harness: Harness, source: str) -> str:
    """``<source>-fork-<n>`` with the smallest ``n`` no live or stored session has."""
    n = 1
    while await _taken(harness, f"{source}-fork-{n}"):
        n += 1
    return f"{source}-fork-{n}"


async def _taken(harness: Harness, session_id: str) -> bool:
    live = harness.sessions.get(session_id) is not None
    return live or await harness.sessions.load(session_id) is not None


async def _sessions_fork(harness: Harness, args: argparse.Namespace) -> int:
    events = await _load(harness, args.id)
    # Read, never written: not a live session of the harness, so it takes no writer lock and
    # can be forked while another process writes it.
    source = Session(args.id, events)
    if args.new_id and not args.force and await _taken(harness, args.new_id):
        raise DshError(
            f"session {args.new_id!r} already exists: pick another --id, or pass --force to "
            "replace it with the fork"
        )
    child_id = args.new_id or await _fork_id(harness, args.id)
    child = harness.sessions.fork(source, args.at_seq, child_id)
    await harness.sessions.claim(child)
    try:
        await child.flush()
    except Exception as exc:
        await harness.sessions.close(child)  # given up: not flushed again at exit
        raise DshError(f"cannot store the fork {child.id!r}: {error_messages(exc)}") from exc
    print(f"forked {args.id} at seq {len(child) - 1} as {child.id}")
    return 0


async def _sessions_replay(harness: Harness, args: argparse.Namespace) -> int:
    report = verify(await _load(harness, args.id))
    for mismatch in report.mismatches:
        print(mismatch)
    verdict = "ok" if report.ok else f"{len(report.mismatches)} mismatch(es)"
    print(
        f"{verdict}: {report.verified} message(s) verified, "
        f"{report.unanswered} step(s) without a message"
    )
    return 0 if report.ok else 1


_SESSION_ACTIONS: dict[str, Callable[[Harness, argparse.Namespace], Awaitable[int]]] = {
    "list": _sessions_list,
    "show": _sessions_show,
    "resume": _sessions_resume,
    "fork": _sessions_fork,
    "replay": _sessions_replay,
    "rewind": _sessions_rewind,
    "diff": _sessions_diff,
}


def _sessions(harness: Harness, args: argparse.Namespace) -> int:
    """``dsh sessions list|show|resume|fork|replay|rewind|diff``: exit 2 for an unknown id."""
    if args.action is None:
        args.sessions_parser.print_help()
        return 2
    return asyncio.run(_run_sessions(harness, args))


async def _run_sessions(harness: Harness, args: argparse.Namespace) -> int:
    try:
        async with harness:
            return await _SESSION_ACTIONS[args.action](harness, args)
    except _NoSession as exc:
        print(f"dsh sessions {args.action}: {exc}", file=sys.stderr)
        return 2
    except DshError as exc:
        print(f"dsh sessions {args.action}: {_message(exc)}", file=sys.stderr)
        return 1


def _sessions_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    parser.set_defaults(sessions_parser=parser)
    listing = actions.add_parser("list", help="stored sessions, newest first")
    listing.add_argument("--query", help="only sessions whose id or title contains this")
    listing.add_argument("--limit", type=int, default=20, help="at most this many (default 20)")
    show = actions.add_parser("show", help="the events of a stored session")
    resume = actions.add_parser(
        "resume", help="load a session, close a turn a crash left open, run what was queued"
    )
    resume.add_argument(
        "--model",
        help="the model that answers queued messages and --prompt (default: the one the session "
        "used last, else [terminal_ui] model)",
    )
    resume.add_argument("--prompt", help="a message to send once resumed")
    fork = actions.add_parser("fork", help="store a copy of a session (up to --at-seq)")
    fork.add_argument("--at-seq", type=int, help="the last event to copy (default: all)")
    fork.add_argument("--id", dest="new_id", help="the new session's id (default ID-fork-N)")
    fork.add_argument(
        "--force", action="store_true", help="replace a stored session that has the --id given"
    )
    replay_ = actions.add_parser(
        "replay", help="verify that the logged chunks give the logged messages (exit 1 if not)"
    )
    rewind_ = actions.add_parser(
        "rewind",
        help="put the files the file tools changed since a turn back, and continue in a fork "
        "whose history ends before it",
    )
    rewind_.add_argument(
        "--to-turn", type=int, required=True, metavar="N", help="the turn to rewind to before"
    )
    rewind_.add_argument(
        "--in-place",
        action="store_true",
        help="continue in the same session (it logs the rewind) instead of a fork",
    )
    rewind_.add_argument(
        "--force",
        action="store_true",
        help="also overwrite files changed since by something else (conflicts)",
    )
    diff = actions.add_parser("diff", help="what the file tools changed on disk in a turn")
    diff.add_argument("--turn", type=int, required=True, metavar="N", help="the turn")
    for sub in (show, resume, fork, replay_, rewind_, diff):
        sub.add_argument("id", metavar="ID", help="the session id")


# -- approvals ---------------------------------------------------------------------------------


class _BadInput(DshError):
    """The command line names something that is not there (exit 2)."""


def _approvals(harness: Harness, args: argparse.Namespace) -> int:
    """``dsh approvals [SESSION]`` lists parked calls; ``dsh approvals allow|deny SESSION
    CALL_ID`` decides one and runs the turn on. Exit 2 for bad input (an unknown session or
    call), 1 when the decision could not be made or the turn did not complete."""
    words = list(args.words)
    decides = bool(words) and words[0] in ("allow", "deny")
    wanted = 3 if decides else len(words)
    if len(words) != wanted or (wanted > 1 and not decides):
        print(
            "dsh approvals: usage: dsh approvals [SESSION] | dsh approvals allow|deny SESSION "
            "CALL_ID [--reason TEXT]",
            file=sys.stderr,
        )
        return 2
    return asyncio.run(_run_approvals(harness, args, words))


async def _run_approvals(harness: Harness, args: argparse.Namespace, words: list[str]) -> int:
    try:
        async with harness:
            if words and words[0] in ("allow", "deny"):
                return await _decide(harness, args, words[0] == "allow", words[1], words[2])
            return await _list_approvals(harness, words[0] if words else None, args.limit)
    except (_NoSession, _BadInput) as exc:
        print(f"dsh approvals: {exc}", file=sys.stderr)
        return 2
    except DshError as exc:
        print(f"dsh approvals: {_message(exc)}", file=sys.stderr)
        return 1


async def _list_approvals(harness: Harness, session_id: str | None, limit: int) -> int:
    if session_id is not None:
        found = _pending(session_id, await _load(harness, session_id))
    else:
        found = []
        for summary in await harness.sessions.stored(None, limit):
            try:
                events = await harness.sessions.load(summary.id) or []
            except DshError as exc:  # a damaged session: `dsh sessions list` says what is wrong
                print(f"dsh approvals: {summary.id}: {_message(exc)}", file=sys.stderr)
                continue
            found += _pending(summary.id, events)
    if not found:
        print("no calls wait for approval" + (f" in {session_id}" if session_id else ""))
        return 0
    print(f"{'SESSION':<32} {'CALL':<16} {'TOOL':<16} {'REQUESTED':16}  {'BY':6} ARGUMENTS")
    for pending in found:
        when = _when(pending.requested_at)
        print(
            f"{pending.session_id:<32} {pending.call_id:<16} {brief(pending.name, 16):<16} "
            f"{when:16}  {pending.by:6} {brief(pending.summary, 60)}"
        )
        print(f"{'':<32} {pending.reason}")
    return 0


def _pending(session_id: str, events: Sequence[SessionEvent]) -> list[PendingApproval]:
    return pending_in(events, session_id, agent_id_of(session_id))


async def _decide(
    harness: Harness, args: argparse.Namespace, allow: bool, session_id: str, call_id: str
) -> int:
    try:
        return await _decide_once(harness, args, allow, session_id, call_id)
    except SessionConflict:
        # Another process wrote the session between our reading and our claiming it (it may
        # have decided this very call): read it again, and decide on what it holds now.
        return await _decide_once(harness, args, allow, session_id, call_id)


async def _decide_once(
    harness: Harness, args: argparse.Namespace, allow: bool, session_id: str, call_id: str
) -> int:
    stored = await _load(harness, session_id)
    if not any(p.call_id == call_id for p in _pending(session_id, stored)):
        decided = [
            e.data
            for e in stored
            if isinstance(e.data, ApprovalDecided) and e.data.call_id == call_id
        ]
        if decided:
            verdict = "allowed" if decided[-1].allowed else "denied"
            raise AlreadyDecided(
                f"call {call_id!r} of session {session_id!r} was already decided: {verdict} by "
                f"{decided[-1].by} ({decided[-1].reason})"
            )
        waiting = ", ".join(p.call_id for p in _pending(session_id, stored)) or "none"
        raise _BadInput(
            f"no call {call_id!r} waits for approval in session {session_id!r} (waiting: "
            f"{waiting}; see 'dsh approvals {session_id}')"
        )
    model = aliases.resolve(args.model or _last_model(stored) or _default_model(harness))
    if not harness.llm.serves(model):
        known = ", ".join(harness.llm.models()) or "none"
        raise DshError(
            f"the turn of {session_id!r} goes on with model {model!r}, which no adapter "
            f"serves: pass --model (known models: {known})"
        )
    try:
        agent = await harness.agent_loop.resume(session_id, AgentOptions(model=model))
    except SessionBusy as exc:
        raise DshError(
            f"{exc}: another process holds the session (it may be deciding this call or "
            "running the turn); see 'dsh approvals' once it is done"
        ) from exc
    shown = len(agent.session)
    await agent.decide(call_id, allow, args.reason)
    print(f"{'allowed' if allow else 'denied'} {call_id} of {session_id}")
    await agent.wait_idle()
    ran = agent.session.events[shown:]
    _print_events(ran)
    if agent.status == "waiting":
        left = ", ".join(p.call_id for p in agent.pending_approvals())
        print(f"the turn still waits for a decision on {left}")
        return 0
    ends = [e.data.reason for e in ran if isinstance(e.data, TurnEnd)]
    return 0 if all(isinstance(end, TurnCompleted) for end in ends) else 1


def _approvals_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "words",
        nargs="*",
        metavar="[allow|deny] SESSION CALL_ID",
        help="nothing: the calls waiting in every stored session; SESSION: in that one; "
        "allow|deny SESSION CALL_ID: decide that call, and run the turn on",
    )
    parser.add_argument("--reason", help="why (a denial's reason reaches the model)")
    parser.add_argument(
        "--model",
        help="the model the turn goes on with (default: the one the session used last)",
    )
    parser.add_argument(
        "--limit", type=int, default=100, help="look at most this many sessions (default 100)"
    )


# -- models and keys ---------------------------------------------------------------------------


def _models(harness: Harness, args: argparse.Namespace) -> int:
    """``dsh models`` (the table), ``dsh models alias set|remove``; exit 1 on bad input."""
    try:
        if args.action == "alias":
            return _alias(harness, args)
        if args.refresh is not None:
            return asyncio.run(_refresh(harness, args.refresh))
        _print_models(harness)
    except UserConfigError as exc:
        print(f"dsh models: {exc}", file=sys.stderr)
        return 1
    return 0


async def _refresh(harness: Harness, provider: str) -> int:
    """``dsh models --refresh PROVIDER``: fetch the provider's model list and cache it."""
    try:
        models = await harness.llm.list_models(provider)
    except LlmError as exc:
        print(f"dsh models --refresh: {exc.failure.message}", file=sys.stderr)
        return 1
    finally:
        await harness.llm.aclose()
    path = modelcache.write(provider, models)
    print(f"{len(models)} models of {provider} cached in {path}")
    return 0


def _alias(harness: Harness, args: argparse.Namespace) -> int:
    if args.alias_action == "set":
        aliases.store(args.name, args.model, harness.llm.serves, harness.llm.models())
        print(f"{args.name} -> {args.model}")
        return 0
    if args.alias_action == "remove":
        if aliases.remove(args.name):
            print(f"removed alias {args.name}")
            return 0
        print(f"dsh models alias remove: there is no alias {args.name!r}", file=sys.stderr)
        return 1
    args.alias_parser.print_help()
    return 2


def _print_models(harness: Harness) -> None:
    table = aliases.load()
    columns = f"{'CONTEXT':>8} {'OUTPUT':>8} {'IMAGES':6} {'THINKING':8} {'$/M IN/OUT':14}"
    # The model column is as wide as the longest name (e.g. an OpenRouter vendor/model id).
    wide = max([36, *(len(model) for model in harness.llm.models())])
    print(f"{'MODEL':{wide}} {columns} ALIASES")
    for model in harness.llm.models():
        info = harness.llm.model_info(model) or ModelInfo()
        names = ", ".join(sorted(name for name, target in table.items() if target == model))
        print(f"{model:{wide}} {_capabilities(info)} {names or '-'}")
        unavailable = harness.llm.unavailable(model)
        if unavailable is not None:
            print(f"    unavailable: {unavailable}")
    prefixes = ", ".join(prefix + ANY_MODEL for prefix in harness.llm.prefixes())
    if prefixes:
        print(f"    and any model under {prefixes} (default capabilities unless listed)")
    for name, target in sorted(table.items()):
        if not harness.llm.serves(target):
            print(f"alias {name} -> {target}: no loaded adapter serves {target!r}")


def _capabilities(info: ModelInfo) -> str:
    price = "-"
    if info.pricing is not None:
        now = info.pricing.price_at(time.time())
        price = f"{now.input:g}/{now.output:g}"
    return (
        f"{_tokens(info.context_window):>8} {_tokens(info.max_output_tokens):>8} "
        f"{_yes_no(info.image_input):6} {_yes_no(info.thinking_default, 'on', 'off'):8} "
        f"{price:14}"
    )


def _tokens(count: int | None) -> str:
    if count is None:
        return "?"
    if count >= 1_000_000 and count % 1_000_000 == 0:
        return f"{count // 1_000_000}M"
    return f"{count // 1000}K" if count >= 1000 and count % 1000 == 0 else str(count)


def _yes_no(flag: bool | None, yes: str = "yes", no: str = "no") -> str:
    return "?" if flag is None else yes if flag else no


def _models_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--refresh",
        metavar="PROVIDER",
        help="fetch PROVIDER's model list (e.g. openrouter) and cache the capabilities it "
        "reports; the config's model tables still override",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="the models, their capabilities and aliases (the default)")
    alias = actions.add_parser("alias", help="name a model: dsh models alias set NAME MODEL")
    alias.set_defaults(alias_parser=alias)
    alias_actions = alias.add_subparsers(dest="alias_action", metavar="ACTION")
    set_ = alias_actions.add_parser("set", help="make NAME mean MODEL in -m/--model and /model")
    set_.add_argument("name", metavar="NAME")
    set_.add_argument("model", metavar="MODEL")
    remove = alias_actions.add_parser("remove", help="forget the alias NAME")
    remove.add_argument("name", metavar="NAME")


def _keys(harness: Harness, args: argparse.Namespace) -> int:
    """``dsh keys set|list|remove|path``: names are listed, keys never printed."""
    try:
        return _KEY_ACTIONS[args.action](args) if args.action else _keys_help(args)
    except UserConfigError as exc:
        print(f"dsh keys {args.action}: {exc}", file=sys.stderr)
        return 1


def _keys_help(args: argparse.Namespace) -> int:
    args.keys_parser.print_help()
    return 2


def _keys_set(args: argparse.Namespace) -> int:
    if args.value is not None:
        key = args.value
    elif sys.stdin.isatty():
        key = getpass.getpass(f"Enter the key for {args.name}: ")
    else:
        key = sys.stdin.readline()
    path = keys.store(args.name, key)
    print(f"stored the key for {args.name} in {path}")
    return 0


def _keys_list(args: argparse.Namespace) -> int:
    names = sorted(keys.load())
    if not names:
        print("no stored keys ('dsh keys set NAME' stores one)")
    for name in names:
        print(name)
    return 0


def _keys_remove(args: argparse.Namespace) -> int:
    if keys.remove(args.name):
        print(f"removed the key for {args.name}")
        return 0
    print(f"dsh keys remove: there is no stored key {args.name!r}", file=sys.stderr)
    return 1


def _keys_path(args: argparse.Namespace) -> int:
    print(keys.keys_path())
    return 0


_KEY_ACTIONS: dict[str, Callable[[argparse.Namespace], int]] = {
    "set": _keys_set,
    "list": _keys_list,
    "remove": _keys_remove,
    "path": _keys_path,
}


def _keys_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    parser.set_defaults(keys_parser=parser)
    set_ = actions.add_parser(
        "set", help="store a key (read from the terminal without echo, or from stdin)"
    )
    set_.add_argument("name", metavar="NAME", help="whose key: deepseek for the DeepSeek adapters")
    set_.add_argument("--value", help="the key itself (it lands in your shell history)")
    actions.add_parser("list", help="the names of the stored keys (never the keys)")
    remove = actions.add_parser("remove", help="forget a stored key")
    remove.add_argument("name", metavar="NAME")
    actions.add_parser("path", help="the file the keys are stored in")


def _core_commands() -> list[tuple[str, str, Any, Any]]:
    def dump_flag(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dump", action="store_true", help="print the effective config")

    return [
        ("plugins", "list loaded plugins, their distributions, and disabled ones", _plugins, None),
        ("hooks", "list every hook, its call style and its implementations", _hooks, None),
        ("tools", "list every tool, its source, its effect and its permission", _tools, None),
        (
            "models",
            "list models, their aliases and capabilities; set aliases",
            _models,
            _models_arguments,
        ),
        (
            "keys",
            "store API keys in the user config directory (set, list, remove, path)",
            _keys,
            _keys_arguments,
        ),
        ("config", "show configuration sections (--dump: effective values)", _config, dump_flag),
        (
            "sessions",
            "list, show, resume, fork, replay (verify), rewind or diff stored sessions",
            _sessions,
            _sessions_arguments,
        ),
        (
            "approvals",
            "list the tool calls parked for approval; allow or deny one",
            _approvals,
            _approvals_arguments,
        ),
    ]


def _parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dsh", description="dsh: an extensible agent harness")
    parser.add_argument("--config", help="TOML config file (default: ./dsh.toml if present)")
    parser.add_argument("--log-format", choices=["console", "json"], default="console")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="warning")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_, _, configure in _core_commands():
        configure_fn = configure or (lambda p: None)
        configure_fn(sub.add_parser(name, help=help_))
    for command in commands.values():
        sub_parser = sub.add_parser(command.name, help=command.help)
        if command.configure is not None:
            command.configure(sub_parser)
    _accept_global_options(parser, [a for a in parser._actions if a.dest in _GLOBAL_OPTIONS])
    return parser


#: What ``--log-level`` takes: the standard levels.
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
#: The options of ``dsh`` itself, accepted after any command too.
_GLOBAL_OPTIONS = ("config", "log_format", "log_level")


def _accept_global_options(parser: argparse.ArgumentParser, options: list[argparse.Action]) -> None:
    """Let the global ``options`` follow every command and sub-command too (``dsh mcp serve
    --config FILE``, as MCP clients' configurations write them): :func:`_global_options` reads
    them wherever they stand; the full parse must not refuse them. A command's own option of
    the same name keeps its meaning."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for command in action.choices.values():
            for option in options:
                if not any(o in command._option_string_actions for o in option.option_strings):
                    command.add_argument(
                        *option.option_strings,
                        choices=option.choices,
                        default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS,
                    )
            _accept_global_options(command, options)


def _global_options(argv: Sequence[str]) -> argparse.Namespace:
    """The options needed before plugins load (config, logging), read ahead of the full parse."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    pre.add_argument("--log-format", choices=["console", "json"], default="console")
    pre.add_argument("--log-level", choices=LOG_LEVELS, default="warning")
    known, _ = pre.parse_known_args(argv)
    known.config = find_config(known.config)
    return known


#: Exit code of a command whose output's reader went away (``dsh sessions list | head``): 128 +
#: SIGPIPE, as a shell reports a command a closed pipe ended. (``run`` and ``chat`` abort their
#: turn and exit 130 instead.)
OUTPUT_CLOSED = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dsh`` console script; returns the exit code. When the reader of
    stdout goes away, the command ends quietly (:data:`OUTPUT_CLOSED`), with no traceback."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, not at exit, where a closed pipe is a traceback
    except BrokenPipeError:
        # What is still buffered goes nowhere, quietly, when the interpreter exits.
        with suppress(OSError, ValueError):  # no descriptor to silence
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        return OUTPUT_CLOSED
    return code


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        options = _global_options(argv)
    except DshError as exc:
        print(f"dsh: {exc}", file=sys.stderr)
        return 2
    configure_logging(options.log_format, options.log_level, deferred=True)
    try:
        harness = Harness(config=options.config)
        harness.load()
    except DshError as exc:
        print(f"dsh: {exc}", file=sys.stderr)
        return 2
    parser = _parser(harness.commands)
    args = parser.parse_args(argv)
    core = {name: run for name, _, run, _ in _core_commands()}
    if args.command in core:
        return int(core[args.command](harness, args))
    if args.command is None:
        parser.print_help()
        return 0
    try:
        result = harness.commands[args.command].run(args)
        if inspect.isawaitable(result):
            result = asyncio.run(_await(result))
    except KeyboardInterrupt:
        return 130
    return int(result)


async def _await(awaitable: Any) -> Any:
    return await awaitable
