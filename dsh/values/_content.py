"""Content blocks, messages and message sources: what a conversation is made of.

All values are frozen, slotted attrs classes with tuple collections. Each class carries its wire
tag in the class variable ``type`` (the seed's hyphenated names); :mod:`dsh.session._codec` uses it
to tag unions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from attrs import frozen

from dsh.values._value import Value

__all__ = [
    "AgentSource",
    "Block",
    "Image",
    "Message",
    "MessageSource",
    "PluginSource",
    "Reasoning",
    "Role",
    "Text",
    "ToolCall",
    "ToolResult",
    "UserSource",
    "as_blocks",
    "text_of",
]


@frozen(repr=False, eq=False)
class Text(Value):
    """Plain text."""

    type: ClassVar[str] = "text"
    text: str


@frozen(repr=False, eq=False)
class Reasoning(Value):
    """The model's reasoning ("thinking") text, passed back to providers that require it.

    ``signature``: the provider's opaque proof of the reasoning (the Anthropic Messages API's
    thinking-block ``signature``), which must come back unchanged with it — an empty string is
    a signature too; ``redacted``: the provider encrypted the reasoning, ``text`` is empty and
    ``signature`` holds the encrypted data (a ``redacted_thinking`` block). ``provider_data``:
    the reasoning blocks exactly as a gateway sent them (JSON text: LiteLLM's
    ``thinking_blocks``, OpenRouter's ``reasoning_details``), for the adapter that read them to
    send back verbatim. Adapters of APIs without these ignore them.
    """

    type: ClassVar[str] = "reasoning"
    text: str
    signature: str | None = None
    redacted: bool = False
    provider_data: str | None = None

    def __repr__(self) -> str:
        # Only what is set: reasoning from providers without signatures reads as it always did.
        extra = "" if self.signature is None else f", signature={self.signature!r}"
        extra += ", redacted=True" if self.redacted else ""
        extra += "" if self.provider_data is None else f", provider_data={self.provider_data!r}"
        return f"Reasoning(text={self.text!r}{extra})"


@frozen(repr=False, eq=False)
class ToolCall(Value):
    """A call the model asked for. ``arguments`` stays the raw JSON string end to end."""

    type: ClassVar[str] = "tool-call"
    id: str
    name: str
    arguments: str


@frozen(repr=False, eq=False)
class Image(Value):
    """An image by URL (``data:`` URLs included)."""

    type: ClassVar[str] = "image"
    url: str
    mime_type: str | None = None


@frozen(repr=False, eq=False)
class ToolResult(Value):
    """The outcome of one tool call, echoed to the model under the call's id."""

    type: ClassVar[str] = "tool-result"
    tool_call_id: str
    content: tuple[Text | Image, ...]
    is_error: bool = False


Block = Text | Reasoning | ToolCall | ToolResult | Image
Role = Literal["system", "user", "assistant"]


@frozen(repr=False, eq=False)
class Message(Value):
    """One message of model-visible history."""

    role: Role
    content: tuple[Block, ...]


@frozen(repr=False, eq=False)
class UserSource(Value):
    """The message came from the human (or host) driving the agent."""

    type: ClassVar[str] = "user"


@frozen(repr=False, eq=False)
class PluginSource(Value):
    """The message was contributed by a plugin."""

    type: ClassVar[str] = "plugin"
    name: str


@frozen(repr=False, eq=False)
class AgentSource(Value):
    """The message was sent by another agent."""

    type: ClassVar[str] = "agent"
    agent_id: str


MessageSource = UserSource | PluginSource | AgentSource


def text_of(blocks: tuple[Block, ...]) -> str:
    """The concatenated text of the ``Text`` blocks in ``blocks``."""
    return "".join(b.text for b in blocks if isinstance(b, Text))


def as_blocks(content: str | Block | Sequence[Block]) -> tuple[Block, ...]:
    """What ``send``/``steer``/``inject`` accept (text, one block or blocks), as blocks."""
    if isinstance(content, str):
        return (Text(content),)
    if isinstance(content, Text | Reasoning | ToolCall | ToolResult | Image):
        return (content,)
    return tuple(content)
