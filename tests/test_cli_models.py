"""``dsh models`` (models, capabilities, aliases), ``dsh tools``, ``dsh plugins`` with disabled
plugins, and ``dsh sessions resume`` without ``--model``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh import Tool, hookimpl
from dsh.app import _aliases as aliases
from dsh.cli import main
from dsh.llm._service import ModelInfo
from dsh.testing import ScriptedAdapter, text_response
from dsh.values._request import ToolSchema
from dsh.values._tokens import Price
from tests.helpers import make_dist
from tests.test_cli_sessions import crash_in_a_turn, run_agent

pytestmark = pytest.mark.usefixtures("cli_workdir")


class Described(ScriptedAdapter):
    """A scripted adapter that knows its model and can say it is not usable here."""

    def __init__(self, script: list[Any], info: ModelInfo | None, problem: str | None) -> None:
        super().__init__(script)
        self.info, self.problem = info, problem

    def model_info(self, model: str) -> ModelInfo | None:
        return self.info

    def unavailable(self, model: str) -> str | None:
        return self.problem


async def noop(args: Any, execution: Any) -> str:
    return "ok"


class Extras:
    """Models with and without capabilities, one that cannot run here, and two host tools."""

    def __init__(self, script: list[Any]) -> None:
        info = ModelInfo(128_000, 8_192, False, True, Price(0.5, 2.0))
        self.local = Described(script, info, None)
        self.bare = ScriptedAdapter([])
        self.missing = Described([], ModelInfo(1_500, 999), "install the frobnicator")

    @hookimpl
    def dsh_register_llm_adapters(self, register: Any) -> None:
        register(["local"], self.local)
        register(["bare"], self.bare)
        register(["needs-sdk"], self.missing)

    @hookimpl
    def dsh_register_tools(self, register: Any) -> None:
        register(Tool(ToolSchema("peek", "p"), noop, effect="read"))
        register(Tool(ToolSchema("zap", "z"), noop))


def with_extras(monkeypatch: pytest.MonkeyPatch, script: list[Any] = ()) -> Extras:  # type: ignore[assignment]
    """Give the CLI's harness the :class:`Extras` plugin."""
    extras = Extras(list(script))
    from dsh.app import _harness as harness_module

    original = harness_module.Harness.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["plugins"] = [*kwargs.get("plugins", ()), extras]
        original(self, *args, **kwargs)

    monkeypatch.setattr(harness_module.Harness, "__init__", init)
    return extras


