"""The permissions middleware in a harness: it vetoes, asks a host, and logs every decision."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from dsh import AgentOptions, ConfigError, DshError, Harness, ToolExecution, ToolOutcome, hookimpl
from dsh.loop._loop import LoopAgent
from dsh.plugin import ApprovalDecided
from dsh.values._content import Text
from dsh_plugins.permissions import (
    ApprovalAsked,
    PermissionsConfig,
    PermissionsPlugin,
)
from dsh_plugins.tools_fs import FsToolsPlugin
from dsh_plugins.tools_shell import ShellToolPlugin

Call = Callable[..., Awaitable[ToolOutcome]]


class Approver:
    """A host that answers approval requests with ``answer`` and records what it was asked."""

    def __init__(self, answer: bool | None) -> None:
        self.answer = answer
        self.asked: list[tuple[str, str]] = []

    @hookimpl
    def dsh_tools_approve(self, execution: ToolExecution, reason: str) -> bool | None:
        self.asked.append((execution.name, reason))
        return self.answer


class Inner:
    """A middleware of another plugin: it must never see a call the policy denied."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @hookimpl
    async def dsh_tools_execute(self, execution: ToolExecution, call_next: Any) -> Any:
        self.seen.append(execution.name)
        return await call_next(execution)


class World:
    """A harness with the file and shell tools, the policy, and an agent in a workspace."""

    def __init__(self, harness: Harness, agent: LoopAgent, workspace: Path) -> None:
        self.harness = harness
        self.agent = agent
        self.workspace = workspace

    async def call(self, name: str, agent: bool = True, **args: Any) -> ToolOutcome:
        execution = ToolExecution("c1", name, json.dumps(args), self.agent if agent else None)
        return await self.harness.tools.execute(execution)

    def events(self, type_: str) -> list[Any]:
        return [e.data for e in self.agent.session.events if e.type == type_]


@pytest.fixture
def permissions() -> dict[str, Any]:
    """Section ``permissions`` for the test; parametrize to change it."""
    return {}


@pytest.fixture
def hosts() -> list[object]:
    return []


@pytest.fixture
async def world(
    tmp_path: Path, permissions: dict[str, Any], hosts: list[object]
) -> AsyncIterator[World]:
    plugins = [FsToolsPlugin, ShellToolPlugin, PermissionsPlugin, *hosts]
    config = {"permissions": permissions}
    async with Harness(load_entrypoints=False, plugins=plugins, config=config) as harness:
        agent = harness.agent_loop.create("a", AgentOptions(workspace=str(tmp_path)))
        yield World(harness, agent, tmp_path)


def text(outcome: ToolOutcome) -> str:
    [block] = outcome.content
    assert isinstance(block, Text)
    return block.text


# -- modes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("permissions", [{"mode": "read-only"}])
async def test_read_only_denies_writes_and_commands(world: World) -> None:
    written = await world.call("write_file", path="a.txt", content="x")
    assert (written.is_error, written.code) == (True, "DENIED")
    assert text(written).startswith(
        "Error: permission denied: write_file changes files and the permissions mode is "
        '"read-only", which does not allow it.'
    )
    assert not (world.workspace / "a.txt").exists()
    (world.workspace / "b.txt").write_text("before\n")
    edited = await world.call("edit_file", path="b.txt", old="before", new="after")
    assert edited.code == "DENIED"
    assert (world.workspace / "b.txt").read_text() == "before\n"
    shell = await world.call("shell", command="touch c.txt")
    assert shell.code == "DENIED" and "runs commands" in text(shell)
    assert not (world.workspace / "c.txt").exists()
    assert text(await world.call("read_file", path="b.txt")) == "     1\tbefore"
    decided = world.events("approval/decided")
    assert [(d.name, d.allowed, d.by) for d in decided] == [
        ("write_file", False, "mode"),
        ("edit_file", False, "mode"),
        ("shell", False, "mode"),
        ("read_file", True, "mode"),
    ]
    assert world.events("approval/asked") == []


async def test_workspace_write_writes_but_asks_before_commands(world: World) -> None:
    assert text(await world.call("write_file", path="a.txt", content="x")).startswith("created")
    shell = await world.call("shell", command="touch c.txt")
    assert shell.code == "DENIED"
    assert "shell needs approval" in text(shell) and "was not approved" in text(shell)
    assert not (world.workspace / "c.txt").exists()
    [asked] = world.events("approval/asked")
    assert asked == ApprovalAsked(
        "c1",
        "shell",
        '{"command": "touch c.txt"}',
        'shell runs commands and the permissions mode is "workspace-write"',
    )
    assert world.events("approval/decided")[-1] == ApprovalDecided(
        "c1", "shell", False, "nobody", asked.reason
    )


@pytest.mark.parametrize("permissions", [{"mode": "full"}])
async def test_full_allows_everything(world: World) -> None:
    assert text(await world.call("shell", command="echo hi")) == "hi\n[exit code 0]"


# -- the approver ----------------------------------------------------------------------------


