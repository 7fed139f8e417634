"""Logging: structlog, imported when dsh first logs a line that can be shown.

dsh logs through structlog and never configures logging at import. Importing structlog costs a
process ~13 ms of CPU, more than any other module dsh's start needs, and a run that logs nothing
needs none of it. So the modules of dsh and of its plugins log through a :class:`Logger`
(:func:`get_logger`), which imports structlog, and configures it as :func:`configure_logging`
does unless someone already did (:func:`ensure_configured`), at the first line it logs.

While structlog is not imported no one can have configured it, so dsh's own configuration would
apply, and it drops ``debug`` and ``info``: such a line is dropped without importing structlog.
Once structlog is imported (by a host, or an earlier line) every line goes to it. The command
line asks for its configuration (``--log-format``, ``--log-level``) with ``deferred``: applied
at the first line logged at that level or above, so a command that logs nothing does not import
structlog either.

The loop binds agent, session and turn with :func:`bind_context`: kept in a context variable of
dsh's and bound on every line dsh logs, and, when structlog is imported (a host that configured
it has), bound with ``structlog.contextvars`` too, so the host's own lines logged while an agent
works carry them.
"""

from __future__ import annotations

import functools
import logging
import sys
from contextvars import ContextVar
from typing import Any, Literal, TextIO

__all__ = [
    "Logger",
    "bind_context",
    "configure_logging",
    "ensure_configured",
    "get_logger",
    "level_number",
]

#: The level dsh's own configuration shows from (warnings and up).
DEFAULT_LEVEL = "warning"
#: What :func:`bind_context` bound in this context (a new mapping each time, never changed).
_CONTEXT: ContextVar[dict[str, Any]] = ContextVar("dsh_log_context", default={})  # noqa: B039
#: A configuration asked for with ``deferred`` and not applied yet: format, level, stream.
_deferred: tuple[Literal["console", "json"], str, TextIO | None] | None = None


def configure_logging(
    fmt: Literal["console", "json"] = "console",
    level: str = DEFAULT_LEVEL,
    stream: TextIO | None = None,
    *,
    deferred: bool = False,
) -> None:
    """Route structlog to ``stream`` (stderr by default) as plain console lines or JSON,
    showing ``level`` and up. With ``deferred`` (what the command line does) and structlog not
    imported yet, it is done when dsh first logs a line it shows, unless structlog was
    configured by then (by whoever imported it since, whose configuration is the later one)."""
    global _deferred
    level_number(level)  # a bad level is an error now, not at the first line
    if deferred and not structlog_loaded():
        _deferred = (fmt, level, sys.stderr if stream is None else stream)  # stderr as it is now
        return
    _deferred = None
    import structlog

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
        wrapper_class=structlog.make_filtering_bound_logger(level_number(level)),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )


@functools.cache  # a few names; dsh's per-request debug line asks for two of them
def level_number(level: str) -> int:
    """The number of the level named ``level`` (``"warning"``, ``"DEBUG"``...)."""
    return logging.getLevelNamesMapping()[level.upper()]


def ensure_configured() -> None:
    """Configure structlog unless someone already did: as a deferred :func:`configure_logging`
    asked, else warnings and up to stderr.

    Called when dsh logs its first line, not at import or start: a host that configures
    structlog first keeps its configuration; one that does not gets quiet, stderr-only logs
    instead of structlog's default of printing every level to stdout.
    """
    global _deferred
    import structlog

    wanted, _deferred = _deferred, None
    if not structlog.is_configured():
        configure_logging(*(wanted or ()))


def structlog_loaded() -> bool:
    """Whether structlog is imported in this process (and so may be configured)."""
    return "structlog" in sys.modules


def bind_context(**values: Any) -> None:
    """Bind ``values`` (``agent``, ``session``, ``turn``) to every line logged from this context
    on, dsh's and, when structlog is imported, everyone's (``structlog.contextvars``)."""
    _CONTEXT.set({**_CONTEXT.get(), **values})
    if structlog_loaded():
        import structlog

        structlog.contextvars.bind_contextvars(**values)


class Logger:
    """A logger of dsh's: structlog's logger named ``name``, got when a line is first logged
    (see the module's docstring); :func:`bind_context`'s values are bound on every line."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def debug(self, event: str, **fields: Any) -> None:
        self._log("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._log("error", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """An error with the exception being handled (call it in an ``except`` block)."""
        self._log("exception", event, fields)

    def _log(self, level: str, event: str, fields: dict[str, Any]) -> None:
        number = level_number("error" if level == "exception" else level)
        if number < _shown_from() and not structlog_loaded():
            return  # dsh's configuration, the only one there can be, drops it
        ensure_configured()
        import structlog

        logger = structlog.get_logger(self.name)
        context = _CONTEXT.get()
        if context:
            logger = logger.bind(**context)
        getattr(logger, level)(event, **fields)


def _shown_from() -> int:
    """The level dsh's configuration shows lines from: a deferred one's, else the default."""
    return level_number(DEFAULT_LEVEL if _deferred is None else _deferred[1])


def get_logger(name: str) -> Logger:
    """dsh's logger named ``name`` (the module's or plugin's dotted name)."""
    return Logger(name)