def out(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def row(lines: list[str], first: str) -> list[str]:
    return next(line.split() for line in lines if line.split()[:1] == [first])


def test_models_lists_capabilities_aliases_and_what_cannot_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with_extras(monkeypatch)
    assert main(["models", "alias", "set", "quick", "local"]) == 0
    assert out(capsys) == ["quick -> local"]
    assert main(["models", "alias", "set", "fast", "local"]) == 0
    capsys.readouterr()
    assert main(["models"]) == 0
    lines = out(capsys)
    assert lines[0].split() == [
        "MODEL", "CONTEXT", "OUTPUT", "IMAGES", "THINKING", "$/M", "IN/OUT", "ALIASES"
    ]  # fmt: skip
    assert row(lines, "local") == ["local", "128K", "8192", "no", "on", "0.5/2", "fast,", "quick"]
    assert row(lines, "bare") == ["bare", "?", "?", "?", "?", "-", "-"]
    assert row(lines, "needs-sdk") == ["needs-sdk", "1500", "999", "?", "?", "-", "-"]
    assert "    unavailable: install the frobnicator" in lines
    assert row(lines, "deepseek-flash")[1:5] == ["1M", "384K", "yes", "on"]
    assert main(["models", "list"]) == 0
    assert out(capsys) == lines


def test_aliases_are_checked_removed_and_reported_when_dangling(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with_extras(monkeypatch)
    assert main(["models", "alias", "set", "x", "gpt-9"]) == 1
    refused = capsys.readouterr().err
    assert "no adapter serves model 'gpt-9'; known models: " in refused
    assert " bare, " in refused
    assert main(["models", "alias", "set", "local", "bare"]) == 1
    assert "'local' is already a model id" in capsys.readouterr().err
    assert main(["models", "alias", "set", "two words", "bare"]) == 1
    assert "one word" in capsys.readouterr().err
    aliases.aliases_path().parent.mkdir(parents=True, exist_ok=True)
    aliases.aliases_path().write_text('{"old": "retired-model", "b": "bare"}')
    assert main(["models"]) == 0
    assert "alias old -> retired-model: no loaded adapter serves 'retired-model'" in out(capsys)
    assert main(["models", "alias", "remove", "old"]) == 0
    assert out(capsys) == ["removed alias old"]
    assert main(["models", "alias", "remove", "old"]) == 1
    assert "there is no alias 'old'" in capsys.readouterr().err
    assert aliases.load() == {"b": "bare"}
    assert main(["models", "alias"]) == 2
    assert "usage: dsh models alias" in capsys.readouterr().out


def test_tools_lists_source_effect_and_permission(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with_extras(monkeypatch)
    assert main(["tools"]) == 0
    lines = out(capsys)
    assert lines[0].split() == ["TOOL", "SOURCE", "EFFECT", "PERMISSION"]
    assert " ".join(row(lines, "read_file")[1:]) == (
        "built-in (tools_fs) read allow (workspace-write mode)"
    )
    assert row(lines, "shell")[1:5] == ["built-in", "(tools_shell)", "execute", "ask"]
    assert row(lines, "peek")[1:5] == ["plugin", "Extras", "(host)", "read"]
    assert row(lines, "zap")[4:7] == ["other", "allow", "(workspace-write"]
    (tmp_path / "dsh.toml").write_text(
        '[permissions]\nmode = "read-only"\n'
        'rules = [{tool = "shell", match = "git *", action = "allow"},'
        ' {tool = "shell", action = "deny"}]\n'
    )
    assert main(["tools"]) == 0
    lines = out(capsys)
    assert " ".join(row(lines, "shell")[4:]) == "deny (rule 2); rule 1 may decide some calls"
    assert " ".join(row(lines, "write_file")[4:]) == "deny (read-only mode)"
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "permissions")
    (tmp_path / "dsh.toml").unlink()
    assert main(["tools"]) == 0
    lines = out(capsys)
    assert " ".join(row(lines, "zap")[5:]) == "runs (no permission policy is loaded)"
    assert " ".join(row(lines, "shell")[4:]) == (
        'deny (no permission policy is loaded; [permissions] mode = "full" runs it)'
    )


def test_tools_says_when_there_are_none(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "tools_fs,tools_shell,subagents")
    assert main(["tools"]) == 0
    assert out(capsys) == ["no tools: no loaded plugin registers any (see 'dsh plugins')"]


def test_host_tools_are_marked_as_the_hosts() -> None:
    from dsh import Harness
    from dsh.cli import _tool_source

    harness = Harness(load_entrypoints=False)
    harness.load()
    harness.tools.register(Tool(ToolSchema("mine", "m"), noop))
    assert _tool_source(harness, harness.tools.owner("mine") or "") == "host"
    assert harness.tools.owner("nope") is None


def test_plugins_marks_disabled_ones() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "dsh", "plugins"],
        env={**__import__("os").environ, "DSH_DISABLE_PLUGINS": "retry, no-such-plugin"},
        capture_output=True,
        text=True,
        check=False,
    )
    lines = result.stdout.splitlines()
    assert "retry                    disabled (DSH_DISABLE_PLUGINS)" in lines
    assert (
        "no-such-plugin           disabled (DSH_DISABLE_PLUGINS), but no installed plugin has "
        "this name"
    ) in lines
    assert not any(line.startswith("retry ") and "dsh-harness" in line for line in lines)


