"""LlmRequest → the body of ``POST /v1/messages`` (streamed).

The rules the API enforces, and how dsh meets them:

* the system prompt is the top-level ``system`` (the request's, then the text of any
  ``system`` messages of the history, joined by blank lines: the API has no system role);
* ``max_tokens`` is required: the request's, else the configured default;
* ``thinking``: ``{"type": "enabled", "budget_tokens": b}`` when the request turns it on (``b``
  the configured budget, at most ``max_tokens - 1``; below the API's minimum of 1024 the request
  is refused here with a clear error — except for DeepSeek, whose endpoint ignores the budget,
  so it is sent as configured), ``{"type": "disabled"}`` when off, left out when unset;
* an assistant turn sends its blocks in order: reasoning as a ``thinking`` block with its
  ``signature`` (or a ``redacted_thinking`` block), text, ``tool_use`` blocks whose ``input`` is
  the parsed arguments. A thinking block must come back exactly as it came, signature and all,
  or the API refuses the turn — an empty signature too (gateways that turn another format's
  reasoning into thinking send ``"signature": ""`` and want it back); reasoning without a
  signature field (made by another provider) cannot be checked by the API and is left out;
* tool results go in the next user message as ``tool_result`` blocks (``is_error`` when the tool
  failed), before any other content of that message, as the API requires; consecutive messages
  of one role are merged into one turn;
* empty text is never sent (the API refuses empty text blocks); tools carry ``input_schema``;
  ``tool_choice`` is left to the API's default (``auto``: forcing a tool is refused with
  thinking on); ``stop`` becomes ``stop_sequences``.
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

__all__ = ["EMPTY_TOOL_OUTPUT", "MIN_THINKING_BUDGET", "request_body", "wire_blocks"]

#: What an empty tool result says (the API refuses empty text).
EMPTY_TOOL_OUTPUT = "(no output)"
#: The smallest ``budget_tokens`` the API accepts.
MIN_THINKING_BUDGET = 1024
WireBlock = dict[str, Any]


def request_body(
    request: LlmRequest,
    model: str,
    max_tokens: int,
    budget_tokens: int,
    checks_budget: bool = True,
) -> dict[str, Any]:
    """The JSON body for ``POST /v1/messages``. ``checks_budget``: the provider holds the
    thinking budget to Anthropic's rules (else the configured budget is sent unchecked)."""
    limit = request.max_tokens or max_tokens
    body: dict[str, Any] = {"model": model, "max_tokens": limit, "stream": True}
    system = [
        request.system or "",
        *(_text(m.content) for m in request.messages if m.role == "system"),
    ]
    system_text = "\n\n".join(part for part in system if part)
    if system_text:
        body["system"] = system_text
    body["messages"] = wire_messages(request.messages)
    if request.thinking is True:
        budget = _budget(limit, budget_tokens) if checks_budget else budget_tokens
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    elif request.thinking is False:
        body["thinking"] = {"type": "disabled"}
    if request.tools:
        body["tools"] = [_tool(schema) for schema in request.tools]
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    return body


def _budget(max_tokens: int, budget_tokens: int) -> int:
    budget = min(budget_tokens, max_tokens - 1)
    if budget < MIN_THINKING_BUDGET:
        raise LlmError.of(
            "INVALID_REQUEST",
            f"max_tokens {max_tokens} leaves no room for thinking: the Messages API wants a "
            f"budget of at least {MIN_THINKING_BUDGET} tokens below max_tokens; raise "
            "max_tokens or turn thinking off",
        )
    return budget


def _tool(schema: ToolSchema) -> dict[str, Any]:
    return {
        "name": schema.name,
        "description": schema.description,
        "input_schema": schema.parameters,
    }


def wire_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """The conversation as alternating turns (``system`` messages are in ``system``)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        blocks = wire_blocks(message)
        if not blocks:
            continue
        if out and out[-1]["role"] == message.role:
            out[-1]["content"] = _results_first([*out[-1]["content"], *blocks])
        else:
            out.append({"role": message.role, "content": blocks})
    return out


def wire_blocks(message: Message) -> list[WireBlock]:
    """One message's content blocks; a user message's tool results first."""
    blocks = [wire for block in message.content if (wire := _block(block)) is not None]
    return _results_first(blocks) if message.role == "user" else blocks


def _results_first(blocks: list[WireBlock]) -> list[WireBlock]:
    results = [block for block in blocks if block["type"] == "tool_result"]
    return [*results, *(block for block in blocks if block["type"] != "tool_result")]


def _block(block: Block) -> WireBlock | None:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text} if block.text else None
    if isinstance(block, Reasoning):
        return _thinking(block)
    if isinstance(block, ToolCall):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": _input(block)}
    if isinstance(block, ToolResult):
        return _tool_result(block)
    return _image(block)


def _thinking(block: Reasoning) -> WireBlock | None:
    if block.signature is None:
        return None
    if block.redacted:
        return {"type": "redacted_thinking", "data": block.signature}
    return {"type": "thinking", "thinking": block.text, "signature": block.signature}


def _input(call: ToolCall) -> Any:
    """The arguments as the object ``tool_use.input`` must be: arguments that are not a JSON
    object (the model wrote broken JSON) go back as ``{}`` — the tool's error result, sent
    with it, tells the model what was wrong."""
    try:
        parsed = json.loads(call.arguments)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _tool_result(result: ToolResult) -> WireBlock:
    content = [part for block in result.content if (part := _block(block)) is not None]
    wire: WireBlock = {"type": "tool_result", "tool_use_id": result.tool_call_id}
    wire["content"] = content or [{"type": "text", "text": EMPTY_TOOL_OUTPUT}]
    if result.is_error:
        wire["is_error"] = True
    return wire


def _image(image: Image) -> WireBlock:
    """A ``data:`` URL is sent as base64 data, anything else by URL."""
    head, comma, data = image.url.partition(",")
    if image.url.startswith("data:") and comma and head.endswith(";base64"):
        media_type = head.removeprefix("data:").removesuffix(";base64")
        source = {"type": "base64", "media_type": image.mime_type or media_type, "data": data}
        return {"type": "image", "source": source}
    return {"type": "image", "source": {"type": "url", "url": image.url}}


def _text(blocks: tuple[Block, ...]) -> str:
    return "\n".join(block.text for block in blocks if isinstance(block, Text))
