"""Logging setup. dsh never configures logging at import; the CLI (or the host) calls
:func:`configure_logging` once. Agent, session and turn ids are bound as context variables by
the loop, so every line logged while an agent works carries them."""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO

import structlog

__all__ = ["configure_logging", "ensure_configured"]


def configure_logging(
    fmt: Literal["console", "json"] = "console",
    level: str = "warning",
    stream: TextIO | None = None,
) -> None:
    """Route structlog to ``stream`` (stderr by default) as coloured console lines or JSON."""
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )


def ensure_configured() -> None:
    """Configure structlog (warnings and up, to stderr) unless the host already did.

    Called when a harness is created, not at import: a host that configures structlog first
    keeps its configuration; one that does not gets quiet, stderr-only logs instead of
    structlog's default of printing every level to stdout.
    """
    if not structlog.is_configured():
        configure_logging()
