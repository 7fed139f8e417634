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
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from attrs import field, frozen

from dsh._json import decode_json_exact
from dsh.values._config import greater_than
from dsh.values._content import Image, Text
from dsh.values._errors import DshError
from dsh.values._request import ToolSchema
from dsh.values._value import Value

if TYPE_CHECKING:
    from dsh.hooks._caller import Hooks
    from dsh.values._agent import Agent
    from dsh.values._approval import ApprovalNeeded

__all__ = [
    "GUARDED_EFFECTS",
    "POLICY_SECTION",
    "TOOL_NAME",
    "Effect",
    "InvalidTool",
    "NoPolicyConfig",
    "Tool",
    "ToolContent",
    "ToolError",
    "ToolExecution",
    "ToolOutcome",
    "ToolRegistry",
    "ToolsConfig",
    "as_content",
    "checked_outcome",
    "confine",
]

ToolContent = str | Sequence[Text | Image]

#: What a tool does, so that a permission policy can classify it without knowing it: ``read``
#: changes nothing (reads files, computes, queries), ``write`` changes files, ``execute`` runs
#: programs, ``other`` is anything else or undeclared (policies treat it with the most caution).
Effect = Literal["read", "write", "execute", "other"]

#: What no call may do while no permission policy is loaded, unless the user said
#: ``permissions.mode = "full"``: fail closed, as a policy that failed to load must not mean
#: "no policy".
GUARDED_EFFECTS: tuple[Effect, ...] = ("write", "execute")

#: The config section of the permission policy; the core reads it only when no policy is loaded.
POLICY_SECTION = "permissions"

#: The content blocks a tool's result is made of; what an outcome's code may be.
_BLOCKS, _CODES = (Text, Image), (str, type(None))

#: A registry entry's tool, and a tool's schema.
_TOOL, _SCHEMA = itemgetter(0), attrgetter("schema")

#: The tool names every model API accepts; the registry refuses others.
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def as_content(value: object) -> tuple[Text | Image, ...]:
    """What a tool returned, as content blocks; raises :class:`ToolError` for a value without
    an obvious text form.

    A ``str`` is one text block; a :class:`Text`/:class:`Image` block or a non-empty sequence of
    them is used as it is; ``None`` is empty text; ``bytes`` are decoded as UTF-8 (and refused
    when they are not UTF-8); numbers, booleans, dicts, lists and tuples of JSON values become
    their JSON text. Anything else (an object, a mix of blocks and values, bytes that are not
    text) is refused, so that nothing reaches the session log that could not be read back.
    """
    if isinstance(value, str):
        return (Text(value),)
    if isinstance(value, Text | Image):
        return (_checked_block(value),)
    if isinstance(value, list | tuple) and value and any(_is_block(v) for v in value):
        if not all(_is_block(v) for v in value):
            raise ToolError("the tool returned a sequence that mixes content blocks and values")
        return tuple(_checked_block(v) for v in value)
    if value is None:
        return (Text(""),)
    if isinstance(value, bytes | bytearray | memoryview):
        return (Text(_utf8(bytes(value))),)
    if isinstance(value, bool | int | float | dict | list | tuple):
        return (Text(_json_text(value)),)
    raise ToolError(
        f"the tool returned a {type(value).__name__}, which has no text form; a tool returns "
        "a str, content blocks, bytes of UTF-8 text or JSON values"
    )


def _is_block(value: object) -> bool:
    return isinstance(value, _BLOCKS)


def _checked_block(block: Text | Image) -> Text | Image:
    """``block`` if its fields have the types the session log stores (attrs does not check)."""
    raw: Any = block  # typed as its class says, but a tool may have built it with anything
    if isinstance(raw, Text):
        fine = isinstance(raw.text, str)
    else:
        fine = isinstance(raw.url, str) and isinstance(raw.mime_type, str | None)
    if not fine:
        raise ToolError(f"the tool returned a malformed {type(block).__name__} block: {block!r}")
    return block


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"the tool returned {len(data)} bytes that are not UTF-8 text ({exc.reason} at "
            f"byte {exc.start}); a tool returns text"
        ) from exc