def test_help_advertises_only_what_exists(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "verify stored sessions" not in text and "replay (verify)" in text
    for command in ("tools", "models", "keys"):
        assert f"    {command} " in text
    with pytest.raises(SystemExit):
        main(["sessions", "verify", "x"])
    assert "invalid choice: 'verify'" in capsys.readouterr().err


def test_resume_uses_the_sessions_model_then_the_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(run_agent("a", [text_response("one")], "first"))  # answered by model "m"
    extras = with_extras(monkeypatch, [text_response("from local")])
    assert main(["models", "alias", "set", "m", "local"]) == 0  # "m" now means "local"
    assert main(["sessions", "resume", "a-session", "--prompt", "again"]) == 0
    assert [r.model for r in extras.local.requests] == ["local"]
    capsys.readouterr()
    (Path("dsh.toml")).write_text('[terminal_ui]\nmodel = "local"\n')
    asyncio.run(crash_in_a_turn("b"))  # a session nobody answered: no model in it
    extras.local.script.append(text_response("default"))
    assert main(["sessions", "resume", "b-session", "--prompt", "hi"]) == 0
    assert [r.model for r in extras.local.requests] == ["local", "local"]


def test_plugins_in_process_and_third_party_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "retry,nope")
    assert main(["plugins"]) == 0
    lines = out(capsys)
    assert lines[-2:] == [
        "nope                     disabled (DSH_DISABLE_PLUGINS), but no installed plugin has "
        "this name",
        "retry                    disabled (DSH_DISABLE_PLUGINS)",
    ]
    from dsh import Harness
    from dsh.cli import _tool_source
    from dsh.hooks._entrypoints import Found
    from dsh.hooks._loading import DistributionInfo, PluginInfo

    make_dist(tmp_path, "acme-tools", {}, {})
    found = Found("acme", "acme:Plugin", "dsh", str(tmp_path / "acme-tools-1.0.dist-info"))
    acme = DistributionInfo(found)
    harness = Harness(load_entrypoints=False)
    harness.plugins.register(Extras([]), "acme", PluginInfo("acme", acme))
    assert _tool_source(harness, "acme") == "plugin acme (acme-tools)"


class LongNames:
    """A model and a tool whose names are longer than the tables' default columns."""

    model = "deepseek/deepseek-v4-flash-vision-exp-preview-2026"
    tool = "mcp__a_server_with_a_long_name__a_tool_with_a_long_name"

    @hookimpl
    def dsh_register_llm_adapters(self, register: Any) -> None:
        register([self.model], ScriptedAdapter([]))

    @hookimpl
    def dsh_register_tools(self, register: Any) -> None:
        register(Tool(ToolSchema(self.tool, "t"), noop, effect="read"))


def test_long_names_keep_the_columns_aligned(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dsh.app import _harness as harness_module

    original = harness_module.Harness.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["plugins"] = [*kwargs.get("plugins", ()), LongNames()]
        original(self, *args, **kwargs)

    monkeypatch.setattr(harness_module.Harness, "__init__", init)
    assert main(["tools"]) == 0
    header, *rows = out(capsys)
    starts = [header.index(title) for title in ("SOURCE", "EFFECT", "PERMISSION")]
    for line in rows:  # each row's source, effect and permission start under their titles
        assert all(line[at - 1] == " " and line[at] != " " for at in starts), line
    [long_tool] = [line for line in rows if line.startswith(LongNames.tool)]
    assert long_tool[starts[1] :].split()[0] == "read"
    assert main(["models"]) == 0
    header, *rows = out(capsys)
    aliases_at = header.index("ALIASES")
    models = [line for line in rows if not line.startswith((" ", "alias "))]
    assert LongNames.model in [line.split()[0] for line in models]
    for line in models:  # the aliases (or "-") start under ALIASES
        assert line[aliases_at - 1] == " " and line[aliases_at] != " ", line
