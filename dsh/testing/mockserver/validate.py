"""Request checks the real API makes, so that adapter bugs fail here as they would in production.

Each check returns the error message of the 400 DeepSeek answers, or ``None``. Messages quote the
real API where its wording is known (``deepseek-wire.md`` §2, §5.2).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from dsh.testing.mockserver.conversation import thinking_enabled
from dsh.testing.mockserver.scenario import Scenario, error_reply

__all__ = [
    "LEGACY_MODELS",
    "REASONING_NOT_PASSED_BACK",
    "RETIRED_MODELS",
    "serving_model",
    "validate",
]

REASONING_NOT_PASSED_BACK = (
    "The `reasoning_content` in the thinking mode must be passed back to the API."
)
_DESERIALIZE = "Failed to deserialize the JSON body into the target type: "
_ROLES = ("system", "user", "assistant", "tool")
Body = dict[str, Any]

#: Retired names the API still accepts, by the model that now serves them (Models & Pricing:
#: "requests are served by DeepSeek-V4.1-Flash and billed at Flash prices").
LEGACY_MODELS = {
    "deepseek-v4-flash": "deepseek-flash",
    "deepseek-v4-flash-vision-exp": "deepseek-flash",
}
#: Names the API stopped accepting on 2026-07-24 at 15:59 UTC; it answers 400 naming the
#: current models.
RETIRED_MODELS = ("deepseek-chat", "deepseek-reasoner")
_RESPONSE_FORMATS = ("text", "json_object")
_NO_JSON_WORD = (
    "Prompt must contain the word 'json' in some form to use 'response_format' of type "
    "'json_object'."
)


def serving_model(model: str) -> str:
    """The model that answers a request for ``model`` (a legacy name is served by its
    successor, and the response names the successor)."""
    return LEGACY_MODELS.get(model, model)


def validate(body: Any, *, beta: bool, models: Collection[str]) -> Scenario | None:
    """The error answer the API gives to ``body``, or ``None`` if it would be served."""
    if not isinstance(body, dict):
        return error_reply(400, _DESERIALIZE + "expected a JSON object", name="invalid-request")
    for field in ("model", "messages"):
        if field not in body:
            message = f"{_DESERIALIZE}missing field `{field}` at line 1 column 2"
            return error_reply(422, message, plain=True, name="invalid-request")
    problem = _model(body["model"], models)
    if problem is not None:
        return error_reply(400, problem, name="invalid-request")
    for check in _checks(beta):
        problem = check(body)
        if problem is not None:
            return error_reply(400, problem, name="invalid-request")
    return None


def _checks(beta: bool) -> list[Callable[[Body], str | None]]:
    return [
        _messages_shape,
        _tool_answers,
        _reasoning_passed_back,
        _tool_choice,
        lambda body: _tools(body, beta),
        _response_format,
    ]


def _model(model: Any, models: Collection[str]) -> str | None:
    if model in models or LEGACY_MODELS.get(model) in models:
        return None
    if model in RETIRED_MODELS:
        names = " or ".join(models)
        return f"The supported API model names are {names}, but you passed {model}."
    return "Model Not Exist"


def _response_format(body: Body) -> str | None:
    """``text`` or ``json_object``; JSON output also needs the word "json" in the prompt."""
    response_format = body.get("response_format")
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind not in _RESPONSE_FORMATS:
        return "This response_format type is unavailable now"
    if kind == "json_object" and not any("json" in text.lower() for text in _prompts(body)):
        return _NO_JSON_WORD
    return None


def _prompts(body: Body) -> list[str]:
    """The text of the system and user messages."""
    texts: list[str] = []
    for message in body["messages"]:
        if message["role"] not in ("system", "user"):
            continue
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"text": content}]
        texts.extend(str(part.get("text") or "") for part in parts if isinstance(part, dict))
    return texts


def _messages_shape(body: Body) -> str | None:
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: the list of messages must not be empty"
    for position, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in _ROLES:
            return (
                f"{_DESERIALIZE}messages[{position}]: unknown variant `{role}`, expected one "
                "of `system`, `user`, `assistant`, `tool`"
            )
        if role == "assistant":
            problem = _assistant_shape(position, message)
            if problem is not None:
                return problem
    return None


def _assistant_shape(position: int, message: Body) -> str | None:
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return f"{_DESERIALIZE}messages[{position}]: invalid type: sequence, expected a string"
    if content is None and not message.get("tool_calls"):
        return f"messages[{position}]: content or tool_calls must be set"
    return None


def _tool_answers(body: Body) -> str | None:
    """Each tool message answers a call of the assistant message before it; every call is
    answered before the conversation moves on."""
    pending: set[str] = set()
    for position, message in enumerate(body["messages"]):
        role = message["role"]
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                return (
                    f"messages[{position}]: tool_call_id {call_id!r} does not answer a tool "
                    "call of the preceding assistant message"
                )
            pending.discard(call_id)
            continue
        if pending:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'. (missing: {', '.join(sorted(pending))})"
            )
        if role == "assistant":
            pending = {call["id"] for call in message.get("tool_calls") or ()}
    return None


def _reasoning_passed_back(body: Body) -> str | None:
    """V4: in thinking mode, the reasoning of every turn that called a tool must come back."""
    if not thinking_enabled(body):
        return None
    for message in body["messages"]:
        called = message["role"] == "assistant" and message.get("tool_calls")
        if called and not isinstance(message.get("reasoning_content"), str):
            return REASONING_NOT_PASSED_BACK
    return None


def _tool_choice(body: Body) -> str | None:
    choice = body.get("tool_choice")
    if thinking_enabled(body) and choice not in (None, "auto", "none"):
        return "Thinking mode does not support this tool_choice"
    return None


def _tools(body: Body, beta: bool) -> str | None:
    tools = body.get("tools") or []
    for position, tool in enumerate(tools):
        if tool.get("type") != "function":
            return (
                f"{_DESERIALIZE}tools[{position}]: unknown variant `{tool.get('type')}`, "
                "expected `function`"
            )
    strict = [bool(tool["function"].get("strict")) for tool in tools]
    if any(strict) and not beta:
        return "strict mode is a beta feature: use the base URL https://api.deepseek.com/beta"
    if beta and any(strict) and not all(strict):
        return "in strict mode every function must set strict: true"
    if beta and any(strict):
        return next(filter(None, map(_strict_schema, enumerate(tools))), None)
    return None


# Where a JSON Schema nests schemas: by name, or in a list (``items`` and ``not`` may hold one).
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("items", "prefixItems", "anyOf", "oneOf", "allOf", "not")


def _describes_object(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return (
        "properties" in schema or kind == "object" or (isinstance(kind, list) and "object" in kind)
    )


def _strict_schema(numbered: tuple[int, Any]) -> str | None:
    """Strict mode checks each schema: every object sets ``additionalProperties: false`` and
    lists all its properties in ``required``."""
    position, tool = numbered
    where = f"tools[{position}].function.parameters"
    return _closed(tool["function"].get("parameters") or {}, where)


def _closed(schema: Any, where: str) -> str | None:
    if not isinstance(schema, dict):
        return None
    if _describes_object(schema):
        properties = schema.get("properties") or {}
        if schema.get("additionalProperties") is not False:
            return f"Invalid strict schema at {where}: additionalProperties must be false"
        if sorted(schema.get("required") or ()) != sorted(properties):
            return f"Invalid strict schema at {where}: every property must be in required"
    for key, value in schema.items():
        subschemas = _subschemas(key, value)
        for name, sub in subschemas:
            problem = _closed(sub, f"{where}.{key}{name}")
            if problem is not None:
                return problem
    return None


def _subschemas(key: str, value: Any) -> list[tuple[str, Any]]:
    if key in _SCHEMA_MAPS and isinstance(value, dict):
        return [(f".{name}", sub) for name, sub in value.items()]
    if key in _SCHEMA_LISTS and isinstance(value, list):
        return [(f"[{index}]", sub) for index, sub in enumerate(value)]
    return [("", value)] if key in _SCHEMA_LISTS else []
