"""The ``dsh`` command line. Core commands: ``plugins``, ``hooks``, ``config``; plugins add
more (``demo``, ``mock-server``, ...) through ``dsh_register_commands``."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dsh.errors import DshError
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


def _redacted(value: Any) -> Any:
    """``value`` with every secret-looking key's value replaced, so a dump is safe to share."""
    if isinstance(value, dict):
        return {
            k: "***" if v and any(s in k.lower() for s in _SECRET) else _redacted(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


def _core_commands() -> list[tuple[str, str, Any, Any]]:
    def dump_flag(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dump", action="store_true", help="print the effective config")

    return [
        ("plugins", "list loaded plugins and their distributions", _plugins, None),
        ("hooks", "list every hook, its call style and its implementations", _hooks, None),
        ("config", "show configuration sections (--dump: effective values)", _config, dump_flag),
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
