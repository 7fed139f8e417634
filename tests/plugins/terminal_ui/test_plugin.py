"""The plugin registers both commands and its config section."""

from __future__ import annotations

from dsh import Harness
from dsh_plugins.terminal_ui import TerminalUi, TerminalUiConfig, console, headless


def test_the_plugin_contributes_run_chat_and_its_section() -> None:
    harness = Harness(load_entrypoints=False, plugins=[TerminalUi()])
    harness.load()
    run, chat = harness.commands["run"], harness.commands["chat"]
    assert (run.help, run.configure) == (headless.HELP, headless.configure)
    assert (chat.help, chat.configure) == (console.HELP, console.configure)
    assert run.run.func is headless.run and run.run.args == (harness,)  # type: ignore[attr-defined]
    assert chat.run.func is console.run and chat.run.args == (harness,)  # type: ignore[attr-defined]
    assert harness.config.section("terminal_ui", TerminalUiConfig) == TerminalUiConfig()
    assert TerminalUiConfig().model == "deepseek-flash"
