"""What a model call is asked to do: the request and the tool schemas it offers."""

from __future__ import annotations

from typing import Any, Literal

from attrs import field, frozen

from dsh.values._content import Message
from dsh.values._value import Value

__all__ = ["JsonObject", "LlmRequest", "ReasoningEffort", "ResponseFormat", "ToolSchema"]

JsonObject = dict[str, Any]
ReasoningEffort = Literal["low", "medium", "high", "max"]
#: ``"json_object"`` asks for JSON output mode (the answer is one JSON object; the prompt must
#: say "json" and describe the shape); ``"text"`` or ``None`` is ordinary text.
ResponseFormat = Literal["text", "json_object"]


@frozen(repr=False, eq=False)
class ToolSchema(Value):
    """A tool as the model sees it: name, description and a JSON Schema for its arguments.

    ``parameters`` is a plain JSON object; treat it as read-only.
    """

    name: str
    description: str
    parameters: JsonObject = field(factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False


@frozen(repr=False, eq=False)
class LlmRequest(Value):
    """One model call. ``model`` is the full model id (possibly ``provider/model``).

    ``thinking`` switches reasoning on or off where the model supports both; ``None`` leaves the
    provider default. ``response_format`` selects JSON output mode (``None``: not sent).
    ``purpose`` marks calls that are not agent steps (e.g. ``"compaction"``).
    """

    model: str
    messages: tuple[Message, ...]
    system: str | None = None
    tools: tuple[ToolSchema, ...] = ()
    temperature: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    reasoning_effort: ReasoningEffort | None = None
    thinking: bool | None = None
    response_format: ResponseFormat | None = None
    session_id: str | None = None
    purpose: str | None = None

    def with_tools(self, tools: tuple[ToolSchema, ...]) -> LlmRequest:
        """This request offering ``tools`` instead: ``attrs.evolve(self, tools=tools)`` without
        attrs' walk over the fields by name (an agent's tool set filters every step's
        request)."""
        return LlmRequest(
            self.model,
            self.messages,
            self.system,
            tools,
            self.temperature,
            self.max_tokens,
            self.stop,
            self.reasoning_effort,
            self.thinking,
            self.response_format,
            self.session_id,
            self.purpose,
        )
