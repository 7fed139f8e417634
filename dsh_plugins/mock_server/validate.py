"""Request checks the real API makes, so that adapter bugs fail here as they would in production.

Each check returns the error message of the 400 DeepSeek answers, or ``None``. Messages quote the
real API where its wording is known (``deepseek-wire.md`` §2, §5.2).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from dsh_plugins.mock_server.conversation import thinking_enabled
from dsh_plugins.mock_server.scenario import Scenario, error_reply

__all__ = ["REASONING_NOT_PASSED_BACK", "validate"]

REASONING_NOT_PASSED_BACK = (
    "The `reasoning_content` in the thinking mode must be passed back to the API."
)
_DESERIALIZE = "Failed to deserialize the JSON body into the target type: "
_ROLES = ("system", "user", "assistant", "tool")
Body = dict[str, Any]


def validate(body: Any, *, beta: bool, models: Collection[str]) -> Scenario | None:
    """The error answer the API gives to ``body``, or ``None`` if it would be served."""
    if not isinstance(body, dict):
        return error_reply(400, _DESERIALIZE + "expected a JSON object", name="invalid-request")
    for field in ("model", "messages"):
        if field not in body:
            message = f"{_DESERIALIZE}missing field `{field}` at line 1 column 2"
            return error_reply(422, message, plain=True, name="invalid-request")
    if body["model"] not in models:
        return error_reply(400, "Model Not Exist", name="invalid-request")
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
    ]


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
    return None
