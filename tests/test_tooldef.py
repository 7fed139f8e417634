"""``@dsh.tool``: schemas from type hints and docstrings, validation, conversion, registry."""

from __future__ import annotations

import asyncio
import enum
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import attrs
import pytest

import dsh
from dsh import AgentOptions, Harness, Tool, ToolExecution, ToolOutcome
from dsh.tools._define import tool
from dsh.tools._docstrings import parse_docstring
from dsh.tools._registry import ToolError, ToolsConfig, confine
from dsh.tools._schema import validate
from dsh.values._content import Image, Text
from dsh.values._request import ToolSchema


def props(t: Tool) -> dict[str, Any]:
    return dict(t.schema.parameters["properties"])


async def run(h: Harness, name: str, args: Any) -> ToolOutcome:
    raw = args if isinstance(args, str) else json.dumps(args)
    return await h.tools.execute(ToolExecution("c1", name, raw))


def text(outcome: ToolOutcome) -> str:
    first = outcome.content[0]
    assert isinstance(first, Text)
    return first.text


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Point:
    """A point on the plane.

    Attributes:
        x: Horizontal position.
        y: Vertical position.
    """

    x: int
    y: int = 0


@attrs.frozen
class Shape:
    name: str
    points: tuple[Point, ...] = ()
    origin: Point | None = None
    _secret: str = attrs.field(default="s", metadata={"description": "kept private"})
    derived: int = attrs.field(init=False, default=1)


# -- the decorator ---------------------------------------------------------------------------


