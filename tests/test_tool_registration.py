"""Tools are checked when they are registered: a name no model API takes, or an input schema
that would fail every call, is refused naming its owner, the tool and the JSON pointer of the
problem; a plugin's other tools go on."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from dsh import Harness, Tool, ToolExecution, hookimpl
from dsh.tools._define import tool
from dsh.tools._registry import InvalidTool
from dsh.tools._schema import MAX_SCHEMA_DEPTH, describe_problem, schema_problem, validate
from dsh.values._request import ToolSchema

TYPES = '"null", "boolean", "integer", "number", "string", "array", "object"'


async def echo(args: Any, execution: ToolExecution) -> str:
    return str(args)


def nested(levels: int) -> dict[str, Any]:
    """A schema whose innermost object is ``levels`` JSON levels deep (the root is level 1)."""
    schema: dict[str, Any] = {} if levels % 2 else {"properties": {}}
    for _ in range((levels - 1) // 2):
        schema = {"properties": {"x": schema}}
    return schema


@pytest.mark.parametrize(
    ("schema", "pointer", "what"),
    [
        ({"type": 5}, "/type", f"expected one of {TYPES} or an array of them, got integer 5"),
        ({"type": []}, "/type", f"expected one of {TYPES} or an array of them, got array []"),
        ({"type": "object", "required": 5}, "/required", "expected an array of property names"),
        ({"required": ["a", 1]}, "/required", "expected an array of property names"),
        ({"properties": [{"type": "string"}]}, "/properties", "expected an object of schemas"),
        (
            {"properties": {"a/b~c": {"type": "strng"}}},
            "/properties/a~1b~0c/type",
            'got string "strng"',
        ),
        ([], "", "expected a JSON object (an object schema), got array []"),
        ({"type": "string"}, "/type", 'a tool\'s arguments are a JSON object: expected "object"'),
        ({"anyOf": []}, "/anyOf", "expected a non-empty array of schemas, got array []"),
        ({"oneOf": {"type": "string"}}, "/oneOf", "expected a non-empty array of schemas"),
        ({"anyOf": [{}, 5]}, "/anyOf/1", "expected a schema (a JSON object or a boolean)"),
        ({"items": [{}, {"type": 5}]}, "/items/1/type", "expected one of"),
        ({"items": {"type": 5}}, "/items/type", "expected one of"),
        ({"additionalProperties": "no"}, "/additionalProperties", "expected a schema"),
        ({"$defs": 5}, "/$defs", "expected an object of schemas by name, got integer 5"),
        ({"enum": 5}, "/enum", "expected an array of the allowed values, got integer 5"),
        ({"minItems": -1}, "/minItems", "expected a non-negative integer, got integer -1"),
        ({"maxLength": True}, "/maxLength", "expected a non-negative integer, got boolean true"),
        ({"maximum": "3"}, "/maximum", 'expected a number, got string "3"'),
        ({"description": 5}, "/description", "expected a string, got integer 5"),
        (nested(MAX_SCHEMA_DEPTH + 1), "/properties/x" * 32, "deeper than 64 levels"),
        ({"default": {1, 2}}, "/default", "a set is not a JSON value"),
        ({"properties": {1: {}}}, "/properties", "the key 1 is not a string"),
    ],
)
def test_a_malformed_schema_is_found_with_its_place(schema: Any, pointer: str, what: str) -> None:
    problem = schema_problem(schema)
    assert problem is not None
    assert problem[0] == pointer
    assert what in problem[1]


@pytest.mark.parametrize(
    "schema",
    [
        {},
        {"type": "object", "properties": {}},
        nested(MAX_SCHEMA_DEPTH),
        {
            "type": "object",
            "properties": {
                "any": True,
                "none": False,
                "maybe": {"type": ["string", "null"], "enum": ("a", None)},
                "pair": {"type": "array", "items": [{"type": "integer"}, {}], "minItems": 2},
                "list": {"type": "array", "items": {"type": "number", "minimum": 0.5}},
            },
            "required": ("any",),
            "additionalProperties": False,
            "$defs": {"x": {"not": {"type": "null"}}},
            "x-vendor": {"anything": object},  # unknown keywords are left alone...
        },
    ],
)
def test_sound_schemas_pass(schema: Any) -> None:
    if "x-vendor" in schema:  # ...but must still be JSON
        assert schema_problem(schema) == ("/x-vendor/anything", "a type is not a JSON value")
        schema = {k: v for k, v in schema.items() if k != "x-vendor"}
    assert schema_problem(schema) is None


def test_describe_problem() -> None:
    assert describe_problem(("", "expected a JSON object")) == "at the root: expected a JSON object"
    assert describe_problem(("/type", "bad")) == "at /type: bad"


def test_boolean_schemas_validate() -> None:
    assert validate(1, True) == []
    assert validate(1, False) == ["arguments: no value is allowed here, got integer 1"]
    assert validate({"x": 1, "y": 2}, {"properties": {"x": True, "y": False}}) == [
        "y: no value is allowed here, got integer 2"
    ]
    assert validate([1], {"items": False}) == ["[0]: no value is allowed here, got integer 1"]
    assert validate("a", {"anyOf": [False, {"type": "integer"}]}) == [
        'arguments: expected no value or integer, got string "a"'
    ]


async def test_the_registry_refuses_bad_schemas_and_names(harness: Harness) -> None:
    with pytest.raises(InvalidTool) as caught:
        harness.tools.register(
            Tool(ToolSchema("bad", "d", {"type": "object", "required": 5}), echo)
        )
    assert (caught.value.owner, caught.value.tool, caught.value.pointer) == (
        "host",
        "bad",
        "/required",
    )
    assert caught.value.message == (
        "tool 'bad' of 'host' is refused: its input schema is invalid at /required: expected an "
        "array of property names, got integer 5"
    )
    with pytest.raises(InvalidTool, match=r"tool 'a\.b' of 'me' is refused: model APIs accept"):
        harness.tools.register(Tool(ToolSchema("a.b", "d"), echo), "me")
    with pytest.raises(InvalidTool) as long:
        harness.tools.register(Tool(ToolSchema("n" * 5000, "d"), echo))
    assert long.value.message.startswith(f"tool {'n' * 60!r}... (5000 characters) of 'host'")
    assert long.value.pointer is None
    with pytest.raises(InvalidTool, match="names of 1 to 64"):
        harness.tools.register(Tool(ToolSchema("", "d"), echo))
    assert harness.tools.names() == []


def test_a_plugins_bad_tool_is_refused_and_its_other_tools_go_on() -> None:
    @tool
    def good(text: str) -> str:
        """Fine."""
        return text

    class Plugin:
        @hookimpl
        def dsh_register_tools(self, register: Any) -> None:
            schema = {"properties": {"p": {"type": 5}}}
            dispose = register(Tool(ToolSchema("broken", "d", schema), echo))
            dispose()  # a refused tool's disposer does nothing
            register(good)

    with capture_logs() as logs:
        h = Harness(load_entrypoints=False, plugins=[Plugin()])
        h.load()
    assert "good" in h.tools.names() and "broken" not in h.tools.names()
    [refused] = [e for e in logs if e["event"] == "tool refused"]
    assert (refused["plugin"], refused["tool"], refused["log_level"]) == (
        "Plugin",
        "broken",
        "error",
    )
    assert refused["error"].startswith(
        "tool 'broken' of 'Plugin' is refused: its input schema is invalid at "
        "/properties/p/type: expected one of"
    )
