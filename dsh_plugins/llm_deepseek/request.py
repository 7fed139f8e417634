"""LlmRequest → the DeepSeek chat-completions request body.

The rules the API enforces (and the reasons) are in ``docs/plugins/llm_deepseek.md``: assistant
``content`` is always a string; ``reasoning_content`` goes back verbatim on every assistant turn
that carried reasoning, and (unless thinking is off) as ``""`` on a tool-calling turn that carried
none; tool results become ``tool`` messages answering their call by id; ``thinking`` is sent
explicitly whenever the request sets it; ``tool_choice`` is never forced; strict tools are sent
with their schemas closed (:mod:`~dsh_plugins.llm_deepseek.strict`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from dsh.plugin import (
    Block,
    Image,
    LlmRequest,
    Message,
    Reasoning,
    Text,
    ToolCall,
    ToolResult,
    ToolSchema,
)
from dsh_plugins.llm_deepseek.strict import close_schema

__all__ = [
    "EMPTY_TOOL_OUTPUT",
    "encode_body",
    "encoded_wire",
    "request_body",
    "uses_strict_tools",
    "wire_json",
    "wire_message",
]

EMPTY_TOOL_OUTPUT = "(no output)"
WireMessage = dict[str, Any]
Serializer = Callable[[Message, bool], Sequence[WireMessage]]


def uses_strict_tools(request: LlmRequest) -> bool:
    """Strict tools are a beta feature: the request must go to the ``/beta`` base URL."""
    return any(tool.strict for tool in request.tools)


def request_body(
    request: LlmRequest, model: str, serialize: Serializer | None = None
) -> dict[str, Any]:
    """The JSON body for ``POST /chat/completions`` (streaming, usage requested).

    ``serialize`` turns one message into wire messages (default :func:`wire_message`); the
    adapter passes a memoised one, since a history is re-sent, unchanged, at every step.
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": wire_messages(request, serialize or wire_message),
    }
    body.update(_options(request))
    return body


def _options(request: LlmRequest) -> dict[str, Any]:
    """The body's fields after ``model`` and ``messages``, in order."""
    body: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
    if request.thinking is not None:
        body["thinking"] = {"type": "enabled" if request.thinking else "disabled"}
    if request.reasoning_effort is not None and request.thinking is not False:
        body["reasoning_effort"] = request.reasoning_effort
    if request.tools:
        strict = uses_strict_tools(request)
        body["tools"] = [_tool(schema, strict) for schema in request.tools]
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.stop:
        body["stop"] = list(request.stop)
    if request.response_format is not None:
        # JSON output mode; the API also wants the word "json" in the prompt (the caller's).
        body["response_format"] = {"type": request.response_format}
    return body


def wire_json(value: Any) -> bytes:
    """``value`` as compact JSON in UTF-8. orjson writes it (a message ~5x faster than
    ``json.dumps``; non-ASCII as UTF-8); what orjson refuses (a lone surrogate, an integer past
    64 bits) ``json.dumps`` writes, compact and ASCII, so that a lone surrogate travels as an
    escape and the body is still UTF-8."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(value, separators=(",", ":")).encode()


def encoded_wire(message: Message, passback: bool, serialize: Serializer) -> bytes:
    """The wire messages of one message (``serialize``, e.g. :func:`wire_message`) as JSON,
    as they stand in the body's ``messages`` array (``","``-separated; ``b""`` for a message
    that sends none). The adapter keeps it as long as the session: a bytes object of its own
    size, not orjson's (which holds a buffer of 4 KB however short its JSON)."""
    wires = [wire_json(wire) for wire in serialize(message, passback)]
    return bytes(memoryview(wires[0])) if len(wires) == 1 else b",".join(wires)


def encode_body(request: LlmRequest, model: str, encoded: Sequence[bytes]) -> bytes:
    """:func:`request_body` as compact JSON in UTF-8 (:func:`wire_json`), the history given
    already encoded (:func:`encoded_wire` of each message, in order).

    A history is re-sent, unchanged, at every step, and encoding it was most of a step's cost
    (as for any client that sends a whole conversation); the adapter encodes each message once
    and joins the encoded messages here, as bytes: the body goes to the socket without a
    copy of the whole as text and another as bytes.
    """
    head = wire_json({"model": model})[:-1]
    parts = [wire_json(wire) for wire in _system(request)]
    parts.extend(filter(None, encoded))  # in C: the history is long, and sent every step
    options = wire_json(_options(request))[1:]
    return b"".join((head, b',"messages":[', b",".join(parts), b"],", options))


