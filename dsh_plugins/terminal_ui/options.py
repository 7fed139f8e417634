"""The options of ``dsh run`` and ``dsh chat``.

Every ``dsh`` command line builds the parsers of every command, and every harness loads the
plugin that registers them, so this module imports nothing at all (``argparse`` only when a
parser is built): the console, the renderer and the rest load only when one of the two
commands runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

__all__ = ["EFFORTS", "add_agent_options", "chat", "run"]

EFFORTS = ("low", "high", "max")


def run(parser: argparse.ArgumentParser) -> None:
    """The options of ``dsh run``."""
    parser.add_argument(
        "prompt", nargs="?", help="what to ask; '-' (or nothing, with input piped) reads stdin"
    )
    parser.add_argument(
        "--json", action="store_true", help="stream the session events as JSON lines instead"
    )
    parser.add_argument("--usage", action="store_true", help="print token usage on stderr")
    parser.add_argument(
        "--schema",
        metavar="SCHEMA",
        help="a JSON Schema (inline or a file path) the answer must match; stdout gets the "
        "validated JSON only (exit code 1 when the answer never matched)",
    )
    add_agent_options(parser)


def chat(parser: argparse.ArgumentParser) -> None:
    """The options of ``dsh chat``."""
    add_agent_options(parser)


def add_agent_options(parser: argparse.ArgumentParser) -> None:
    """The options ``run`` and ``chat`` share."""
    import argparse

    parser.add_argument("-m", "--model", help="the model to talk to (default: deepseek-flash)")
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
    _add_request_options(parser)
    parser.add_argument(
        "-y", "--yes", action="store_true", help="approve every tool call a policy asks about"
    )
    parser.add_argument(
        "--hide-reasoning", action="store_true", help="do not show the model's reasoning"
    )
    parser.add_argument(
        "--otel",
        action="store_true",
        help="send traces and metrics to the OTLP endpoint the OTEL_* variables name",
    )
    # ``--config`` is the global option of ``dsh``: read before the command is parsed wherever
    # it stands. Accepting it after the command too only spares users an argparse error.
    parser.add_argument("--config", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def _add_request_options(parser: argparse.ArgumentParser) -> None:
    """How the model is asked: unset options leave the model's (or the agent's) defaults."""
    import argparse

    parser.add_argument(
        "--agent", metavar="ID", help="start from a configured agent ([[agent_loop.agents]])"
    )
    parser.add_argument(
        "--thinking",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="reason before answering, or not (default: the model's default)",
    )
    parser.add_argument("--effort", choices=EFFORTS, help="how hard to reason (thinking only)")
    parser.add_argument(
        "--temperature", type=_temperature, metavar="T", help="sampling temperature, 0 to 2"
    )
    parser.add_argument(
        "--max-tokens", type=_positive, metavar="N", help="at most N output tokens per step"
    )


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 2.0:
        import argparse

        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to 2")
    return value


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        import argparse

        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)