def test_bare_decorator_builds_a_tool_from_hints_and_docstring() -> None:
    @tool
    async def search(query: str, limit: int = 10, exact: bool = False, weight: float = 1.0) -> str:
        """Search the notes.

        Returns the best matches first.

        Args:
            query: What to look for,
                in plain words.
            limit (int): How many results.

        Returns:
            The matches.
        """
        return query

    assert isinstance(search, Tool)
    assert search.name == "search"
    assert search.schema.description == "Search the notes.\n\nReturns the best matches first."
    assert search.schema.strict is False
    assert search.schema.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for, in plain words."},
            "limit": {"type": "integer", "description": "How many results."},
            "exact": {"type": "boolean"},
            "weight": {"type": "number"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    assert (search.timeout_s, search.concurrency_safe, search.effect) == (None, False, "other")


def test_options_override_the_defaults() -> None:
    @tool(
        name="lookup",
        description="Look it up.",
        timeout_s=2.5,
        concurrency_safe=True,
        effect="read",
    )
    def find(key: str) -> str:
        """Ignored."""
        return key

    assert (find.name, find.schema.description) == ("lookup", "Look it up.")
    assert (find.timeout_s, find.concurrency_safe, find.effect) == (2.5, True, "read")
    assert dsh.tool is tool


async def test_the_execution_parameter_receives_the_call(harness: Harness) -> None:
    seen: list[ToolExecution] = []

    @tool
    async def where(path: str, *, execution: ToolExecution) -> str:
        seen.append(execution)
        return path

    @tool
    def named_otherwise(ctx: ToolExecution) -> str:
        return ctx.call_id

    assert props(where) == {"path": {"type": "string"}}
    assert props(named_otherwise) == {}
    harness.tools.register(where)
    harness.tools.register(named_otherwise)
    assert text(await run(harness, "where", {"path": "a"})) == "a"
    assert seen[0].call_id == "c1"
    assert text(await run(harness, "named_otherwise", "")) == "c1"


async def test_plugins_register_decorated_functions() -> None:
    @tool
    def shout(word: str) -> str:
        """Shout the word."""
        return word.upper()

    class Tools:
        def dsh_register_tools(self, register: Any) -> None:
            register(shout)

    async with Harness(load_entrypoints=False, plugins=[Tools()]) as h:
        assert h.tools.get("shout") is shout
        assert text(await run(h, "shout", {"word": "hi"})) == "HI"


async def test_return_values_become_content(harness: Harness) -> None:
    image = Image("data:image/png;base64,AA==", "image/png")
    values: dict[str, Any] = {
        "text": "plain",
        "block": Text("block"),
        "blocks": [Text("a"), image],
        "none": None,
        "data": {"n": 1, "when": Color.RED},
        "empty": [],
    }
    for key, value in values.items():

        @tool(name=key)
        def give(value: Any = value) -> Any:
            return value

        harness.tools.register(give)
    contents = {key: (await run(harness, key, {})).content for key in values}
    assert contents == {
        "text": (Text("plain"),),
        "block": (Text("block"),),
        "blocks": (Text("a"), image),
        "none": (Text(""),),
        "data": (Text('{"n": 1, "when": "Color.RED"}'),),
        "empty": (Text("[]"),),
    }


# -- annotations -----------------------------------------------------------------------------


def test_choices_optionals_and_unions() -> None:
    @tool
    def pick(
        mode: Literal["fast", "slow"],
        level: Literal[1, 2],
        mixed: Literal["a", 1, None],
        color: Color,
        note: str | None = None,
        either: int | str = 0,
        anything: Any = None,
        described: Annotated[int, {"not": "text"}, "How many."] = 1,
    ) -> str:
        return ""

    assert props(pick) == {
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "level": {"type": "integer", "enum": [1, 2]},
        "mixed": {"enum": ["a", 1, None]},
        "color": {"type": "string", "enum": ["red", "blue"]},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "anything": {},
        "described": {"type": "integer", "description": "How many."},
    }


def test_arrays_and_mappings() -> None:
    @tool
    def gather(
        names: list[str],
        pair: tuple[int, str],
        many: tuple[float, ...],
        seq: Sequence[int],
        loose: list,  # type: ignore[type-arg]
        table: dict[str, int],
        blob: dict,  # type: ignore[type-arg]
    ) -> str:
        return ""

    assert props(gather) == {
        "names": {"type": "array", "items": {"type": "string"}},
        "pair": {
            "type": "array",
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
            "minItems": 2,
            "maxItems": 2,
        },
        "many": {"type": "array", "items": {"type": "number"}},
        "seq": {"type": "array", "items": {"type": "integer"}},
        "loose": {"type": "array"},
        "table": {"type": "object", "additionalProperties": {"type": "integer"}},
        "blob": {"type": "object"},
    }


def test_attrs_classes_become_closed_objects() -> None:
    @tool
    def draw(shape: Shape) -> str:
        return ""

    point = {
        "type": "object",
        "description": "A point on the plane.",
        "properties": {
            "x": {"type": "integer", "description": "Horizontal position."},
            "y": {"type": "integer", "description": "Vertical position."},
        },
        "required": ["x"],
        "additionalProperties": False,
    }
    assert props(draw)["shape"] == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "points": {"type": "array", "items": point},
            "origin": {"anyOf": [point, {"type": "null"}]},
            "secret": {"type": "string", "description": "kept private"},
        },
        "required": ["name"],
        "additionalProperties": False,
    }


async def test_arguments_are_converted_to_the_annotated_types(harness: Harness) -> None:
    got: dict[str, Any] = {}

    @tool
    def convert(
        shape: Shape,
        color: Color,
        pair: tuple[int, str],
        many: tuple[float, ...],
        table: dict[str, int],
        count: int,
        ratio: float,
        maybe: Point | None = None,
        either: int | str = 0,
    ) -> str:
        got.update(locals())
        return "ok"

    harness.tools.register(convert)
    args = {
        "shape": {"name": "tri", "points": [{"x": 1, "y": 2}, {"x": 3}], "secret": "k"},
        "color": "blue",
        "pair": [1, "a"],
        "many": [1, 2.5],
        "table": {"a": 1},
        "count": 3.0,
        "ratio": 2,
        "maybe": None,
        "either": "s",
    }
    assert text(await run(harness, "convert", args)) == "ok"
    assert got["shape"] == Shape("tri", (Point(1, 2), Point(3, 0)), None, "k")
    assert got["color"] is Color.BLUE
    assert got["pair"] == (1, "a") and got["many"] == (1.0, 2.5)
    assert got["table"] == {"a": 1}
    assert type(got["count"]) is int and type(got["ratio"]) is float
    assert got["maybe"] is None and got["either"] == "s"


