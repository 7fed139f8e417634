"""Security: no secret reaches a command, and no command outlives its call."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dsh import AgentOptions, Harness
from dsh.testing import ScriptedAdapter, text_response, tool_call_response
from dsh.tools._output import HeadTail
from dsh.values._events import ToolResultEvent
from dsh_plugins.tools_shell import ShellToolPlugin, process
from dsh_plugins.tools_shell.process import run_command
from tests.plugins.tools_shell.support import Call, alive, eventually, pids, running_with, text

SECRETS = {
    "OPENAI_API_KEY": "sk-openai-value",
    "DEEPSEEK_API_KEY": "sk-deepseek-value",
    "GITHUB_TOKEN": "ghp-token-value",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    "DB_PASSWORD": "db-password-value",
    "my_service_secret": "lowercase-secret-value",
}

#: Starts a child that ignores SIGTERM, records both pids, then waits for the child.
STUBBORN = "trap '' TERM; sleep 30 & echo $! > child.pid; echo $$ > shell.pid; wait"


async def test_secret_variables_are_absent(call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PLAIN_SETTING", "plain-value")
    monkeypatch.setenv("LANG", "C.UTF-8")
    seen = text(await call("shell", command="env"))
    leaked = [name for name, value in SECRETS.items() if name in seen or value in seen]
    assert leaked == []
    assert "PLAIN_SETTING" not in seen  # not on the allow-list
    assert "LANG=C.UTF-8" in seen and f"PATH={os.environ['PATH']}" in seen
    assert "PAGER=cat" in seen


@pytest.mark.parametrize("shell_config", [{"env_allow": ["PLAIN_*", "EXACT"]}])
async def test_config_adds_to_the_allow_list(call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAIN_SETTING", "plain-value")
    monkeypatch.setenv("PLAIN_TOKEN", "token-value")
    monkeypatch.setenv("EXACT", "exact-value")
    seen = text(await call("shell", command="env"))
    assert "PLAIN_SETTING=plain-value" in seen and "EXACT=exact-value" in seen
    assert "token-value" not in seen  # a glob never passes a secret-looking name


@pytest.mark.parametrize("shell_config", [{"env_allow": ["GITHUB_TOKEN"]}])
async def test_a_secret_can_be_allowed_explicitly(
    call: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-token-value")
    monkeypatch.setenv("OTHER_TOKEN", "other-value")
    seen = text(await call("shell", command="env"))
    assert "GITHUB_TOKEN=ghp-token-value" in seen and "OTHER_TOKEN" not in seen


@pytest.mark.parametrize("shell_config", [{"kill_grace_s": 0.1}])
async def test_a_command_that_ignores_sigterm_is_still_killed_at_timeout(
    call: Call, workspace: Path
) -> None:
    # 1 s: the shell must have set its trap and written the pids before the timeout, even on a
    # loaded machine.
    started = time.monotonic()
    outcome = await call("shell", command=STUBBORN, timeout_s=1.0)
    assert outcome.code == "TOOL_TIMEOUT"
    assert time.monotonic() - started < 20  # not the 30 s the command would have taken
    child, shell = await pids(workspace / "child.pid", workspace / "shell.pid")
    await eventually(lambda: not alive(child) and not alive(shell))


@pytest.mark.parametrize("shell_config", [{"kill_grace_s": 0.2}])
async def test_children_that_outlive_the_leader_are_killed_too(call: Call, workspace: Path) -> None:
    # The shell dies of SIGTERM at once; the subshell ignores it and must still be killed.
    command = "(trap '' TERM; sleep 30) & echo $! > child.pid; echo $$ > shell.pid; wait"
    # 1 s: the pids must be written before the timeout, even on a loaded machine.
    outcome = await call("shell", command=command, timeout_s=1.0)
    assert outcome.code == "TOOL_TIMEOUT"
    child, shell = await pids(workspace / "child.pid", workspace / "shell.pid")
    await eventually(lambda: not alive(child) and not alive(shell))


@pytest.mark.parametrize("shell_config", [{"kill_grace_s": 0.1}])
async def test_cancelling_the_call_kills_the_process_group(
    call: Call, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cancelled while reading the output (the pid files can appear before the call is back from
    # starting the command, which another test covers): wait until the call reads.
    reading = asyncio.Event()
    pump = process._pump

    async def watched(stream: asyncio.StreamReader, output: Any) -> None:
        reading.set()
        await pump(stream, output)

    monkeypatch.setattr(process, "_pump", watched)
    running = asyncio.ensure_future(call("shell", command=STUBBORN))
    child, shell = await pids(workspace / "child.pid", workspace / "shell.pid")
    assert alive(child) and alive(shell)
    await reading.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await eventually(lambda: not alive(child) and not alive(shell))


async def test_a_cancellation_while_the_command_starts_kills_its_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The process runs before create_subprocess_exec returns: hold it there, then cancel.
    spawn = asyncio.create_subprocess_exec
    started, release = asyncio.Event(), asyncio.Event()

    async def slow_spawn(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await spawn(*args, **kwargs)
        started.set()
        await release.wait()
        return process

    monkeypatch.setattr(asyncio, "create_subprocess_exec", slow_spawn)
    marker = f"30.{os.getpid()}{time.monotonic_ns() % 100000}"
    running = asyncio.ensure_future(
        run_command(
            ["/bin/sh", "-c", f"sleep {marker} & wait"],
            cwd=tmp_path,
            env=dict(os.environ),
            timeout_s=60,
            grace_s=0.1,
            output=HeadTail(100),
        )
    )
    await started.wait()
    await eventually(lambda: bool(running_with(marker)))
    running.cancel()
    await asyncio.sleep(0.01)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await running
    await eventually(lambda: not running_with(marker))


@pytest.mark.parametrize("shell_config", [{"kill_grace_s": 60}])
async def test_a_second_cancellation_kills_at_once(call: Call, workspace: Path) -> None:
    running = asyncio.ensure_future(call("shell", command=STUBBORN))
    child, shell = await pids(workspace / "child.pid", workspace / "shell.pid")
    running.cancel()
    await asyncio.sleep(0.05)  # the call is now inside its 60 s grace period
    assert not running.done() and alive(child)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await eventually(lambda: not alive(child) and not alive(shell))


async def test_a_process_that_leaves_the_group_does_not_hang_the_call(
    call: Call, workspace: Path
) -> None:
    # It starts its own session (out of reach by design) and keeps the output pipe open; the
    # shell waits until it has left the group, so only the timeout can end the call (1 s: time
    # for Python to start on a loaded machine).
    escape = (
        f'{sys.executable} -c \'import os, time; os.setsid(); open("left", "w").close(); '
        "time.sleep(30)'"
    )
    command = f"{escape} & echo $! > daemon.pid; until [ -e left ]; do sleep 0.01; done"
    started = time.monotonic()
    outcome = await call("shell", command=f"{command}; echo started", timeout_s=1.0)
    assert time.monotonic() - started < 20  # not the 30 s the daemon holds the pipe
    assert outcome.code == "TOOL_TIMEOUT" and "Output so far:\nstarted\n" in text(outcome)
    [daemon] = await pids(workspace / "daemon.pid")
    os.kill(daemon, signal.SIGKILL)


async def test_aborting_the_agent_kills_the_running_command(tmp_path: Path) -> None:
    adapter = ScriptedAdapter(
        [tool_call_response("c1", "shell", {"command": STUBBORN}), text_response("never")]
    )
    config: dict[str, Any] = {"tools_shell": {"kill_grace_s": 0.1}, "permissions": {"mode": "full"}}
    async with Harness(load_entrypoints=False, plugins=[ShellToolPlugin], config=config) as h:
        h.llm.register_adapter(["scripted"], adapter)
        agent = h.agent_loop.create("a", AgentOptions(model="scripted", workspace=str(tmp_path)))
        agent.send("run it")
        child, shell = await pids(tmp_path / "child.pid", tmp_path / "shell.pid")
        agent.abort("user pressed stop")
        await agent.wait_idle()
    [result] = [e.data for e in agent.session.events if e.type == "tool/result"]
    assert isinstance(result, ToolResultEvent) and result.code == "ABORTED"
    await eventually(lambda: not alive(child) and not alive(shell))
