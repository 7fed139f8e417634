"""The ``dsh`` command line. Core commands: ``plugins``, ``hooks``, ``config``, ``sessions``;
plugins add more (``demo``, ``mock-server``, ...) through ``dsh_register_commands``."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from dsh import recovery, replay
from dsh.agent import AgentOptions
from dsh.content import Block, text_of
from dsh.errors import DshError
from dsh.events import SessionEvent
from dsh.harness import Command, Harness
from dsh.hooks import HOOK_STYLES
from dsh.logs import configure_logging

__all__ = ["main"]


def _plugins(harness: Harness, args: argparse.Namespace) -> int:
    for name in harness.plugins.names():
        info = harness.plugins.info.get(name)
        dist = f"{info.distribution} {info.version}" if info and info.distribution else "(host)"
        print(f"{name:24} {dist}")
    for failure in harness.plugins.failures:
        print(f"{failure.name:24} {failure.distribution}  FAILED: {failure.error}")
    return 1 if harness.plugins.failures else 0


def _hooks(harness: Harness, args: argparse.Namespace) -> int:
    runtime = harness.plugins.runtime
    for hook, style in HOOK_STYLES.items():
        impls = ", ".join(impl.plugin for impl in runtime.impls(hook)) or "-"
        print(f"{hook:32} {style:12} {impls}")
    return 0


def _config(harness: Harness, args: argparse.Namespace) -> int:
    if not args.dump:
        print("sections: " + ", ".join(harness.config.sections()))
        return 0
    print(json.dumps(_redacted(harness.config.dump()), indent=2, default=str))
    return 0


_SECRET = ("api_key", "token", "secret", "password")


def _secret(key: str) -> bool:
    """``api_key``, ``token``, ``client_secret``...: a secret; ``max_tokens`` is not."""
    key = key.lower()
    return any(key == s or key.endswith(f"_{s}") for s in _SECRET)


def _redacted(value: Any) -> Any:
    """``value`` with every secret-looking key's value replaced, so a dump is safe to share."""
    if isinstance(value, dict):
        return {k: "***" if v and _secret(k) else _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


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


def _brief(value: Any, limit: int = 70) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _describe(data: Any) -> str:
    """One line about an event's data: its text, its call, its reason."""
    content: tuple[Block, ...] | None = getattr(data, "content", None)
    if content is not None:
        return _brief(text_of(content) or content)
    if hasattr(data, "arguments"):
        return _brief(f"{data.name}({data.arguments})")
    for name in ("reason", "message"):
        if hasattr(data, name):
            return _brief(getattr(data, name))
    return _brief(data)


def _print_events(events: Sequence[SessionEvent]) -> None:
    """The events one per line; a run of ``assistant/chunk`` events is one line."""
    position = 0
    while position < len(events):
        event = events[position]
        end = position + 1
        while (
            event.type == "assistant/chunk" and end < len(events) and events[end].type == event.type
        ):
            end += 1
        if end - position > 1:
            print(f"{event.seq:>6}  {event.type:<20} x{end - position}")
        else:
            print(f"{event.seq:>6}  {event.type:<20} {_describe(event.data)}")
        position = end


async def _sessions_list(harness: Harness, args: argparse.Namespace) -> int:
    found = await harness.sessions.stored(args.query, args.limit)
    if not found:
        print("no stored sessions" + (f" match {args.query!r}" if args.query else ""))
    for summary in found:
        updated = time.strftime("%Y-%m-%d %H:%M", time.localtime(summary.updated))
        print(
            f"{summary.id:<32} {updated}  {summary.events:>6} events  {_brief(summary.title, 60)}"
        )
    return 0


async def _sessions_show(harness: Harness, args: argparse.Namespace) -> int:
    events = await _load(harness, args.id)
    turns = sum(e.type == "turn/start" for e in events)
    print(f"session {args.id}: {len(events)} events, {turns} turns")
    _print_events(events)
    return 0


async def _sessions_resume(harness: Harness, args: argparse.Namespace) -> int:
    stored = await _load(harness, args.id)
    queued = recovery.pending_messages(stored)
    if (queued or args.prompt) and not args.model:
        what = f"{len(queued)} queued message(s)" if queued else "the prompt"
        raise DshError(f"resuming {args.id!r} runs {what}: pass --model")
    agent = await harness.agent_loop.resume(args.id, AgentOptions(model=args.model or ""))
    print(f"resumed {args.id}: {len(stored)} stored events; recovered:")
    _print_events(agent.session.events[len(stored) :])
    shown = len(agent.session)
    if args.prompt:
        agent.send(args.prompt)
    await agent.wait_idle()
    ran = agent.session.events[shown:]
    _print_events(ran)
    ends = [e.data.reason.type for e in ran if e.type == "turn/end"]
    return 0 if all(end == "completed" for end in ends) else 1


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
    source = harness.sessions.create(args.id, events, persisted=len(events))
    child_id = args.new_id or await _fork_id(harness, args.id)
    child = harness.sessions.fork(source, args.at_seq, child_id)
    await child.flush()
    print(f"forked {args.id} at seq {len(child) - 1} as {child.id}")
    return 0


async def _sessions_replay(harness: Harness, args: argparse.Namespace) -> int:
    report = replay.verify(await _load(harness, args.id))
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
}


