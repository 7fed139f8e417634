"""``terminal_ui``: ``dsh run`` (one prompt, headless, exit code = how the turn ended) and
``dsh chat`` (interactive: streamed answers, tool calls, steering, slash commands).

Both drive one agent of the harness the CLI loaded; while they run they register small host
plugins that render that agent (:mod:`.view`) and answer ``dsh_tools_approve`` for it (``--yes``
approves everything; ``dsh run`` otherwise denies, ``dsh chat`` asks). Config section
``terminal_ui``; see ``docs/plugins/terminal_ui.md`` and ``docs/cli.md``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from dsh.plugin import Command, Harness, hookimpl
from dsh_plugins.terminal_ui import options
from dsh_plugins.terminal_ui.config import SECTION, TerminalUiConfig

__all__ = ["CHAT_HELP", "RUN_HELP", "TerminalUi", "TerminalUiConfig"]

RUN_HELP = "run one prompt headless: the answer on stdout, the exit code says how the turn ended"
CHAT_HELP = "chat with an agent: streamed answers, tool calls, steering, slash commands (/help)"


def _deferred(module: str, function: str, *bound: Any) -> Callable[[Any], Any]:
    """``module.function`` (with ``bound`` first), imported when first called: every harness
    loads this plugin for its commands (and every ``dsh`` command line builds their options,
    :mod:`.options`), and only ``dsh run`` and ``dsh chat`` need the console, the renderer and
    the rest (~5 ms of import in a process that runs neither)."""

    def call(arg: Any) -> Any:
        return getattr(importlib.import_module(f"{__name__}.{module}"), function)(*bound, arg)

    return call


class TerminalUi:
    """Contributes the ``run`` and ``chat`` commands and the ``terminal_ui`` config section."""

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, TerminalUiConfig)

    @hookimpl
    def dsh_register_commands(self, register: Callable[[Command], Any], harness: Harness) -> None:
        run = _deferred("headless", "run", harness)
        chat = _deferred("console", "run", harness)
        register(Command("run", RUN_HELP, run, options.run))
        register(Command("chat", CHAT_HELP, chat, options.chat))
