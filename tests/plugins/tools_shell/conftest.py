"""A harness with the shell tool, an agent whose workspace is a fresh directory, and ``call``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dsh import AgentOptions, Harness, ToolExecution, ToolOutcome
from dsh_plugins.tools_shell import ShellToolPlugin
from tests.plugins.tools_shell.support import Call


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def shell_config() -> dict[str, Any]:
    """Overrides for section ``tools_shell``; tests parametrize it."""
    return {"kill_grace_s": 0.1}


@pytest.fixture
async def call(workspace: Path, shell_config: dict[str, Any]) -> AsyncIterator[Call]:
    # No permission policy is loaded here: the shell runs unrestricted, as configured.
    config = {"tools_shell": shell_config, "permissions": {"mode": "full"}}
    async with Harness(load_entrypoints=False, plugins=[ShellToolPlugin], config=config) as h:
        agent = h.agent_loop.create("sh", AgentOptions(workspace=str(workspace)))

        async def run(name: str, **args: Any) -> ToolOutcome:
            return await h.tools.execute(ToolExecution("c1", name, json.dumps(args), agent))

        yield run