# -- strict ----------------------------------------------------------------------------------


async def test_strict_lists_every_property_and_null_means_the_default(harness: Harness) -> None:
    got: list[Any] = []

    @tool(strict=True)
    def place(point: Point, label: str = "here", note: str | None = "n") -> str:
        got.append((point, label, note))
        return "ok"

    params = place.schema.parameters
    assert place.schema.strict is True
    assert params["required"] == ["point", "label", "note"]
    assert params["additionalProperties"] is False
    assert params["properties"]["label"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert params["properties"]["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    nested = params["properties"]["point"]
    assert nested["required"] == ["x", "y"] and nested["additionalProperties"] is False
    harness.tools.register(place)
    args = {"point": {"x": 1, "y": None}, "label": None, "note": None}
    assert text(await run(harness, "place", args)) == "ok"
    assert got == [(Point(1, 0), "here", "n")]
    missing = await run(harness, "place", {"point": {"x": 1, "y": 2}})
    assert missing.code == "INVALID_ARGS"
    assert "label: required field is missing" in text(missing)


@pytest.mark.parametrize(
    ("annotation", "message"),
    [(dict[str, int], "a dict cannot be strict"), (tuple[int, int], "fixed-length tuple")],
)
def test_strict_refuses_what_strict_schemas_cannot_say(annotation: Any, message: str) -> None:
    def loose(value: Any) -> str:
        return ""

    loose.__annotations__["value"] = annotation
    with pytest.raises(TypeError, match=message):
        tool(strict=True)(loose)


# -- definition errors -----------------------------------------------------------------------


def no_hint(value):
    return value


def var_args(*values: int) -> str:
    return ""


def positional(value: int, /) -> str:
    return ""


def a_set(values: set[int]) -> str:
    return ""


def int_keys(table: dict[int, str]) -> str:
    return ""


def float_choices(value: Literal[b"x"]) -> str:
    return ""


@attrs.frozen
class Node:
    value: int
    children: tuple[Node, ...] = ()


def recursive(node: Node) -> str:
    return ""


@attrs.define
class Untyped:
    value = attrs.field()


def untyped_field(item: Untyped) -> str:
    return ""


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (no_hint, "'no_hint': parameter 'value' has no type annotation"),
        (var_args, "parameter 'values': tools take named parameters only"),
        (positional, "tools take named parameters only"),
        (a_set, "parameter 'values': no JSON Schema for set\\[int\\]"),
        (int_keys, "JSON object keys are strings"),
        (float_choices, "must be strings, numbers, booleans or None"),
        (recursive, "Node contains itself"),
        (untyped_field, "parameter 'value' has no type annotation"),
    ],
)
def test_unsupported_signatures_fail_at_definition(fn: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        tool(fn)


# -- docstrings ------------------------------------------------------------------------------


def test_google_docstrings() -> None:
    doc = parse_docstring(
        """Summary line.

        Details here.

        Args:
            path (str): The file.
                Relative to the workspace.

            *rest: More things.
        Note:
            Not a parameter.
        """
    )
    assert doc.description == "Summary line.\n\nDetails here."
    assert doc.params == {"path": "The file. Relative to the workspace.", "rest": "More things."}


def test_numpy_docstrings() -> None:
    doc = parse_docstring(
        """Summary.

        Parameters
        ----------
        path : str
            The file,
            relative.
        count
            How many.

        Returns
        -------
        str
            Not a parameter.
        """
    )
    assert doc.description == "Summary."
    assert doc.params == {"path": "The file, relative.", "count": "How many."}


def test_sphinx_docstrings() -> None:
    doc = parse_docstring(
        """Summary.

        :param str path: The file,
            relative.
        :param count: How many.
        :type count: int
        :returns: Not a parameter.
            Still not.
        :param: nameless
        not a continuation
        """
    )
    assert doc.description == "Summary."
    assert doc.params == {"path": "The file, relative.", "count": "How many."}


def test_a_docstring_may_start_with_its_parameters() -> None:
    def run(command: str) -> str:
        """
        Args:
            command: The command line.
        """
        return command

    assert props(tool(run)) == {"command": {"type": "string", "description": "The command line."}}


def test_missing_or_plain_docstrings() -> None:
    assert parse_docstring(None).description == ""
    assert parse_docstring("Does this:\n\nand that.").description == "Does this:\n\nand that."
    assert parse_docstring("Summary.\n\nArgs:\n    x:\n        Deeper.").params == {"x": "Deeper."}


# -- validation ------------------------------------------------------------------------------

OBJECT = {
    "type": "object",
    "properties": {
        "n": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}], "minItems": 1},
        "kind": {"enum": ["a", True]},
        "either": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "choice": {
            "anyOf": [
                {"type": "object", "properties": {"x": {"type": "integer"}}},
                {"type": "string", "enum": ["none"]},
            ]
        },
    },
    "required": ["n"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        ({"n": 1}, []),
        ({"n": 2.0, "either": None, "choice": "none", "kind": True}, []),
        ([], ["arguments: expected object, got array []"]),
        ({}, ["n: required field is missing"]),
        ({"n": True}, ["n: expected integer, got boolean true"]),
        ({"n": 1.5}, ["n: expected integer, got number 1.5"]),
        (
            {"n": 1, "x": 0},
            ["x: unexpected field (allowed fields: n, tags, pair, kind, either, choice)"],
        ),
        (
            {"n": 1, "tags": ["a", 1, "c"]},
            [
                "tags: expected 0 to 2 items, got 3",
                "tags[1]: expected string, got integer 1",
            ],
        ),
        ({"n": 1, "pair": []}, ["pair: expected at least 1 items, got 0"]),
        ({"n": 1, "pair": [1, 2]}, ["pair[0]: expected string, got integer 1"]),
        ({"n": 1, "kind": 1}, ['kind: expected one of "a", true, got integer 1']),
        ({"n": 1, "either": "x"}, ['either: expected integer or null, got string "x"']),
        ({"n": 1, "choice": {"x": "y"}}, ['choice.x: expected integer, got string "y"']),
        ({"n": 1, "choice": 3}, ['choice: expected object or one of "none", got integer 3']),
    ],
)
def test_validation_names_the_field_and_why(value: Any, problems: list[str]) -> None:
    assert validate(value, OBJECT) == problems


