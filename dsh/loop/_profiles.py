"""Configured agent profiles (``[[agent_loop.agents]]``) as agent options.

A profile names a model, a system prompt, the tools the agent may call and the type of its
answer (by import path); the same profile serves ``dsh run/chat --agent ID``, the agents the
harness creates at start, and ``task(agent=ID)`` sub-agents.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attrs import evolve

from dsh.loop._output import import_type
from dsh.values._agent import AgentOptions
from dsh.values._config import AgentConfig
from dsh.values._errors import DshError

__all__ = ["find_profile", "options_for"]


def options_for(
    profile: AgentConfig, base: AgentOptions | None = None, near: Path | None = None
) -> AgentOptions:
    """``base`` with what ``profile`` sets: its model (if it names one), its system prompt,
    its tools and its output type (imported from ``near``, the config file's directory, first).
    Raises :class:`DshError` for an output type that cannot be imported."""
    base = base or AgentOptions()
    output_type = import_type(profile.output_type, near) if profile.output_type else None
    return evolve(
        base,
        model=profile.model or base.model,
        system_prompt=profile.system_prompt,
        tools=profile.tools,
        output_type=output_type,
    )


def find_profile(profiles: Sequence[AgentConfig], agent_id: str) -> AgentConfig:
    """The profile ``agent_id``; raises :class:`DshError` naming the configured ones."""
    for profile in profiles:
        if profile.id == agent_id:
            return profile
    known = ", ".join(p.id for p in profiles) or "none are configured"
    raise DshError(f"no agent profile {agent_id!r} in [[agent_loop.agents]] (configured: {known})")
