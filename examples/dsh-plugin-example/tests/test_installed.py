"""The installed distribution: dsh finds the plugin through its entry point.

These run against the package as pip installed it (the ``src`` layout keeps the source tree off
``sys.path``), next to dsh's own built-in plugins, talking to dsh's mock DeepSeek server over
real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from pathlib import Path

from dsh import AgentOptions, Harness
from dsh.testing.mock import deepseek_config
from dsh.testing.mockserver import MockServer, reply

import dsh_example

Factory = Callable[..., Awaitable[Harness]]


def test_dsh_plugins_lists_it_with_its_distribution() -> None:
    dsh = Path(sys.executable).with_name("dsh")
    # Not check=True: the exit code also reports other distributions' plugins that failed.
    out = subprocess.run([dsh, "plugins"], capture_output=True, text=True).stdout
    mine = [line.split() for line in out.splitlines() if line.startswith("calculator ")]
    assert mine == [["calculator", "dsh-plugin-example", version("dsh-plugin-example")]], out
    assert dsh_example.__version__ == version("dsh-plugin-example")


async def test_a_harness_loads_it_from_the_entry_point(
    dsh_harness_factory: Factory, mock_server: MockServer
) -> None:
    mock_server.queue(
        reply(tool_calls=[("call-1", "calculate", json.dumps({"expression": "6 * 7"}))]),
        reply(text="6 times 7 is 42."),
    )
    harness = await dsh_harness_factory(load_entrypoints=True, config=deepseek_config(mock_server))
    assert harness.plugins.info["calculator"].distribution == "dsh-plugin-example"
    agent = harness.agent_loop.create("a", AgentOptions(model="deepseek-flash"))
    agent.send("What is 6 * 7?")
    await agent.wait_idle()

    first, second = (request.body for request in mock_server.requests)
    assert "calculate" in [tool["function"]["name"] for tool in first["tools"]]
    assert first["messages"][0]["role"] == "system"
    assert "call the calculate tool" in first["messages"][0]["content"]
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call-1", "content": "42"}
