"""The plugin registers both commands and its config section, and imports what runs them only
when they run."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from dsh import Harness
from dsh_plugins.terminal_ui import (
    CHAT_HELP,
    RUN_HELP,
    TerminalUi,
    TerminalUiConfig,
    console,
    headless,
    options,
)


def test_the_plugin_contributes_run_chat_and_its_section(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[object, ...]] = []
    for module in (headless, console):
        name = module.__name__.rsplit(".", 1)[1]
        monkeypatch.setattr(module, "run", lambda *a, n=name: calls.append((n, "run", *a)))
    harness = Harness(load_entrypoints=False, plugins=[TerminalUi()])
    harness.load()
    run, chat = harness.commands["run"], harness.commands["chat"]
    assert (run.help, chat.help) == (headless.HELP, console.HELP) == (RUN_HELP, CHAT_HELP)
    run.run("args")
    chat.run("args")
    assert calls == [("headless", "run", harness, "args"), ("console", "run", harness, "args")]
    # The options come from a module that imports neither (every dsh parser builds them).
    assert run.configure is options.run is headless.configure
    assert chat.configure is options.chat is console.configure
    parser = argparse.ArgumentParser()
    run.configure(parser)
    parsed = parser.parse_args(["hi", "--json", "-m", "m"])
    assert (parsed.prompt, parsed.json, parsed.model) == ("hi", True, "m")
    parser = argparse.ArgumentParser()
    chat.configure(parser)
    assert parser.parse_args(["-c"]).continue_latest is True
    assert harness.config.section("terminal_ui", TerminalUiConfig) == TerminalUiConfig()
    assert TerminalUiConfig().model == "deepseek-flash"


def test_loading_the_plugin_leaves_the_console_and_the_renderer_unimported() -> None:
    code = (
        "import sys\n"
        "from dsh import Harness\n"
        "from dsh_plugins.terminal_ui import TerminalUi\n"
        "Harness(load_entrypoints=False, plugins=[TerminalUi()]).load()\n"
        "print(sorted(m for m in sys.modules if m.startswith('dsh_plugins.terminal_ui.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (
        out.stdout.strip()
        == "['dsh_plugins.terminal_ui.config', 'dsh_plugins.terminal_ui.options']"
    )
