"""MCP tools as dsh tools: names, effects, schemas, and results as content blocks."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from typing import Any

from mcp import types as mcp_types

from dsh.plugin import (
    TOOL_NAME,
    Effect,
    HeadTail,
    Image,
    Text,
    Tool,
    ToolError,
    ToolExecution,
    ToolSchema,
)
from dsh_plugins.mcp.client import Connection
from dsh_plugins.mcp.config import McpError

__all__ = ["content_of", "dsh_name", "effect_of", "make_tool"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
#: Hex digits of the hash that tells apart the tool names that had to change.
HASH_CHARS = 8


def dsh_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>`` when model APIs accept that name (1 to 64 letters, digits,
    ``_`` and ``-``). Otherwise ``mcp__<server>__<readable>_<hash>``: the tool's name with
    accents dropped and every run of other characters as one ``_``, cut to fit 64 characters,
    then the first :data:`HASH_CHARS` hex digits of the SHA-256 of the exact name, so the form is
    stable and two names that read alike still differ. (Server names have at most 32
    characters, which leaves room.)"""
    prefix = f"mcp__{server}__"
    if TOOL_NAME.fullmatch(prefix + tool):
        return prefix + tool
    digest = hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    letters = unicodedata.normalize("NFKD", tool).encode("ascii", "ignore").decode("ascii")
    room = 64 - len(prefix) - HASH_CHARS - 1
    readable = _UNSAFE.sub("_", letters).strip("_")[:room].rstrip("_")
    return f"{prefix}{readable}_{digest}" if readable else f"{prefix}{digest}"


def effect_of(annotations: mcp_types.ToolAnnotations | None) -> Effect:
    """What a permission policy makes of the tool: ``readOnlyHint`` → ``read``; an explicit
    ``destructiveHint: false`` → ``other`` (runs in ``workspace-write``, asks in
    ``read-only``); anything else may destroy (the hint's default is true) → ``execute``,
    which asks in ``workspace-write``, as a command does."""
    if annotations is not None and annotations.read_only_hint:
        return "read"
    if annotations is not None and annotations.destructive_hint is False:
        return "other"
    return "execute"


def make_tool(
    connection: Connection, tool: mcp_types.Tool, name: str, max_output_bytes: int
) -> Tool:
    """The dsh tool ``name`` that calls ``tool`` on ``connection``'s server, by its exact name;
    its schema is the server's description and input schema, unchanged."""
    description = tool.description or tool.title or tool.name
    schema = ToolSchema(name, description, tool.input_schema)
    effect = effect_of(tool.annotations)

    async def execute(args: Any, execution: ToolExecution) -> tuple[Text | Image, ...]:
        try:
            result = await connection.call(tool.name, args)
        except McpError as exc:
            raise ToolError(exc.message, exc.code) from exc
        return content_of(result, max_output_bytes)

    return Tool(
        schema,
        execute,
        timeout_s=connection.config.timeout_s,
        concurrency_safe=effect == "read",
        effect=effect,
    )


def content_of(result: mcp_types.CallToolResult, max_output_bytes: int) -> tuple[Text | Image, ...]:
    """Text parts as one text block (capped like the shell tool's output: head and tail kept),
    images as :class:`Image` blocks. Structured content is the JSON text when the server sent
    no text (the spec asks servers to send both). ``isError`` raises :class:`ToolError`."""
    texts: list[str] = []
    images: list[Image] = []
    for item in result.content:
        if isinstance(item, mcp_types.ImageContent):
            images.append(Image(f"data:{item.mime_type};base64,{item.data}", item.mime_type))
        else:
            texts.append(_text_of(item))
    if not texts and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = _capped("\n".join(texts), max_output_bytes)
    if result.is_error:
        raise ToolError(text or "the MCP tool reported an error without a message", "TOOL_ERROR")
    return (Text(text), *images)


def _text_of(
    item: mcp_types.TextContent
    | mcp_types.AudioContent
    | mcp_types.ResourceLink
    | mcp_types.EmbeddedResource,
) -> str:
    if isinstance(item, mcp_types.TextContent):
        return item.text
    if isinstance(item, mcp_types.AudioContent):
        return f"[audio ({item.mime_type}) omitted: dsh passes no audio to models]"
    if isinstance(item, mcp_types.ResourceLink):
        return f"[resource {item.name}: {item.uri}]"
    resource = item.resource
    if isinstance(resource, mcp_types.TextResourceContents):
        return resource.text
    kind = resource.mime_type or "binary data"
    return f"[resource {resource.uri} ({kind}) omitted: it is not text]"


def _capped(text: str, limit: int) -> str:
    kept = HeadTail(limit)
    kept.feed(text.encode("utf-8"))
    return kept.text()
