"""LlmRequest → the arguments of ``client.chat.completions.create``.

The wire must be what DeepSeek accepts (``docs/plugins/llm_openai_sdk.md`` gives the reasons):

* an assistant turn's ``content`` is a string, ``""`` when it had no text (never ``null``);
* its reasoning goes back verbatim as ``reasoning_content`` on *every* turn that reasoned;
* tool calls go back with their ids exactly as received; each tool result is a ``tool`` message
  answering its call's id;
* DeepSeek's own options, ``thinking`` and ``reasoning_effort`` (whose values OpenAI's do not
  cover), travel in ``extra_body``; ``tool_choice`` is never sent, so thinking mode never sees
  a forced choice;
* when any tool is strict, every tool is sent strict (and the adapter calls the beta base URL).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from dsh.content import Block, Image, Message, Reasoning, Text, ToolCall, ToolResult
from dsh.request import LlmRequest, ToolSchema

__all__ = ["EMPTY_TOOL_RESULT", "create_arguments", "is_strict", "wire_messages"]

EMPTY_TOOL_RESULT = "(no output)"
WireMessage = dict[str, Any]


def is_strict(request: LlmRequest) -> bool:
    """Whether the request uses strict tools, a DeepSeek beta feature."""
    return any(schema.strict for schema in request.tools)


def create_arguments(request: LlmRequest, model: str) -> dict[str, Any]:
    """Keyword arguments for ``chat.completions.create``: a stream with usage, for ``model``
    (the bare wire name), with only the options the request sets."""
    arguments: dict[str, Any] = {
        "model": model,
        "messages": wire_messages(request),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        strict = is_strict(request)
        arguments["tools"] = [_function(schema, strict) for schema in request.tools]
    sampling = {
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "stop": list(request.stop) or None,
    }
    arguments.update((name, value) for name, value in sampling.items() if value is not None)
    extra = _deepseek_options(request)
    if extra:
        arguments["extra_body"] = extra
    return arguments


def _deepseek_options(request: LlmRequest) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if request.thinking is not None:
        options["thinking"] = {"type": "enabled" if request.thinking else "disabled"}
    if request.reasoning_effort is not None and request.thinking is not False:
        options["reasoning_effort"] = request.reasoning_effort
    return options


def _function(schema: ToolSchema, strict: bool) -> WireMessage:
    function: dict[str, Any] = {
        "name": schema.name,
        "description": schema.description,
        "parameters": schema.parameters,
    }
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def wire_messages(request: LlmRequest) -> list[WireMessage]:
    """The system prompt first, then each message of the history as one or more wire
    messages."""
    wire = [{"role": "system", "content": request.system}] if request.system else []
    for message in request.messages:
        wire.extend(_wire(message))
    return wire


def _wire(message: Message) -> list[WireMessage]:
    if message.role == "system":
        return [{"role": "system", "content": _texts(message.content, "\n")}]
    if message.role == "assistant":
        return [_assistant_turn(message.content)]
    return _user_turn(message.content)


def _texts(blocks: Iterable[Block], separator: str) -> str:
    return separator.join(block.text for block in blocks if isinstance(block, Text))


def _assistant_turn(blocks: Sequence[Block]) -> WireMessage:
    turn: WireMessage = {"role": "assistant", "content": _texts(blocks, "")}
    reasoning = [block.text for block in blocks if isinstance(block, Reasoning)]
    if reasoning:
        turn["reasoning_content"] = "".join(reasoning)
    calls = [_call(block) for block in blocks if isinstance(block, ToolCall)]
    if calls:
        turn["tool_calls"] = calls
    return turn


def _call(call: ToolCall) -> WireMessage:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _user_turn(blocks: Sequence[Block]) -> list[WireMessage]:
    """Tool results become ``tool`` messages; the text and images between them stay user
    messages, in their order."""
    wire: list[WireMessage] = []
    for is_result, run in itertools.groupby(blocks, key=lambda b: isinstance(b, ToolResult)):
        if is_result:
            wire.extend(_tool_message(result) for result in run if isinstance(result, ToolResult))
            continue
        content = [block for block in run if isinstance(block, Text | Image)]
        if content:
            wire.append({"role": "user", "content": _user_content(content)})
    return wire


def _user_content(blocks: list[Text | Image]) -> str | list[dict[str, Any]]:
    """Text only: one string. With images: OpenAI's content parts."""
    if all(isinstance(block, Text) for block in blocks):
        return _texts(blocks, "\n")
    return [
        {"type": "text", "text": block.text}
        if isinstance(block, Text)
        else {"type": "image_url", "image_url": {"url": block.url}}
        for block in blocks
    ]


def _tool_message(result: ToolResult) -> WireMessage:
    # A tool message holds a string: an image is named, so the model knows there was one.
    pieces = (
        block.text if isinstance(block, Text) else f"[image: {block.mime_type or 'unknown type'}]"
        for block in result.content
    )
    content = "\n".join(piece for piece in pieces if piece)
    return {
        "role": "tool",
        "tool_call_id": result.tool_call_id,
        "content": content or EMPTY_TOOL_RESULT,
    }