def _json_text(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ToolError(
            f"the tool returned a {type(value).__name__} that is not made of JSON values ({exc})"
        ) from exc


class InvalidTool(DshError):
    """The registry refused a tool ``tool`` that ``owner`` registered: its name is not one model
    APIs accept, or its input schema is invalid at ``pointer`` (a JSON pointer into it;
    ``None`` for a name)."""

    def __init__(self, message: str, owner: str, tool: str, pointer: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.owner = owner
        self.tool = tool
        self.pointer = pointer


class ToolError(DshError):
    """Raise it from a tool to fail the call with ``message`` for the model, and a ``code``
    (``TOOL_ERROR`` unless a more specific one helps, e.g. ``NOT_FOUND``)."""

    def __init__(self, message: str, code: str = "TOOL_ERROR") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@frozen(repr=False, eq=False)
class ToolExecution(Value):
    """One tool call on its way to execution. ``arguments`` is the raw JSON string."""

    call_id: str
    name: str
    arguments: str
    agent: Agent | None = None
    #: The call was parked and then allowed (``agent.decide``): a policy lets it run.
    approved: bool = False

    def parsed_arguments(self) -> Any:
        """The arguments as JSON values; an empty string means ``{}``. Raises ``ValueError``."""
        return decode_json_exact(self.arguments) if self.arguments.strip() else {}

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


@frozen(repr=False, eq=False)
class ToolOutcome(Value):
    """What a tool call produced. ``code`` says why an error happened (``UNKNOWN_TOOL``,
    ``INVALID_ARGS``, ``TOOL_ERROR``, ``TOOL_TIMEOUT``, ``ABORTED``, ``DENIED``, ...).
    ``approval`` is set (code ``APPROVAL_PENDING``) when a policy parked the call: the loop
    logs ``approval/requested`` instead of a result and waits for a decision."""

    content: tuple[Text | Image, ...]
    is_error: bool = False
    code: str | None = None
    approval: ApprovalNeeded | None = None

    @classmethod
    def error(cls, code: str, message: str) -> ToolOutcome:
        return cls((Text(f"Error: {message}"),), is_error=True, code=code)

    @classmethod
    def deferred(cls, needed: ApprovalNeeded) -> ToolOutcome:
        """The call waits for a decision. A caller that cannot park it (no agent loop runs it)
        reads this outcome as the error it also is: the call did not run."""
        text = (
            f"Error: not run: the call needs approval ({needed.reason}) and was parked for a "
            "decision"
        )
        return cls((Text(text),), True, "APPROVAL_PENDING", needed)


@frozen(repr=False, eq=False)
class Tool(Value):
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


@frozen(repr=False, eq=False)
class NoPolicyConfig(Value):
    """Section ``permissions`` while no permission policy is loaded (the ``permissions`` plugin
    is disabled or failed to load): calls of tools that write files or run commands are denied,
    unless ``mode = "full"`` and no ``rules`` are given, which runs every call unrestricted. The
    keys are those of the ``permissions`` plugin, so one config works with and without it;
    ``rules`` cannot be applied without the plugin, so giving any keeps the denial, and
    ``approval`` and ``approval_timeout_s`` mean nothing without it (nothing asks)."""

    mode: Literal["read-only", "workspace-write", "full"] = "workspace-write"
    rules: tuple[Any, ...] = ()
    approval: Literal["ask", "deny", "defer"] = "ask"
    approval_timeout_s: float | None = None

    @property
    def unrestricted(self) -> bool:
        return self.mode == "full" and not self.rules


@frozen(repr=False, eq=False)
class ToolsConfig(Value):
    """Section ``tools``: ``default_timeout_s`` bounds each call of a tool that sets no
    ``timeout_s`` of its own (greater than 0; ``inf`` for no bound)."""

    default_timeout_s: float = field(default=300.0, validator=greater_than(0))


class ToolRegistry:
    """Registered tools by name; ``execute`` runs a call through the ``dsh_tools_execute``
    middleware, whose terminal parses and validates the arguments and runs the tool."""

    def __init__(self, hooks: Hooks) -> None:
        self._hooks = hooks
        self._tools: dict[str, tuple[Tool, str]] = {}
        self.config = ToolsConfig()
        #: The plugin whose ``dsh_tools_execute`` middleware decides which calls may run
        #: (see :meth:`install_policy`); ``None``: no policy is loaded.
        self.policy: str | None = None
        #: What the core does without a policy: deny ``GUARDED_EFFECTS``, unless unrestricted.
        self.no_policy = NoPolicyConfig()
        #: Also check every outcome by a round trip through the event codec (see
        #: :func:`checked_outcome`): on in Python's development mode (``-X dev``) or when the
        #: ``DSH_DEBUG`` environment variable is set to a non-empty value (the test suite does).
        self.round_trip = sys.flags.dev_mode or bool(os.environ.get("DSH_DEBUG"))

    def configure(self, config: ToolsConfig) -> None:
        """Apply the ``tools`` config section (the harness does this once config is loaded)."""
        self.config = config

    def install_policy(self, owner: str) -> Callable[[], None]:
        """Declare that ``owner``'s ``dsh_tools_execute`` middleware decides which calls run.

        Without a declared policy the registry itself denies every call of a tool whose effect
        is in :data:`GUARDED_EFFECTS` (unless ``permissions.mode = "full"``), so a policy plugin
        that is disabled or failed to load leaves dsh closed, not open. Returns the disposer.
        """
        if self.policy is not None and self.policy != owner:
            raise DshError(f"two permission policies: {self.policy!r} and {owner!r}")
        self.policy = owner

        def dispose() -> None:
            if self.policy == owner:
                self.policy = None

        return dispose

    def register(self, tool: Tool, owner: str = "host") -> Callable[[], None]:
        """Add ``tool``; returns the function that takes it out again. Raises
        :class:`InvalidTool` for a name model APIs refuse (see :data:`TOOL_NAME`) or an input
        schema :func:`dsh.tools._schema.schema_problem` finds fault with, and :class:`DshError`
        for a name already taken."""
        _check(tool, owner)
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

    def owner(self, name: str) -> str | None:
        """Who registered tool ``name``: a plugin's name, or ``"host"``."""
        found = self._tools.get(name)
        return None if found is None else found[1]

    def schemas(self) -> tuple[ToolSchema, ...]:
        return tuple(map(_SCHEMA, map(_TOOL, self._tools.values())))  # in C: every step

    def timeout_of(self, tool: Tool) -> float | None:
        """How long one call of ``tool`` may run, in seconds (``None``: unbounded)."""
        timeout_s = self.config.default_timeout_s if tool.timeout_s is None else tool.timeout_s
        return None if math.isinf(timeout_s) else timeout_s

    async def execute(self, execution: ToolExecution) -> ToolOutcome:
        """Run one call. Never raises except on cancellation: ``SystemExit`` and
        ``KeyboardInterrupt`` from a tool or a middleware are errors of this call too, and an
        outcome that the session log could not store is replaced by a ``TOOL_ERROR``."""
        try:
            outcome = await self._hooks.tools_execute(execution, self._run)
            return checked_outcome(outcome, execution.name, round_trip=self.round_trip)
        except (SystemExit, KeyboardInterrupt) as exc:
            return _exit_outcome(exc)
        except Exception as exc:
            return ToolOutcome.error("TOOL_ERROR", str(exc))

    async def _run(self, execution: ToolExecution) -> ToolOutcome:
        tool = self.get(execution.name)
        if tool is None:
            known = ", ".join(self.names()) or "none"
            return ToolOutcome.error(
                "UNKNOWN_TOOL", f'unknown tool "{execution.name}"; available tools: {known}'
            )
        if self._unpoliced(tool):
            return ToolOutcome.error("DENIED", _no_policy_denial(tool, self.no_policy))
        try:
            args = execution.parsed_arguments()
        except ValueError as exc:
            return ToolOutcome.error("INVALID_ARGS", f"arguments are not valid JSON: {exc}")
        invalid = _invalid_arguments(tool, args)
        if invalid is not None:
            return invalid
        return await self._call(tool, args, execution)

    def held_back(self) -> list[str]:
        """The tools denied because no permission policy is loaded to judge them, by name."""
        return [name for name in self.names() if self._unpoliced(self._tools[name][0])]

    def _unpoliced(self, tool: Tool) -> bool:
        """Whether ``tool`` is refused because no policy is loaded to judge it."""
        guarded = tool.effect in GUARDED_EFFECTS
        return guarded and self.policy is None and not self.no_policy.unrestricted

    async def _call(self, tool: Tool, args: Any, execution: ToolExecution) -> ToolOutcome:
        scope = asyncio.timeout(self.timeout_of(tool))
        try:
            async with scope:
                content = await tool.execute(args, execution)
        except ToolError as exc:
            return ToolOutcome.error(exc.code, exc.message)
        except (SystemExit, KeyboardInterrupt) as exc:
            return _exit_outcome(exc)
        except Exception as exc:
            if isinstance(exc, TimeoutError) and scope.expired():
                return ToolOutcome.error(
                    "TOOL_TIMEOUT",
                    f"tool {tool.name!r} timed out after {self.timeout_of(tool)} s and was "
                    "cancelled",
                )
            return ToolOutcome.error("TOOL_ERROR", f"{type(exc).__name__}: {exc}")
        try:
            return ToolOutcome(as_content(content))
        except ToolError as exc:
            return ToolOutcome.error("TOOL_ERROR", f"tool {tool.name!r}: {exc.message}")


def _check(tool: Tool, owner: str) -> None:
    """Refuse a tool no model could be offered, or whose schema would fail its calls."""
    # toolschema imports this module (ToolExecution): import it here, not at the top.
    from dsh.tools._schema import describe_problem, schema_problem

    name = tool.name
    if not TOOL_NAME.fullmatch(name):
        shown = repr(name) if len(name) <= 70 else f"{name[:60]!r}... ({len(name)} characters)"
        raise InvalidTool(
            f"tool {shown} of {owner!r} is refused: model APIs accept tool names of 1 to 64 "
            "letters, digits, '_' and '-' only",
            owner,
            name,
        )
    problem = schema_problem(tool.schema.parameters)
    if problem is not None:
        raise InvalidTool(
            f"tool {name!r} of {owner!r} is refused: its input schema is invalid "
            f"{describe_problem(problem)}",
            owner,
            name,
            problem[0],
        )


def _exit_outcome(exc: SystemExit | KeyboardInterrupt) -> ToolOutcome:
    """A tool that tried to end the process: its call fails, the host goes on."""
    detail = f" ({exc})" if str(exc) else ""
    return ToolOutcome.error(
        "TOOL_ERROR",
        f"the tool raised {type(exc).__name__}{detail}; a tool cannot exit the process",
    )


def checked_outcome(outcome: object, tool_name: str, *, round_trip: bool = False) -> ToolOutcome:
    """``outcome`` if the session log can store it and read it back, else a ``TOOL_ERROR``
    outcome saying what was wrong (a middleware may return anything).

    The type check always runs; ``round_trip`` also encodes the result event with the event
    codec, decodes it and compares, which catches what a type check could miss (a block of a
    subclass would read back as its base class; a decoding error propagates).
    """
    problem = _outcome_problem(outcome)
    if problem is None and round_trip:
        problem = _round_trip_problem(cast(ToolOutcome, outcome))
    if problem is None:
        return cast(ToolOutcome, outcome)
    return ToolOutcome.error("TOOL_ERROR", f"tool {tool_name!r} produced {problem}")


def _outcome_problem(outcome: object) -> str | None:
    if not isinstance(outcome, ToolOutcome):
        return f"a {type(outcome).__name__} where a ToolOutcome belongs"
    return _fields_problem(outcome)


def _fields_problem(outcome: Any) -> str | None:
    """What is wrong with the fields of a ``ToolOutcome`` (attrs does not check their types)."""
    if not isinstance(outcome.content, tuple):
        return f"content of type {type(outcome.content).__name__}, not a tuple of blocks"
    try:
        for block in outcome.content:
            if not _is_block(block):
                return f"a {type(block).__name__} among its content blocks"
            _checked_block(block)
    except ToolError as exc:
        return exc.message.replace("the tool returned ", "")
    if not isinstance(outcome.is_error, bool) or not isinstance(outcome.code, _CODES):
        return f"an is_error or code of the wrong type ({outcome.is_error!r}, {outcome.code!r})"
    return None


def _round_trip_problem(outcome: ToolOutcome) -> str | None:
    # The converter imports the event types, which import this module's neighbours.
    from dsh.session._codec import dumps, structure, unstructure
    from dsh.values._events import ToolResultEvent

    event = ToolResultEvent(0, 0, "check", outcome.content, outcome.is_error, outcome.code)
    if structure(json.loads(dumps(unstructure(event))), ToolResultEvent) == event:
        return None
    return "a result the session log would not read back unchanged"


def _no_policy_denial(tool: Tool, config: NoPolicyConfig) -> str:
    if tool.effect == "write":
        does = "changes files"
    elif tool.name.startswith("mcp__"):  # an MCP tool: it need not run commands
        does = "may change anything (its MCP server does not mark it read-only or non-destructive)"
    else:
        does = "runs commands"
    rules = (
        " (the configured [permissions] rules cannot be applied without it)" if config.rules else ""
    )
    return (
        f"permission denied: {tool.name} {does} and no permission policy is loaded{rules}: the "
        "permissions plugin is disabled (DSH_DISABLE_PLUGINS) or failed to load (see "
        "'dsh plugins'), and without a policy dsh denies every call that writes files or runs "
        "commands. Do not retry this call; the user can enable the permissions plugin, or run "
        'every tool unrestricted with mode = "full" (and no rules) in the [permissions] '
        "configuration."
    )


def _invalid_arguments(tool: Tool, args: Any) -> ToolOutcome | None:
    """An ``INVALID_ARGS`` outcome naming every field that breaks the tool's schema."""
    # toolschema resolves ToolExecution, so it imports this module: import it here, not at the top.
    from dsh.tools._schema import validate

    problems = validate(args, tool.schema.parameters)
    if not problems:
        return None
    return ToolOutcome.error(
        "INVALID_ARGS",
        f"invalid arguments for tool {tool.name!r}: {'; '.join(problems)}. "
        "Call it again with arguments that match its schema.",
    )
