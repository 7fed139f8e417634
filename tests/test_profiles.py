"""Configured agent profiles: model, system prompt, tool allow-list and output type by path."""

from __future__ import annotations

import attrs
import pytest

from dsh import AgentOptions, DshError, Harness
from dsh.config import AgentConfig
from dsh.profiles import find_profile, options_for


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
