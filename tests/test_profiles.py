"""Configured agent profiles: model, system prompt, tool allow-list and output type by path."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import attrs
import pytest

from dsh import AgentOptions, DshError, Harness
from dsh.loop._profiles import find_profile, options_for
from dsh.values._config import AgentConfig


@attrs.frozen
class Summary:
    text: str


def test_options_for_a_profile() -> None:
    profile = AgentConfig(
        id="r", system_prompt="Review.", tools=("read",), output_type=f"{__name__}:Summary"
    )
    base = AgentOptions(model="base", system_prompt="old", temperature=0.5)
    options = options_for(profile, base)
    assert options == AgentOptions(
        model="base",
        system_prompt="Review.",
        temperature=0.5,
        tools=("read",),
        output_type=Summary,
    )
    assert options_for(AgentConfig(id="x", model="m")) == AgentOptions(model="m")


def test_find_profile() -> None:
    profiles = (AgentConfig(id="a"), AgentConfig(id="b"))
    assert find_profile(profiles, "b") is profiles[1]
    with pytest.raises(DshError, match=r"no agent profile 'c' .*\(configured: a, b\)"):
        find_profile(profiles, "c")
    with pytest.raises(DshError, match="none are configured"):
        find_profile((), "c")


async def test_configured_agents_are_created_with_their_profile() -> None:
    agents = [{"id": "r", "model": "m", "tools": ["read"], "output_type": f"{__name__}:Summary"}]
    config = {"agent_loop": {"agents": agents}}
    async with Harness(config=config, load_entrypoints=False) as harness:
        agent = harness.agents.get("r")
        assert agent is not None
        assert (agent.options.tools, agent.options.output_type) == (("read",), Summary)


# -- a project's own types, beside its dsh.toml -----------------------------------------------

REVIEW = """
import attrs


@attrs.frozen
class Review:
    verdict: str
"""


def _project(tmp_path: Path, output_type: str) -> Path:
    """A project directory: its ``dsh.toml`` names a profile whose type lives beside it."""
    project = tmp_path / "project"
    (project / "reviewapp").mkdir(parents=True)
    (project / "reviewapp" / "__init__.py").write_text("")
    (project / "reviewapp" / "types.py").write_text(REVIEW)
    (project / "dsh.toml").write_text(
        f'[[agent_loop.agents]]\nid = "review"\noutput_type = "{output_type}"\n\n'
        '[[agent_loop.agents]]\nid = "plain"\n'
    )
    return project


async def test_an_output_type_imports_from_the_config_files_directory(tmp_path: Path) -> None:
    """The console script does not put the project on ``sys.path``: the type is looked for
    beside ``dsh.toml`` first (not from the working directory, which is elsewhere here)."""
    project = _project(tmp_path, "reviewapp.types:Review")
    assert str(project) not in sys.path
    async with Harness(load_entrypoints=False, config=project / "dsh.toml") as harness:
        agent = harness.agents.get("review")
        assert agent is not None and agent.options.output_type.__name__ == "Review"
    assert str(project) not in sys.path  # looked in, not left there


async def test_a_profile_whose_type_does_not_import_does_not_stop_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _project(tmp_path, "reviewapp.nope:Review")
    async with Harness(load_entrypoints=False, config=project / "dsh.toml") as harness:
        assert harness.agents.get("review") is None
        assert harness.agents.get("plain") is not None
    logged = capsys.readouterr()
    assert "agent profile not created" in logged.out + logged.err
    assert f"looked in {project}" in logged.out + logged.err


async def test_the_commands_that_need_the_profile_say_why_in_one_line(tmp_path: Path) -> None:
    project = _project(tmp_path, "reviewapp.nope:Review")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dsh",
        "run",
        "--agent",
        "review",
        "hi",
        cwd=project,
        env={k: v for k, v in os.environ.items() if k != "DSH_CONFIG"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await process.communicate()
    assert process.returncode == 2
    assert err.decode().strip().splitlines() == [
        f"dsh run: cannot import the output type 'reviewapp.nope:Review' (looked in {project} "
        "and on sys.path): No module named 'reviewapp.nope'"
    ]
