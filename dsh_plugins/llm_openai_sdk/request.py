"""LlmRequest → the SDK's typed parameters of ``chat.completions.create``.

Messages and tools are built as the SDK's own ``TypedDict`` params (DeepSeek's assistant turns
add one key, :class:`DeepSeekAssistantTurn`); JSON output mode is its typed ``response_format``;
DeepSeek's own options travel in ``extra_body``. What the wire must hold, and why, is in
``docs/plugins/llm_openai_sdk.md``:

* an assistant turn's ``content`` is a string, ``""`` without text (never ``null``);
* **reasoning passback**: unless the request turns thinking off, every assistant turn that made
  tool calls carries ``reasoning_content`` — its reasoning verbatim, ``""`` when it streamed
  none (thinking mode rejects the history otherwise, request after request); other turns carry
  it when they reasoned;
* tool calls go back with their ids as received; each tool result is a ``tool`` message
  answering its call's id, in order among the user's text and images;
* ``thinking`` travels whenever the request sets it and ``reasoning_effort`` unless thinking is
  off, both in ``extra_body`` (OpenAI's ``reasoning_effort`` type lacks DeepSeek's ``max``);
  ``tool_choice`` is never sent, so thinking mode never sees a forced choice;
* when any tool is strict, every tool is sent strict, its schema closed (:mod:`.closure`), and
  the adapter calls the beta base URL.

Imports nothing of the SDK at run time: the adapter asks :func:`uses_beta` before it is loaded.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from dsh.plugin import Block, Image, LlmRequest, Reasoning, Text, ToolCall, ToolResult, ToolSchema
from dsh_plugins.llm_openai_sdk.closure import closed

if TYPE_CHECKING:
    from openai.types.chat import (
        ChatCompletionAssistantMessageParam,
        ChatCompletionContentPartParam,
        ChatCompletionMessageParam,
        ChatCompletionMessageToolCallParam,
        ChatCompletionToolMessageParam,
        ChatCompletionToolParam,
    )
    from openai.types.shared_params import FunctionDefinition

    class DeepSeekAssistantTurn(ChatCompletionAssistantMessageParam, total=False):
        """An assistant message with DeepSeek's ``reasoning_content``."""

        reasoning_content: str


__all__ = ["NO_OUTPUT", "create_params", "history", "passes_reasoning_back", "uses_beta"]

#: The content of a tool message whose result had none (a tool message must hold a string).
NO_OUTPUT = "(no output)"


def uses_beta(request: LlmRequest) -> bool:
    """Strict tools are a DeepSeek beta feature, served under ``{base_url}/beta``."""
    return any(tool.strict for tool in request.tools)


def passes_reasoning_back(request: LlmRequest) -> bool:
    """Whether tool-calling assistant turns must carry ``reasoning_content``: in thinking mode,
    which is on unless the request says off (``None`` is the server's default: on)."""
    return request.thinking is not False


def create_params(request: LlmRequest, model: str) -> dict[str, Any]:
    """Keyword arguments for ``chat.completions.create``: a stream with usage, for ``model``
    (the name sent), with only the options the request sets."""
    params: dict[str, Any] = {
        "model": model,
        "messages": history(request),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        params["tools"] = tool_params(request.tools, uses_beta(request))
    params.update(_sampling(request))
    if request.response_format is not None:
        params["response_format"] = {"type": request.response_format}
    extra = _deepseek_options(request)
    if extra:
        params["extra_body"] = extra
    return params


def _sampling(request: LlmRequest) -> Iterator[tuple[str, Any]]:
    if request.temperature is not None:
        yield "temperature", request.temperature
    if request.max_tokens is not None:
        yield "max_tokens", request.max_tokens
    if request.stop:
        yield "stop", list(request.stop)


def _deepseek_options(request: LlmRequest) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if request.thinking is not None:
        options["thinking"] = {"type": "enabled" if request.thinking else "disabled"}
    if request.reasoning_effort is not None and request.thinking is not False:
        options["reasoning_effort"] = request.reasoning_effort
    return options


def tool_params(tools: Iterable[ToolSchema], strict: bool) -> list[ChatCompletionToolParam]:
    """The ``tools`` parameter: every tool strict (and closed) when ``strict``."""
    params: list[ChatCompletionToolParam] = []
    for tool in tools:
        function: FunctionDefinition = {
            "name": tool.name,
            "description": tool.description,
            "parameters": closed(tool.parameters) if strict else tool.parameters,
        }
        if strict:
            function["strict"] = True
        params.append({"type": "function", "function": function})
    return params


def history(request: LlmRequest) -> list[ChatCompletionMessageParam]:
    """The ``messages`` parameter: the system prompt, then each message of the history as
    one or more wire messages."""
    passback = passes_reasoning_back(request)
    wire: list[ChatCompletionMessageParam] = []
    if request.system:
        wire.append({"role": "system", "content": request.system})
    for message in request.messages:
        match message.role:
            case "assistant":
                wire.append(_assistant(message.content, passback))
            case "system":
                wire.append({"role": "system", "content": _text(message.content, "\n")})
            case _:
                wire.extend(_user(message.content))
    return wire


def _text(blocks: Iterable[Block], separator: str) -> str:
    return separator.join(block.text for block in blocks if isinstance(block, Text))


def _assistant(blocks: tuple[Block, ...], passback: bool) -> DeepSeekAssistantTurn:
    turn: DeepSeekAssistantTurn = {"role": "assistant", "content": _text(blocks, "")}
    calls = [_tool_call(block) for block in blocks if isinstance(block, ToolCall)]
    reasoning = [block.text for block in blocks if isinstance(block, Reasoning)]
    if reasoning or (calls and passback):
        turn["reasoning_content"] = "".join(reasoning)
    if calls:
        turn["tool_calls"] = calls
    return turn


def _tool_call(call: ToolCall) -> ChatCompletionMessageToolCallParam:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _user(blocks: tuple[Block, ...]) -> list[ChatCompletionMessageParam]:
    """Tool results become ``tool`` messages; the text and images between them stay user
    messages, in their order."""
    wire: list[ChatCompletionMessageParam] = []
    for is_result, run in itertools.groupby(blocks, key=lambda b: isinstance(b, ToolResult)):
        if is_result:
            wire.extend(_tool_message(block) for block in run if isinstance(block, ToolResult))
            continue
        content = [block for block in run if isinstance(block, Text | Image)]
        if not content:
            continue
        if all(isinstance(block, Text) for block in content):
            wire.append({"role": "user", "content": _text(content, "\n")})
        else:
            wire.append({"role": "user", "content": [_part(block) for block in content]})
    return wire


def _part(block: Text | Image) -> ChatCompletionContentPartParam:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    return {"type": "image_url", "image_url": {"url": block.url}}


def _tool_message(result: ToolResult) -> ChatCompletionToolMessageParam:
    # A tool message holds a string: an image is named, so the model knows there was one.
    pieces = (
        block.text if isinstance(block, Text) else f"[image: {block.mime_type or 'unknown type'}]"
        for block in result.content
    )
    content = "\n".join(piece for piece in pieces if piece)
    return {"role": "tool", "tool_call_id": result.tool_call_id, "content": content or NO_OUTPUT}
