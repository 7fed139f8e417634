"""Without a permission policy dsh fails closed: what writes files or runs commands is denied
with an explanation, unless the user asked for ``permissions.mode = "full"``."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import dsh.hooks._loading
from dsh import AgentOptions, Harness, ToolExecution, ToolOutcome
from dsh.testing import ScriptedAdapter, text_response, tool_call_response
from dsh.tools._registry import NoPolicyConfig, Tool, ToolRegistry
from dsh.values._content import Text
from dsh.values._errors import DshError
from dsh.values._events import ToolResultEvent
from dsh.values._request import ToolSchema
from dsh_plugins.permissions import PermissionsPlugin
from dsh_plugins.tools_fs import FsToolsPlugin
from dsh_plugins.tools_shell import ShellToolPlugin

TOOLS = [FsToolsPlugin, ShellToolPlugin]


def text(outcome: ToolOutcome) -> str:
    [block] = outcome.content
    assert isinstance(block, Text)
    return block.text


async def call(harness: Harness, workspace: Path, name: str, **args: Any) -> ToolOutcome:
    agent = harness.agents.get("a") or harness.agent_loop.create(
        "a", AgentOptions(workspace=str(workspace))
    )
    return await harness.tools.execute(ToolExecution("c1", name, json.dumps(args), agent))


@pytest.fixture
async def unpoliced(tmp_path: Path) -> AsyncIterator[Harness]:
    """The file and shell tools, and no permissions plugin."""
    async with Harness(load_entrypoints=False, plugins=TOOLS) as harness:
        yield harness


def assert_explained_denial(outcome: ToolOutcome, tool: str, does: str) -> None:
    assert outcome.is_error and outcome.code == "DENIED"
    message = text(outcome)
    assert message.startswith(f"Error: permission denied: {tool} {does}")
    assert "no permission policy is loaded" in message
    assert "DSH_DISABLE_PLUGINS" in message and "'dsh plugins'" in message
    assert 'mode = "full"' in message and "[permissions]" in message


async def test_writes_and_commands_are_denied_without_a_policy(
    unpoliced: Harness, tmp_path: Path
) -> None:
    outcome = await call(unpoliced, tmp_path, "write_file", path="a.txt", content="x")
    assert_explained_denial(outcome, "write_file", "changes files")
    (tmp_path / "b.txt").write_text("old\n")
    outcome = await call(unpoliced, tmp_path, "edit_file", path="b.txt", old="old", new="new")
    assert_explained_denial(outcome, "edit_file", "changes files")
    outcome = await call(unpoliced, tmp_path, "shell", command="touch ran")
    assert_explained_denial(outcome, "shell", "runs commands")
    assert not (tmp_path / "a.txt").exists() and not (tmp_path / "ran").exists()
    assert (tmp_path / "b.txt").read_text() == "old\n"


async def test_an_unmarked_mcp_tool_is_not_said_to_run_commands(
    unpoliced: Harness, tmp_path: Path
) -> None:
    async def never(args: Any, execution: ToolExecution) -> str:
        raise AssertionError("a denied call ran")

    unpoliced.tools.register(Tool(ToolSchema("mcp__srv__deploy", "d"), never, effect="execute"))
    outcome = await call(unpoliced, tmp_path, "mcp__srv__deploy")
    does = "may change anything (its MCP server does not mark it read-only or non-destructive)"
    assert_explained_denial(outcome, "mcp__srv__deploy", does)


async def test_reads_and_unknown_tools_are_not_held_back(
    unpoliced: Harness, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    assert text(await call(unpoliced, tmp_path, "read_file", path="a.txt")) == "     1\thello"
    outcome = await call(unpoliced, tmp_path, "nope")
    assert outcome.code == "UNKNOWN_TOOL"


async def test_the_model_reads_the_denial_and_nothing_runs(tmp_path: Path) -> None:
    script = [
        tool_call_response("c1", "shell", {"command": "touch ran"}),
        text_response("I may not run commands here."),
    ]
    adapter = ScriptedAdapter(script)
    async with Harness(load_entrypoints=False, plugins=TOOLS) as harness:
        harness.llm.register_adapter(["scripted"], adapter)
        agent = harness.agent_loop.create(
            "a", AgentOptions(model="scripted", workspace=str(tmp_path))
        )
        agent.send("run it")
        await agent.wait_idle()
    [result] = [e.data for e in agent.session.events if e.type == "tool/result"]
    assert isinstance(result, ToolResultEvent)
    assert result.is_error and result.code == "DENIED"
    assert not (tmp_path / "ran").exists()


async def test_mode_full_runs_unrestricted_without_a_policy(tmp_path: Path) -> None:
    config = {"permissions": {"mode": "full"}}
    async with Harness(load_entrypoints=False, plugins=TOOLS, config=config) as harness:
        written = await call(harness, tmp_path, "write_file", path="a.txt", content="x")
        ran = await call(harness, tmp_path, "shell", command="touch ran")
    assert not written.is_error and not ran.is_error
    assert (tmp_path / "a.txt").exists() and (tmp_path / "ran").exists()


@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
async def test_other_modes_keep_the_denial_without_a_policy(tmp_path: Path, mode: str) -> None:
    config = {"permissions": {"mode": mode}}
    async with Harness(load_entrypoints=False, plugins=TOOLS, config=config) as harness:
        outcome = await call(harness, tmp_path, "write_file", path="a.txt", content="x")
    assert_explained_denial(outcome, "write_file", "changes files")


async def test_rules_that_cannot_be_applied_keep_the_denial_even_in_mode_full(
    tmp_path: Path,
) -> None:
    rules = [{"tool": "shell", "match": "rm *", "action": "deny"}]
    config = {"permissions": {"mode": "full", "rules": rules}}
    async with Harness(load_entrypoints=False, plugins=TOOLS, config=config) as harness:
        outcome = await call(harness, tmp_path, "shell", command="rm -rf x")
    assert_explained_denial(outcome, "shell", "runs commands")
    assert "the configured [permissions] rules cannot be applied without it" in text(outcome)


async def test_a_bad_mode_is_still_a_config_error_without_the_plugin() -> None:
    config = {"permissions": {"mode": "yolo"}}
    with pytest.raises(Exception, match=r"\[permissions\]"):
        Harness(load_entrypoints=False, plugins=TOOLS, config=config).load()


def test_loading_without_a_policy_warns_naming_the_held_back_tools() -> None:
    with capture_logs() as logs:
        Harness(load_entrypoints=False, plugins=TOOLS).load()
    [warning] = [e for e in logs if e["event"].startswith("no permission policy is loaded")]
    assert warning["log_level"] == "warning"
    assert warning["tools"] == ["delete_file", "edit_file", "move_file", "shell", "write_file"]


@pytest.mark.parametrize(
    ("plugins", "config"),
    [
        ([*TOOLS, PermissionsPlugin], {}),
        (TOOLS, {"permissions": {"mode": "full"}}),
        ([], {}),  # no tool that writes or runs
    ],
)
def test_nothing_is_said_when_nothing_is_held_back(
    plugins: list[object], config: dict[str, Any]
) -> None:
    with capture_logs() as logs:
        Harness(load_entrypoints=False, plugins=plugins, config=config).load()
    assert not [e for e in logs if e["event"].startswith("no permission policy")]


# -- the policy disabled or broken, through the real entry points ------------------------------


async def test_disabling_the_permissions_plugin_fails_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "permissions")
    async with Harness() as harness:
        assert "permissions" not in harness.plugins.names()
        outcome = await call(harness, tmp_path, "write_file", path="a.txt", content="x")
    assert_explained_denial(outcome, "write_file", "changes files")
    assert not (tmp_path / "a.txt").exists()


async def test_a_permissions_plugin_that_fails_to_load_fails_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = importlib.metadata.EntryPoint(
        "permissions", "dsh_plugins.permissions:NoSuchPlugin", "dsh"
    )

    def discover(group: str) -> list[importlib.metadata.EntryPoint]:
        found = importlib.metadata.entry_points(group=group)
        return [broken, *(ep for ep in found if ep.name != "permissions")]

    monkeypatch.setattr(dsh.hooks._loading, "entry_points", discover)
    monkeypatch.delenv("DSH_DISABLE_PLUGINS", raising=False)
    async with Harness(strict=False) as harness:
        assert [f.name for f in harness.plugins.failures] == ["permissions"]
        outcome = await call(harness, tmp_path, "shell", command="touch ran")
    assert_explained_denial(outcome, "shell", "runs commands")
    assert not (tmp_path / "ran").exists()


# -- the registry's side -----------------------------------------------------------------------


def test_one_policy_at_a_time_and_its_disposer_fails_closed_again() -> None:
    registry = ToolRegistry(Harness(load_entrypoints=False).hooks)
    dispose = registry.install_policy("mine")
    assert registry.install_policy("mine") is not dispose  # the same owner again is fine
    with pytest.raises(DshError, match="two permission policies: 'mine' and 'theirs'"):
        registry.install_policy("theirs")
    dispose()
    assert registry.policy is None
    registry.install_policy("theirs")
    dispose()  # a stale disposer leaves the new policy in place
    assert registry.policy == "theirs"


def test_no_policy_config_is_unrestricted_only_in_mode_full_without_rules() -> None:
    assert NoPolicyConfig("full").unrestricted
    assert not NoPolicyConfig().unrestricted
    assert not NoPolicyConfig("full", ({"tool": "*", "action": "deny"},)).unrestricted


async def test_the_approval_keys_are_accepted_and_change_nothing_without_a_policy(
    tmp_path: Path,
) -> None:
    config = {"permissions": {"approval": "defer", "approval_timeout_s": 60}}
    async with Harness(load_entrypoints=False, plugins=TOOLS, config=config) as harness:
        written = await call(harness, tmp_path, "write_file", path="a.txt", content="x")
        assert written.code == "DENIED" and written.approval is None
    assert not (tmp_path / "a.txt").exists()
