"""LlmRequest → an OpenAI chat-completions request body, shaped by the provider's quirks and
the model's capabilities.

What a model cannot take is decided here, before anything is sent: tool schemas are left out
for a model without tools, images become a note for a model that does not read them (the
image stays in the session; only this request goes without it), and JSON mode for a model
without it is refused with ``INVALID_REQUEST``.
"""

from __future__ import annotations

import json
from typing import Any

from dsh.plugin import (
    Block,
    Image,
    LlmError,
    LlmRequest,
    Message,
    Reasoning,
    Text,
    ToolCall,
    ToolResult,
    ToolSchema,
)
from dsh_plugins.llm_providers.config import ModelSettings
from dsh_plugins.llm_providers.profiles import Provider

__all__ = ["EMPTY_TOOL_OUTPUT", "body_for", "image_note"]

Wire = dict[str, Any]
EMPTY_TOOL_OUTPUT = "(no output)"


def image_note(model: str) -> str:
    """What replaces an image for a model that does not read images."""
    return f"[an image was here; {model} does not read images, so it was left out]"


def body_for(provider: Provider, model: str, request: LlmRequest) -> Wire:
    """The JSON body of ``POST {base_url}/chat/completions`` for ``model`` (its wire name)."""
    caps = provider.caps(model)
    if request.response_format == "json_object" and not caps.json_mode:
        raise LlmError.of(
            "INVALID_REQUEST",
            f"{provider.name}/{model} has no JSON mode: set json_mode = true in "
            f'[llm_providers.{provider.name}.models."{model}"] if the endpoint supports it, '
            "or ask for JSON in the prompt instead",
        )
    body: Wire = {"model": model, "messages": _messages(provider, model, caps, request)}
    body["stream"] = True
    if provider.stream_options:
        body["stream_options"] = {"include_usage": True}
    if request.tools and caps.tools:
        body["tools"] = [_tool(schema) for schema in request.tools]
    if request.max_tokens is not None:
        body[provider.token_limit_field] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop:
        body["stop"] = list(request.stop)
    if request.response_format is not None:
        body["response_format"] = {"type": request.response_format}
    if request.reasoning_effort is not None and caps.reasoning is not False:
        # OpenAI's scale tops out at "high"; OpenRouter, Ollama and vLLM take the same field.
        effort = "high" if request.reasoning_effort == "max" else request.reasoning_effort
        body["reasoning_effort"] = effort
    return {**body, **provider.settings.extra_body}


def _tool(schema: ToolSchema) -> Wire:
    function: Wire = {
        "name": schema.name,
        "description": schema.description,
        "parameters": schema.parameters,
    }
    if schema.strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def _messages(
    provider: Provider, model: str, caps: ModelSettings, request: LlmRequest
) -> list[Wire]:
    out: list[Wire] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        out.extend(_message(provider, model, caps, message))
    return out


def _message(provider: Provider, model: str, caps: ModelSettings, message: Message) -> list[Wire]:
    if message.role == "assistant":
        return [_assistant(provider, message.content)]
    if message.role == "system":
        return [{"role": "system", "content": _text(message.content, "\n")}]
    return _user(message.content, None if caps.image_input else image_note(model))


def _assistant(provider: Provider, blocks: tuple[Block, ...]) -> Wire:
    calls = [block for block in blocks if isinstance(block, ToolCall)]
    text = _text(blocks, "")
    # OpenAI's schema: content is required unless tool_calls is given (then it may be null).
    wire: Wire = {"role": "assistant", "content": text if text or not calls else None}
    reasoning = "".join(block.text for block in blocks if isinstance(block, Reasoning))
    # Passing reasoning back, a tool-calling turn carries the field even when it had none
    # (as "" — DeepSeek's thinking mode refuses such a turn without it).
    if provider.send_reasoning and (reasoning or calls):
        field = (
            "reasoning_content" if provider.reasoning_field == "auto" else provider.reasoning_field
        )
        wire[field] = reasoning
    if provider.reasoning_passback != "none":
        details = [
            detail
            for block in blocks
            if isinstance(block, Reasoning) and block.provider_data is not None
            for detail in json.loads(block.provider_data)
        ]
        if details:
            wire[provider.reasoning_passback] = details
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


def _user(blocks: tuple[Block, ...], note: str | None) -> list[Wire]:
    """Tool results become ``tool`` messages, in order; the other blocks a user message."""
    out: list[Wire] = []
    pending: list[Text | Image] = []
    for block in blocks:
        if isinstance(block, ToolResult):
            out.extend(_user_parts(pending, note))
            pending = []
            out.append(_tool_result(block))
        elif isinstance(block, Text | Image):
            pending.append(block)
    out.extend(_user_parts(pending, note))
    return out


def _user_parts(blocks: list[Text | Image], note: str | None) -> list[Wire]:
    if not blocks:
        return []
    if note is not None:
        blocks = [Text(note) if isinstance(b, Image) else b for b in blocks]
    if all(isinstance(block, Text) for block in blocks):
        return [{"role": "user", "content": _text(blocks, "\n")}]
    parts = [
        {"type": "text", "text": block.text}
        if isinstance(block, Text)
        else {"type": "image_url", "image_url": {"url": block.url}}
        for block in blocks
    ]
    return [{"role": "user", "content": parts}]


def _tool_result(result: ToolResult) -> Wire:
    # A tool message carries text only: an image is named so that the model knows of it.
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


def _text(blocks: Any, separator: str) -> str:
    return separator.join(block.text for block in blocks if isinstance(block, Text))
