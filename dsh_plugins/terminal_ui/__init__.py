"""``terminal_ui``: ``dsh run`` (one prompt, headless, exit code = how the turn ended) and
``dsh chat`` (interactive: streamed answers, tool calls, steering, slash commands).

Both drive one agent of the harness the CLI loaded; while they run they register small host
plugins that render that agent (:mod:`.view`) and answer ``dsh_tools_approve`` for it (``--yes``
approves everything; ``dsh run`` otherwise denies, ``dsh chat`` asks). Config section
``terminal_ui``; see ``docs/plugins/terminal_ui.md`` and ``docs/cli.md``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from dsh.harness import Command, Harness
from dsh.markers import hookimpl
from dsh_plugins.terminal_ui import console, headless
from dsh_plugins.terminal_ui.config import SECTION, TerminalUiConfig

__all__ = ["TerminalUi", "TerminalUiConfig"]


class TerminalUi:
    """Contributes the ``run`` and ``chat`` commands and the ``terminal_ui`` config section."""

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, TerminalUiConfig)

    @hookimpl
    def dsh_register_commands(self, register: Callable[[Command], Any], harness: Harness) -> None:
        run = functools.partial(headless.run, harness)
        chat = functools.partial(console.run, harness)
        register(Command("run", headless.HELP, run, headless.configure))
        register(Command("chat", console.HELP, chat, console.configure))
