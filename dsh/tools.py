"""Tools: what a model can call, and the registry that runs calls through ``dsh_tools_execute``.

A tool failure is never a turn failure: an unknown tool, arguments that are not JSON or do not
match the tool's schema, a tool that raises or times out all become an ``is_error`` outcome the
model can read and correct from.

Tools that touch files are confined to the agent's workspace: :attr:`ToolExecution.workspace` is
that directory and :func:`confine` resolves a path the model gave inside it, or refuses it.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from attrs import frozen

from dsh.content import Image, Text
from dsh.errors import DshError
from dsh.request import ToolSchema

if TYPE_CHECKING:
    from dsh.hooks import Hooks
    from dsh.loop import LoopAgent

__all__ = [
    "Effect",
    "Tool",
    "ToolContent",
    "ToolError",
    "ToolExecution",
    "ToolOutcome",
    "ToolRegistry",
    "ToolsConfig",
    "as_content",
    "confine",
]

ToolContent = str | Sequence[Text | Image]

#: What a tool does, so that a permission policy can classify it without knowing it: ``read``
#: changes nothing (reads files, computes, queries), ``write`` changes files, ``execute`` runs
#: programs, ``other`` is anything else or undeclared (policies treat it with the most caution).
Effect = Literal["read", "write", "execute", "other"]


def as_content(value: ToolContent) -> tuple[Text | Image, ...]:
    """Normalise what a tool returned into content blocks."""
    if isinstance(value, str):
        return (Text(value),)
    return tuple(value)


class ToolError(DshError):
    """Raise it from a tool to fail the call with ``message`` for the model, and a ``code``
    (``TOOL_ERROR`` unless a more specific one helps, e.g. ``NOT_FOUND``)."""

    def __init__(self, message: str, code: str = "TOOL_ERROR") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@frozen
class ToolExecution:
    """One tool call on its way to execution. ``arguments`` is the raw JSON string."""

    call_id: str
    name: str
    arguments: str
    agent: LoopAgent | None = None

    def parsed_arguments(self) -> Any:
        """The arguments as JSON values; an empty string means ``{}``. Raises ``ValueError``."""
        return json.loads(self.arguments) if self.arguments.strip() else {}

    @property
    def workspace(self) -> Path:
        """The directory this call is confined to: the agent's ``AgentOptions.workspace``, else
        the current directory (absolute, symlinks resolved)."""
        configured = self.agent.options.workspace if self.agent is not None else None
        return Path(configured or os.getcwd()).resolve()


def confine(path: str, workspace: Path) -> Path:
    """``path`` (relative to ``workspace``, or absolute) resolved with symlinks followed.

    Raises :class:`ToolError` (code ``OUTSIDE_WORKSPACE``) when it leads outside ``workspace``,
    saying how: an absolute path elsewhere, ``..`` components, or a symbolic link.
    """
    root = workspace.resolve()
    given = Path(path)
    lexical = Path(os.path.normpath(given if given.is_absolute() else root / given))
    if not _within(lexical, root, workspace):
        how = "is an absolute path" if given.is_absolute() else "climbs out with '..'"
        raise ToolError(_outside(path, root, f"{how} outside it"), "OUTSIDE_WORKSPACE")
    try:
        resolved = lexical.resolve()
    except RuntimeError as exc:  # Python < 3.13 on a symlink loop
        raise ToolError(f"path {path!r} is a symbolic link loop", "BAD_PATH") from exc
    if not resolved.is_relative_to(root):
        how = f"leads outside it through a symbolic link (to {resolved})"
        raise ToolError(_outside(path, root, how), "OUTSIDE_WORKSPACE")
    return resolved


def _within(path: Path, root: Path, workspace: Path) -> bool:
    # ``workspace`` as given may itself sit behind a symlink; a path spelled through it is inside.
    return path.is_relative_to(root) or path.is_relative_to(os.path.abspath(workspace))


def _outside(path: str, root: Path, how: str) -> str:
    return (
        f"path {path!r} is refused: the workspace is {root} and this path {how}. "
        "Use a path inside the workspace (relative paths are resolved against it)."
    )


@frozen
class ToolOutcome:
    """What a tool call produced. ``code`` says why an error happened (``UNKNOWN_TOOL``,
    ``INVALID_ARGS``, ``TOOL_ERROR``, ``TOOL_TIMEOUT``, ``ABORTED``, ``DENIED``, ...)."""

    content: tuple[Text | Image, ...]
    is_error: bool = False
    code: str | None = None

    @classmethod
    def error(cls, code: str, message: str) -> ToolOutcome:
        return cls((Text(f"Error: {message}"),), is_error=True, code=code)


@frozen
class Tool:
    """A schema plus ``execute(args, execution) -> content``; build one with ``@dsh.tool``.

    ``timeout_s`` bounds one call (``None``: the ``tools.default_timeout_s`` config;
    ``math.inf``: no bound); ``concurrency_safe`` tools may run beside each other; ``effect``
    says what the tool does, for permission policies.
    """

    schema: ToolSchema
    execute: Callable[[Any, ToolExecution], Awaitable[ToolContent]]
    timeout_s: float | None = None
    concurrency_safe: bool = False
    effect: Effect = "other"

    @property
    def name(self) -> str:
        return self.schema.name


@frozen
class ToolsConfig:
    """Section ``tools``: ``default_timeout_s`` bounds each call of a tool that sets no
    ``timeout_s`` of its own (``inf`` for no bound)."""

    default_timeout_s: float = 300.0


class ToolRegistry:
    """Registered tools by name; ``execute`` runs a call through the ``dsh_tools_execute``
    middleware, whose terminal parses and validates the arguments and runs the tool."""

    def __init__(self, hooks: Hooks) -> None:
        self._hooks = hooks
        self._tools: dict[str, tuple[Tool, str]] = {}
        self.config = ToolsConfig()

    def configure(self, config: ToolsConfig) -> None:
        """Apply the ``tools`` config section (the harness does this once config is loaded)."""
        self.config = config

    def register(self, tool: Tool, owner: str = "host") -> Callable[[], None]:
        known = self._tools.get(tool.name)
        if known is not None:
            raise DshError(
                f"tool {tool.name!r} is registered twice: by {known[1]!r} and by {owner!r}"
            )
        self._tools[tool.name] = (tool, owner)

        def dispose() -> None:
            if self._tools.get(tool.name, (None,))[0] is tool:
                del self._tools[tool.name]

        return dispose

    def get(self, name: str) -> Tool | None:
        found = self._tools.get(name)
        return None if found is None else found[0]

    def names(self) -> list[str]:
        return sorted(self._tools)

    def schemas(self) -> tuple[ToolSchema, ...]:
        return tuple(tool.schema for tool, _ in self._tools.values())

    def timeout_of(self, tool: Tool) -> float | None:
        """How long one call of ``tool`` may run, in seconds (``None``: unbounded)."""
        timeout_s = self.config.default_timeout_s if tool.timeout_s is None else tool.timeout_s
        return None if math.isinf(timeout_s) else timeout_s

    async def execute(self, execution: ToolExecution) -> ToolOutcome:
        """Run one call. Never raises except on cancellation."""
        try:
            return await self._hooks.tools_execute(execution, self._run)
        except Exception as exc:
            return ToolOutcome.error("TOOL_ERROR", str(exc))

    async def _run(self, execution: ToolExecution) -> ToolOutcome:
        tool = self.get(execution.name)
        if tool is None:
            known = ", ".join(self.names()) or "none"
            return ToolOutcome.error(
                "UNKNOWN_TOOL", f'unknown tool "{execution.name}"; available tools: {known}'
            )
        try:
            args = execution.parsed_arguments()
        except ValueError as exc:
            return ToolOutcome.error("INVALID_ARGS", f"arguments are not valid JSON: {exc}")
        invalid = _invalid_arguments(tool, args)
        if invalid is not None:
            return invalid
        return await self._call(tool, args, execution)

    async def _call(self, tool: Tool, args: Any, execution: ToolExecution) -> ToolOutcome:
        scope = asyncio.timeout(self.timeout_of(tool))
        try:
            async with scope:
                content = await tool.execute(args, execution)
        except ToolError as exc:
            return ToolOutcome.error(exc.code, exc.message)
        except Exception as exc:
            if isinstance(exc, TimeoutError) and scope.expired():
                return ToolOutcome.error(
                    "TOOL_TIMEOUT",
                    f"tool {tool.name!r} timed out after {self.timeout_of(tool)} s and was "
                    "cancelled",
                )
            return ToolOutcome.error("TOOL_ERROR", f"{type(exc).__name__}: {exc}")
        return ToolOutcome(as_content(content))


def _invalid_arguments(tool: Tool, args: Any) -> ToolOutcome | None:
    """An ``INVALID_ARGS`` outcome naming every field that breaks the tool's schema."""
    # tooldef builds Tools, so it imports this module: import it here, not at the top.
    from dsh.tooldef import validate

    problems = validate(args, tool.schema.parameters)
    if not problems:
        return None
    return ToolOutcome.error(
        "INVALID_ARGS",
        f"invalid arguments for tool {tool.name!r}: {'; '.join(problems)}. "
        "Call it again with arguments that match its schema.",
    )