def wire_messages(request: LlmRequest, serialize: Serializer) -> list[WireMessage]:
    """The system prompt, then the history, one or more wire messages per dsh message."""
    out = _system(request)
    passback = passes_reasoning_back(request)
    for message in request.messages:
        out.extend(serialize(message, passback))
    return out


def _system(request: LlmRequest) -> list[WireMessage]:
    """The wire message of the system prompt, if there is one."""
    return [{"role": "system", "content": request.system}] if request.system else []


def passes_reasoning_back(request: LlmRequest) -> bool:
    """Whether every tool-calling assistant turn must carry ``reasoning_content``: in thinking
    mode, which is on unless the request turns it off (``None`` leaves the server default, on).
    Omitting it is a 400 that stays in the history and fails every later request."""
    return request.thinking is not False


def _tool(schema: ToolSchema, strict: bool) -> WireMessage:
    function: dict[str, Any] = {
        "name": schema.name,
        "description": schema.description,
        "parameters": close_schema(schema.parameters) if strict else schema.parameters,
    }
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def wire_message(message: Message, passback: bool = True) -> tuple[WireMessage, ...]:
    """The wire messages of one dsh message; they depend on nothing else (``passback``: see
    :func:`passes_reasoning_back`), so callers may memoise them (treat them as read-only)."""
    return tuple(_message(message, passback))


def _message(message: Message, passback: bool) -> list[WireMessage]:
    if message.role == "assistant":
        return [_assistant(message.content, passback)]
    if message.role == "system":
        return [{"role": "system", "content": _joined_text(message.content)}]
    return _user(message.content)


def _assistant(blocks: tuple[Block, ...], passback: bool) -> WireMessage:
    # content must be a string: null without tool_calls is a 400 ("content or tool_calls must
    # be set"), and an array is a deserialization error.
    wire: WireMessage = {"role": "assistant", "content": _joined_text(blocks, "")}
    reasoning = [block.text for block in blocks if isinstance(block, Reasoning)]
    calls = [block for block in blocks if isinstance(block, ToolCall)]
    # A tool-calling turn whose thinking streamed only the opening "" kept no Reasoning block;
    # in thinking mode it still needs the field, as "" (also for turns made with thinking off).
    if reasoning or (calls and passback):
        wire["reasoning_content"] = "".join(reasoning)
    if calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in calls
        ]
    return wire


#: The blocks a user message carries besides tool results.
_USER_BLOCKS = (Text, Image)


def _user(blocks: tuple[Block, ...]) -> list[WireMessage]:
    """Tool results become ``tool`` messages; the other blocks stay a user message, in order."""
    out: list[WireMessage] = []
    pending: list[Text | Image] = []
    for block in blocks:
        if isinstance(block, ToolResult):
            out.extend(_user_content(pending))
            pending = []
            out.append(_tool_result(block))
        elif isinstance(block, _USER_BLOCKS):
            pending.append(block)
    out.extend(_user_content(pending))
    return out


def _user_content(blocks: list[Text | Image]) -> list[WireMessage]:
    if not blocks:
        return []
    if all(isinstance(block, Text) for block in blocks):
        return [{"role": "user", "content": _joined_text(blocks)}]
    parts = [
        {"type": "text", "text": block.text}
        if isinstance(block, Text)
        else {"type": "image_url", "image_url": {"url": block.url}}
        for block in blocks
    ]
    return [{"role": "user", "content": parts}]


def _tool_result(result: ToolResult) -> WireMessage:
    # A tool message carries a string only; images are named so the model knows one was there.
    pieces = [
        block.text if isinstance(block, Text) else f"[image: {block.mime_type or 'unknown type'}]"
        for block in result.content
    ]
    content = "\n".join(piece for piece in pieces if piece)
    return {
        "role": "tool",
        "tool_call_id": result.tool_call_id,
        "content": content or EMPTY_TOOL_OUTPUT,
    }


def _joined_text(blocks: Any, separator: str = "\n") -> str:
    return separator.join(block.text for block in blocks if isinstance(block, Text))
