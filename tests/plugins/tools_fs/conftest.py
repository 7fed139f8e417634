"""A harness with the file tools, an agent whose workspace is a fresh directory, and ``call``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dsh import AgentOptions, Harness, ToolExecution, ToolOutcome
from dsh_plugins.tools_fs import FsToolsPlugin
from tests.plugins.tools_fs.support import Call


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def fs_config() -> dict[str, Any]:
    """Overrides for section ``tools_fs``; tests parametrize it to shrink the caps."""
    return {}


@pytest.fixture
async def call(workspace: Path, fs_config: dict[str, Any]) -> AsyncIterator[Call]:
    # No permission policy is loaded here: the tools under test run unrestricted, as configured.
    config = {"tools_fs": fs_config, "permissions": {"mode": "full"}}
    async with Harness(load_entrypoints=False, plugins=[FsToolsPlugin], config=config) as harness:
        agent = harness.agent_loop.create("fs", AgentOptions(workspace=str(workspace)))

        async def run(name: str, **args: Any) -> ToolOutcome:
            execution = ToolExecution("c1", name, json.dumps(args), agent)
            return await harness.tools.execute(execution)

        yield run
