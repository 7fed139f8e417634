"""What ``dsh run`` and ``dsh chat`` share before the first prompt: their options, the checks
that fail early with a clear message (unknown model, missing API key, bad workspace), and the
agent they drive (new, ``--resume ID`` or ``--continue``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from urllib.parse import urlsplit

from dsh.plugin import (
    Agent,
    AgentConfig,
    AgentLoopConfig,
    AgentOptions,
    DshError,
    Harness,
    api_key,
    configure_logging,
    import_type,
    resolve_alias,
    start_export,
)
from dsh_plugins.terminal_ui.config import SECTION, TerminalUiConfig
from dsh_plugins.terminal_ui.options import add_agent_options

__all__ = [
    "NO_KEY",
    "add_agent_options",
    "agent_options",
    "model_problem",
    "open_agent",
    "options_problem",
    "quiet_logs",
    "section",
    "usable_models",
]

NO_KEY = (
    "no DeepSeek API key: export DEEPSEEK_API_KEY=sk-... or store one with `dsh keys set "
    "deepseek` (get one at https://platform.deepseek.com/api_keys), or try `dsh demo` to run "
    "offline"
)
_REAL_API_HOST = "api.deepseek.com"


def quiet_logs(args: argparse.Namespace) -> None:
    """Both commands show failed turns themselves, so the loop's warning about them would say
    it twice: log only errors, unless ``--log-level`` was changed from its default."""
    if getattr(args, "log_level", None) == "warning":
        configure_logging(args.log_format, "error", deferred=True)


def section(harness: Harness) -> TerminalUiConfig:
    return harness.config.section(SECTION, TerminalUiConfig)


def agent_options(harness: Harness, args: argparse.Namespace) -> AgentOptions:
    """The agent's options from the command line, falling back on the ``--agent``'s config,
    then on ``[terminal_ui]``; a model alias (``dsh models alias set``) becomes its model. The
    ``--agent``'s tool allow-list and output type (by import path) apply as they are."""
    workspace = os.path.abspath(args.workspace) if args.workspace else None
    agent = configured_agent(harness, args.agent) or AgentConfig(id="")
    return AgentOptions(
        model=resolve_alias(args.model or agent.model or section(harness).model),
        system_prompt=args.system or agent.system_prompt,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        reasoning_effort=args.effort,
        thinking=args.thinking,
        workspace=workspace,
        tools=agent.tools,
        output_type=import_type(agent.output_type, harness.config_dir)
        if agent.output_type
        else None,
    )


def configured_agent(harness: Harness, agent_id: str | None) -> AgentConfig | None:
    """The ``[[agent_loop.agents]]`` entry with id ``agent_id`` (``None`` for none asked)."""
    if agent_id is None:
        return None
    agents = harness.config.section("agent_loop", AgentLoopConfig).agents
    for agent in agents:
        if agent.id == agent_id:
            return agent
    known = ", ".join(agent.id for agent in agents) or "none is configured"
    raise DshError(f"no configured agent {agent_id!r} ([[agent_loop.agents]]: {known})")


def model_problem(harness: Harness, model: str) -> str | None:
    """Why ``model`` cannot be used now (unknown, or needs a key nobody gave), else ``None``."""
    if not harness.llm.serves(model):
        known = ", ".join(usable_models(harness)) or "none"
        return f"no adapter serves model {model!r}; known models: {known}"
    unavailable = harness.llm.unavailable(model)
    if unavailable is not None:
        return unavailable
    if _needs_deepseek_key(harness, model):
        return NO_KEY
    return None


def usable_models(harness: Harness) -> list[str]:
    """The models an adapter serves and can serve here (a model whose optional dependency is
    not installed is left out)."""
    return [model for model in harness.llm.models() if harness.llm.unavailable(model) is None]


def _needs_deepseek_key(harness: Harness, model: str) -> bool:
    """True when the DeepSeek adapter would call the real API with no key: no
    ``DEEPSEEK_API_KEY``, no ``api_key`` configured, and ``base_url`` the real API (a base URL
    pointing elsewhere, such as the mock server, works offline)."""
    dump = harness.config.dump()
    deepseek = dump.get("llm_deepseek")
    if deepseek is None or deepseek.get("api_key") or api_key("deepseek", "DEEPSEEK_API_KEY"):
        return False
    real_api = urlsplit(deepseek["base_url"]).hostname == _REAL_API_HOST
    return real_api and _served_by_deepseek(harness, deepseek["models"], model)


def _served_by_deepseek(harness: Harness, configured: list[str], model: str) -> bool:
    """Whether the adapter serving ``model`` (a known id) is the one serving the configured
    DeepSeek models: it also serves names this plugin does not list (legacy aliases)."""
    known = harness.llm.models()
    anchors = [f"deepseek/{name}" for name in configured if f"deepseek/{name}" in known]
    return bool(anchors) and harness.llm.adapter_for(model) is harness.llm.adapter_for(anchors[0])


def options_problem(harness: Harness, args: argparse.Namespace) -> str | None:
    """Why the command cannot start with these options, else ``None``. With ``--otel`` it
    also starts the OpenTelemetry export (or says what to install)."""
    if getattr(args, "otel", False) and (problem := start_export()):
        return problem
    if args.workspace and not Path(args.workspace).is_dir():
        return f"workspace {args.workspace!r} is not a directory"
    if args.effort is not None and args.thinking is False:
        return "--effort sets how hard the model reasons: drop --no-thinking, or drop --effort"
    try:
        model = agent_options(harness, args).model
    except DshError as exc:
        return str(exc)
    return model_problem(harness, model)


async def open_agent(
    harness: Harness, agent_id: str, args: argparse.Namespace, options: AgentOptions
) -> Agent:
    """A new agent on a fresh session, or one on the stored session ``--resume`` names (or the
    newest, for ``--continue``). Raises ``DshError`` with a message for the user."""
    session_id: str | None = args.resume
    if args.continue_latest:
        stored = await harness.sessions.stored(limit=1)
        if not stored:
            raise DshError("there is no stored session to continue")
        session_id = stored[0].id
    if session_id is None:  # a fresh session, with an id no stored one has
        return harness.agent_loop.create(agent_id, options)
    return await harness.agent_loop.resume(session_id, options, agent_id)
