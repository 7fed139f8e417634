"""``dsh sessions rewind``, ``diff`` and the files ``show`` lists, run as the real command."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh import AgentOptions, Harness
from dsh.cli import main
from dsh.testing import ScriptedAdapter, text_response, tool_call_response

pytestmark = pytest.mark.usefixtures("cli_workdir")


def script() -> list[Any]:
    return [
        tool_call_response("c1", "write_file", {"path": "a.txt", "content": "one\ntwo\n"}),
        text_response("turn 1 done"),
        tool_call_response("c2", "edit_file", {"path": "a.txt", "old": "two", "new": "TWO"}),
        tool_call_response("c3", "write_file", {"path": "b.bin", "content": "\x00x"}),
        tool_call_response("c4", "shell", {"command": "echo hi > shell.txt"}),
        tool_call_response("c5", "shell", {"command": "rm -rf /"}),  # denied: never ran
        text_response("turn 2 done"),
        tool_call_response("c6", "delete_file", {"path": "a.txt"}),
        text_response("turn 3 done"),
    ]


async def three_turns(workspace: Path) -> str:
    deny_rm = {"tool": "shell", "match": "rm *", "action": "deny"}
    config = {"permissions": {"mode": "full", "rules": [deny_rm]}}
    async with Harness(config=config) as h:
        h.llm.register_adapter(["m"], ScriptedAdapter(script()))
        options = AgentOptions(model="m", workspace=str(workspace))
        agent = h.agent_loop.create("a", options, session_id="s")
        for n in (1, 2, 3):
            agent.send(f"turn {n}")
            await agent.wait_idle()
    return "s"


def dsh(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DSH_DISABLE_PLUGINS": ""}
    command = [sys.executable, "-m", "dsh", "sessions", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, check=False)


def test_show_diff_and_rewind_from_the_command_line(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    asyncio.run(three_turns(workspace))
    a, b = workspace / "a.txt", workspace / "b.bin"

    shown = dsh("show", "s")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1:7] == [
        "turn 1: 1 file change(s)",
        f"  created {a} [write_file]",
        "turn 2: 2 file change(s)",
        f"  changed {a} [edit_file]",
        f"  created {b} [write_file]",
        "turn 3: 1 file change(s)",
    ]
    assert any("file/changed" in line and f"deleted {a} [delete_file]" in line for line in lines)
    assert any("file/blob" in line and "kept 8 bytes as sha256:" in line for line in lines)

    diff = dsh("diff", "s", "--turn", "2")
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.splitlines() == [
        f"--- a{a}",
        f"+++ b{a}",
        "@@ -1,2 +1,2 @@",
        " one",
        "-two",
        "+TWO",
        "--- /dev/null",
        f"+++ b{b}",
        "@@ -0,0 +1 @@",
        "+\x00x",
    ]
    # Turn 3 deleted a.txt: its content after turn 2 was kept when it was deleted.
    assert dsh("diff", "s", "--turn", "3").stdout.splitlines()[:2] == [f"--- a{a}", "+++ /dev/null"]

    rewound = dsh("rewind", "s", "--to-turn", "2")
    assert rewound.returncode == 0, rewound.stderr
    assert rewound.stdout.splitlines() == [
        "rewound s to before turn 2 as s-fork-1",
        f"  restored   {a}",
        f"  restored   {b}",
        "  1 shell command(s) ran since then: their effects stay (shell commands are not tracked)",
        "continue with: dsh sessions resume s-fork-1",
    ]
    assert a.read_text() == "one\ntwo\n" and not b.exists()
    assert (workspace / "shell.txt").exists()
    forked = dsh("show", "s-fork-1").stdout.splitlines()
    assert forked[0].endswith(" events, 1 turns")
    assert forked[-1].split()[1:7] == ["session/rewind", "files", "of", "s", "rewound", "to"]

    # In place, a file changed since by something else is a conflict, kept unless --force.
    a.write_text("mine\n")
    conflict = dsh("rewind", "s", "--to-turn", "1", "--in-place")
    assert conflict.returncode == 1
    assert f"  conflict   {a} (changed since by something else; kept)" in conflict.stdout
    assert a.read_text() == "mine\n"
    forced = dsh("rewind", "s", "--to-turn", "1", "--in-place", "--force")
    assert forced.returncode == 0, forced.stdout
    assert forced.stdout.splitlines()[0] == "rewound s to before turn 1 in place"
    assert not a.exists()
    assert "session/rewind" in dsh("show", "s").stdout


def test_bad_turns_and_unknown_sessions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(three_turns(tmp_path))
    assert main(["sessions", "rewind", "s", "--to-turn", "9"]) == 1
    assert "there is no turn 9: the session holds turns 1 to 3" in capsys.readouterr().err
    assert main(["sessions", "diff", "s", "--turn", "0"]) == 1
    assert "there is no turn 0" in capsys.readouterr().err
    for action in ("rewind", "diff"):
        assert (
            main(["sessions", action, "nope", "--to-turn" if action == "rewind" else "--turn", "1"])
            == 2
        )
        assert "no stored session 'nope'" in capsys.readouterr().err
    assert main(["sessions", "rewind", "nope", "--to-turn", "1", "--in-place"]) == 2
    assert main(["sessions", "diff", "s", "--turn", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "--- /dev/null"


def test_rewind_in_this_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(three_turns(tmp_path))
    assert main(["sessions", "show", "s"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "turn 1: 1 file change(s)"
    assert main(["sessions", "rewind", "s", "--to-turn", "3"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "continue with: dsh sessions resume s-fork-1"
    assert (tmp_path / "a.txt").read_text() == "one\nTWO\n"
    assert main(["sessions", "rewind", "s", "--to-turn", "2", "--in-place"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "rewound s to before turn 2 in place"
    assert (tmp_path / "a.txt").read_text() == "one\ntwo\n"
