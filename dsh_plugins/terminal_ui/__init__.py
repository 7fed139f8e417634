"""``terminal_ui``: ``dsh run`` (one prompt, headless, exit code = how the turn ended).

It drives one agent of the harness the CLI loaded; while it runs it registers small host
plugins that render that agent (:mod:`.view`) and answer ``dsh_tools_approve`` for it (``--yes``
approves everything, otherwise it denies). Config section ``terminal_ui``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from dsh.harness import Command, Harness
from dsh.markers import hookimpl
from dsh_plugins.terminal_ui import headless
from dsh_plugins.terminal_ui.config import SECTION, TerminalUiConfig

__all__ = ["TerminalUi", "TerminalUiConfig"]


class TerminalUi:
    """Contributes the ``run`` command and the ``terminal_ui`` config section."""

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, TerminalUiConfig)

    @hookimpl
    def dsh_register_commands(self, register: Callable[[Command], Any], harness: Harness) -> None:
        run = functools.partial(headless.run, harness)
        register(Command("run", headless.HELP, run, headless.configure))
