"""The plugin registers its command and its config section."""

from __future__ import annotations

from dsh import Harness
from dsh_plugins.terminal_ui import TerminalUi, TerminalUiConfig, headless


def test_the_plugin_contributes_run_and_its_section() -> None:
    harness = Harness(load_entrypoints=False, plugins=[TerminalUi()])
    harness.load()
    run = harness.commands["run"]
    assert (run.help, run.configure) == (headless.HELP, headless.configure)
    assert run.run.func is headless.run and run.run.args == (harness,)  # type: ignore[attr-defined]
    assert harness.config.section("terminal_ui", TerminalUiConfig) == TerminalUiConfig()
    assert TerminalUiConfig().model == "deepseek-v4-flash"
