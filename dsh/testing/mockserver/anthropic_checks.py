"""What the mock's Messages endpoint checks before answering, and the request as the scenarios
read it.

The checks are those of the Messages API (and of DeepSeek's Anthropic-format endpoint) that an
adapter can get wrong: the key in ``x-api-key`` or ``Authorization: Bearer``; ``model``,
``max_tokens`` and ``messages`` present; roles ``user`` and ``assistant`` only; no empty text;
no content DeepSeek's endpoint does not support (images, documents, search results, redacted
thinking); every ``tool_use`` answered by a ``tool_result`` at the start of the next message,
and no ``tool_result`` without its call; ``thinking.type`` ``enabled`` or ``disabled`` (its
``budget_tokens`` DeepSeek ignores, and so does the mock); in thinking mode, every assistant
turn that uses a tool starting with its thinking block, and every thinking block carrying the
signature it was given; no forced ``tool_choice`` in thinking mode; tools
with an ``input_schema``. Errors are Messages API error bodies (:func:`error_answer`).

:func:`openai_body` rewrites an accepted request as the chat-completions body the scenarios
(scripted conversation, tool loop) were written to read.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from dsh.testing.mockserver.anthropic import signature_of
from dsh.testing.mockserver.conversation import thinking_enabled
from dsh.testing.mockserver.scenario import Scenario
from dsh.testing.mockserver.validate import serving_model
from dsh.testing.mockserver.wire import dumps

__all__ = [
    "THINKING_NOT_PASSED_BACK",
    "auth_failure",
    "error_answer",
    "openai_body",
    "served_model",
    "thinking_on",
    "validate",
]

#: DeepSeek's words (as users of its Anthropic-format endpoint quote them).
THINKING_NOT_PASSED_BACK = (
    "The `content[].thinking` in the thinking mode must be passed back to the API."
)
_BLOCK_TYPES = {
    "user": ("text", "tool_result"),
    "assistant": ("text", "thinking", "tool_use"),
}
#: Block types of the Messages API that DeepSeek's endpoint lists as not supported.
_UNSUPPORTED = ("image", "document", "search_result", "redacted_thinking")
Body = dict[str, Any]


def error_answer(status: int, message: str, kind: str = "invalid_request_error") -> Scenario:
    """A Messages API error answer."""
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return Scenario("invalid-request", status=status, body=dumps(body))


def auth_failure(headers: Mapping[str, str], required: str | None) -> Scenario | None:
    """401 without a key, or with another key than ``required`` (any, if ``None``). DeepSeek
    takes the key in ``x-api-key`` or as ``Authorization: Bearer`` (the official SDK's way);
    when both are sent, ``Authorization`` wins."""
    authorization = headers.get("Authorization")
    if authorization is not None:
        scheme, _, key = authorization.partition(" ")
        if scheme != "Bearer":
            key = ""
    else:
        key = headers.get("x-api-key", "")
    if not key.strip():
        return error_answer(
            401, "an x-api-key or Authorization: Bearer header is required", "authentication_error"
        )
    if required is not None and key != required:
        return error_answer(401, "invalid API key", "authentication_error")
    return None


def served_model(model: str) -> str:
    """The model that answers ``model`` on DeepSeek's endpoint: ``claude-opus*`` is
    ``deepseek-v4-pro``, any other ``claude*`` is ``deepseek-flash``, a legacy name its
    successor."""
    if model.startswith("claude-opus"):
        return "deepseek-v4-pro"
    if model.startswith("claude"):
        return "deepseek-flash"
    return serving_model(model)


def validate(body: Any, models: Collection[str]) -> Scenario | None:
    """The error answer the API gives to ``body``, or ``None`` if it would be served."""
    if not isinstance(body, dict):
        return error_answer(400, "the request body must be a JSON object")
    for field in ("model", "max_tokens", "messages"):
        if field not in body:
            return error_answer(400, f"{field}: Field required")
    for check in (_model, _max_tokens, _thinking, _tools, _messages, _pairing, _passback):
        problem = check(body, models)
        if problem is not None:
            return error_answer(400, problem)
    return None


def _model(body: Body, models: Collection[str]) -> str | None:
    if served_model(str(body["model"])) in models:
        return None
    return f"model: {body['model']!r} is not a supported model; use one of {', '.join(models)}"


def _max_tokens(body: Body, models: Collection[str]) -> str | None:
    limit = body["max_tokens"]
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        return "max_tokens: Input should be an integer greater than or equal to 1"
    return None


def thinking_on(body: Body) -> bool:
    """Whether a Messages request runs in thinking mode (``thinking``, else the model's
    default)."""
    return thinking_enabled({**body, "model": served_model(str(body["model"]))})


def _thinking(body: Body, models: Collection[str]) -> str | None:
    thinking = body.get("thinking")
    if thinking is None:
        return None
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind not in ("enabled", "disabled"):
        return "thinking.type: Input should be 'enabled' or 'disabled'"
    # DeepSeek's compatibility table: thinking is "Supported (budget_tokens is ignored)".
    return None


def _tools(body: Body, models: Collection[str]) -> str | None:
    for position, tool in enumerate(body.get("tools") or ()):
        if not isinstance(tool, dict) or not isinstance(tool.get("input_schema"), dict):
            return f"tools.{position}.input_schema: Field required"
    choice = body.get("tool_choice")
    forced = isinstance(choice, dict) and choice.get("type") in ("any", "tool")
    if forced and thinking_on(body):
        return "Thinking may not be enabled when tool_choice forces tool use."
    return None


def _content(message: Body) -> list[Any]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def _messages(body: Body, models: Collection[str]) -> str | None:
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for position, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in _BLOCK_TYPES:
            return f"messages.{position}.role: Input should be 'user' or 'assistant'"
        for number, block in enumerate(_content(message)):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in _UNSUPPORTED:
                return f"messages.{position}.content.{number}: `{kind}` content is not supported"
            if kind not in _BLOCK_TYPES[role]:
                return f"messages.{position}.content.{number}: unexpected block type {kind!r}"
            if kind == "text" and not block.get("text"):
                return "messages: text content blocks must be non-empty"
    return None


def _pairing(body: Body, models: Collection[str]) -> str | None:
    """Each ``tool_use`` is answered at the start of the next message; each ``tool_result``
    answers a call of the message before it."""
    calls: set[str] = set()
    for position, message in enumerate(body["messages"]):
        blocks = _content(message)
        results = [b for b in blocks if b["type"] == "tool_result"]
        leading = blocks[: len(results)]
        if results and leading != results:
            return f"messages.{position}: `tool_result` blocks must come first in the content"
        answered = {str(block.get("tool_use_id")) for block in results}
        if answered - calls:
            return (
                f"messages.{position}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{', '.join(sorted(answered - calls))}. Each `tool_result` block must have a "
                "corresponding `tool_use` block in the previous message."
            )
        if calls - answered:
            return (
                f"messages.{position}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(sorted(calls - answered))}"
            )
        calls = {str(b.get("id")) for b in blocks if b["type"] == "tool_use"}
    return None


def _passback(body: Body, models: Collection[str]) -> str | None:
    """In thinking mode a tool-using turn starts with its thinking block, and every thinking
    block comes back with the signature the mock gave it."""
    thinking = thinking_on(body)
    for position, message in enumerate(body["messages"]):
        if message["role"] != "assistant":
            continue
        blocks = _content(message)
        for number, block in enumerate(blocks):
            if block["type"] == "thinking" and block.get("signature") != signature_of(
                str(block.get("thinking"))
            ):
                return (
                    f"messages.{position}.content.{number}: Invalid `signature` in `thinking` block"
                )
        uses_tools = any(block["type"] == "tool_use" for block in blocks)
        if thinking and uses_tools and blocks[0]["type"] != "thinking":
            return THINKING_NOT_PASSED_BACK
    return None


def openai_body(body: Body) -> Body:
    """An accepted Messages request as the chat-completions body the scenarios read."""
    messages: list[Body] = []
    system = body.get("system")
    if isinstance(system, list):
        system = "\n".join(str(part.get("text", "")) for part in system)
    if system:
        messages.append({"role": "system", "content": system})
    for message in body["messages"]:
        messages += _openai_messages(message)
    converted: Body = {"model": served_model(str(body["model"])), "messages": messages}
    if "thinking" in body:
        converted["thinking"] = {"type": body["thinking"]["type"]}
    if body.get("tools"):
        converted["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool["name"],
                    "description": tool.get("description", ""),
                    "parameters": tool["input_schema"],
                },
            }
            for tool in body["tools"]
        ]
    return converted


def _openai_messages(message: Body) -> list[Body]:
    blocks = _content(message)
    if message["role"] == "assistant":
        wire: Body = {
            "role": "assistant",
            "content": "".join(b["text"] for b in blocks if b["type"] == "text"),
        }
        thinking = [b.get("thinking", "") for b in blocks if b["type"] == "thinking"]
        if thinking:
            wire["reasoning_content"] = "".join(thinking)
        calls = [b for b in blocks if b["type"] == "tool_use"]
        if calls:
            wire["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": json.dumps(call["input"], ensure_ascii=False),
                    },
                }
                for call in calls
            ]
        return [wire]
    out: list[Body] = [
        {"role": "tool", "tool_call_id": b["tool_use_id"], "content": _result_text(b)}
        for b in blocks
        if b["type"] == "tool_result"
    ]
    text = "\n".join(b["text"] for b in blocks if b["type"] == "text")
    if text:
        out.append({"role": "user", "content": text})
    return out


def _result_text(result: Body) -> str:
    content = result.get("content")
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) for part in content if part.get("type") == "text"
        )
    return str(content or "")
