"""The shell tool: output, exit codes, caps, timeouts, configuration."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from dsh import AgentOptions, Harness, ToolExecution
from dsh.tools._output import HeadTail
from dsh_plugins.tools_shell import ShellConfig, ShellToolPlugin
from dsh_plugins.tools_shell.config import SECRET_PATTERNS
from dsh_plugins.tools_shell.environment import allowed, is_secret
from tests.plugins.tools_shell.support import Call, text


async def test_the_tool_and_its_config() -> None:
    async with Harness(load_entrypoints=False, plugins=[ShellToolPlugin]) as h:
        shell = h.tools.get("shell")
        assert h.config.section("tools_shell", ShellConfig) == ShellConfig()
    assert shell is not None
    assert (shell.effect, shell.concurrency_safe, h.tools.timeout_of(shell)) == (
        "execute",
        False,
        None,
    )
    assert shell.schema.parameters == {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command line to run."},
            "timeout_s": {
                "anyOf": [{"type": "number"}, {"type": "null"}],
                "description": "Seconds after which the command is killed.",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    assert "(default 120, at most 600)" in shell.schema.description


async def test_output_and_exit_codes(call: Call, workspace: Path) -> None:
    assert text(await call("shell", command="echo out; echo err >&2; exit 3")) == (
        "out\nerr\n[exit code 3]"
    )
    assert text(await call("shell", command="printf partial")) == "partial\n[exit code 0]"
    assert text(await call("shell", command="true")) == "(no output)\n[exit code 0]"
    assert (
        text(await call("shell", command="kill -9 $$")) == "(no output)\n[killed by signal SIGKILL]"
    )
    assert text(await call("shell", command="pwd")) == f"{workspace}\n[exit code 0]"
    # stdin is closed: a command that reads it ends at once instead of waiting forever.
    assert text(await call("shell", command="cat")) == "(no output)\n[exit code 0]"


@pytest.mark.parametrize("shell_config", [{"max_output_bytes": 20}])
async def test_long_output_keeps_head_and_tail(call: Call) -> None:
    result = text(await call("shell", command="seq 1 1000"))
    total = sum(len(f"{n}\n") for n in range(1, 1001))
    assert result == (
        f"1\n2\n3\n4\n5\n\n[... {total - 20} bytes (992 lines) elided ...]\n\n999\n1000\n"
        "[exit code 0]"
    )


# 1 s: the shell must have printed and set its trap before the timeout, even on a loaded machine.
@pytest.mark.parametrize("shell_config", [{"timeout_s": 1.0, "kill_grace_s": 0.1}])
async def test_a_timeout_kills_the_command_and_keeps_its_output(call: Call) -> None:
    started = time.monotonic()
    outcome = await call(
        "shell", command="echo started; trap 'echo stopping; exit 1' TERM; sleep 30 & wait"
    )
    assert time.monotonic() - started < 20  # not the 30 s the command would have taken
    assert (outcome.is_error, outcome.code) == (True, "TOOL_TIMEOUT")
    assert text(outcome) == (
        "Error: the command timed out after 1 s and its process group was killed. "
        "Output so far:\nstarted\nstopping\n"
    )
    quick = await call("shell", command="sleep 30", timeout_s=0.05)
    assert "timed out after 0.05 s" in text(quick)


@pytest.mark.parametrize("shell_config", [{"max_timeout_s": 0.1}])
async def test_the_requested_timeout_is_capped(call: Call) -> None:
    assert "timed out after 0.1 s" in text(await call("shell", command="sleep 30", timeout_s=99))
    assert "timed out after 0.1 s" in text(await call("shell", command="sleep 30"))


async def test_a_timeout_must_be_positive(call: Call) -> None:
    for bad in (0, -1):
        outcome = await call("shell", command="true", timeout_s=bad)
        assert (outcome.code, text(outcome)) == (
            "INVALID_ARGS",
            "Error: timeout_s must be more than 0 seconds",
        )


@pytest.mark.parametrize("shell_config", [{"executable": "/bin/sh"}])
async def test_the_shell_is_configurable(call: Call) -> None:
    assert text(await call("shell", command="echo $0")) == "/bin/sh\n[exit code 0]"


async def test_a_missing_workspace_is_reported(tmp_path: Path) -> None:
    config = {"permissions": {"mode": "full"}}
    async with Harness(load_entrypoints=False, plugins=[ShellToolPlugin], config=config) as h:
        agent = h.agent_loop.create("sh", AgentOptions(workspace=str(tmp_path / "gone")))
        outcome = await h.tools.execute(ToolExecution("c", "shell", '{"command": "ls"}', agent))
    assert outcome.code == "NOT_FOUND"
    assert re.fullmatch(r"Error: the workspace .*/gone is not a directory", text(outcome))


# -- the pieces ------------------------------------------------------------------------------


def test_head_tail_keeps_both_ends_and_counts_the_middle() -> None:
    output = HeadTail(10)
    output.feed(b"abc")
    assert (output.text(), output.elided_bytes) == ("abc", 0)
    output.feed(b"de\nfgh")
    assert output.text() == "abcde\nfgh"
    output.feed(b"i\nj\nk\nlmn")
    assert (output.elided_bytes, output.elided_lines) == (8, 3)
    assert output.text() == "abcde\n[... 8 bytes (3 lines) elided ...]\nk\nlmn"
    multibyte = HeadTail(4)
    multibyte.feed("é€".encode())
    assert multibyte.text() == "é\n[... 1 bytes (0 lines) elided ...]\n\ufffd\ufffd"


def test_secret_names_are_recognised() -> None:
    patterns = SECRET_PATTERNS
    secret = [
        "OPENAI_API_KEY",
        "deepseek_api_key",
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "DB_PASSWORD",
        "PGPASSWD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SSH_PRIVATE_KEY",
        "NPM_AUTH",
        "DATABASE_URL",
        "MYAPIKEY",
        "SENTRY_DSN",
    ]
    plain = ["PATH", "HOME", "LANG", "TERM", "VIRTUAL_ENV", "KEYBOARD_LAYOUT", "AUTHOR"]
    assert [name for name in secret if not is_secret(name, patterns)] == []
    assert [name for name in plain if is_secret(name, patterns)] == []


def test_the_environment_is_an_allow_list() -> None:
    environ = {"PATH": "/bin", "LC_ALL": "C", "LC_TOKEN": "t", "Y_TOKEN": "y", "OTHER": "o"}
    assert allowed(environ, ["PATH", "LC_*"], ["*TOKEN"]) == {"PATH": "/bin", "LC_ALL": "C"}
    extra: dict[str, Any] = {"PAGER": "cat"}
    assert allowed(environ, ["PATH", "Y_TOKEN", "path"], ["*TOKEN"], extra) == {
        "PATH": "/bin",
        "Y_TOKEN": "y",  # named exactly: passed although it looks secret
        "PAGER": "cat",
    }
    assert allowed(environ, ["*"], ["*TOKEN"]) == {"PATH": "/bin", "LC_ALL": "C", "OTHER": "o"}


def test_the_plugin_is_registered_as_an_entry_point() -> None:
    from importlib.metadata import entry_points

    (found,) = entry_points(group="dsh", name="tools_shell")
    assert found.load() is ShellToolPlugin
