"""A command cannot read the harness's secrets through ``/proc``: the harness wipes them from
its initial environment block and makes itself non-dumpable when the shell plugin starts."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dsh import Harness
from dsh_plugins.tools_shell import ShellToolPlugin
from dsh_plugins.tools_shell.environment import (
    PR_SET_DUMPABLE,
    protect_process,
    set_non_dumpable,
    wipe_environment_block,
)

PR_GET_DUMPABLE = 3
KEY = "sk-deepseek-very-secret-1234"
OTHER = "ghp-other-secret-5678"

#: A harness in its own process, started with secrets in its environment: its shell tool tries
#: every path to the harness's environment; the harness then reports what it still sees.
HARNESS = textwrap.dedent(
    """
    import asyncio, json, os, subprocess, sys
    from dsh import AgentOptions, Harness, ToolExecution
    from dsh_plugins.tools_shell import ShellToolPlugin

    PROBE = (
        "cat /proc/$PPID/environ; echo; cat /proc/{pid}/environ; echo; "
        "cat /proc/$PPID/task/*/environ; echo; env"
    )

    async def main():
        config = json.loads(sys.argv[1])
        async with Harness(load_entrypoints=False, plugins=[ShellToolPlugin], config=config) as h:
            agent = h.agent_loop.create("a", AgentOptions(workspace=os.getcwd()))
            command = json.dumps({"command": PROBE.format(pid=os.getpid())})
            outcome = await h.tools.execute(ToolExecution("c", "shell", command, agent))
        inherited = subprocess.run(
            ["sh", "-c", "echo $DEEPSEEK_API_KEY"], capture_output=True, text=True
        ).stdout.strip()
        print(json.dumps({
            "shell": outcome.content[0].text,
            "environ": os.environ.get("DEEPSEEK_API_KEY"),
            "inherited": inherited,
        }))

    asyncio.run(main())
    """
)


def run_harness(tmp_path: Path, shell_config: dict[str, object]) -> dict[str, str]:
    config = {"tools_shell": shell_config, "permissions": {"mode": "full"}}
    env = {**os.environ, "DEEPSEEK_API_KEY": KEY, "GITHUB_TOKEN": OTHER, "PLAIN": "plain-1"}
    done = subprocess.run(
        [sys.executable, "-c", HARNESS, json.dumps(config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_a_command_cannot_read_the_harness_secrets_through_proc(tmp_path: Path) -> None:
    seen = run_harness(tmp_path, {})
    assert "DEEPSEEK_API_KEY=" in seen["shell"]  # the command did read the block...
    assert "plain-1" in seen["shell"]  # ...which still holds what is not secret
    assert KEY not in seen["shell"] and OTHER not in seen["shell"]  # ...without the secrets
    # The harness itself, and what it starts with the inherited environment, still have them.
    assert seen["environ"] == KEY and seen["inherited"] == KEY


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_without_protection_the_command_reads_them(tmp_path: Path) -> None:
    seen = run_harness(tmp_path, {"protect_process": False})
    assert KEY in seen["shell"] and OTHER in seen["shell"]


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_the_process_is_made_non_dumpable(tmp_path: Path) -> None:
    script = (
        "import ctypes; from dsh_plugins.tools_shell.environment import set_non_dumpable\n"
        "libc = ctypes.CDLL(None)\n"
        "print(libc.prctl(3, 0, 0, 0, 0), set_non_dumpable(), libc.prctl(3, 0, 0, 0, 0))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == ["1", "True", "0"]  # PR_GET_DUMPABLE before and after


def fake_proc(tmp_path: Path, memory: ctypes.Array[ctypes.c_char], shown: bytes) -> Path:
    """A ``/proc/<pid>`` look-alike whose ``stat`` points at ``memory`` (a buffer of this
    process) and whose ``environ`` shows ``shown``."""
    proc = tmp_path / "proc"
    proc.mkdir()
    start = ctypes.addressof(memory)
    fields = ["S", *["0"] * 46, str(start), str(start + len(shown)), "0", "0"]
    (proc / "stat").write_text(f"1 (python (x)) {' '.join(fields)}\n")
    (proc / "environ").write_bytes(shown)
    return proc


def test_only_the_values_of_secret_variables_are_wiped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = b"PATH=/bin\0MY_TOKEN=abc\0GONE_SECRET=xyz\0NOVALUE=\0BARE\0"
    memory = ctypes.create_string_buffer(block, len(block))
    monkeypatch.setenv("MY_TOKEN", "abc")
    monkeypatch.delenv("GONE_SECRET", raising=False)
    wiped = wipe_environment_block(["*TOKEN*", "*SECRET*"], fake_proc(tmp_path, memory, block))
    assert wiped == ["MY_TOKEN", "GONE_SECRET"]
    assert memory.raw == b"PATH=/bin\0MY_TOKEN=\0\0\0\0GONE_SECRET=\0\0\0\0NOVALUE=\0BARE\0"
    assert os.environ["MY_TOKEN"] == "abc"
    inherited = subprocess.run(["sh", "-c", "echo $MY_TOKEN"], capture_output=True, text=True)
    assert inherited.stdout == "abc\n"  # the C library's copy was kept
    assert wipe_environment_block(["*TOKEN*"], tmp_path / "proc") == []  # nothing left to wipe


def test_nothing_is_written_unless_the_memory_holds_the_block(tmp_path: Path) -> None:
    memory = ctypes.create_string_buffer(b"MY_TOKEN=different", 18)
    proc = fake_proc(tmp_path, memory, b"MY_TOKEN=abcdefghi")
    assert wipe_environment_block(["*TOKEN*"], proc) == []
    assert memory.raw == b"MY_TOKEN=different"
    (proc / "environ").write_bytes(b"MY_TOKEN=abc")  # a block of another length
    assert wipe_environment_block(["*TOKEN*"], proc) == []
    assert memory.raw == b"MY_TOKEN=different"


def test_without_proc_nothing_is_wiped(tmp_path: Path) -> None:
    assert wipe_environment_block(["*"], tmp_path / "absent") == []
    assert protect_process(["*"], tmp_path / "absent") == []
    assert set_non_dumpable() in (True, False)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux prctl")
@pytest.mark.parametrize(("protect", "dumpable"), [(True, 0), (False, 1)])
async def test_the_harness_protects_itself_at_start_unless_told_not_to(
    protect: bool, dumpable: int
) -> None:
    libc = ctypes.CDLL(None)
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as a process starts
    config = {"tools_shell": {"protect_process": protect}}
    async with Harness(load_entrypoints=False, plugins=[ShellToolPlugin], config=config):
        assert libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == dumpable
