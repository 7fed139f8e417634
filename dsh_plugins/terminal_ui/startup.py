"""What ``dsh run`` and ``dsh chat`` share before the first prompt: their options, the checks
that fail early with a clear message (unknown model, missing API key, bad workspace), and the
agent they drive (new, ``--resume ID`` or ``--continue``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from urllib.parse import urlsplit

from dsh.agent import AgentOptions
from dsh.errors import DshError
from dsh.harness import Harness
from dsh.logs import configure_logging
from dsh.loop import LoopAgent
from dsh_plugins.terminal_ui.config import SECTION, TerminalUiConfig

__all__ = [
    "NO_KEY",
    "add_agent_options",
    "agent_options",
    "model_problem",
    "open_agent",
    "options_problem",
    "quiet_logs",
    "section",
]

NO_KEY = (
    "no DeepSeek API key: export DEEPSEEK_API_KEY=sk-... "
    "(get one at https://platform.deepseek.com/api_keys), or try `dsh demo` to run offline"
)
_REAL_API_HOST = "api.deepseek.com"


def add_agent_options(parser: argparse.ArgumentParser) -> None:
    """The options ``run`` and ``chat`` share."""
    parser.add_argument("-m", "--model", help="the model to talk to (default: deepseek-v4-flash)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("-r", "--resume", metavar="SESSION_ID", help="continue a stored session")
    which.add_argument(
        "-c",
        "--continue",
        dest="continue_latest",
        action="store_true",
        help="continue the most recent stored session",
    )
    parser.add_argument("--workspace", metavar="DIR", help="the directory tools may touch")
    parser.add_argument("--system", metavar="TEXT", help="extra system prompt for the agent")
    parser.add_argument(
        "-y", "--yes", action="store_true", help="approve every tool call a policy asks about"
    )
    parser.add_argument(
        "--hide-reasoning", action="store_true", help="do not show the model's reasoning"
    )
    # ``--config`` is the global option of ``dsh``: read before the command is parsed wherever
    # it stands. Accepting it after the command too only spares users an argparse error.
    parser.add_argument("--config", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def quiet_logs(args: argparse.Namespace) -> None:
    """Both commands show failed turns themselves, so the loop's warning about them would say
    it twice: log only errors, unless ``--log-level`` was changed from its default."""
    if getattr(args, "log_level", None) == "warning":
        configure_logging(args.log_format, "error")


def section(harness: Harness) -> TerminalUiConfig:
    return harness.config.section(SECTION, TerminalUiConfig)


def agent_options(harness: Harness, args: argparse.Namespace) -> AgentOptions:
    """The agent's options from the command line, falling back on ``[terminal_ui]``."""
    workspace = os.path.abspath(args.workspace) if args.workspace else None
    return AgentOptions(
        model=args.model or section(harness).model,
        system_prompt=args.system or "",
        workspace=workspace,
    )


def model_problem(harness: Harness, model: str) -> str | None:
    """Why ``model`` cannot be used now (unknown, or needs a key nobody gave), else ``None``."""
    known = harness.llm.models()
    if model not in known:
        return f"no adapter serves model {model!r}; known models: {', '.join(known) or 'none'}"
    if _needs_deepseek_key(harness, model):
        return NO_KEY
    return None


def _needs_deepseek_key(harness: Harness, model: str) -> bool:
    """True when the DeepSeek adapter would call the real API with no key: no
    ``DEEPSEEK_API_KEY``, no ``api_key`` configured, and ``base_url`` the real API (a base URL
    pointing elsewhere, such as the mock server, works offline)."""
    dump = harness.config.dump()
    deepseek = dump.get("llm_deepseek")
    if deepseek is None or os.environ.get("DEEPSEEK_API_KEY") or deepseek.get("api_key"):
        return False
    served = {*deepseek["models"], *(f"deepseek/{m}" for m in deepseek["models"])}
    return model in served and urlsplit(deepseek["base_url"]).hostname == _REAL_API_HOST


def options_problem(harness: Harness, args: argparse.Namespace) -> str | None:
    """Why the command cannot start with these options, else ``None``."""
    if args.workspace and not Path(args.workspace).is_dir():
        return f"workspace {args.workspace!r} is not a directory"
    return model_problem(harness, agent_options(harness, args).model)


async def open_agent(
    harness: Harness, agent_id: str, args: argparse.Namespace, options: AgentOptions
) -> LoopAgent:
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