@pytest.mark.parametrize("hosts", [[Approver(True)]])
async def test_a_host_that_approves_lets_the_call_run(world: World, hosts: list[Any]) -> None:
    assert text(await world.call("shell", command="echo approved")) == "approved\n[exit code 0]"
    assert hosts[0].asked == [
        ("shell", 'shell runs commands and the permissions mode is "workspace-write"')
    ]
    assert [d.allowed for d in world.events("approval/decided")] == [True]


@pytest.mark.parametrize(
    ("hosts", "why", "by"),
    [
        ([Approver(False)], "the user declined it.", "approver"),
        ([Approver(None)], "nobody could be asked (a non-interactive run).", "nobody"),
    ],
)
async def test_a_host_that_declines_or_passes_denies(world: World, why: str, by: str) -> None:
    denied = await world.call("shell", command="echo no")
    assert denied.code == "DENIED"
    # An explicit no says the user declined; no answer says nobody could be asked.
    assert f"was not approved: {why} Do not retry" in text(denied)
    assert [d.by for d in world.events("approval/decided")] == [by]


@pytest.mark.parametrize("hosts", [[Approver(True)]])
async def test_writes_outside_the_workspace_ask(world: World, hosts: list[Any]) -> None:
    outcome = await world.call("write_file", path="../escape.txt", content="x")
    # Approved by the host, then refused by the tool itself: confinement does not depend on it.
    assert outcome.code == "OUTSIDE_WORKSPACE"
    assert hosts[0].asked == [
        ("write_file", "write_file would write outside the workspace: ../escape.txt")
    ]


# -- rules -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "permissions",
    [
        {
            "rules": [
                {"tool": "shell", "match": "echo *", "action": "allow"},
                {"tool": "write_file", "match": "*.lock", "action": "deny"},
            ]
        }
    ],
)
async def test_rules_from_config(world: World) -> None:
    assert text(await world.call("shell", command="echo ok")) == "ok\n[exit code 0]"
    compound = await world.call("shell", command="echo ok; touch x")
    assert compound.code == "DENIED" and not (world.workspace / "x").exists()
    locked = await world.call("write_file", path="poetry.lock", content="x")
    assert locked.code == "DENIED" and "rule 2 of [permissions]" in text(locked)
    assert [d.by for d in world.events("approval/decided")] == ["rule", "nobody", "rule"]


async def test_a_bad_config_fails_at_start() -> None:
    config = {"permissions": {"mode": "yolo", "rules": [{"action": "maybe"}]}}
    with pytest.raises(ConfigError) as info:
        Harness(load_entrypoints=False, plugins=[PermissionsPlugin], config=config).load()
    assert len(info.value.errors) == 2


# -- the middleware's place ------------------------------------------------------------------


async def test_the_policy_wraps_other_middleware(tmp_path: Path) -> None:
    inner = Inner()
    # Registered after the policy, so without tryfirst it would be called first.
    plugins = [FsToolsPlugin, PermissionsPlugin, inner]
    config = {"permissions": {"mode": "read-only"}}
    async with Harness(load_entrypoints=False, plugins=plugins, config=config) as harness:
        agent = harness.agent_loop.create("a", AgentOptions(workspace=str(tmp_path)))
        denied = ToolExecution("c1", "write_file", '{"path": "a", "content": "x"}', agent)
        assert (await harness.tools.execute(denied)).code == "DENIED"
        allowed = ToolExecution("c2", "list_dir", "{}", agent)
        assert not (await harness.tools.execute(allowed)).is_error
    assert inner.seen == ["list_dir"]


async def test_calls_the_policy_cannot_judge_pass_through(world: World) -> None:
    unknown = await world.call("no_such_tool")
    assert unknown.code == "UNKNOWN_TOOL"
    execution = ToolExecution("c2", "write_file", "{not json", world.agent)
    assert (await world.harness.tools.execute(execution)).code == "INVALID_ARGS"
    assert [d.name for d in world.events("approval/decided")] == ["write_file"]


async def test_calls_without_an_agent_are_judged_but_not_logged(world: World) -> None:
    assert (await world.call("shell", agent=False, command="echo x")).code == "DENIED"
    assert world.events("approval/asked") == world.events("approval/decided") == []


async def test_the_events_round_trip(world: World) -> None:
    await world.call("shell", command="echo x")
    for event in world.agent.session.events:
        if event.type.startswith("approval/"):
            codec = world.harness.events
            assert codec.decode(json.loads(json.dumps(codec.encode(event)))) == event


async def test_the_plugin_needs_a_harness() -> None:
    async def never(execution: ToolExecution) -> ToolOutcome:
        raise AssertionError

    with pytest.raises(DshError, match="not registered with a harness"):
        await PermissionsPlugin().dsh_tools_execute(ToolExecution("c", "t", "{}"), never)
    assert PermissionsConfig().mode == "workspace-write"


def test_the_plugin_is_registered_as_an_entry_point() -> None:
    from importlib.metadata import entry_points

    (found,) = entry_points(group="dsh", name="permissions")
    assert found.load() is PermissionsPlugin
