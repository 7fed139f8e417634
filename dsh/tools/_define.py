"""``@dsh.tool``: a tool from a plain function, its JSON Schema built from type hints and docstring.

::

    @dsh.tool
    async def add(a: int, b: int = 0) -> str:
        \"""Add two numbers.

        Args:
            a: The first number.
            b: The second number.
        \"""
        return str(a + b)

The description is the docstring's text before its first section; parameter descriptions come
from a Google (``Args:``), NumPy (``Parameters`` + dashes) or Sphinx (``:param a:``) section. A
parameter named ``execution`` (or annotated :class:`~dsh.tools._registry.ToolExecution`) receives
the call and is not part of the schema. The schema comes from :mod:`dsh.tools._schema`, the
descriptions from :mod:`dsh.tools._docstrings`. Arguments are checked with
:func:`dsh.tools._schema.validate` before the tool runs (the registry does this for every tool),
then turned into the annotated Python values: attrs instances, enum members, tuples.
``docs/tools.md`` lists every supported annotation.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any, overload

from dsh.tools import _docstrings as docstrings
from dsh.tools._registry import Effect, Tool, ToolContent, ToolExecution, as_content
from dsh.tools._schema import Convert, arguments_shape
from dsh.values._content import Image, Text
from dsh.values._request import ToolSchema

__all__ = ["tool"]

# ---------------------------------------------------------------------------------------------
# The decorator.
# ---------------------------------------------------------------------------------------------


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = False,
    timeout_s: float | None = None,
    concurrency_safe: bool = False,
    effect: Effect = "other",
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = False,
    timeout_s: float | None = None,
    concurrency_safe: bool = False,
    effect: Effect = "other",
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a function (``async def`` or ``def``, which runs directly in the event loop) into
    a :class:`~dsh.tools._registry.Tool`; use it bare (``@tool``) or with options.

    ``name`` and ``description`` default to the function's name and docstring. ``strict``
    makes the schema follow strict function calling: every object lists all its properties in
    ``required`` and forbids others; a parameter with a default then also accepts ``null``,
    which means "use the default". ``timeout_s``, ``concurrency_safe`` and ``effect`` are the
    :class:`~dsh.tools._registry.Tool` fields of the same names. Raises ``TypeError`` for an
    annotation that has no JSON Schema.
    """

    def build(function: Callable[..., Any]) -> Tool:
        doc = docstrings.parse_docstring(function.__doc__)
        tool_name = name or function.__name__
        try:
            arguments, execution_param = arguments_shape(function, strict, doc.params)
        except TypeError as exc:
            raise TypeError(f"@dsh.tool {tool_name!r}: {exc}") from exc
        text = doc.description if description is None else description
        schema = ToolSchema(tool_name, text, arguments.schema, strict)
        execute = _executor(function, arguments.convert, execution_param)
        return Tool(schema, execute, timeout_s, concurrency_safe, effect)

    return build if fn is None else build(fn)


def _executor(
    function: Callable[..., Any], convert: Convert, execution_param: str | None
) -> Callable[[Any, ToolExecution], Any]:
    async def execute(args: Any, execution: ToolExecution) -> ToolContent:
        kwargs = convert(args)
        if execution_param is not None:
            kwargs[execution_param] = execution
        result = function(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return _content(result)

    return execute


def _content(value: Any) -> ToolContent:
    """What the function returned as tool content: text and images as they are, ``None`` as no
    text, bytes decoded as UTF-8, anything else as JSON (objects by their ``str``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Text | Image):
        return (value,)
    if (
        isinstance(value, list | tuple)
        and value
        and all(isinstance(v, Text | Image) for v in value)
    ):
        return tuple(value)
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray | memoryview):
        return as_content(value)  # UTF-8 text, else a ToolError
    return json.dumps(value, ensure_ascii=False, default=str)