def test_validation_of_the_rest_of_the_subset() -> None:
    assert validate("x", {"type": ["string", "null"]}) == []
    assert validate(3, {"type": ["string", "null"]}) == [
        "arguments: expected string or null, got integer 3"
    ]
    assert validate("x", {"type": "custom-type", "format": "email"}) == []
    assert validate(
        {"a": "b"}, {"type": "object", "additionalProperties": {"type": "integer"}}
    ) == ['a: expected integer, got string "b"']
    assert validate([1, 2], {"type": "array", "minItems": 2, "maxItems": 2}) == []
    assert validate([1], {"type": "array", "minItems": 2, "maxItems": 2}) == [
        "arguments: expected exactly 2 items, got 1"
    ]
    long = "x" * 100
    assert validate(long, {"type": "integer"}) == [
        f'arguments: expected integer, got string "{"x" * 56}...'
    ]
    loose = {"anyOf": [{"type": "integer"}, {"properties": {}}]}
    assert validate("s", {"anyOf": [{"type": "integer"}, {"type": "object"}]}) == [
        'arguments: expected integer or object, got string "s"'
    ]
    assert validate("s", loose) == []
    assert validate(
        {"x": "s"}, {"anyOf": [{"type": "integer"}, {"properties": {"x": {"enum": [1]}}}]}
    ) == ['arguments: expected integer or a value of another shape, got object {"x": "s"}']
    odd = {"anyOf": [{"enum": [1]}, {"not": "understood", "type": "boolean"}, {"minimum": 2}]}
    assert validate(None, odd) == []
    assert validate(None, {"anyOf": [{"enum": [1]}, {"type": "integer"}, {"type": "string"}]}) == [
        "arguments: expected one of 1 or integer or string, got null"
    ]
    assert validate(None, {"type": "object"}) == ["arguments: expected object, got null"]
    [odd_value] = validate(object(), {"type": "string"})
    assert odd_value.startswith('arguments: expected string, got object "<object object at')


