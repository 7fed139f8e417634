"""The core CLI: plugins, hooks, config, plugin commands, bad config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsh import Command, hookimpl
from dsh.cli import main

pytestmark = pytest.mark.usefixtures("cli_workdir")


def test_plugins_lists_what_is_loaded(dists: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 1  # a plugin failed to load
    lines = capsys.readouterr().out.splitlines()
    assert ["zeta", "fake_dist", "1.0"] in [line.split() for line in lines]
    assert any(line.startswith("broken") and "FAILED: ImportError" in line for line in lines)
    assert main(["--log-level", "critical", "plugins"]) == 1


def test_hooks_lists_each_hook_with_its_style(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hooks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:2] == ["dsh_agent_request", "waterfall"] for line in lines)
    assert any(line.split()[:2] == ["dsh_session_flush", "parallel"] for line in lines)


def test_config_dump_shows_effective_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "dsh.toml").write_text('[[agent_loop.agents]]\nid = "main"\n')
    assert main(["config", "--dump"]) == 0
    dumped = json.loads(capsys.readouterr().out)
    assert dumped["agent_loop"] == {
        "agents": [
            {
                "id": "main",
                "model": "",
                "system_prompt": "",
                "tools": None,
                "output_type": None,
                "permission_mode": None,
            }
        ],
        "max_parallel_tools": 8,
        "max_depth": 3,
    }
    assert main(["config"]) == 0
    assert "agent_loop" in capsys.readouterr().out


def test_bad_config_exits_2_with_every_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.toml").write_text("[nope]\n[agent_loop]\nagentz = 1\n")
    assert main(["--config", "bad.toml", "plugins"]) == 2
    err = capsys.readouterr().err
    assert "unknown section" in err and "agentz" in err


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "usage: dsh" in capsys.readouterr().out


def test_help_names_the_cluster_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "cluster             up, status or down: a pool" in capsys.readouterr().out


def test_plugin_commands_are_dispatched(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Commands:
        @hookimpl
        def dsh_register_commands(self, register: Any) -> None:
            def configure(parser: Any) -> None:
                parser.add_argument("--name", default="world")

            async def hello(args: Any) -> int:
                print(f"hello {args.name}")
                return 3

            register(Command("hello", "say hello", hello, configure))
            register(Command("sync", "sync command", lambda args: 0))

    from dsh.app import _harness as harness_module

    original = harness_module.Harness.__init__

    def with_commands(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["plugins"] = [Commands()]
        original(self, *args, **kwargs)

    monkeypatch.setattr(harness_module.Harness, "__init__", with_commands)
    assert main(["hello", "--name", "dsh"]) == 3
    assert capsys.readouterr().out == "hello dsh\n"
    assert main(["sync"]) == 0


def test_config_dump_redacts_secrets(capsys: pytest.CaptureFixture[str]) -> None:
    from dsh.app._configdoc import masked as _redacted

    raw = {
        "x": {"api_key": "sk-123", "empty_token": "", "nested": [{"password": "p"}], "n": 1},
        "compaction": {"reserve_tokens": 10, "github_token": "t", "secret": "s"},
    }
    assert _redacted(raw) == {
        "x": {"api_key": "***", "empty_token": "", "nested": [{"password": "***"}], "n": 1},
        "compaction": {"reserve_tokens": 10, "github_token": "***", "secret": "***"},
    }


def test_ctrl_c_in_a_command_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    class Interrupted:
        @hookimpl
        def dsh_register_commands(self, register: Any) -> None:
            def stop(args: Any) -> int:
                raise KeyboardInterrupt

            register(Command("stop", "interrupted", stop))

    from dsh.app import _harness as harness_module

    original = harness_module.Harness.__init__

    def with_commands(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["plugins"] = [Interrupted()]
        original(self, *args, **kwargs)

    monkeypatch.setattr(harness_module.Harness, "__init__", with_commands)
    assert main(["stop"]) == 130


def test_python_dash_m_dsh_runs_the_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib
    import sys

    monkeypatch.setattr("sys.argv", ["dsh", "hooks"])
    monkeypatch.delitem(sys.modules, "dsh.__main__", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module("dsh.__main__")
    assert exit_info.value.code == 0
    assert "dsh_agent_request" in capsys.readouterr().out


def test_a_dsh_config_naming_no_file_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.toml"
    monkeypatch.setenv("DSH_CONFIG", str(missing))
    assert main(["config", "--dump"]) == 2
    assert capsys.readouterr().err.strip().endswith(f"DSH_CONFIG={missing}: no such file")
