"""Tools: what a model can call, and the registry that runs calls through ``dsh_tools_execute``.

A tool failure is never a turn failure: an unknown tool, arguments that are not JSON, a tool that
raises or times out all become an ``is_error`` outcome the model can read and correct from.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from attrs import frozen

from dsh.content import Image, Text
from dsh.errors import DshError
from dsh.request import ToolSchema

if TYPE_CHECKING:
    from dsh.hooks import Hooks
    from dsh.loop import LoopAgent

__all__ = ["Tool", "ToolContent", "ToolExecution", "ToolOutcome", "ToolRegistry", "as_content"]

ToolContent = str | Sequence[Text | Image]


def as_content(value: ToolContent) -> tuple[Text | Image, ...]:
    """Normalise what a tool returned into content blocks."""
    if isinstance(value, str):
        return (Text(value),)
    return tuple(value)


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
    """A schema plus ``execute(args, execution) -> content``.

    ``timeout_s`` bounds one call; ``concurrency_safe`` tools may run beside each other.
    """

    schema: ToolSchema
    execute: Callable[[Any, ToolExecution], Awaitable[ToolContent]]
    timeout_s: float | None = None
    concurrency_safe: bool = False

    @property
    def name(self) -> str:
        return self.schema.name


class ToolRegistry:
    """Registered tools by name; ``execute`` runs a call through the ``dsh_tools_execute``
    middleware, whose terminal parses the arguments and runs the tool."""

    def __init__(self, hooks: Hooks) -> None:
        self._hooks = hooks
        self._tools: dict[str, tuple[Tool, str]] = {}

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
        try:
            async with asyncio.timeout(tool.timeout_s):
                content = await tool.execute(args, execution)
        except TimeoutError:
            return ToolOutcome.error(
                "TOOL_TIMEOUT", f"tool {tool.name!r} timed out after {tool.timeout_s} s"
            )
        except Exception as exc:
            return ToolOutcome.error("TOOL_ERROR", f"{type(exc).__name__}: {exc}")
        return ToolOutcome(as_content(content))
