"""Issue #34, as the user met it: ``/plan`` typed while the agent works in ``dsh chat``, in a
real pseudo-terminal against the mock server, with the built-in permissions policy and file
tools. ``/plan`` judges the very next tool call (a ``write_file`` the model was about to make
is refused); a ``/model`` typed beside it is queued, and applied when the turn ends.

The turn is held at a ``gate`` tool (read-only) that returns once the test writes to a FIFO:
the test types while the agent is certainly mid-turn, and lets it go on when the screen shows
what it typed took effect. Nothing waits on a clock."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dsh.testing.mockserver import MockServer, reply
from tests.helpers import disabled_plugins, make_dist
from tests.plugins.terminal_ui.test_pty import BOOT, Screen

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX terminal")

GATE = '''
import asyncio
import os

from dsh import tool

FIFO = {fifo!r}


@tool(effect="read")
async def gate() -> str:
    """Wait until the gate opens."""
    return await asyncio.to_thread(_wait)


def _wait():
    fd = os.open(FIFO, os.O_RDONLY)  # the test holds it open for writing: no wait here
    try:
        return os.read(fd, 1).decode() and "open"
    finally:
        os.close(fd)


class Gate:
    def dsh_register_tools(self, register):
        register(gate)
'''


class GatedChat:
    def __init__(self, screen: Screen, gate: int, workspace: Path) -> None:
        self.screen = screen
        self.gate = gate
        self.workspace = workspace

    def open_gate(self) -> None:
        os.write(self.gate, b"x")


@pytest.fixture
async def gated(mock_server: MockServer, tmp_path: Path) -> AsyncIterator[GatedChat]:
    fifo = tmp_path / "gate.fifo"
    os.mkfifo(fifo)
    gate = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # never blocks, and keeps the FIFO open
    source = GATE.format(fifo=str(fifo))
    make_dist(tmp_path, "gate_tool", {"zz_gate": "gate_tool:Gate"}, {"gate_tool": source})
    config = tmp_path / "dsh.toml"
    config.write_text(f'[llm_deepseek]\nbase_url = "{mock_server.url}"\napi_key = "mock-key"\n')
    workspace = tmp_path / "work"
    workspace.mkdir()
    env = dict(os.environ, TERM="xterm", PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    env["DSH_DISABLE_PLUGINS"] = disabled_plugins()  # the built-in permissions policy judges
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env.pop("NO_COLOR", None)
    master, slave = pty.openpty()
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", BOOT, "--config", str(config), "chat", "--no-thinking",
        stdin=slave, stdout=slave, stderr=slave, env=env, cwd=workspace, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    screen = Screen(master, child)
    try:
        yield GatedChat(screen, gate, workspace)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
        screen.close()
        os.close(gate)


async def test_plan_typed_mid_turn_judges_the_next_call_and_model_waits(
    gated: GatedChat, mock_server: MockServer
) -> None:
    chat = gated.screen
    await chat.expect("dsh chat · deepseek-flash · session chat-")
    await chat.expect("> ")
    write = json.dumps({"path": "plan.txt", "content": "written while planning"})
    mock_server.queue(
        reply(tool_calls=[("g1", "gate", "{}")], name="gate"),
        reply(tool_calls=[("w1", "write_file", write)], name="write"),
        reply(text="I will write plan.txt once you approve.", name="answer"),
    )
    chat.type("write plan.txt\r")
    await chat.expect("→ gate")  # the agent is mid-turn, held at the gate

    chat.type("/plan\r")
    await chat.expect("plan mode: only read-only tools run, from the agent's next tool call on")
    chat.type("/model deepseek-v4-pro\r")
    await chat.expect("⧗ /model deepseek-v4-pro: runs when the agent is done")

    gated.open_gate()
    await chat.expect("→ write_file")
    await chat.expect("✗ ")  # refused: the call was judged in plan mode
    await chat.expect("I will write plan.txt once you approve.")
    await chat.expect("▸ /model deepseek-v4-pro (queued while the agent worked)")
    await chat.expect("model: deepseek-v4-pro")
    await chat.expect("> ")
    assert not (gated.workspace / "plan.txt").exists()

    mock_server.queue(reply(text="Hello from the pro model.", name="hello"))
    chat.type("hello\r")
    await chat.expect("Hello from the pro model.")
    await chat.expect("── ")
    await chat.expect("> ")
    models = [request.body["model"] for request in mock_server.requests]
    assert models == ["deepseek-flash"] * 3 + ["deepseek-v4-pro"]
    after_plan = mock_server.requests[1].body["messages"][0]["content"]
    assert "You are in plan mode" in after_plan  # and the model was told, from that step on
    assert "plan mode" not in mock_server.requests[0].body["messages"][0]["content"]

    chat.type("/quit\r")
    assert await chat.exit_code() == 0