def _sessions(harness: Harness, args: argparse.Namespace) -> int:
    """``dsh sessions list|show|resume|fork|replay``: exit 2 for an unknown session id."""
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
        print(f"dsh sessions {args.action}: {exc}", file=sys.stderr)
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
    resume.add_argument("--model", help="the model that answers queued messages and --prompt")
    resume.add_argument("--prompt", help="a message to send once resumed")
    fork = actions.add_parser("fork", help="store a copy of a session (up to --at-seq)")
    fork.add_argument("--at-seq", type=int, help="the last event to copy (default: all)")
    fork.add_argument("--id", dest="new_id", help="the new session's id (default ID-fork-N)")
    replay_ = actions.add_parser(
        "replay", help="verify that the logged chunks give the logged messages (exit 1 if not)"
    )
    for sub in (show, resume, fork, replay_):
        sub.add_argument("id", metavar="ID", help="the session id")


def _core_commands() -> list[tuple[str, str, Any, Any]]:
    def dump_flag(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dump", action="store_true", help="print the effective config")

    return [
        ("plugins", "list loaded plugins and their distributions", _plugins, None),
        ("hooks", "list every hook, its call style and its implementations", _hooks, None),
        ("config", "show configuration sections (--dump: effective values)", _config, dump_flag),
        (
            "sessions",
            "list, show, resume, fork or verify stored sessions",
            _sessions,
            _sessions_arguments,
        ),
    ]


def _parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dsh", description="dsh: an extensible agent harness")
    parser.add_argument("--config", help="TOML config file (default: ./dsh.toml if present)")
    parser.add_argument("--log-format", choices=["console", "json"], default="console")
    parser.add_argument("--log-level", default="warning")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_, _, configure in _core_commands():
        configure_fn = configure or (lambda p: None)
        configure_fn(sub.add_parser(name, help=help_))
    for command in commands.values():
        sub_parser = sub.add_parser(command.name, help=command.help)
        if command.configure is not None:
            command.configure(sub_parser)
    return parser


def _global_options(argv: Sequence[str]) -> argparse.Namespace:
    """The options needed before plugins load (config, logging), read ahead of the full parse."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    pre.add_argument("--log-format", choices=["console", "json"], default="console")
    pre.add_argument("--log-level", default="warning")
    known, _ = pre.parse_known_args(argv)
    if known.config is None and Path("dsh.toml").is_file():
        known.config = "dsh.toml"
    return known


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dsh`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    options = _global_options(argv)
    configure_logging(options.log_format, options.log_level)
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