# -- the registry: validation, errors, timeouts ----------------------------------------------


async def test_invalid_arguments_are_refused_before_the_tool_runs(harness: Harness) -> None:
    ran: list[int] = []

    @tool
    def count(n: int) -> str:
        ran.append(n)
        return str(n)

    harness.tools.register(count)
    outcome = await run(harness, "count", {"n": "three", "m": 1})
    assert outcome.is_error and outcome.code == "INVALID_ARGS"
    assert text(outcome) == (
        "Error: invalid arguments for tool 'count': n: expected integer, got string \"three\"; "
        "m: unexpected field (allowed fields: n). Call it again with arguments that match its "
        "schema."
    )
    assert (await run(harness, "count", "{not json")).code == "INVALID_ARGS"
    assert ran == []


async def test_hand_built_tools_are_validated_against_their_schema(harness: Harness) -> None:
    async def echo(args: Any, execution: ToolExecution) -> str:
        return str(args)

    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    harness.tools.register(Tool(ToolSchema("echo", "echo", schema), echo))
    assert (await run(harness, "echo", {})).code == "INVALID_ARGS"
    assert text(await run(harness, "echo", {"x": "1", "extra": 2})) == "{'x': '1', 'extra': 2}"


async def test_a_tool_error_carries_its_code_and_message(harness: Harness) -> None:
    @tool
    def fail(how: str) -> str:
        if how == "tool":
            raise ToolError("the file is gone", "NOT_FOUND")
        if how == "timeout":
            raise TimeoutError("the tool's own timeout")
        raise ValueError("bad")

    harness.tools.register(fail)
    gone = await run(harness, "fail", {"how": "tool"})
    assert (gone.code, text(gone)) == ("NOT_FOUND", "Error: the file is gone")
    own = await run(harness, "fail", {"how": "timeout"})
    assert (own.code, text(own)) == ("TOOL_ERROR", "Error: TimeoutError: the tool's own timeout")
    bad = await run(harness, "fail", {"how": "other"})
    assert (bad.code, text(bad)) == ("TOOL_ERROR", "Error: ValueError: bad")
    assert ToolError("x").code == "TOOL_ERROR"


async def test_timeouts_come_from_the_tool_or_the_tools_config() -> None:
    gate = asyncio.Event()

    @tool
    async def wait() -> str:
        await gate.wait()
        return "done"

    own = attrs.evolve(wait, schema=attrs.evolve(wait.schema, name="own"), timeout_s=0.01)
    never = attrs.evolve(wait, schema=attrs.evolve(wait.schema, name="never"), timeout_s=math.inf)
    config = {"tools": {"default_timeout_s": 0.02}}
    async with Harness(load_entrypoints=False, config=config) as h:
        for t in (wait, own, never):
            h.tools.register(t)
        assert h.tools.config == ToolsConfig(0.02)
        assert [h.tools.timeout_of(t) for t in (wait, own, never)] == [0.02, 0.01, None]
        timed_out = await run(h, "wait", {})
        assert (timed_out.code, text(timed_out)) == (
            "TOOL_TIMEOUT",
            "Error: tool 'wait' timed out after 0.02 s and was cancelled",
        )
        assert (await run(h, "own", {})).code == "TOOL_TIMEOUT"
        pending = asyncio.ensure_future(run(h, "never", {}))
        await asyncio.sleep(0.05)
        gate.set()
        assert text(await pending) == "done"
    assert ToolsConfig().default_timeout_s == 300.0


# -- the workspace ---------------------------------------------------------------------------


async def test_the_workspace_is_the_agents_or_the_current_directory(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert ToolExecution("c", "t", "{}").workspace == tmp_path  # pytest's tmp_path is resolved
    elsewhere = tmp_path / "ws"
    elsewhere.mkdir()
    agent = harness.agent_loop.create("a", AgentOptions(workspace=str(elsewhere)))
    assert ToolExecution("c", "t", "{}", agent).workspace == elsewhere
    plain = harness.agent_loop.create("b")
    assert ToolExecution("c", "t", "{}", plain).workspace == tmp_path


def test_confine_keeps_paths_inside_the_workspace(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("no")
    os.symlink(tmp_path / "secret.txt", root / "escape")
    os.symlink(root / "sub", root / "inner")
    assert confine("sub/../a.txt", root) == root.resolve() / "a.txt"
    assert confine(str(root / "sub"), root) == root.resolve() / "sub"
    assert confine("inner", root) == root.resolve() / "sub"
    assert confine("new/file.txt", root) == root.resolve() / "new" / "file.txt"
    for path, how in [
        ("../secret.txt", "climbs out with '..' outside it"),
        ("sub/../../secret.txt", "climbs out with '..'"),
        (str(tmp_path / "secret.txt"), "is an absolute path outside it"),
        ("escape", "leads outside it through a symbolic link (to "),
    ]:
        with pytest.raises(ToolError) as info:
            confine(path, root)
        assert info.value.code == "OUTSIDE_WORKSPACE"
        assert how in info.value.message
        assert f"the workspace is {root.resolve()}" in info.value.message


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="3.13 resolves loops without raising")
def test_confine_refuses_symlink_loops(tmp_path: Path) -> None:
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    with pytest.raises(ToolError, match="'loop/x' is a symbolic link loop"):
        confine("loop/x", tmp_path)


def test_confine_accepts_paths_spelled_through_a_symlinked_workspace(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    os.symlink(real, link)
    assert confine(str(link / "a.txt"), link) == real.resolve() / "a.txt"


async def test_bytes_are_utf8_text_or_an_error(harness: Harness) -> None:
    @tool
    def give_text() -> bytes:
        return "café".encode()

    @tool
    def give_binary() -> bytes:
        return b"\x89PNG"

    harness.tools.register(give_text)
    harness.tools.register(give_binary)
    assert text(await run(harness, "give_text", {})) == "café"
    outcome = await run(harness, "give_binary", {})
    assert outcome.code == "TOOL_ERROR" and "4 bytes that are not UTF-8 text" in text(outcome)


def test_the_schema_of_one_annotation_or_field_is_public() -> None:
    from dsh.tools._schema import field_shape, shape_of

    class Colour(enum.Enum):
        RED = "red"

    shape = shape_of(tuple[int, Colour])
    assert shape.schema["prefixItems"] == [{"type": "integer"}, {"enum": ["red"], "type": "string"}]
    assert shape.convert([1, "red"]) == (1, Colour.RED)
    assert shape_of(int | None, strict=True).schema == {
        "anyOf": [{"type": "integer"}, {"type": "null"}]
    }
    with pytest.raises(TypeError, match="'when'"):
        field_shape("when", complex)
